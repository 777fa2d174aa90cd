"""A smaller run of benchmarks/openreward_load.py: many concurrent episodes, the limit held, none lost or doubled."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARK = Path(__file__).resolve().parents[3] / "benchmarks" / "openreward_load.py"


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("openreward_load", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_concurrent_episodes_respect_the_limit_and_are_counted_once() -> None:
    pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")
    benchmark = load_benchmark()
    limit = 48
    reports = benchmark.run_load(episodes=200, concurrency=limit, group_size=4, tool_latency=0.01, phases=("bridge", "rollouts"))
    assert [r.phase for r in reports] == ["bridge", "rollouts"]
    for report in reports:
        assert report.failed == 0 and report.returned == report.episodes == 200
        assert report.exact, (report.sessions, report.expected_sessions)
        assert limit // 2 <= report.peak_sessions <= limit
        assert len(report.server_waits) == 200 and all(w > 0 for w in report.server_waits)
        print("\n".join(report.lines()))
    assert benchmark.Relay.live == 0 and benchmark.Relay.closed == 200
