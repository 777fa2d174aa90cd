"""A training step at scale: minds' forward_backward + optim_step against a plain peft step on the same tokens.

Run on a GPU: ``.venv/bin/python benchmarks/gpu_step.py`` (``--shapes 0.6B`` for one). For each of the
Qwen3-0.6B and Qwen3-1.7B shapes (configs built here with the real sizes and vocabulary, random weights),
64 rows of 512 tokens, LoRA rank 32 on every linear layer and the output layer, timed in one run:

* minds: ``forward_backward(importance_sampling)`` + ``optim_step`` through the local training client, on
  RL rollouts (8 prompts x 8 samples, 256-token prompts, 256 sampled tokens) and on 64 unrelated rows; the
  rollouts twice, with the placement's attention over packed rows and with the other mode (FlexAttention
  block mask or dense mask); for each, whether its prompts were shared and both plans' measured costs;
* the loop a user writes by hand on the same tokens: peft, float32 LoRA, bf16 autocast, micro-batches of
  16 rows, the same loss over full logits, AdamW;
* floors: the device's bf16 matmul rate and copy bandwidth, measured now; the compute floor of a step is
  6 x matmul parameters x tokens at that rate.

It prints each step's seconds, its peak GPU memory, and minds' speed-up over the peft step (target >= 1.5x
at no more peak memory). ``--cpu``: the CPU target instead (the default without a GPU): a ~25M-parameter
model, datums of mixed lengths (40-600 tokens), minds against the same peft loop in float32 with padded
micro-batches, timed in turns (target >= 1.5x). ``--smoke``: tiny shapes on the CPU, seconds, no targets.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from tinker import types
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_backend import Shape, alternating_medians, build_model, matmul_params, synced

from minds_core.backends.local import ServiceClient
from minds_core.backends.local.model.lora import LoraSpec, target_modules
from minds_core.backends.local.model.packed_attention import MODES, flex_failure
from minds_core.backends.local.model.placement import resolve_placement
from minds_core.backends.local.model.tiny_model import byte_tokenizer
from minds_core.backends.local.training.pass_cost import TRIALS

RANK = 32
ADAM = types.AdamParams(learning_rate=1e-5)
QWEN3 = {  # name: (hidden, intermediate); both: 28 layers, 16 query / 8 key-value heads of 128, tied embeddings
    "0.6B": (1024, 3072),
    "1.7B": (2048, 6144),
}


FULL = Shape(prompt_tokens=256, group_size=8, groups=8, max_tokens=256, repeats=3)
"""The training data: ``groups`` prompts x ``group_size`` samples, ``prompt_tokens + max_tokens`` tokens a row."""
SMOKE = Shape(prompt_tokens=24, group_size=4, groups=2, max_tokens=24, repeats=1)


def qwen3_config(name: str, vocab: int = 151936) -> Qwen3Config:
    hidden, intermediate = QWEN3[name]
    return Qwen3Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip


def smoke_config() -> Qwen3Config:
    return Qwen3Config(
        vocab_size=2048, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, bos_token_id=None, eos_token_id=None,
        pad_token_id=None,
    )  # fmt: skip


def save_model(config: Qwen3Config, directory: Path, device: str) -> Path:
    """Random weights of ``config`` (bf16 on a GPU), saved with the tiny model's tokenizer (token ids are drawn
    over the model's whole vocabulary; nothing is decoded)."""
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    model.to(torch.bfloat16 if device == "cuda" else torch.float32).save_pretrained(directory)
    byte_tokenizer().save_pretrained(directory)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()  # the float32 weights it was built in, held by torch's allocator otherwise
    return directory


def rl_rows(shape: Shape, vocab: int, shared: bool) -> list[list[int]]:
    """Token rows: ``groups`` of ``group_size`` rows sharing their prompt, or as many unrelated rows."""
    gen = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(shape.groups):
        prompt = torch.randint(0, vocab, (shape.prompt_tokens,), generator=gen).tolist()
        for _ in range(shape.group_size):
            head = prompt if shared else torch.randint(0, vocab, (shape.prompt_tokens,), generator=gen).tolist()
            rows.append(head + torch.randint(0, vocab, (shape.max_tokens,), generator=gen).tolist())
    return rows


def mixed_rows(count: int, low: int, high: int, vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(2)
    lengths = torch.randint(low, high + 1, (count,), generator=gen).tolist()
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]


