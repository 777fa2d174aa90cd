"""The local backend near the machine's limit: step time vs a compute floor, sampler throughput, peak RSS.

Run: ``.venv/bin/python benchmarks/local_backend.py`` (``--smoke``: tiny shapes, a few
seconds, no targets checked). Every figure is a ratio measured in this run:

* RL step (sample G=8 rollouts of 4 prompts of ~500 tokens, 48 tokens each, then
  importance_sampling forward_backward on all 32 + optim_step) against the compute
  floor: the step's matmul FLOPs (prefill, decode, and forward+backward of every
  rollout as if unshared) at the one-thread matmul rate calibrated in this run.
  Targets: >= 30% for minds-tiny, >= 60% for a ~25M-parameter model built here.
* Sampler tokens/s against batched ``transformers`` ``generate`` (prompt repeated
  G times) at a 500-token prompt, G=8, 48 tokens, timed in turns (7 each, medians).
  Target: >= 3x.
* 32 concurrent one-sample requests against one 32-sample request (in turns, likewise).
  Target: >= 70%.
* One token draw of 64 rows over the 151,936-token Qwen vocabulary, per setting (temperature 1,
  0.7, top-p 0.9): the two-round race ``Draws.draw`` runs against the inverse-CDF draw it
  replaced (float64 cumulative sum, ``searchsorted``), on the same logits, in turns, each as
  the decoder runs it (a CUDA graph on a GPU). Reported; ``--draws`` times only these.
* One decode step of 8 rows at position 500 through a merged sampler's tree, its sibling
  weights joined (one matrix product for q/k/v, one for gate/up) against the tree's deep
  copy (one product per layer), in turns, and the aten ops each runs. Reported;
  ``--decode-step`` times only these.
* One ``forward_backward`` (importance_sampling, rank 8) of the RL step's 32 rollouts, random completions,
  prompts shared, through a training engine whose sibling LoRA layers compute as one group
  (``joined_lora``) against the same engine on peft's per-layer forward, in turns, and the aten ops
  each runs (all of them, and those that are not views). Reported; ``--train-step`` times only these.
* Peak RSS of a training step of the ~25M model at the default batch, in a child
  process (``--rss-child``). Target: <= 4 GB.

``--device cuda`` runs the same figures on a GPU (bf16 base weights, float32 LoRA): the
floor is then the GPU's own bf16 matmul rate, measured in this run, and a ~300M-parameter
model joins the RL step. The targets above are the CPU's; on a GPU the figures are reported.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tinker import types
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from minds_core.backends.local import DEFAULT_BASE_MODEL, ServiceClient
from minds_core.backends.local.model.accelerator import accelerator_for
from minds_core.backends.local.model.lora import LoraSpec, adapter_state, attach_lora
from minds_core.backends.local.model.models import BaseModelRegistry
from minds_core.backends.local.model.placement import resolve_placement
from minds_core.backends.local.model.tiny_model import byte_tokenizer, tiny_model_path
from minds_core.backends.local.sampling.cuda_graphs import StepGraphs
from minds_core.backends.local.sampling.device_sampling import Draws, Rows, RowSettings, row_key, uniforms
from minds_core.backends.local.sampling.fast_decode import FastDecoder
from minds_core.backends.local.sampling.kv_slots import KVSlots
from minds_core.backends.local.training.datums import DatumTensors, submitted_datum
from minds_core.backends.local.training.joined_lora import use_joined
from minds_core.backends.local.training.pass_cost import TRIALS


@dataclass(frozen=True)
class Shape:
    """One benchmark's sizes."""

    prompt_tokens: int = 500
    group_size: int = 8
    groups: int = 4
    max_tokens: int = 48
    repeats: int = 3
    sampler_repeats: int = 7  # sampler vs generate: each takes well under a second


FULL, SMOKE = Shape(), Shape(prompt_tokens=40, group_size=2, groups=2, max_tokens=4, repeats=1, sampler_repeats=1)


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``run`` after one warm-up call."""
    return alternating_medians([run], repeats)[0]


def alternating_medians(runs: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median wall time of each of ``runs`` after one warm-up call each, timed in turns (a, b, a, b, ...)
    so that the machine's slow spells fall on all of them alike."""
    for run in runs:
        run()
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, spent in zip(runs, times, strict=True):
            start = time.perf_counter()
            run()
            spent.append(time.perf_counter() - start)
    return [statistics.median(spent) for spent in times]


