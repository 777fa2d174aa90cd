"""CPU seconds and wall seconds of the fast subset (`pytest -m "not slow"`, what `make test-fast` runs), against its
target of 60 CPU-seconds in total on 2 cores.

    .venv/bin/python benchmarks/fast_suite.py            # the whole fast subset (a minute or two)
    .venv/bin/python benchmarks/fast_suite.py --smoke    # one small test file: checks the script runs

CPU time is the user and system time of pytest and every process it waited for (its xdist workers, the servers
and `minds` processes the tests start), so a machine busy with other work does not change it; wall time does.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_CPU_SECONDS = 60.0
SMOKE_FILE = "tests/test_names.py"


def measured(command: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run ``command`` in the repository root: CPU seconds of it and its waited-for children, wall seconds, the result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help=f"only {SMOKE_FILE}, to check the script runs")
    args = parser.parse_args()
    selection = [SMOKE_FILE] if args.smoke else []
    command = [sys.executable, "-m", "pytest", "-m", "not slow", "-q", "-p", "no:cacheprovider", *selection]
    cpu, wall, done = measured(command)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "(no output)"
    if done.returncode != 0:
        sys.exit(f"{' '.join(command[1:])} exited {done.returncode}: {summary}\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
    if args.smoke:
        print(f"{SMOKE_FILE} (smoke: one file, the target does not apply): {summary}")
        print(f"CPU {cpu:.1f} s, wall {wall:.1f} s")
    else:
        print(f"the fast subset: {summary}")
        print(f"CPU {cpu:.1f} s = {cpu / TARGET_CPU_SECONDS:.2f} x the target of {TARGET_CPU_SECONDS:.0f} CPU-s; wall {wall:.1f} s")


if __name__ == "__main__":
    main()