@dataclass(frozen=True)
class Batch:
    """``rows`` as training tensors: inputs ``row[:-1]``, targets ``row[1:]``, sampler log-probs and advantages
    (advantages 0 on the first ``prompt`` targets: only the completion trains)."""

    rows: list[list[int]]
    prompt: int

    def columns(self, row: list[int], index: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(100 + index)
        n = len(row) - 1
        sampled = (torch.arange(n) >= self.prompt - 1).float()
        return -torch.rand(n, generator=gen) * 2 - 1, sampled * (torch.rand((), generator=gen) - 0.5)

    def datums(self) -> list[types.Datum]:
        data = []
        for i, row in enumerate(self.rows):
            logprobs, advantages = self.columns(row, i)
            data.append(types.Datum(
                model_input=types.ModelInput.from_ints(row[:-1]),
                loss_fn_inputs={"target_tokens": row[1:], "logprobs": logprobs, "advantages": advantages},
            ))  # fmt: skip
        return data

    def tokens(self) -> int:
        return sum(len(row) - 1 for row in self.rows)


def minds_step(
    service: ServiceClient, model_dir: Path, batch: Batch, plan: dict[str, float] | None = None,
    attention: str | None = None,
) -> Callable[[], None]:
    """minds' training step on ``batch``; each step leaves its forward_backward metrics of the prompt-sharing plan
    in ``plan``. ``attention`` (``packed_attention.MODES``) overrides the placement's mode of packed-row attention.
    The first requests with shared prompts try both plans (``pass_cost.TRIALS`` each): they run here, untimed."""
    trainer = service.create_lora_training_client(str(model_dir), rank=RANK, seed=0).result()
    if attention is not None:
        trainer._trainer._passes.attention = attention  # the benchmark's A/B of the two modes on one placement
    data = batch.datums()
    for _ in range(2 * TRIALS):
        trainer.forward_backward(data, "importance_sampling").result()

    def step() -> None:
        out = trainer.forward_backward(data, "importance_sampling")
        trainer.optim_step(ADAM).result()
        metrics = out.result().metrics
        if plan is not None:
            plan.update({k: v for k, v in metrics.items() if k != "loss:sum"})

    return step


def rl_step(service: ServiceClient, model_dir: Path, shape: Shape, vocab: int) -> Callable[[], None]:
    """One whole RL step as ``minds run`` takes it: a snapshot of the adapter, ``groups`` prompts x ``group_size``
    samples of ``max_tokens`` from it (no stop), and a training step (importance_sampling + AdamW) on them all."""
    trainer = service.create_lora_training_client(str(model_dir), rank=RANK, seed=0).result()
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, vocab, (shape.prompt_tokens,), generator=gen).tolist() for _ in range(shape.groups)]
    params = types.SamplingParams(max_tokens=shape.max_tokens, temperature=1.0, seed=0, stop=[])

    def step() -> None:
        sampler = trainer.save_weights_and_get_sampling_client().result()
        futures = [sampler.sample(types.ModelInput.from_ints(p), shape.group_size, params) for p in prompts]
        data = []
        for prompt, future in zip(prompts, futures, strict=True):
            sequences = future.result().sequences
            rewards = torch.randn(len(sequences), generator=gen)
            for sequence, advantage in zip(sequences, (rewards - rewards.mean()).tolist(), strict=True):
                row = prompt + sequence.tokens
                sampled = (torch.arange(len(row) - 1) >= len(prompt) - 1).float()
                logprobs = torch.cat([torch.zeros(len(prompt) - 1), torch.tensor(sequence.logprobs)])
                data.append(types.Datum(
                    model_input=types.ModelInput.from_ints(row[:-1]),
                    loss_fn_inputs={"target_tokens": row[1:], "logprobs": logprobs, "advantages": sampled * advantage},
                ))  # fmt: skip
        out = trainer.forward_backward(data, "importance_sampling")
        trainer.optim_step(ADAM).result()
        out.result()

    return step