def matmul_flops_per_second(smoke: bool, device: str) -> float:
    """One-thread float32 matmul rate (the floor's unit), measured now; on a GPU, its bf16 rate."""
    if device == "cuda":
        n = 1024 if smoke else 8192
        a, b = torch.randn(n, n, device=device, dtype=torch.bfloat16), torch.randn(n, n, device=device, dtype=torch.bfloat16)

        def products() -> None:
            for _ in range(10):
                a @ b
            torch.cuda.synchronize()

        return 10 * 2 * n**3 / median_seconds(products, 3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rates = []
        for n in (128,) if smoke else (256, 512):
            a, b = torch.randn(n, n), torch.randn(n, n)
            for _ in range(2 if smoke else 5):
                rates.append(20 * 2 * n**3 / median_seconds(lambda a=a, b=b: [a @ b for _ in range(20)], 1))
        return max(rates)  # the best of several sizes and tries: an idle core's rate (the machine is shared)
    finally:
        torch.set_num_threads(threads)


def build_model(directory: Path, hidden: int = 512, layers: int = 8) -> Path:
    """A Qwen3-style model with the tiny model's byte tokenizer, random weights: ~25M parameters by default,
    ~300M at ``hidden=1024, layers=24``."""
    tokenizer = byte_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
        num_attention_heads=hidden // 64, num_key_value_heads=hidden // 128, head_dim=64, max_position_embeddings=4096,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def matmul_params(model: torch.nn.Module) -> int:
    """Parameters that take part in matmuls per token (every linear layer; not the embedding lookup)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def prompts(tokenizer, shape: Shape) -> list[list[int]]:
    """``groups`` chat prompts of about ``prompt_tokens`` tokens each (byte tokens: one per character)."""
    out = []
    for g in range(shape.groups):
        body = f"Puzzle {g}: " + " ".join(f"clue {i * (g + 3) % 97} points at {i}." for i in range(400))
        head = f"<|im_start|>user\n{body}"[: shape.prompt_tokens - 24]
        out.append(list(tokenizer.encode(head + "<|im_end|>\n<|im_start|>assistant\n")))
    return out


def rl_step(service: ServiceClient, model_name: str, shape: Shape) -> dict[str, float]:
    """Time an RL step (sample every group, then train on every rollout) against its FLOP count."""
    trainer = service.create_lora_training_client(model_name, rank=8, seed=0).result()
    tokenizer = trainer.get_tokenizer()
    groups = prompts(tokenizer, shape)
    params = types.SamplingParams(max_tokens=shape.max_tokens, temperature=1.0, seed=0, stop=[])
    counted: dict[str, int] = {}

    def step() -> None:
        sampler = trainer.save_weights_and_get_sampling_client().result()
        futures = [sampler.sample(types.ModelInput.from_ints(p), shape.group_size, params) for p in groups]
        data = []
        for prompt, future in zip(groups, futures, strict=True):
            for seq in future.result().sequences:
                full = prompt + list(seq.tokens)
                n = len(full) - 1
                data.append(types.Datum(
                    model_input=types.ModelInput.from_ints(full[:-1]),
                    loss_fn_inputs={
                        "target_tokens": full[1:],
                        "logprobs": [0.0] * (len(prompt) - 1) + list(seq.logprobs),
                        "advantages": [0.0] * (len(prompt) - 1) + [0.5] * (n - len(prompt) + 1),
                    },
                ))
        trainer.forward_backward(data, "importance_sampling")
        trainer.optim_step(types.AdamParams(learning_rate=1e-4)).result()
        counted["trained"] = sum(d.model_input.length for d in data)
        counted["pairs"] = sum(d.model_input.length**2 / 2 for d in data)
        suffixes = [d.model_input.length - len(groups[i // shape.group_size]) for i, d in enumerate(data)]
        counted["shared_trained"] = sum(len(p) for p in groups) + sum(suffixes)
        counted["shared_pairs"] = sum(len(p) ** 2 / 2 for p in groups) + sum(
            s * len(groups[i // shape.group_size]) + s * s / 2 for i, s in enumerate(suffixes)
        )

    for _ in range(2 * TRIALS - 1):  # the trainer's first steps try both prompt-sharing plans: past them (with the
        step()  # warm-up step of median_seconds), the steady state is timed
    seconds = median_seconds(step, shape.repeats)
    model = trainer._trainer.base.model
    n = matmul_params(model)
    # Attention scores and mixing: 4 * (query/key width) FLOPs per (query, key) pair per layer, causal.
    config = model.config
    per_pair = 4 * config.num_attention_heads * config.head_dim * config.num_hidden_layers
    lengths = [len(p) for p in groups]
    prefill = sum(lengths)
    decoded = shape.groups * shape.group_size * shape.max_tokens
    pairs_prefill = sum(t * t / 2 for t in lengths)
    pairs_decode = shape.group_size * sum(t * shape.max_tokens + shape.max_tokens**2 / 2 for t in lengths)
    sample_flops = 2 * n * (prefill + decoded) + per_pair * (pairs_prefill + pairs_decode)
    train_flops = 3 * (2 * n * counted["trained"] + per_pair * counted["pairs"])
    shared_train_flops = 3 * (2 * n * counted["shared_trained"] + per_pair * counted["shared_pairs"])
    return {
        "seconds": seconds,
        "flops": sample_flops + train_flops,
        "shared_flops": sample_flops + shared_train_flops,
        "matmul_params": n,
    }


def sampler_vs_generate(service: ServiceClient, shape: Shape, device: str) -> dict[str, float]:
    """Tokens/s of a G-sample request (rank-8 adapter) against batched ``generate`` (base model, no adapter),
    and 32 one-sample requests vs one 32-sample request."""
    trainer = service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=8, seed=0).result()
    sampler = trainer.save_weights_and_get_sampling_client().result()  # rank-8 adapter, merged
    tokenizer = sampler.get_tokenizer()
    prompt = prompts(tokenizer, shape)[0]
    model_input = types.ModelInput.from_ints(prompt)
    params = types.SamplingParams(max_tokens=shape.max_tokens, temperature=1.0, seed=0, stop=[])
    placement = resolve_placement(device)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=placement.dtype).to(placement.device).eval()
    config = GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=shape.max_tokens,
        min_new_tokens=shape.max_tokens, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    batch = torch.tensor([prompt], device=placement.device).repeat(shape.group_size, 1)

    def generate() -> None:
        with torch.inference_mode():
            model.generate(batch, generation_config=config)

    ours, batched = alternating_medians(
        [lambda: sampler.sample(model_input, shape.group_size, params).result(), generate], shape.sampler_repeats
    )
    rows = 4 if shape is SMOKE else 32

    def concurrent() -> None:
        futures = [sampler.sample(model_input, 1, params) for _ in range(rows)]
        for future in futures:
            future.result()

    one, many = alternating_medians(
        [lambda: sampler.sample(model_input, rows, params).result(), concurrent], shape.sampler_repeats
    )
    return {"ours": ours, "generate": batched, "one_request": one, "many_requests": many, "rows": rows}


DRAW_SETTINGS = {"temperature 1": (1.0, 1.0), "temperature 0.7": (0.7, 1.0), "top-p 0.9": (1.0, 0.9)}
"""The draws timed: temperature and top-p of every row."""


class InverseCdfDraws(Draws):
    """The baseline: ``Draws`` choosing each row's token by inverse CDF, as before the race (the first whose
    float64 cumulative probability reaches a uniform, tabled per token index when the rows join, times the
    total). Everything else in a draw is the same code."""

    def join(self, slots: torch.Tensor, logits: torch.Tensor, settings: list[RowSettings]) -> None:
        super().join(slots, logits, settings)
        self.uniform = uniforms(self.key[:, None], torch.arange(self.capacity, device=self.key.device))

    def _race(self, row: Rows, logprobs: torch.Tensor, at: torch.Tensor, scaled: bool, truncated: bool) -> torch.Tensor:
        if scaled or truncated:
            values = logprobs * row.inverse_temperature
            if truncated:
                values = self._truncate(values, row)
            weights = (values - values.amax(dim=-1, keepdim=True)).exp_()
        else:
            weights = logprobs.exp()
        cdf = weights.cumsum(dim=-1, dtype=torch.float64)
        targets = self.uniform[: len(at)].gather(1, at) * cdf[:, -1:]
        return torch.searchsorted(cdf, targets)[:, 0].clamp_(max=self.vocab - 1)


def draw_figures(smoke: bool, device: str) -> dict[str, tuple[float, float]]:
    """Seconds of one draw of every row by the race and by inverse CDF, per setting of ``DRAW_SETTINGS``."""
    rows, vocab = (8, 4096) if smoke else (64, 151936)
    torch.manual_seed(0)
    logits = torch.randn(rows, vocab, device=device) * 3
    figures = {}
    for name, (temperature, top_p) in DRAW_SETTINGS.items():
        settings = [RowSettings(temperature, -1, top_p, row_key(0, i), (), 8) for i in range(rows)]
        switches = (False, True, temperature != 1, top_p < 1)
        runs = []
        for kind in (Draws, InverseCdfDraws):
            draws = kind(rows, vocab, capacity=8, stops=1, device=torch.device(device))
            draws.join(torch.arange(rows, device=device), logits, settings)
            graphs = StepGraphs(accelerator_for(torch.device(device)))  # as the decoder runs it: a CUDA graph on a GPU, replayed
            step = functools.partial(draws.draw, rows, *switches)
            runs.append(synced(functools.partial(graphs.run, switches, step), device))
        race, cdf = alternating_medians(runs, 3 if smoke else 9)
        figures[name] = (race, cdf)
    return figures


def synced(run: Callable[[], object], device: str) -> Callable[[], None]:
    """``run``, then wait for the GPU (where ``device`` is one) to finish it."""

    def timed() -> None:
        run()
        if device == "cuda":
            torch.cuda.synchronize()

    return timed


def print_draws(figures: dict[str, tuple[float, float]], smoke: bool) -> None:
    """Print ``draw_figures``' seconds and their ratios."""
    print(f"one draw, {'8 x 4,096' if smoke else '64 x 151,936'} (rows x vocabulary), race vs inverse CDF:")
    for name, (race, cdf) in figures.items():
        print(f"  {name:16s} race {race * 1e3:7.2f} ms, inverse CDF {cdf * 1e3:7.2f} ms -> {cdf / race:.1f}x")


