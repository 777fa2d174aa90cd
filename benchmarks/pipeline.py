"""Pipelining of the training loop against a FAKE service with injected latency (no compute).

Sampling a batch takes S seconds and a forward_backward + optim_step takes T
seconds. Targets: time per step <= 1.15 x max(S, T) with max_steps_off_policy=1,
and <= 1.1 x (S + T) with 0. Figures are ratios measured in this run.

    .venv/bin/python benchmarks/pipeline.py [--sample 0.4] [--train 0.4] [--steps 8]
    .venv/bin/python benchmarks/pipeline.py --smoke    # seconds: checks the script runs, figures mean nothing
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import tinker
from transformers import AutoTokenizer

from minds_core import Rubric, SingleTurnEnvironment, Task, hookimpl
from minds_core.backends.local.model.tiny_model import tiny_model_path
from minds_core.base import logs
from minds_core.config import load_config
from minds_core.contract.plugins import load_plugins
from minds_core.train import train as train_run


class FakeFuture:
    """An awaitable result, like the SDK's APIFuture, backed by an asyncio task."""

    def __init__(self, coroutine: Any) -> None:
        self.task = asyncio.ensure_future(coroutine)

    def __await__(self):
        return self.task.__await__()


class LatencySampler:
    """FAKE sampler: every request takes `seconds` and returns fixed tokens."""

    def __init__(self, seconds: float, eos: int) -> None:
        self.seconds, self.eos = seconds, eos

    def sample(self, prompt: Any, num_samples: int, sampling_params: Any) -> FakeFuture:
        async def run() -> tinker.types.SampleResponse:
            await asyncio.sleep(self.seconds)
            sequence = tinker.types.SampledSequence(
                stop_reason="stop",
                sequence_id="fake",
                tokens_np=np.asarray([65, 66, self.eos], dtype=np.int32),
                logprobs_np=np.full(3, -1.0, dtype=np.float32),
            )
            return tinker.types.SampleResponse(sequences=[sequence] * num_samples)

        return FakeFuture(run())


class LatencyTrainingClient:
    """FAKE training client: requests run in order; forward_backward takes `seconds`."""

    def __init__(self, tokenizer: Any, sample_seconds: float, train_seconds: float) -> None:
        self.tokenizer, self.sample_seconds, self.train_seconds = tokenizer, sample_seconds, train_seconds
        self.last: asyncio.Task | None = None

    def _queue(self, seconds: float, result: Any) -> FakeFuture:
        previous = self.last

        async def run() -> Any:
            if previous is not None:
                await previous
            await asyncio.sleep(seconds)
            return result

        future = FakeFuture(run())
        self.last = future.task
        return future

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    def forward_backward(self, data: Any, loss_fn: str, loss_fn_config: Any = None) -> FakeFuture:
        return self._queue(self.train_seconds, tinker.types.ForwardBackwardOutput(loss_fn_output_type="", loss_fn_outputs=[], metrics={"loss:sum": 0.0}))

    def optim_step(self, adam_params: Any) -> FakeFuture:
        return self._queue(0.0, None)

    def save_state(self, name: str, **kwargs: Any) -> FakeFuture:
        return self._queue(0.0, tinker.types.SaveWeightsResponse(path=f"tinker://fake/weights/{name}"))

    def save_weights_for_sampler(self, name: str, **kwargs: Any) -> FakeFuture:
        return self._queue(0.0, tinker.types.SaveWeightsForSamplerResponse(path=f"tinker://fake/sampler_weights/{name}"))

    def save_weights_and_get_sampling_client(self) -> FakeFuture:
        return self._queue(0.0, LatencySampler(self.sample_seconds, self.tokenizer.eos_token_id))


class LatencyService:
    """FAKE ServiceClient with injected latency."""

    def __init__(self, sample_seconds: float, train_seconds: float) -> None:
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
        self.client = LatencyTrainingClient(tokenizer, sample_seconds, train_seconds)

    def create_lora_training_client(self, **kwargs: Any) -> FakeFuture:
        async def ready() -> LatencyTrainingClient:
            return self.client

        return FakeFuture(ready())


class BenchPlugin:
    def __init__(self, sample_seconds: float, train_seconds: float) -> None:
        self.sample_seconds, self.train_seconds = sample_seconds, train_seconds

    @hookimpl
    def minds_register_backends(self, register: Any) -> None:
        register("latency", lambda config, run_dir: LatencyService(self.sample_seconds, self.train_seconds))

    @hookimpl
    def minds_register_environments(self, register: Any) -> None:
        tasks = [Task(prompt=f"task {i}", id=str(i)) for i in range(64)]
        rubric = Rubric([lambda completion: random.random()], names=["noise"])
        register("noise", lambda: SingleTurnEnvironment({"train": tasks}, rubric))


def seconds_per_step(sample: float, train: float, steps: int, off_policy: int) -> float:
    plugins = load_plugins(extra=[("bench", BenchPlugin(sample, train))])
    with tempfile.TemporaryDirectory() as runs:
        config = load_config(None, [
            "env.id=noise", "backend=latency", f"runs_dir={runs}", "name=bench", f"trainer.steps={steps}",
            f"trainer.max_steps_off_policy={off_policy}", "trainer.group_size=4", "trainer.groups_per_batch=8",
            "metrics.sinks=[]", "metrics.rollouts_per_step=0",
        ])
        train_run(config, plugins=plugins)
        rows = [json.loads(line) for line in (Path(runs) / "bench" / "metrics.jsonl").read_text().splitlines()]
    return statistics.fmean(r["time/step"] for r in rows[1:])  # step 0 has nothing to overlap with


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", type=float, default=0.4, help="seconds to sample one batch (S)")
    parser.add_argument("--train", type=float, default=0.4, help="seconds of forward_backward + optim_step (T)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="one tiny scenario in seconds, to check the script runs")
    args = parser.parse_args()
    logs.configure("json", "warning")
    s, t = args.sample, args.train
    scenarios = [("S = T", s, t), ("S = 2T", 2 * s, t), ("T = 2S", s, 2 * t)]
    if args.smoke:
        scenarios, args.steps = [("smoke", 0.01, 0.01)], 3
    for label, sample, train in scenarios:
        on = seconds_per_step(sample, train, args.steps, 0)
        off = seconds_per_step(sample, train, args.steps, 1)
        print(f"{label:7s} S={sample:.2f}s T={train:.2f}s | on-policy (0): {on:.3f} s/step = {on / (sample + train):.3f} x (S+T)"
              f" [target <= 1.10] | off-policy (1): {off:.3f} s/step = {off / max(sample, train):.3f} x max(S,T) [target <= 1.15]")


if __name__ == "__main__":
    main()
