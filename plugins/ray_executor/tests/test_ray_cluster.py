"""The ``ray`` executor on a real Ray cluster on this machine: a head and a second node, each its own process.

One cluster for the module (Ray is slow to start on a busy machine); the test that kills the second node runs last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from ray_cluster import (  # this folder is on sys.path (conftest.py)
    AUTH_VARIABLES,
    ENV,
    LocalCluster,
)

from minds_core.testing import run_minds

pytestmark = pytest.mark.slow

QUICK = ["trainer.group_size=2", "trainer.groups_per_batch=2", "sampling.max_tokens=8", "metrics.rollouts_per_step=2"]


@pytest.fixture(scope="module")
def cluster():
    started = LocalCluster()
    with pytest.MonkeyPatch.context() as patch:
        for key in AUTH_VARIABLES:  # the drivers (this process, the minds processes it starts) have the token only
            patch.delenv(key, raising=False)
        for key, value in started.driver_env.items():
            patch.setenv(key, value)
        try:
            yield started.start()
        finally:
            started.stop()


def _records(folder: Path, suffix: str) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob(f"*.{suffix}"))]


def _ray(cluster: LocalCluster, *extra: str) -> list[str]:
    return ["rollout.executor=ray", f"ray.address={cluster.address}", *extra]


def _rewards(result) -> list[list[float]]:
    """Per step, the reward of every rollout of its logged groups."""
    return [
        [r["reward"] for group in result.rollouts if group["step"] == step for r in group["rollouts"]] for step in result.steps
    ]


def test_episodes_run_on_both_nodes_and_score_as_in_process_at_temperature_0(cluster, tmp_path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    settings = [*QUICK, "sampling.temperature=0", f"env.args.record_dir={records}", "env.args.burn_seconds=1"]
    on_ray = run_minds(
        "--env", ENV, "--steps", "2", "--backend", "local", runs_dir=tmp_path, name="ray", overrides=[*settings, *_ray(cluster)]
    )
    on_ray.assert_trained_unless_said_why()
    started = _records(records, "start")
    assert len(started) == 8 and {r["name"] for r in started} == {"head", "second"}  # every episode, on both nodes
    assert len({r["node"] for r in started}) == 2
    for path in records.iterdir():
        path.unlink()
    local = run_minds("--env", ENV, "--steps", "2", "--backend", "local", runs_dir=tmp_path, name="local", overrides=settings)
    assert {r["name"] for r in _records(records, "start")} == {""}  # in the run's own process
    assert _rewards(on_ray) == _rewards(local) and len(_rewards(local)[0]) == 4
    assert [row["reward/mean"] for row in on_ray.metrics] == [row["reward/mean"] for row in local.metrics]


def test_workers_start_before_step_0_and_play_every_step_under_fractional_cpus(cluster, tmp_path, capsys) -> None:
    """At ``ray.num_cpus = 0.5`` the 2-CPU cluster holds 4 workers: they start as the run opens (logged with their
    seconds, before any episode) and play both steps' 8 episodes each, none restarted."""
    records = tmp_path / "records"
    records.mkdir()
    settings = [*QUICK, f"env.args.record_dir={records}", "ray.num_cpus=0.5", "trainer.group_size=4"]
    result = run_minds("--env", ENV, "--steps", "2", "--backend", "local", runs_dir=tmp_path, name="warm", overrides=[*settings, *_ray(cluster)])
    result.assert_trained_unless_said_why()
    (started,) = [json.loads(line) for line in capsys.readouterr().err.splitlines() if '"ray workers started"' in line]
    assert started["workers"] == 4 and started["seconds"] > 0
    first, second = (row.get("executor/startup_seconds") for row in result.metrics)
    assert second is None and abs(first - started["seconds"]) <= 0.01  # the first metrics line's, as logged
    episodes = _records(records, "start")
    assert len(episodes) == 16 and len({r["pid"] for r in episodes}) <= 4  # the same 4 processes for both steps
    ready = datetime.fromisoformat(started["timestamp"]).timestamp()
    assert all(r["time"] > ready for r in episodes)  # no episode began before every worker was up