def peft_step(model_dir: Path, batch: Batch, device: str, rows_per_micro_batch: int = 16) -> Callable[[], None]:
    """The hand-written loop: peft LoRA (float32 factors) on the modules minds adapts, bf16 autocast on a GPU,
    micro-batches of ``rows_per_micro_batch`` rows right-padded to their longest, full logits, AdamW."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa").to(device)
    base.requires_grad_(False)
    config = LoraConfig(r=RANK, lora_alpha=32, lora_dropout=0.0, target_modules=target_modules(base, LoraSpec(RANK)))
    model = get_peft_model(base, config)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=ADAM.learning_rate)
    micro_batches = []
    for start in range(0, len(batch.rows), rows_per_micro_batch):
        rows = batch.rows[start : start + rows_per_micro_batch]
        width = max(len(row) for row in rows) - 1
        ids, mask, targets = (torch.zeros(len(rows), width, dtype=torch.int64) for _ in range(3))
        q, adv = torch.zeros(len(rows), width), torch.zeros(len(rows), width)
        for r, row in enumerate(rows):
            n = len(row) - 1
            ids[r, :n], targets[r, :n], mask[r, :n] = torch.tensor(row[:-1]), torch.tensor(row[1:]), 1
            q[r, :n], adv[r, :n] = batch.columns(row, start + r)
        micro_batches.append([t.to(device) for t in (ids, mask, targets, q, adv)])

    def step() -> None:
        for ids, mask, targets, q, adv in micro_batches:
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                logits = model(input_ids=ids, attention_mask=mask).logits
            logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[..., None])[..., 0]
            loss = -(torch.exp(logp - q) * adv).sum()
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()

    return step


@dataclass(frozen=True)
class Timed:
    seconds: float
    peak_gib: float  # GPU memory allocated at most while it ran (what was held before included)
    held_gib: float  # GPU memory allocated when it began (minds' later contenders: the base model their service holds)


def gpu_allocated(device: str) -> float:
    """GiB of GPU memory torch has allocated in this process (0 on the CPU)."""
    gc.collect()
    return torch.cuda.memory_allocated() / 2**30 if device == "cuda" else 0.0


def timed(make: Callable[[], Callable[[], None]], repeats: int, device: str) -> Timed:
    """Median seconds of the step ``make()`` builds (after a warm-up step) and the peak GPU memory it reached
    (its model included)."""
    held = gpu_allocated(device)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        step = make()
        seconds = alternating_medians([step], repeats)[0]
        del step
    except RuntimeError as exc:  # torch.OutOfMemoryError, or the training client's error carrying it
        if "out of memory" not in str(exc).lower():
            raise
        print(f"  (out of GPU memory: {str(exc).splitlines()[0][:160]})")
        seconds = float("nan")
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    gc.collect()
    return Timed(seconds, peak, held)


def device_floors(device: str, smoke: bool) -> tuple[float, float]:
    """The bf16 matmul rate (FLOP/s; float32 on the CPU) and the copy bandwidth (bytes/s, read + write)."""
    n = 512 if smoke or device == "cpu" else 8192
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    source = torch.empty(1 << (20 if smoke else 28), device=device, dtype=torch.uint8)
    target = torch.empty_like(source)
    matmul, copy = alternating_medians(
        [synced(lambda: [a @ b for _ in range(10)], device), synced(lambda: [target.copy_(source) for _ in range(10)], device)], 5
    )
    return 10 * 2 * n**3 / matmul, 10 * 2 * source.numel() / copy


def minds_figures(
    model_dir: Path, shape: Shape, grouped: Batch, unrelated: Batch, vocab: int, device: str
) -> tuple[dict[str, Timed], dict[str, dict[str, float]], Timed]:
    """minds' training steps (both attention modes on ``grouped``, the placement's on ``unrelated``), each with
    its last step's prompt-sharing plan, and the whole RL step, on one local service: closed when this returns,
    so that none of its GPU memory is held while the peft step runs."""
    results, plans = {}, {}
    with ServiceClient(device=device) as service:
        mode = resolve_placement(device).packed_attention
        other = next(m for m in MODES if m != mode)
        for label, batch, attention in (
            (f"minds, RL groups, {mode}", grouped, None),
            (f"minds, RL groups, {other}", grouped, other),
            ("minds, unrelated rows", unrelated, None),
        ):
            plan = plans[label] = {}
            results[label] = timed(
                lambda b=batch, p=plan, a=attention: minds_step(service, model_dir, b, p, a), shape.repeats, device
            )
        whole = timed(lambda: rl_step(service, model_dir, shape, vocab), shape.repeats, device)
    return results, plans, whole


def gpu_shape(name: str, shape: Shape, device: str, rate: float, smoke: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = smoke_config() if smoke else qwen3_config(name)
        model_dir = save_model(config, Path(tmp) / name, device)
        grouped = Batch(rl_rows(shape, config.vocab_size, shared=True), shape.prompt_tokens)
        unrelated = Batch(rl_rows(shape, config.vocab_size, shared=False), shape.prompt_tokens)
        results, plans, whole = minds_figures(model_dir, shape, grouped, unrelated, config.vocab_size, device)
        results["peft, 16-row micro-batches"] = timed(lambda: peft_step(model_dir, grouped, device), shape.repeats, device)
        with torch.device("meta"):
            params = matmul_params(Qwen3ForCausalLM(config))
    tokens = grouped.tokens()
    floor = 6 * params * tokens / rate
    print(f"{name}: {len(grouped.rows)} rows x {shape.prompt_tokens + shape.max_tokens} tokens "
          f"({shape.groups} prompts x {shape.group_size} samples), rank {RANK}, {params / 1e6:.0f}M matmul params; "
          f"compute floor {floor:.3f} s")  # fmt: skip
    baseline = results["peft, 16-row micro-batches"]
    for label, r in results.items():
        print(f"  {label:28s} {r.seconds:7.3f} s  {tokens / r.seconds:8.0f} tokens/s  {floor / r.seconds:6.1%} of the "
              f"floor  peak {r.peak_gib:6.2f} GiB ({r.held_gib:.2f} held before)  -> "
              f"{baseline.seconds / r.seconds:5.2f}x the peft step"
              + (f", memory {r.peak_gib / baseline.peak_gib:.2f}x" if baseline.peak_gib else ""))  # fmt: skip
    print("  target: minds >= 1.5x the peft step at no more peak memory")
    for label, plan in plans.items():
        if plan:
            costs = ", ".join(f"{k.split(':')[0].rsplit('_', 1)[1]} {v:.2f}" for k, v in plan.items() if k.startswith("ms_"))
            chosen = "shared its prompts" if plan["prompt_sharing:mean"] else "ran every datum whole"
            print(f"  {label}: the last step {chosen}; measured ms per 1000 tokens: {costs}")
    if flex_failure():  # its requests ran again with the dense mask: the flex rows above timed that
        print(f"  FlexAttention failed, so 'flex' ran the dense mask: {flex_failure()}")
    print(f"  whole RL step (snapshot + {len(grouped.rows)} x {shape.max_tokens} tokens sampled + training on all of "
          f"them): {whole.seconds:.3f} s, peak {whole.peak_gib:.2f} GiB (target <= 2.5 s for 0.6B on an H100/H200)")


def cpu_target(smoke: bool) -> None:
    """The CPU target: mixed-length datums on a ~25M-parameter model, minds vs peft in float32, timed in turns."""
    with tempfile.TemporaryDirectory() as tmp:
        if smoke:
            model_dir = save_model(smoke_config(), Path(tmp) / "smoke", "cpu")
            count, low, high, repeats = 6, 8, 40, 1
        else:
            model_dir = build_model(Path(tmp) / "m25")
            count, low, high, repeats = 16, 40, 600, 3
        vocab = AutoModelForCausalLM.from_pretrained(model_dir).config.vocab_size
        batch = Batch(mixed_rows(count, low, high, vocab), prompt=1)
        with ServiceClient(device="cpu") as service:
            ours = minds_step(service, model_dir, batch)
            theirs = peft_step(model_dir, batch, "cpu")
            minds_s, peft_s = alternating_medians([ours, theirs], repeats)
            threads = torch.get_num_threads()  # as the service sets them, for both
    tokens = batch.tokens()
    print(f"CPU, {count} datums of {low}-{high} tokens ({tokens} tokens), rank {RANK}, float32, "
          f"{threads} torch threads:")  # fmt: skip
    print(f"  minds {minds_s:.3f} s, peft (16-row padded micro-batches) {peft_s:.3f} s -> {peft_s / minds_s:.2f}x "
          "(target >= 1.5x)")  # fmt: skip


def main() -> None:
    warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")  # peft's note on the tied output layer
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, seconds, no targets checked")
    parser.add_argument("--cpu", action="store_true", help="the CPU target (the default without a GPU)")
    parser.add_argument("--shapes", nargs="+", choices=list(QWEN3), default=list(QWEN3), help="GPU shapes to run")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() and not (args.cpu or args.smoke) else "cpu"
    rate, bandwidth = device_floors(device, args.smoke)
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; matmul rate {rate / 1e12:.2f} TFLOP/s "
          f"({'bf16' if device == 'cuda' else 'float32'}); copy bandwidth {bandwidth / 1e9:.0f} GB/s")  # fmt: skip
    if args.smoke:
        gpu_shape("smoke", SMOKE, device, rate, smoke=True)
        cpu_target(smoke=True)
    elif device == "cpu":
        cpu_target(smoke=False)
    else:
        for shape in args.shapes:
            gpu_shape(shape, FULL, device, rate, smoke=False)


if __name__ == "__main__":
    main()
