"""Start-up time of `minds --help` and `minds plugins`, and the time `minds serve` takes to fail on a taken port,
against a bare Python start in the same run.

    .venv/bin/python benchmarks/cli_startup.py [--runs 5]
    .venv/bin/python benchmarks/cli_startup.py --smoke    # one run each: checks the script runs

Targets: `minds --help` under 0.5 s; `minds serve` on a taken port fails (exit 2) in under a second, before any
model loads.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time


def seconds(command: list[str], runs: int, exit_code: int = 0) -> float:
    """Median wall time of ``command`` over ``runs`` runs, each exiting with ``exit_code``."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - began)
        assert done.returncode == exit_code, f"{command} exited {done.returncode}, not {exit_code}: {done.stderr}"
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one run of each command, to check the script runs")
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    bare = seconds([sys.executable, "-c", "pass"], runs)
    with socket.create_server(("127.0.0.1", 0)) as taken_port:
        busy = ["serve", "--port", str(taken_port.getsockname()[1])]
        for label, args, code in (
            ("minds --help", ["--help"], 0),
            ("minds plugins", ["plugins"], 0),
            ("serve, port taken", busy, 2),
        ):
            taken = seconds([sys.executable, "-m", "minds_core.cli.command", *args], runs, code)
            print(f"{label:17s} {taken:.3f} s (median of {runs}) = {taken / bare:.1f} x a bare python start ({bare:.3f} s)")


if __name__ == "__main__":
    main()