def decode_step_figures(smoke: bool, device: str) -> dict[str, tuple[float, float, int, int]]:
    """Per model (minds-tiny; a ~25M one unless ``smoke``): seconds and aten ops of one decode step of 8 rows at
    position 500 through a merged rank-8 sampler's tree, its sibling weights joined (one product per group: q/k/v,
    gate/up) and through the tree's deep copy (every weight a tensor of its own: one product per layer). A service
    is open meanwhile: its torch thread settings are the sampler's."""
    placement, rows, position = resolve_placement(device), 8, 40 if smoke else 500
    spec = LoraSpec(rank=8)
    figures = {}
    with tempfile.TemporaryDirectory() as tmp, ServiceClient(device=device), torch.inference_mode():
        names = [DEFAULT_BASE_MODEL] + ([] if smoke else [str(build_model(Path(tmp) / "m25"))])
        for name in names:
            base = BaseModelRegistry(placement).get(name)
            tree, _ = base.adapted.acquire(spec, adapter_state(attach_lora(base.model, spec, seed=0)))
            runs, ops = [], []
            for model in (tree, copy.deepcopy(tree)):
                fast = FastDecoder.for_model(model)
                assert fast is not None
                config = model.config
                slots = KVSlots(config.num_hidden_layers, config.num_key_value_heads, fast.head_dim, rows,
                                position + 8, placement.dtype, placement.device)  # fmt: skip
                slots.positions[:rows] = position
                slots.window(rows, position + 1, True)
                tokens = torch.arange(rows, device=placement.device)
                graphs = StepGraphs(placement.device_layer)  # as the decoder runs it: a CUDA graph on a GPU, replayed
                step = functools.partial(fast.forward, slots, tokens)
                step()
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
                    step()
                ops.append(sum(event.name.startswith("aten::") for event in profile.events()))
                runs.append(synced(functools.partial(graphs.run, rows, step), device))
            joined, separate = alternating_medians(runs, 3 if smoke else 21)
            figures[Path(name).name] = (joined, separate, *ops)
    return figures


