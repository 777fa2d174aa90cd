"""Overhead of ``minds serve``: one RL step through the real SDK over HTTP vs the same step in-process.

Run: ``python benchmarks/serve_overhead.py`` (``--smoke``: seconds on the CPU, figures mean nothing;
``--cpu``: the CPU shapes on a machine with a GPU). Both sides run the local backend with the same
seed and the same step: a sampling snapshot, one request of ``group`` samples per prompt, all
submitted at once, an ``importance_sampling`` forward_backward on every rollout and an AdamW step.
The served side is ``minds serve --port 0`` in a subprocess, driven by an unmodified
``tinker.ServiceClient``. The median step time of each side is compared, then the median of each
phase (snapshot, sampling, training).

On a GPU (the default where torch sees one), the step of issue 24, one shape:

* ``Qwen3-0.6B``: gpu_step.py's Qwen3-0.6B configuration (random bf16 weights, the real
  151,936-token vocabulary), 8 prompts of 256 tokens x 8 samples x 256 tokens, a rank-32 LoRA.
  Target: served overhead <= 15%. The sides run one after the other, each with the GPU to
  itself: in its steady state the server keeps the sampling sessions its ``SamplerBudget`` allows
  (by default at most ``max_samplers``, within a part of the GPU's free memory), each with its own
  adapted weights and decode slots (~0.6 GB each at this shape), which beside the in-process
  side's would not fit one GPU. The GPU memory each side had in use is printed.

On the CPU, two shapes on the tiny model, the sides held at once and their steps taken in turns
(so that the machine's slow spells fall on both alike):

* ``default``: the default job's step (``groups_per_batch`` 4 x ``group_size`` 8,
  ``max_tokens`` 48, ~500-token prompts, as ``local_backend.py`` measures it).
  Target: served overhead <= 15%.
* ``small requests``: 8 groups of 8, 12-token prompts, 32 tokens. Each HTTP request
  carries little compute here, so the SDK client's own cost per request (about 1-2 ms of
  Python on its event loop, which sends the 8 requests of a sampling phase over
  10-20 ms) weighs most: reported, as the worst case of this kind, without a target.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tinker
import torch
from tinker import types

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_step import qwen3_config, save_model, smoke_config

from minds_core.backends.local import DEFAULT_BASE_MODEL, ServiceClient
from minds_core.backends.local.training.pass_cost import TRIALS
from minds_core.serve.samplers import SamplerBudget


@dataclass(frozen=True)
class Shape:
    """One RL step's sizes, its model, and how its two sides are timed."""

    name: str
    prompts: int
    group: int
    max_tokens: int
    prompt_tokens: int
    target: float | None  # the largest served overhead allowed (a fraction), None: reported only
    steps: int = 12  # timed steps of each side, after its warm-up
    rank: int = 8
    model: str = DEFAULT_BASE_MODEL  # minds-tiny, or a key of gpu_step.QWEN3 or "smoke" (gpu_step's tiny Qwen3), built here
    together: bool = True  # both sides held at once, steps in turns; False: one side after the other
    warmup: int | None = None  # untimed steps of each side first; None: WARMUP's


SMOKE_SHAPES = [
    Shape("smoke", 2, 2, 4, 12, None, steps=1, warmup=1),
    Shape("smoke, one side at a time", 2, 2, 4, 12, None, steps=1, rank=4, model="smoke", together=False, warmup=1),
]
CPU_SHAPES = [Shape("default", 4, 8, 48, 500, 0.15), Shape("small requests", 8, 8, 32, 12, None)]
GPU_SHAPES = [Shape("Qwen3-0.6B", 8, 8, 256, 256, 0.15, steps=4, rank=32, model="0.6B", together=False)]

KEPT = SamplerBudget().max_samplers
"""Sampling sessions the server keeps at most (its default ``--max-samplers``; fewer where its memory budget binds)."""
WARMUP = {"served": max(KEPT, 2 * TRIALS) + 1, "in-process": 2 * TRIALS + 1}
"""Untimed steps a side takes first: the first calls' costs, the training plans' trials (``pass_cost.TRIALS``
of each), and on the server enough steps that it keeps as many sampling sessions as it will and each new one
reuses a dropped one's weights and decode slots (the steady state of a long run)."""

PHASES = ("snapshot", "sample", "train")


def rl_step(trainer: Any, prompts: list[list[int]], shape: Shape, step: int) -> list[float]:
    """One RL step on ``trainer`` (SDK or local: the same API); the wall time of each of ``PHASES`` in seconds
    (building the datums counts as training)."""
    start = time.perf_counter()
    sampler = trainer.save_weights_and_get_sampling_client().result()
    snapshot = time.perf_counter()
    params = types.SamplingParams(max_tokens=shape.max_tokens, temperature=1.0, seed=step, stop=[])
    futures = [sampler.sample(types.ModelInput.from_ints(p), shape.group, params) for p in prompts]
    results = [future.result() for future in futures]
    sampled = time.perf_counter()
    data = []
    for prompt, result in zip(prompts, results, strict=True):
        sequences = result.sequences
        rewards = np.array([np.mean(seq.tokens) for seq in sequences], dtype=np.float32)
        for seq, advantage in zip(sequences, rewards - rewards.mean(), strict=True):
            tokens = prompt + list(seq.tokens)
            pad = len(prompt) - 1
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={
                        "target_tokens": np.array(tokens[1:], dtype=np.int64),
                        "logprobs": np.array([0.0] * pad + list(seq.logprobs), dtype=np.float32),
                        "advantages": np.array([0.0] * pad + [advantage] * len(seq.tokens), dtype=np.float32),
                    },
                )
            )
    fb = trainer.forward_backward(data, "importance_sampling")
    optim = trainer.optim_step(types.AdamParams(learning_rate=1e-3))
    fb.result()
    optim.result()
    return [snapshot - start, sampled - snapshot, time.perf_counter() - sampled]


