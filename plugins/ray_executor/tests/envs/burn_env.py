"""A test environment for the Ray executor: scoring a reply runs a subprocess that burns CPU (as a test
suite would), and each episode notes in ``record_dir`` the Ray node it ran on, when it started and ended.

The reward is a function of the reply's bytes only, so that a greedy policy scores the same wherever it runs.

``one_worker_dir`` makes a worker that cannot be replaced: the environment builds in one Ray worker only (another
worker's build fails, naming this), and scoring a reply in a Ray worker ends that worker's process (as a crash would).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end:\n    pass\n"


def _node() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "driver"
    except ImportError:
        return "driver"


def _in_ray_worker() -> bool:
    try:
        import ray

        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except ImportError:
        return False


def load_environment(
    burn_seconds: float = 0.0, record_dir: str = "", tasks: int = 8, one_worker_dir: str = "", **unused: object
) -> SimpleNamespace:
    """``unused``: args the environment ignores (a test gives it a secret to see that it never travels)."""
    if one_worker_dir and _in_ray_worker():
        try:
            with open(os.path.join(one_worker_dir, "built"), "x") as out:
                out.write(str(os.getpid()))
        except FileExistsError:
            raise RuntimeError("burn_env with one_worker_dir builds in one Ray worker only") from None

    def score(completion: str) -> float:
        if one_worker_dir and _in_ray_worker():
            os._exit(1)  # the worker's process ends mid-episode
        mark = uuid.uuid4().hex
        if record_dir:
            with open(os.path.join(record_dir, f"{mark}.start"), "w") as out:
                json.dump({"node": _node(), "name": os.environ.get("MINDS_TEST_NODE", ""), "pid": os.getpid(), "time": time.time()}, out)
        if burn_seconds > 0:
            subprocess.run([sys.executable, "-c", BURN.format(seconds=burn_seconds)], check=True)
        if record_dir:
            with open(os.path.join(record_dir, f"{mark}.end"), "w") as out:
                json.dump({"node": _node(), "name": os.environ.get("MINDS_TEST_NODE", ""), "time": time.time()}, out)
        return (sum(completion.encode()) % 7) / 6

    rows = [{"prompt": f"Say something about the number {i}.", "answer": ""} for i in range(tasks)]
    return SimpleNamespace(dataset=rows, test_dataset=rows[:2], rubric=SimpleNamespace(funcs=[score], weights=[1.0]))