def print_decode_steps(figures: dict[str, tuple[float, float, int, int]]) -> None:
    """Print ``decode_step_figures``' seconds, op counts and ratios."""
    print("one decode step, 8 rows (a merged rank-8 sampler), sibling weights joined vs one weight per layer:")
    for name, (joined, separate, joined_ops, separate_ops) in figures.items():
        print(f"  {name:16s} joined {joined * 1e3:6.2f} ms ({joined_ops} aten ops), separate {separate * 1e3:6.2f} ms "
              f"({separate_ops} aten ops) -> {separate / joined:.2f}x")


def train_step_figures(smoke: bool, device: str) -> dict[str, tuple[float, float, int, int, int, int]]:
    """Per model (minds-tiny; a ~25M one unless ``smoke``): seconds of one ``forward_backward`` of RL rollouts
    with sibling LoRA layers joined and on peft's forward, and the aten ops (all, not views) of each."""
    shape = SMOKE if smoke else FULL
    figures = {}
    with tempfile.TemporaryDirectory() as tmp, ServiceClient(device=device) as service:
        names = [DEFAULT_BASE_MODEL] + ([] if smoke else [str(build_model(Path(tmp) / "m25"))])
        for name in names:
            trainer = service.create_lora_training_client(name, rank=8, seed=0).result()
            engine = trainer._trainer
            engine._passes.share_prefixes = True  # one plan for both: the comparison is the LoRA layers'
            generator = torch.Generator().manual_seed(0)
            items = []
            for prompt in prompts(trainer.get_tokenizer(), shape):
                for _ in range(shape.group_size):
                    full = prompt + torch.randint(3, 250, (shape.max_tokens,), generator=generator).tolist()
                    n = len(full) - 1
                    datum = types.Datum(
                        model_input=types.ModelInput.from_ints(full[:-1]),
                        loss_fn_inputs={"target_tokens": full[1:], "logprobs": [-1.0] * n, "advantages": [0.5] * n},
                    )
                    items.append(submitted_datum(datum, len(items)))
            ops = []
            for join in (True, False):
                step = functools.partial(_train_step, engine, items, join, device)
                step()
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
                    step()
                events = [event.name for event in profile.events() if event.name.startswith("aten::")]
                with _NotViews() as not_views:
                    step()
                ops += [len(events), not_views.count]
            runs = [functools.partial(_train_step, engine, items, join, device) for join in (True, False)]
            joined, separate = alternating_medians(runs, 1 if smoke else 7)
            figures[Path(name).name] = (joined, separate, *ops)
    return figures


