"""Overhead of ``minds serve``: one RL step through the real SDK over HTTP vs the same step in-process.

Run: ``python benchmarks/serve_overhead.py`` (``--smoke``: seconds, figures mean nothing).
Both sides run the local backend on the tiny model with the same seed and the same
step: a sampling snapshot, one request of ``group`` samples per prompt, all submitted at
once, an ``importance_sampling`` forward_backward on every rollout and an AdamW step. The
served side is ``minds serve --port 0`` in a subprocess, driven by an unmodified
``tinker.ServiceClient``; steps alternate between the two sides, and the median step
time of each is compared, then the median of each phase (snapshot, sampling, training).

Two step shapes, each on fresh training clients:

* ``default``: the default job's step (``groups_per_batch`` 4 x ``group_size`` 8,
  ``max_tokens`` 48, ~500-token prompts, as ``local_backend.py`` measures it).
  Target: served overhead <= 15%.
* ``small requests``: 8 groups of 8, 12-token prompts, 32 tokens. Each HTTP request
  carries little compute here, so the SDK client's own cost per request (about 1-2 ms of
  Python on its event loop, which sends the 8 requests of a sampling phase over
  10-20 ms) weighs most: reported, as the worst case of this kind, without a target.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tinker
from tinker import types

from minds_core.backends.local import DEFAULT_BASE_MODEL, ServiceClient
from minds_core.serve.engine import MAX_SAMPLERS

SMOKE = "--smoke" in sys.argv[1:]
STEPS = 1 if SMOKE else 12


@dataclass(frozen=True)
class Shape:
    """One RL step's sizes."""

    name: str
    prompts: int
    group: int
    max_tokens: int
    prompt_tokens: int
    target: float | None  # the largest served overhead allowed (a fraction), None: reported only


SHAPES = (
    [Shape("smoke", 2, 2, 4, 12, None)]
    if SMOKE
    else [Shape("default", 4, 8, 48, 500, 0.15), Shape("small requests", 8, 8, 32, 12, None)]
)


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


def start_server() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "minds_core.cli.command", "serve", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    return process, json.loads(process.stdout.readline())["url"]


def compare(remote: tinker.ServiceClient, local: ServiceClient, shape: Shape) -> dict[str, list[list[float]]]:
    """Phase times of ``STEPS`` steps of ``shape`` on each side, on fresh training clients."""
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(3, 250, size=shape.prompt_tokens)] for _ in range(shape.prompts)]
    trainers = {
        "served": remote.create_lora_training_client(DEFAULT_BASE_MODEL, rank=8, seed=0).result(),
        "in-process": local.create_lora_training_client(DEFAULT_BASE_MODEL, rank=8, seed=0).result(),
    }
    # Warm-up: first-call costs, and on the server enough steps that it keeps MAX_SAMPLERS
    # sampling sessions and each new one reuses a dropped one's weights (the steady state of
    # a long run). Both sides take the same steps with the same seeds, so that each measured
    # step trains the same adapter on the same rollouts: a step's cost changes as the policy
    # learns (its samples, hence the datums' shapes, change).
    for trainer in trainers.values():
        for step in range(1 if SMOKE else MAX_SAMPLERS + 1):
            rl_step(trainer, prompts, shape, -1 - step)
    times: dict[str, list[list[float]]] = {name: [] for name in trainers}
    for step in range(STEPS):
        for name in (("served", "in-process") if step % 2 == 0 else ("in-process", "served")):
            times[name].append(rl_step(trainers[name], prompts, shape, step))
    return times


def report(shape: Shape, times: dict[str, list[list[float]]]) -> None:
    served, inproc = (statistics.median(sum(step) for step in times[name]) for name in ("served", "in-process"))
    print(
        f"{shape.name} RL step ({shape.prompts} prompts of {shape.prompt_tokens} tokens x {shape.group} samples x "
        f"{shape.max_tokens} tokens, importance_sampling + AdamW), median of {STEPS}:"
    )
    print(f"  in-process local backend: {inproc * 1000:8.1f} ms")
    print(f"  minds serve over HTTP:    {served * 1000:8.1f} ms")
    target = "" if shape.target is None else f"  (target <= {shape.target:.0%})"
    print(f"  served overhead: {100 * (served / inproc - 1):+.1f}%{target}")
    for i, phase in enumerate(PHASES):
        medians = {name: statistics.median(step[i] for step in times[name]) for name in times}
        print(f"    {phase:8s} in-process {medians['in-process'] * 1000:7.1f} ms, served {medians['served'] * 1000:7.1f} ms")


def main() -> None:
    process, url = start_server()
    try:
        remote = tinker.ServiceClient(base_url=url, api_key=os.environ.get("TINKER_API_KEY", "tml-benchmark"))
        with ServiceClient() as local:
            results = [(shape, compare(remote, local, shape)) for shape in SHAPES]
        remote.close("success").result()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    for shape, times in results:
        report(shape, times)


if __name__ == "__main__":
    main()