def test_a_tinker_cookbook_recipe_env_scores_on_ray_as_in_process_at_temperature_0(cluster, tmp_path) -> None:
    """tinker-cookbook's arithmetic recipe env, built on the workers (its renderer for the run's model there too)."""
    cookbook = [
        *QUICK, "sampling.temperature=0", "env.id=tinker_cookbook.recipes.math_rl.arithmetic_env:ArithmeticDatasetBuilder",
        'env.args={"batch_size": 2, "n_batches": 2, "group_size": 2}',
    ]  # fmt: skip
    on_ray = run_minds("--steps", "2", "--backend", "local", runs_dir=tmp_path, name="cookbook-ray", overrides=[*cookbook, *_ray(cluster)])
    local = run_minds("--steps", "2", "--backend", "local", runs_dir=tmp_path, name="cookbook-local", overrides=cookbook)
    assert all(row["rollouts/failed"] == 0 and row["rollouts/total"] == 4 for row in on_ray.metrics)
    assert _rewards(on_ray) == _rewards(local) and len(_rewards(local)[0]) == 4


def _minds(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "minds"), *args]


def _wait(predicate, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def test_an_agent_program_trains_through_the_endpoint_of_the_worker_that_plays_it(cluster, tmp_path) -> None:
    """The ``harness`` environment on Ray: each worker serves its episodes' endpoint; the calls come back as tokens."""
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import json\nfrom openai import OpenAI\n"
        "reply = OpenAI().chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}], max_tokens=6)\n"
        "print(json.dumps({'reward': sum(reply.choices[0].token_ids) % 97}))\n"
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    args = [f"env.args.command={json.dumps([sys.executable, str(agent)])}", f"env.args.tasks={json.dumps(str(tasks))}"]
    result = run_minds(
        "--env",
        "harness",
        "--steps",
        "2",
        "--backend",
        "local",
        runs_dir=tmp_path,
        name="harness",
        overrides=[*QUICK, *args, *_ray(cluster)],
    )
    result.assert_trained_unless_said_why()
    assert all(m["rollouts/failed"] == 0 and m["env/harness/harness/calls"] == 1 for m in result.metrics)
    assert all(r["sampled_tokens"] >= 1 for group in result.rollouts for r in group["rollouts"])


def test_a_resume_after_the_driver_was_killed_continues_with_the_same_data_order(cluster, tmp_path) -> None:
    settings = [*QUICK, "trainer.save_every=1", "env.args.tasks=16"]
    argv = ["run", "--env", ENV, "--steps", "3", "--backend", "local", "--name", "killed", "--set", f"runs_dir={tmp_path}"]
    # each episode burns 1 s on the cluster, so step 0's metrics come seconds before the run could end (the kill is mid-run)
    for assignment in ["metrics.sinks=[]", *settings, "env.args.burn_seconds=1", *_ray(cluster)]:
        argv += ["--set", assignment]
    metrics = tmp_path / "killed" / "metrics.jsonl"
    driver = subprocess.Popen(_minds(*argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait(lambda: metrics.is_file() and metrics.read_text().count("\n") >= 1 or driver.poll() is not None, "step 0")
        assert driver.poll() is None, driver.stderr.read().decode()[-2000:]
        os.killpg(driver.pid, signal.SIGKILL)
    finally:
        driver.wait()
    done = len(metrics.read_text().splitlines())
    assert 1 <= done < 3
    from minds_core.cli.command import main

    assert main(["run", "--resume", str(tmp_path / "killed"), "--set", "metrics.sinks=[]"]) in (0, 1)
    resumed = [json.loads(line) for line in (tmp_path / "killed" / "rollouts.jsonl").read_text().splitlines()]
    whole = run_minds("--env", ENV, "--steps", "3", "--backend", "local", runs_dir=tmp_path, name="whole", overrides=settings)
    prompts = lambda rows: [(r["step"], r["prompt"]) for r in rows]
    assert sorted({r["step"] for r in resumed}) == [0, 1, 2]
    assert prompts(resumed) == prompts(whole.rollouts)


def test_more_workers_than_the_engine_keeps_sampling_sessions_by_default_lose_no_episode(cluster, tmp_path, capsys) -> None:
    """At ``ray.num_cpus = 0.1`` the 2-CPU cluster holds 20 workers, more than the 16 sampling sessions the served
    engine keeps by default; each worker makes one for the base model as it starts and one per step's policy, and
    plays 2 episodes a step: the run's engine keeps as many sessions as its workers do, so none is dropped under them."""
    settings = [*QUICK, "ray.num_cpus=0.1", "trainer.group_size=4", "trainer.groups_per_batch=10", "env.args.tasks=20"]
    result = run_minds("--env", ENV, "--steps", "2", "--backend", "local", runs_dir=tmp_path, name="many", overrides=[*settings, *_ray(cluster)])
    (started,) = [json.loads(line) for line in capsys.readouterr().err.splitlines() if '"ray workers started"' in line]
    assert started["workers"] == 20
    assert [(row["rollouts/total"], row["rollouts/failed"]) for row in result.metrics] == [(40, 0), (40, 0)]


def test_when_every_worker_is_lost_and_none_can_start_again_waiting_episodes_fail_at_once_naming_why(cluster, tmp_path) -> None:
    """One worker (``ray.max_in_flight = 1``) whose episode ends its process, and no other can start (the test
    environment builds in one worker only): the attempts waiting for a worker, the lost one's retry among them, fail
    with the reason and the run ends, where they would otherwise wait for a worker forever."""
    once = tmp_path / "once"
    once.mkdir()
    settings = [*QUICK, f"env.args.one_worker_dir={once}", "ray.max_in_flight=1", "rollout.retries=1", "trainer.groups_per_batch=1"]
    argv = ["run", "--env", ENV, "--steps", "1", "--backend", "local", "--name", "none-left", "--set", f"runs_dir={tmp_path}"]
    for assignment in ["metrics.sinks=[]", *settings, *_ray(cluster)]:
        argv += ["--set", assignment]
    driver = subprocess.Popen(_minds(*argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    err = err.decode()
    assert driver.returncode in (0, 1), err[-3000:]
    assert "a Ray worker was lost with its episode" in err and "a Ray worker could not be replaced" in err
    assert "no Ray worker left" in err and "builds in one Ray worker only" in err, err[-3000:]


def test_a_node_that_joins_mid_run_gets_a_worker_and_episodes_from_the_next_step(cluster, tmp_path) -> None:
    """2 workers at the default ``ray.num_cpus = 1``; a third node joins after step 0: a worker starts there and takes its
    share of the episodes in flight. The node leaves again at the end (killed), as the cluster was."""
    records = tmp_path / "records"
    records.mkdir()
    settings = [*QUICK, f"env.args.record_dir={records}", "env.args.burn_seconds=1", "trainer.groups_per_batch=3"]
    argv = ["run", "--env", ENV, "--steps", "10", "--backend", "local", "--name", "joined", "--set", f"runs_dir={tmp_path}"]
    for assignment in ["metrics.sinks=[]", *settings, *_ray(cluster)]:
        argv += ["--set", assignment]
    metrics = tmp_path / "joined" / "metrics.jsonl"
    driver = subprocess.Popen(_minds(*argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        try:
            _wait(lambda: metrics.is_file() and metrics.read_text().count("\n") >= 1 or driver.poll() is not None, "step 0")
            cluster.join("third")
            _, err = driver.communicate(timeout=400)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait()
    finally:
        cluster.kill("third")
    err = err.decode()
    assert driver.returncode == 0, err[-3000:]
    assert '"a Ray worker joined"' in err
    assert any(r["name"] == "third" for r in _records(records, "start"))
    assert all(json.loads(line)["rollouts/failed"] == 0 for line in metrics.read_text().splitlines())


def test_killing_the_second_node_mid_run_costs_one_attempt_which_is_retried(cluster, tmp_path) -> None:
    """One episode at a time per worker (``ray.max_in_flight = 2``, 2 workers): the node takes the one it was playing."""
    records = tmp_path / "records"
    records.mkdir()
    settings = [
        *QUICK,
        f"env.args.record_dir={records}",
        "env.args.burn_seconds=4",
        "rollout.retries=1",
        "trainer.groups_per_batch=3",
        "ray.max_in_flight=2",
    ]
    argv = ["run", "--env", ENV, "--steps", "1", "--backend", "local", "--name", "lost", "--set", f"runs_dir={tmp_path}"]
    for assignment in ["metrics.sinks=[]", *settings, *_ray(cluster)]:
        argv += ["--set", assignment]
    driver = subprocess.Popen(_minds(*argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait(
            lambda: any(r["name"] == "second" for r in _records(records, "start")) or driver.poll() is not None,
            "an episode on node 2",
        )
        cluster.kill("second")  # its episode is 4 s of burning in: mid-run
        _, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode in (0, 1), err.decode()[-3000:]
    (row,) = [json.loads(line) for line in (tmp_path / "lost" / "metrics.jsonl").read_text().splitlines()]
    assert row["rollouts/total"] == 6 and row["rollouts/failed"] == 0 and row["rollouts/retried"] == 1
    lost = [r for r in _records(records, "start") if r["name"] == "second"]
    finished = [r for r in _records(records, "end") if r["name"] == "second"]
    assert len(lost) - len(finished) == 1  # the one episode the node took with it
    assert "a Ray worker was lost with its episode" in err.decode()
