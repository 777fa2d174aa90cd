"""What a verifiers v1 episode pays before its model calls: a relay to the environment's kept runner, against the
fresh runner each episode started before the runner was kept (import verifiers, load the environment, prepare its
harness), measured in the same run.

    .venv/bin/python benchmarks/verifiers_v1_episodes.py [--runs 5] [--python .venv-verifiers/bin/python]
    .venv/bin/python benchmarks/verifiers_v1_episodes.py --smoke    # one of each: checks the script runs

The environment is the shipped ``minds_sums_v1`` taskset. A relay's cost is its whole round trip for a task the
runner refuses at once (no model call: what every episode pays on top of its own calls); a fresh runner's is its
start until it lists the tasks, then its close. Each figure is the median wall time, with the CPU seconds of the
processes it started. Target: the relay under 1/20 of a fresh runner. Without verifiers' venv (``make
verifiers-v1``) it says so and measures nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKSETS = ROOT / "plugins" / "verifiers_v1" / "tasksets"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(work: Callable[[], None], runs: int) -> tuple[float, float]:
    """Median wall seconds of ``work`` over ``runs`` runs, and the median CPU seconds of the processes it waited for."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu, began = children_cpu(), time.perf_counter()
        work()
        walls.append(time.perf_counter() - began)
        cpus.append(children_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", default=str(ROOT / ".venv-verifiers" / "bin" / "python"), help="verifiers' interpreter")
    parser.add_argument("--smoke", action="store_true", help="one of each, to check the script runs")
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    if not Path(args.python).is_file():
        print(f"no verifiers interpreter at {args.python} (make verifiers-v1 builds it): nothing measured")
        return
    from minds_verifiers_v1 import load_environment

    settings = {"taskset": "minds_sums_v1", "path": [str(TASKSETS)], "python": args.python, "args": {"num_tasks": 4}}
    fresh = measured(lambda: load_environment(**settings).close(), runs)
    env = load_environment(**settings)
    variables = {**os.environ, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "benchmark"}

    def relay() -> None:
        done = subprocess.run(env.command, input=json.dumps({"index": 99}), capture_output=True, text=True, env=variables, check=False)
        assert done.returncode == 1 and "has no task 99" in done.stderr, done.stderr  # refused by the runner: a round trip

    try:
        kept = measured(relay, runs * 4)
    finally:
        env.close()
    print(f"fresh runner per episode: {fresh[0] * 1000:8.1f} ms wall, {fresh[1]:6.2f} CPU-s")
    print(f"relay to the kept runner: {kept[0] * 1000:8.1f} ms wall, {kept[1]:6.2f} CPU-s")
    print(f"relay / fresh runner: {kept[0] / fresh[0]:.4f} wall, {kept[1] / max(fresh[1], 1e-9):.4f} CPU (target < 0.05)")


if __name__ == "__main__":
    main()