@contextlib.contextmanager
def served(model: str, device: str) -> Iterator[tinker.ServiceClient]:
    """An SDK client of ``minds serve --port 0`` serving ``model`` on ``device`` in a subprocess (stopped after)."""
    with serving(model, device) as url:
        remote = tinker.ServiceClient(base_url=url, api_key=os.environ.get("TINKER_API_KEY", "tml-benchmark"))
        yield remote
        remote.close("success").result()


@contextlib.contextmanager
def serving(model: str, device: str, *options: str) -> Iterator[str]:
    """The URL of ``minds serve --port 0 [options]`` serving ``model`` on ``device`` in a subprocess (stopped after)."""
    command = [sys.executable, "-m", "minds_core.cli.command", "serve", "--port", "0", "--device", device, "--model", model, *options]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        if not line:
            raise SystemExit(f"minds serve exited with {process.wait()} before it listened (its errors are above)")
        yield json.loads(line)["url"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def measure(trainers: dict[str, Any], prompts: list[list[int]], shape: Shape) -> dict[str, list[list[float]]]:
    """Phase times of ``shape.steps`` steps of each of ``trainers`` (SDK or local training clients, by side),
    after its warm-up (``shape.warmup``, else ``WARMUP``), in turns where there are two."""
    # Sides held together take the same steps with the same seeds, so that each measured step trains the same
    # adapter on the same rollouts: a step's cost changes as the policy learns (its samples, hence the datums'
    # shapes, change). One side alone takes only the warm-up it needs.
    warmups = {name: shape.warmup or WARMUP[name] for name in trainers}
    for name, trainer in trainers.items():
        for step in range(max(warmups.values()) if shape.together else warmups[name]):
            rl_step(trainer, prompts, shape, -1 - step)
    times: dict[str, list[list[float]]] = {name: [] for name in trainers}
    names = list(trainers)
    for step in range(shape.steps):
        for name in names if step % 2 == 0 else names[::-1]:
            times[name].append(rl_step(trainers[name], prompts, shape, step))
    return times


def gpu_memory_in_use(device: str) -> float | None:
    """GiB in use on the GPU, all processes together (None on the CPU)."""
    if device != "cuda":
        return None
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def compare(shape: Shape, device: str) -> tuple[dict[str, list[list[float]]], dict[str, float | None]]:
    """Phase times of ``shape``'s steps on each side, on fresh training clients, and where the sides run one after
    the other, the GPU memory in use after each side's last step (None on the CPU)."""
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(3, 250, size=shape.prompt_tokens)] for _ in range(shape.prompts)]
    with tempfile.TemporaryDirectory() as tmp:
        model = shape.model
        if model != DEFAULT_BASE_MODEL:
            config = smoke_config() if model == "smoke" else qwen3_config(model)
            model = str(save_model(config, Path(tmp) / model, device))

        def trainer(client: Any) -> Any:
            return client.create_lora_training_client(model, rank=shape.rank, seed=0).result()

        if shape.together:
            with served(model, device) as remote, ServiceClient(device=device) as local:
                return measure({"served": trainer(remote), "in-process": trainer(local)}, prompts, shape), {}
        with served(model, device) as remote:
            times = measure({"served": trainer(remote)}, prompts, shape)
            memory = {"served": gpu_memory_in_use(device)}
        with ServiceClient(device=device) as local:
            times |= measure({"in-process": trainer(local)}, prompts, shape)
            memory["in-process"] = gpu_memory_in_use(device)
        return times, memory


def report(shape: Shape, times: dict[str, list[list[float]]], memory: dict[str, float | None]) -> None:
    served, inproc = (statistics.median(sum(step) for step in times[name]) for name in ("served", "in-process"))
    how = "the sides in turns" if shape.together else "one side after the other"
    model = "the tiny model" if shape.model == DEFAULT_BASE_MODEL else f"a Qwen3-{shape.model} shape"
    print(
        f"{shape.name} RL step ({model}, {shape.prompts} prompts of {shape.prompt_tokens} tokens x {shape.group} "
        f"samples x {shape.max_tokens} tokens, rank {shape.rank}, importance_sampling + AdamW), median of "
        f"{shape.steps}, {how}:"
    )
    print(f"  in-process local backend: {inproc * 1000:8.1f} ms")
    print(f"  minds serve over HTTP:    {served * 1000:8.1f} ms")
    target = "" if shape.target is None else f"; target <= {shape.target:.0%}"
    print(f"  served / in-process: {served / inproc:.3f} (served overhead {100 * (served / inproc - 1):+.1f}%{target})")
    for i, phase in enumerate(PHASES):
        medians = {name: statistics.median(step[i] for step in times[name]) for name in times}
        print(f"    {phase:8s} in-process {medians['in-process'] * 1000:7.1f} ms, served {medians['served'] * 1000:7.1f} ms")
    if memory.get("served") is not None:
        print(f"  GPU memory in use after the last step: in-process {memory['in-process']:.1f} GiB, served "
              f"{memory['served']:.1f} GiB (its kept sampling sessions, at most {KEPT}, included)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, seconds, no targets checked")
    parser.add_argument("--cpu", action="store_true", help="the CPU shapes (the default without a GPU)")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() and not (args.smoke or args.cpu) else "cpu"
    shapes = SMOKE_SHAPES if args.smoke else GPU_SHAPES if device == "cuda" else CPU_SHAPES
    if device == "cuda":
        print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    for shape in shapes:
        report(shape, *compare(shape, device))


if __name__ == "__main__":
    main()
