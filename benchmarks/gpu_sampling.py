"""The local sampler on a GPU against transformers ``generate``, on Qwen3-0.6B and Qwen3-1.7B shapes.

Run: ``.venv/bin/python benchmarks/gpu_sampling.py`` on a machine with a CUDA GPU (``--smoke``: tiny
shapes on the CPU, seconds, no targets checked; ``--sizes 0.6B`` for one model). Each model is built
here from its real configuration (random bf16 weights, the real 151,936-token vocabulary; the
tiny model's byte tokenizer, whose ids are all the prompts use). One run times, on the same rows:

* minds: ``save_weights_and_get_sampling_client`` of a rank-32 LoRA run (every linear layer), then
  ``sample`` of 8 prompts x 8 samples, 256-token prompts, 256 tokens each, no stop, temperature 1,
  through the SDK-shaped sampling client (the 8 requests concurrent, as an RL step sends them); the
  same from a sampling client of the bare base model (what the adapter costs: merged into the
  snapshot's weights, as ``Placement.merge_adapters`` has it on CUDA, nothing per step);
* minds again with the decode step's elementwise math compiled (``Placement.decode_compile``,
  ``--decode-compile``: inductor fuses the norms, rotary, residual adds, softmax and SiLU gate between the
  matrix products; a service of its own, the same snapshot's weights), and the seconds its first
  call took (the compile stall; the others' first calls beside it);
* transformers ``generate`` of the base model (no adapter) on the 64 rows (each prompt 8 times),
  sampling at temperature 1 for exactly 256 tokens.

It prints tokens/s of each and their ratios. Targets on one H100: the 0.6B shape in <= 1.2 s and >= 15x
``generate``; the 1.7B shape >= 10x. ``benchmarks/gpu_step.py`` times the training step and the whole RL step
of the same shapes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tinker import types
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from minds_core.backends.local import ServiceClient
from minds_core.backends.local.model.models import BaseModelRegistry
from minds_core.backends.local.model.placement import COMPILE_MODES
from minds_core.backends.local.model.tiny_model import byte_tokenizer

__all__ = ["FULL", "SIZES", "SMOKE", "Shape", "build_model", "sampling_figures"]

SIZES = {
    "0.6B": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "tie_word_embeddings": True},
    "1.7B": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "tie_word_embeddings": True},
    "smoke": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "tie_word_embeddings": True},
}
"""Qwen3 shapes (the published configurations' sizes); every one has 16 query heads, 8 key/value heads of 128
dims, except ``smoke``'s (4 and 2 of 16), and the 151,936-token vocabulary (``smoke``: 512)."""


@dataclass(frozen=True)
class Shape:
    """One benchmark's sizes."""

    prompts: int = 8
    samples: int = 8
    prompt_tokens: int = 256
    max_tokens: int = 256
    rank: int = 32
    repeats: int = 3  # timed runs of the minds sampler (after one warm-up); generate runs once after a short warm-up

    @property
    def tokens(self) -> int:
        """Tokens sampled per run."""
        return self.prompts * self.samples * self.max_tokens


FULL, SMOKE = Shape(), Shape(prompts=2, samples=2, prompt_tokens=16, max_tokens=8, rank=4, repeats=1)


def build_model(directory: Path, size: str, device: str) -> Path:
    """Save a Qwen3 model of ``size`` (a key of ``SIZES``) with random bf16 weights (initialised on ``device``)
    and the tiny model's tokenizer into ``directory``."""
    tokenizer = byte_tokenizer()
    small = size == "smoke"
    config = Qwen3Config(
        vocab_size=512 if small else 151936, num_attention_heads=4 if small else 16,
        num_key_value_heads=2 if small else 8, head_dim=16 if small else 128, max_position_embeddings=40960,
        rope_theta=1_000_000.0, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **SIZES[size],
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _prompts(shape: Shape) -> list[list[int]]:
    """``shape.prompts`` prompts of ``shape.prompt_tokens`` byte tokens each (random, fixed)."""
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (shape.prompts, shape.prompt_tokens), generator=generator).tolist()


def _timed(run, repeats: int) -> tuple[float, float]:
    """Seconds of a first call of ``run`` (a warm-up: compiles, captures), and the median of ``repeats`` more."""
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def compiling_service(service: ServiceClient, mode: str) -> ServiceClient:
    """A service beside ``service`` (its checkpoints, device and placement; base models of its own) whose samplers
    compile their decode step's elementwise math in ``mode``: ``Placement.decode_compile``, which a service does
    not take as an argument, so it is set here on the service's model registry."""
    placement = replace(service._runtime.models.placement, decode_compile=mode)
    compiling = ServiceClient(checkpoint_root=service.checkpoint_root, device=placement.device.type)
    compiling._runtime.models = BaseModelRegistry(placement)
    return compiling


def sampling_figures(
    service: ServiceClient, compiling: ServiceClient, model_dir: Path, shape: Shape, device: str
) -> dict[str, float]:
    """Seconds of minds' sampling with the adapter snapshot (and of taking the snapshot), of the bare base model
    (no adapter: what the adapter costs), of the snapshot on ``compiling`` (its decode math compiled), and of
    ``generate`` on the same rows; ``*_first``: the first (warm-up) call of each minds sampler."""
    trainer = service.create_lora_training_client(str(model_dir), rank=shape.rank, seed=0).result()
    start = time.perf_counter()
    sampler = trainer.save_weights_and_get_sampling_client().result()
    save_seconds = time.perf_counter() - start
    saved = trainer.save_weights_for_sampler("compiled").result().path
    compiled_sampler = compiling.create_sampling_client(model_path=saved).result()
    prompts = _prompts(shape)
    params = types.SamplingParams(max_tokens=shape.max_tokens, temperature=1.0, seed=0, stop=[])

    def sample(client) -> None:
        futures = [client.sample(types.ModelInput.from_ints(p), shape.samples, params) for p in prompts]
        for future in futures:
            assert all(len(s.tokens) == shape.max_tokens for s in future.result().sequences)

    ours_first, ours = _timed(lambda: sample(sampler), shape.repeats)
    graphs = sampler._sampler._batch.slots.graphs.captured  # a peek: how many step shapes were captured
    base = service.create_sampling_client(base_model=str(model_dir)).result()
    _, bare = _timed(lambda: sample(base), shape.repeats)
    compiled_first, compiled = _timed(lambda: sample(compiled_sampler), shape.repeats)
    compiled_slots = compiled_sampler._sampler._batch.slots  # a peek: its graphs, and whether the math compiled
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device).eval()
    rows = torch.tensor(prompts, device=device).repeat_interleave(shape.samples, dim=0)
    tokenizer = sampler.get_tokenizer()

    def generate(tokens: int) -> None:
        config = GenerationConfig(
            do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=tokens, min_new_tokens=tokens,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )  # fmt: skip
        with torch.inference_mode():
            out = model.generate(rows, attention_mask=torch.ones_like(rows), generation_config=config)
        assert out.shape[1] == rows.shape[1] + tokens

    generate(min(8, shape.max_tokens))  # warm-up
    start = time.perf_counter()
    generate(shape.max_tokens)
    theirs = time.perf_counter() - start
    return {
        "minds": ours, "minds_base": bare, "minds_compiled": compiled, "minds_first": ours_first,
        "minds_compiled_first": compiled_first, "compiled": compiled_slots._fast.math.compiled,
        "compiled_graphs": compiled_slots.graphs.captured, "generate": theirs, "save": save_seconds,
        "graphs": graphs, "tokens": shape.tokens,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, seconds, no targets checked")
    parser.add_argument("--sizes", nargs="+", choices=["0.6B", "1.7B"], default=["0.6B", "1.7B"])
    parser.add_argument(
        "--decode-compile", choices=COMPILE_MODES, default=COMPILE_MODES[0],
        help="torch.compile mode of the compiled-math sampler (Placement.decode_compile)",
    )  # fmt: skip
    args = parser.parse_args()
    device = "cpu" if args.smoke else "cuda"
    shape = SMOKE if args.smoke else FULL
    sizes = ["smoke"] if args.smoke else args.sizes
    if device == "cuda":
        print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"{shape.prompts} prompts x {shape.samples} samples, {shape.prompt_tokens}-token prompts, "
          f"{shape.max_tokens} tokens, no stop; minds with a rank-{shape.rank} LoRA snapshot, generate on the base")  # fmt: skip
    targets = {"0.6B": (1.2, 15.0), "1.7B": (None, 10.0)}
    with (
        tempfile.TemporaryDirectory() as tmp,
        ServiceClient(device=device) as service,
        compiling_service(service, args.decode_compile) as compiling,
    ):
        for size in sizes:
            model_dir = build_model(Path(tmp) / size, size, device)
            r = sampling_figures(service, compiling, model_dir, shape, device)
            seconds, ratio = targets.get(size, (None, None))
            goal = "" if ratio is None else f" (target >= {ratio:.0f}x" + (f", <= {seconds} s)" if seconds else ")")
            print(f"  {size}: minds {r['minds']:.3f} s = {r['tokens'] / r['minds']:,.0f} tokens/s "
                  f"({int(r['graphs'])} step graphs captured; without an adapter {r['minds_base']:.3f} s); "
                  f"generate {r['generate']:.3f} s = "
                  f"{r['tokens'] / r['generate']:,.0f} tokens/s -> {r['generate'] / r['minds']:.1f}x{goal}; "
                  f"snapshot (save_weights_and_get_sampling_client) {r['save']:.3f} s")  # fmt: skip
            state = "compiled" if r["compiled"] else "FELL BACK TO EAGER (see the log)"
            print(f"  {size}: minds, decode math {args.decode_compile!r} ({state}, {int(r['compiled_graphs'])} step "
                  f"graphs captured): {r['minds_compiled']:.3f} s = "
                  f"{r['tokens'] / r['minds_compiled']:,.0f} tokens/s -> {r['minds'] / r['minds_compiled']:.2f}x "
                  f"the eager math, {r['generate'] / r['minds_compiled']:.1f}x generate; first call "
                  f"{r['minds_compiled_first']:.1f} s (eager math: {r['minds_first']:.1f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