def _train_step(engine: Any, items: list[DatumTensors], join: bool, device: str) -> None:
    use_joined(engine.joined, join)
    engine.forward_backward(items, "importance_sampling", None, backward=True)
    if device == "cuda":
        torch.cuda.synchronize()


class _NotViews(TorchDispatchMode):
    """Counts the aten ops that reach the kernels below autograd and are not views (no kernel of their own)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


def print_train_steps(figures: dict[str, tuple[float, float, int, int, int, int]]) -> None:
    """Print ``train_step_figures``' seconds, op counts and ratios."""
    print("one forward_backward of the RL step's rollouts (rank 8), sibling LoRA layers joined vs peft's per-layer "
          "forward:")
    for name, (joined, separate, ops, kernels, separate_ops, separate_kernels) in figures.items():
        print(f"  {name:16s} joined {joined * 1e3:7.1f} ms ({ops} aten ops, {kernels} not views), peft "
              f"{separate * 1e3:7.1f} ms ({separate_ops} aten ops, {separate_kernels} not views) "
              f"-> {separate / joined:.2f}x")


def rss_child(model_dir: str, smoke: bool, device: str) -> None:
    """(Child process) one RL step of the model in ``model_dir``; print peak RSS (and GPU memory) in bytes as JSON."""
    with ServiceClient(device=device) as service:
        rl_step(service, model_dir, SMOKE if smoke else Shape(repeats=1))
    gpu = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    print(json.dumps({"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "peak_gpu": gpu}))


def peak_memory(model_dir: Path, smoke: bool, device: str) -> dict[str, int]:
    args = [sys.executable, __file__, "--rss-child", str(model_dir), "--device", device, *(["--smoke"] if smoke else [])]
    done = subprocess.run(args, capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, seconds, no targets checked")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the local backend computes")
    parser.add_argument("--draws", action="store_true", help="time only one draw: the race vs inverse CDF")
    parser.add_argument("--decode-step", action="store_true", help="time only one decode step: joined vs one weight per layer")
    parser.add_argument("--train-step", action="store_true", help="time only one forward_backward: joined LoRA vs peft's")
    parser.add_argument("--rss-child", metavar="MODEL_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.rss_child, args.smoke, args.device)
        return
    if args.draws:
        print_draws(draw_figures(args.smoke, args.device), args.smoke)
        return
    if args.decode_step:
        print_decode_steps(decode_step_figures(args.smoke, args.device))
        return
    if args.train_step:
        print_train_steps(train_step_figures(args.smoke, args.device))
        return
    shape = SMOKE if args.smoke else FULL
    gpu = args.device == "cuda"
    rate = matmul_flops_per_second(args.smoke, args.device)
    with tempfile.TemporaryDirectory() as tmp, ServiceClient(device=args.device) as service:
        if gpu:
            print(f"device: {torch.cuda.get_device_name()}; bf16 matmul rate: {rate / 1e12:.0f} TFLOP/s")
        else:
            print(f"torch threads: {torch.get_num_threads()}; one-thread matmul rate: {rate / 1e9:.1f} GFLOP/s")
        big = build_model(Path(tmp) / "m25")
        results = {"minds-tiny": rl_step(service, DEFAULT_BASE_MODEL, shape)}
        if not args.smoke:
            results["25M"] = rl_step(service, str(big), shape)
        if gpu and not args.smoke:
            results["300M"] = rl_step(service, str(build_model(Path(tmp) / "m300", hidden=1024, layers=24)), shape)
        sampling = sampler_vs_generate(service, shape, args.device)
        memory = peak_memory(big, args.smoke, args.device)
    draw_seconds = draw_figures(args.smoke, args.device)
    decode_steps = decode_step_figures(args.smoke, args.device)
    train_steps = train_step_figures(args.smoke, args.device)
    floor_name = "GPU bf16 floor" if gpu else "1-core floor"
    print(f"RL step: {shape.groups} prompts x {shape.group_size} samples, ~{shape.prompt_tokens}-token prompts, "
          f"{shape.max_tokens} tokens, every rollout trained (importance_sampling, rank 8)")
    for name, r in results.items():
        floor = r["flops"] / rate
        target = "" if gpu else f" (target >= {0.3 if name == 'minds-tiny' else 0.6:.0%})"
        shared_floor = r["shared_flops"] / rate
        print(f"  {name:10s} ({r['matmul_params'] / 1e6:6.2f}M matmul params): step {r['seconds']:.3f} s, "
              f"{floor_name} {floor:.3f} s -> {floor / r['seconds']:.1%} of the floor{target}; floor of the FLOPs "
              f"left after prompt sharing {shared_floor:.3f} s -> {shared_floor / r['seconds']:.1%}")
    tokens = shape.group_size * shape.max_tokens
    print(f"sampling, {shape.prompt_tokens}-token prompt, G={shape.group_size}, {shape.max_tokens} tokens:")
    print(f"  local sampler (rank-8 adapter) {tokens / sampling['ours']:8.0f} tokens/s; batched generate (base) "
          f"{tokens / sampling['generate']:8.0f} tokens/s -> {sampling['generate'] / sampling['ours']:.1f}x (target >= 3x)")
    print(f"  {sampling['rows']} concurrent one-sample requests reach "
          f"{sampling['one_request'] / sampling['many_requests']:.0%} of one {sampling['rows']}-sample request's "
          "throughput (target >= 70%)")
    print_draws(draw_seconds, args.smoke)
    print_decode_steps(decode_steps)
    print_train_steps(train_steps)
    print(f"peak RSS, one RL step of the 25M model (child process): {memory['peak_rss'] / 2**30:.2f} GiB (target <= 4)"
          + (f"; peak GPU memory allocated {memory['peak_gpu'] / 2**30:.2f} GiB" if gpu else ""))


if __name__ == "__main__":
    main()
