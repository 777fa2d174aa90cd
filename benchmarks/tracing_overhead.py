"""Overhead of tracing: on the default ghost_trace RL step, and on a sample request served by ``minds serve``.

Run: ``python benchmarks/tracing_overhead.py`` (``--smoke``: seconds, on minds-tiny; figures mean nothing).

The step: runs of ``minds run --env ghost_trace`` (its defaults, local backend) in this process, in
three modes taken in turns, ``--rounds`` times: ``off`` (no tracer at all), ``phases only``
(``metrics.trace = false``: the spans are timed for the ``phase/*`` metrics, nothing written) and
``trace.json`` (the default). Each run's median ``time/step`` (its first step left out: it loads the
model) is compared with ``off``'s. Target: <= 2%. Because a step's time varies more than the tracer
costs, the tracer's cost is also measured directly: the spans a default step opens (counted in its
trace) times the cost of one span written to a trace file (timed over many), as a share of the step.

The served request: a ``minds serve --model <model>`` subprocess, one SDK sampling client, requests
of ``--samples`` samples timed one after another. Each served request is counted for ``/metrics`` and
written to its session's trace (``ServeMetrics.track``); that cost, timed over many requests here,
times the HTTP requests one SDK sample makes (counted by the server's own ``/metrics``), as a share of
the request's median latency (the server on the CPU). Target: <= 2%.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tinker
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_overhead import serving

from minds_core.base import logs
from minds_core.base.tracing import SelfTimes, TraceFile, Tracer, read_trace, span, tracing
from minds_core.config import load_config
from minds_core.rl import loop
from minds_core.serve.metrics import ServeMetrics
from minds_core.train import train

MODES = ("off", "phases only", "trace.json")


@contextlib.contextmanager
def untraced(*_args: Any) -> Iterator[None]:
    """``run_tracer`` replaced: no tracer at all (the ``off`` mode)."""
    yield None


def run_steps(root: Path, mode: str, overrides: list[str], name: str) -> tuple[float, Path]:
    """One run in ``mode``: its median step seconds (the first step left out) and its folder."""
    settings = [*overrides, f"runs_dir={root}", f"name={name}", "metrics.sinks=[]", f"metrics.trace={mode == 'trace.json'}"]
    original = loop.run_tracer
    if mode == "off":
        loop.run_tracer = untraced
    try:
        run_dir = Path(train(load_config(None, settings))["run_dir"])
    finally:
        loop.run_tracer = original
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return statistics.median(row["time/step"] for row in rows[1:]), run_dir


def span_seconds(folder: Path, count: int) -> float:
    """Seconds one span costs inside a step, opened and closed with its own time summed and a trace file written
    (the mean over ``count``)."""
    with tracing(Tracer([SelfTimes(), TraceFile(folder / "cost.json")])), span("step", step=0):
        start = time.perf_counter()
        for index in range(count):
            with span("sample", prompt_tokens=index, turn=0):
                pass
        return (time.perf_counter() - start) / count


def step_overhead(root: Path, overrides: list[str], rounds: int) -> None:
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    traced: Path | None = None
    for round_ in range(rounds):
        for mode in MODES:
            seconds, run_dir = run_steps(root, mode, overrides, f"{mode.replace(' ', '-').replace('.', '-')}-{round_}")
            times[mode].append(seconds)
            traced = run_dir if mode == "trace.json" else traced
    off = statistics.median(times["off"])
    print(f"ghost_trace step ({' '.join(overrides) or 'defaults'}), median of {rounds} run(s) per mode:")
    for mode in MODES:
        median = statistics.median(times[mode])
        print(f"  {mode:12s} {median:8.3f} s/step  {100 * (median / off - 1):+6.2f}% vs off")
    assert traced is not None
    events = [e for e in read_trace(traced / "trace.json") if e.get("ph") in ("X", "C")]
    steps = max(1, sum(e["name"] == "step" for e in events))
    per_span = span_seconds(root, 20000)
    per_step = len(events) / steps
    print(
        f"  direct: {per_step:.0f} events per step x {1e6 * per_span:.1f} us per span = {1e3 * per_step * per_span:.2f} ms, "
        f"{100 * per_step * per_span / off:.3f}% of the step (target <= 2%)"
    )


def requests_sent(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == "minds_serve_requests_total")


def served_overhead(root: Path, model: str, samples: int, requests: int) -> None:
    with serving(model, "cpu", "--checkpoint-root", str(root / "ckpt")) as url:
        client = tinker.ServiceClient(base_url=url, api_key=os.environ.get("TINKER_API_KEY", "tml-benchmark"))
        sampler = client.create_sampling_client(base_model=model).result()
        params = tinker.types.SamplingParams(max_tokens=32, temperature=1.0, seed=0)
        prompt = tinker.types.ModelInput.from_ints(list(range(10, 60)))
        sampler.sample(prompt, samples, params).result()  # warm-up
        before = requests_sent(url)
        latencies = []
        for _ in range(requests):
            start = time.perf_counter()
            sampler.sample(prompt, samples, params).result()
            latencies.append(time.perf_counter() - start)
        per_sample = (requests_sent(url) - before - 1) / requests  # less the first scrape
        client.close("success").result()
    metrics = ServeMetrics(["/api/v1/asample", "/api/v1/retrieve_future"], None, root / "traces")
    body = b'{"sampling_session_id": "s1:sample:0", "num_samples": 8}'
    count = 20000
    start = time.perf_counter()
    for _ in range(count):
        with metrics.track("POST", "/api/v1/asample", lambda: 200, lambda: body):
            pass
    cost = (time.perf_counter() - start) / count
    median = statistics.median(latencies)
    print(
        f"served sample request ({samples} samples of {model}), median of {requests}: {1e3 * median:.2f} ms, {per_sample:.1f} HTTP requests each"
    )
    print(
        f"  metrics + session trace: {1e6 * cost:.1f} us per HTTP request, {1e3 * cost * per_sample:.3f} ms per sample request, "
        f"{100 * cost * per_sample / median:.3f}% of its latency (target <= 2%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="seconds on minds-tiny; the figures mean nothing")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode, taken in turns")
    parser.add_argument("--steps", type=int, default=6, help="steps of each run (the first is left out)")
    parser.add_argument("--samples", type=int, default=8, help="samples per served request")
    args = parser.parse_args()
    logs.configure("json", "warning")
    if args.smoke:
        overrides = [
            "env.id=ghost_trace",
            "model.base_model=minds-tiny",
            "trainer.steps=2",
            "trainer.groups_per_batch=1",
            "trainer.group_size=2",
            "sampling.max_tokens=4",
        ]
        rounds, model, requests = 1, "minds-tiny", 3
    else:
        overrides, rounds, model, requests = ["env.id=ghost_trace", f"trainer.steps={args.steps}"], args.rounds, "minds-small", 30
    with tempfile.TemporaryDirectory() as folder:
        step_overhead(Path(folder), overrides, rounds)
        served_overhead(Path(folder), model, args.samples, requests)


if __name__ == "__main__":
    main()
