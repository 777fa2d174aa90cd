"""Every benchmark script runs in its ``--smoke`` mode, so a benchmark that breaks fails the suite.

Benchmarks are found by globbing ``benchmarks/*.py``: one added later is covered
without touching this file. Smoke runs print figures but assert no timings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def test_the_benchmarks_are_found():
    assert {"pipeline.py", "cli_startup.py"} <= {p.name for p in BENCHMARKS}


@pytest.mark.slow
@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_runs_in_smoke_mode(script: Path, tmp_path: Path):
    # a process boundary is the point: each script is run as its README/docstring says
    done = subprocess.run(
        [sys.executable, str(script), "--smoke"], capture_output=True, text=True, timeout=240, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, f"{script.name} --smoke exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    assert done.stdout.strip(), f"{script.name} --smoke printed no figures"
