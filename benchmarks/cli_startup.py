"""Start-up time of `minds --help` and `minds plugins`, against a bare Python start in the same run.

    .venv/bin/python benchmarks/cli_startup.py [--runs 5]
    .venv/bin/python benchmarks/cli_startup.py --smoke    # one run each: checks the script runs

Target: `minds --help` under 0.5 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def seconds(command: list[str], runs: int) -> float:
    """Median wall time of ``command`` over ``runs`` runs."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one run of each command, to check the script runs")
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    bare = seconds([sys.executable, "-c", "pass"], runs)
    for label, args in (("minds --help", ["--help"]), ("minds plugins", ["plugins"])):
        taken = seconds([sys.executable, "-m", "minds_core.cli.command", *args], runs)
        print(f"{label:14s} {taken:.3f} s (median of {runs}) = {taken / bare:.1f} x a bare python start ({bare:.3f} s)")


if __name__ == "__main__":
    main()
