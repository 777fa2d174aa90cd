"""Episodes in process vs on Ray, on this machine: episodes/s of a CPU-bound environment, Ray's
per-episode overhead on a trivial one, and what a default step pays (32 rollouts of 48 tokens, sampled
concurrently from every worker), with the seconds Ray's workers took to start (before step 0, apart).
Everything real: the local backend's tiny model samples, each
episode of the CPU-bound environment runs a subprocess that burns ``--burn`` CPU seconds (the Ray
plugin's test environment), and Ray is a local cluster that ``ray.init`` starts with one CPU per core (once, for every Ray measurement).

Targets: Ray >= 1.7x the episodes/s of the in-process executor (which scores on one core: the reward
blocks its event loop), and <= 20 ms of overhead per episode, one episode at a time.

    .venv/bin/python benchmarks/executors.py [--episodes 16] [--burn 1.0] [--trivial 24] [--step-rollouts 32]
    .venv/bin/python benchmarks/executors.py --parts step --repeat 3   # the default step only, timed 3 times per session
    .venv/bin/python benchmarks/executors.py --smoke    # seconds of burning: checks the script runs, figures mean little
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from minds_core.base import logs
from minds_core.config import load_config
from minds_core.evaluation.evaluation import EvalPlan, evaluate_policy
from minds_core.session.session import Session

ENV = Path(__file__).resolve().parent.parent / "plugins" / "ray_executor" / "tests" / "envs" / "burn_env.py"
PARTS = {"cpu_bound", "trivial", "step"}


async def _seconds(
    executor: str, settings: list[str], tasks: int, samples: int, in_flight: int, runs_dir: str, repeat: int = 1
) -> tuple[list[float], float]:
    """Seconds ``tasks`` x ``samples`` rollouts took on ``executor`` after one warm-up round, each of ``repeat`` times,
    and the seconds the executor's workers took to start (Ray's, when the session opened; 0 in process)."""
    config = load_config(
        None,
        [
            f"env.id={ENV}", f"env.args.tasks={tasks}", "backend=local", f"runs_dir={runs_dir}", *settings,
            f"rollout.executor={executor}", f"rollout.concurrency={in_flight}", f"ray.max_in_flight={in_flight}",
        ],
    )  # fmt: skip
    seconds, failed = [], []
    async with await Session.open(config) as session:
        startup = getattr(session.executor, "startup_seconds", None) or 0.0  # optional (RolloutExecutor)
        policy = await session.start_sampling(None)
        warm = EvalPlan("train", tasks=min(tasks, 2 * (os.cpu_count() or 1)), samples=1)
        await evaluate_policy(session, policy, warm, step=0, require_held_out=False)
        for _ in range(repeat):
            began = time.perf_counter()
            evaluation = await evaluate_policy(session, policy, EvalPlan("train", tasks=tasks, samples=samples), step=0, require_held_out=False)
            seconds.append(time.perf_counter() - began)
            failed += [r.error for g in evaluation.groups for r in g.rollouts if not r.ok]
    if failed:
        raise SystemExit(f"{executor}: {len(failed)} episodes failed, first: {failed[0]}")
    return seconds, startup


def _episodes_per_second(executor: str, burn: float, episodes: int, in_flight: int, runs_dir: str) -> float:
    """Episodes/s of ``episodes`` single-sample tasks of the burning environment, 4 tokens each, on ``executor``."""
    settings = [f"env.args.burn_seconds={burn}", "sampling.max_tokens=4", "sampling.temperature=0"]
    return episodes / asyncio.run(_seconds(executor, settings, episodes, 1, in_flight, runs_dir))[0][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16, help="episodes of the CPU-bound environment")
    parser.add_argument("--burn", type=float, default=1.0, help="CPU seconds each CPU-bound episode burns")
    parser.add_argument("--trivial", type=int, default=24, help="episodes of the trivial environment")
    parser.add_argument("--step-rollouts", type=int, default=32, help="rollouts of the default step (8 per task, 48 tokens each)")
    parser.add_argument("--step-num-cpus", type=float, default=0.25, help="ray.num_cpus of the default step (fractional: many workers)")
    parser.add_argument("--parts", default="cpu_bound,trivial,step", help="which measurements, comma-separated (default: all)")
    parser.add_argument("--repeat", type=int, default=1, help="times the default step is timed in each session (after one warm-up)")
    parser.add_argument("--smoke", action="store_true", help="a few short episodes: checks the script runs")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not parts or parts - PARTS:
        parser.error(f"--parts {args.parts}: choose from {', '.join(sorted(PARTS))}")
    if args.smoke:
        args.episodes, args.burn, args.step_rollouts, args.step_num_cpus = 4, 0.2, 8, 1.0
    logs.configure(level="warning")
    cores = os.cpu_count() or 1
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a cluster of this process only: no token (nor ~/.ray/auth_token)
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False, logging_level="ERROR")  # one cluster for every Ray session
    figures: dict[str, object] = {"cores": cores}
    try:
        with tempfile.TemporaryDirectory() as runs_dir:
            if "cpu_bound" in parts:
                local_cpu = _episodes_per_second("local", args.burn, args.episodes, cores, runs_dir)
                ray_cpu = _episodes_per_second("ray", args.burn, args.episodes, cores, runs_dir)
                figures |= {
                    "cpu_bound/burn_seconds": args.burn,
                    "cpu_bound/local_episodes_per_s": round(local_cpu, 3),
                    "cpu_bound/ray_episodes_per_s": round(ray_cpu, 3),
                    "cpu_bound/ray_vs_local": round(ray_cpu / local_cpu, 2),
                }
            # the smoke skips the trivial pair: the same code again, and Ray's workers start slowly on a busy machine
            if "trivial" in parts and not args.smoke:
                local_one = _episodes_per_second("local", 0.0, args.trivial, 1, runs_dir)
                ray_one = _episodes_per_second("ray", 0.0, args.trivial, 1, runs_dir)
                figures |= {
                    "trivial/local_ms_per_episode": round(1000 / local_one, 1),
                    "trivial/ray_ms_per_episode": round(1000 / ray_one, 1),
                    "trivial/ray_overhead_ms_per_episode": round(1000 * (1 / ray_one - 1 / local_one), 1),
                }
            if "step" in parts:
                # a default step: groups of 8, 48 tokens each, every rollout in flight at once (the engine batches them),
                # at temperature 0 (the same tokens on both executors); on Ray from cores / step_num_cpus workers
                step = ["sampling.max_tokens=48", "sampling.temperature=0", f"ray.num_cpus={args.step_num_cpus}"]
                tasks = max(1, args.step_rollouts // 8)
                local_step, _ = asyncio.run(_seconds("local", step, tasks, 8, tasks * 8, runs_dir, args.repeat))
                ray_step, ray_startup = asyncio.run(_seconds("ray", step, tasks, 8, tasks * 8, runs_dir, args.repeat))
                local_median, ray_median = statistics.median(local_step), statistics.median(ray_step)
                figures |= {
                    "step/rollouts": tasks * 8,
                    "step/ray_num_cpus": args.step_num_cpus,
                    "step/local_seconds": [round(x, 3) for x in local_step],
                    "step/ray_seconds": [round(x, 3) for x in ray_step],
                    "step/ray_overhead_ms_per_rollout": round(1000 * (ray_median - local_median) / (tasks * 8), 1),
                    "ray_workers_startup_seconds": round(ray_startup, 2),
                }
    finally:
        ray.shutdown()
    figures["targets"] = {"ray_vs_local": ">= 1.7", "ray_overhead_ms_per_episode": "<= 20"}
    print(json.dumps(figures))

if __name__ == "__main__":
    main()
