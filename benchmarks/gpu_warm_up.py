"""The first run on a GPU: the memory plan and the sampler's warm-up, against the same sampler with every step eager.

Run: ``.venv/bin/python benchmarks/gpu_warm_up.py`` on a machine with a CUDA GPU (``--smoke``: tiny shapes on
the CPU, where nothing is captured: seconds, figures meaningless). On the Qwen3-0.6B shape
(``gpu_sampling.build_model``: random bf16 weights, the real vocabulary), one service per setting of
``local.cuda_graphs``, each declaring the run's shape (``memory_plan.RunShape``: 64 rows of 512 tokens,
rank 32), times from nothing: loading the model with its memory plan (``create_lora_training_client``),
the first sampler (``save_weights_and_get_sampling_client``: the warm-up that captures the decode steps),
its first ``sample`` of 8 prompts x 8 samples (256-token prompts, 256 tokens), and a second. It prints
the plan, the graphs captured and failed, the seconds of each, and the ratios that say whether the first
run is ever worse than eager: ``first_vs_eager`` (warm-up plus first sample, over the eager sampler's first
sample: what the warm-up costs once) and ``steady_vs_eager`` (second samples). Target: steady <= 1 (faster),
and the warm-up's cost paid back within the run's first few steps.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from tinker import types

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_sampling import FULL, SMOKE, Shape, _prompts, build_model

from minds_core.backends.local import ServiceClient
from minds_core.backends.local.model.memory_plan import RunShape


def figures(model_dir: Path, shape: Shape, device: str, cuda_graphs: str) -> dict[str, float | int | str]:
    """Seconds from nothing to a second sample on a service with ``cuda_graphs``, and what it planned and captured."""
    run = RunShape(rows=shape.prompts * shape.samples, context=shape.prompt_tokens + shape.max_tokens, rank=shape.rank)
    with ServiceClient(device=device, cuda_graphs=cuda_graphs, run_shape=run) as service:
        began = time.perf_counter()
        trainer = service.create_lora_training_client(str(model_dir), rank=shape.rank, seed=0).result()
        loaded = time.perf_counter()
        sampler = trainer.save_weights_and_get_sampling_client().result()
        warmed = time.perf_counter()
        params = types.SamplingParams(max_tokens=shape.max_tokens, temperature=1.0, seed=0, stop=[])
        prompts = _prompts(shape)

        def sample() -> float:
            start = time.perf_counter()
            futures = [sampler.sample(types.ModelInput.from_ints(p), shape.samples, params) for p in prompts]
            for future in futures:
                assert all(len(s.tokens) == shape.max_tokens for s in future.result().sequences)
            return time.perf_counter() - start

        first, second = sample(), sample()
        slots = sampler._sampler._batch.slots  # a peek: what the warm-up captured
        plan = sampler._sampler.base.plan
        assert plan is not None
        return {
            "load_and_plan": loaded - began, "warm_up": warmed - loaded, "first": first, "second": second,
            "graphs": slots.graphs.captured, "failed": len(slots.graphs.failed), "plan": f"{plan.total / 2**30:.2f} GiB",
            "rows": plan.rows, "train_tokens": plan.train_tokens,
        }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, seconds, no targets checked")
    args = parser.parse_args()
    device = "cpu" if args.smoke else "cuda"
    shape = SMOKE if args.smoke else FULL
    if device == "cuda":
        print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"{shape.prompts} prompts x {shape.samples} samples, {shape.prompt_tokens}-token prompts, "
          f"{shape.max_tokens} tokens; rank {shape.rank}; from a fresh service each")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp) / "model", "smoke" if args.smoke else "0.6B", device)
        eager = figures(model_dir, shape, device, "off")
        captured = figures(model_dir, shape, device, "auto")
    for name, row in (("cuda_graphs=off", eager), ("cuda_graphs=auto", captured)):
        print(name + ": " + ", ".join(f"{k} {v:.2f} s" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    first_vs_eager = (captured["warm_up"] + captured["first"]) / (eager["warm_up"] + eager["first"])
    print(f"first_vs_eager {first_vs_eager:.2f}x (warm-up + first sample), "
          f"steady_vs_eager {captured['second'] / eager['second']:.2f}x (second sample; <= 1 is faster)")  # fmt: skip


if __name__ == "__main__":
    main()
