"""verifiers 0.4 (v1) environments train on minds: verifiers runs in its own interpreter, minds trains the calls.

The environments are the bridge's shipped tasksets (written from verifiers 0.4's API), played by verifiers'
own runtime (its null harness, a uv-run chat program, through its interception server) against the run's
policy endpoint; nothing is faked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from minds_core.base.errors import ConfigError

SCORER = Path(__file__).with_name("vf_score.py")


@pytest.mark.slow
def test_the_shipped_v1_config_trains_3_steps_scored_as_verifiers_scores_and_evaluates(
    vf_python: str, tasksets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's `.venv/bin/minds run configs/verifiers_v1.toml`, from the checkout's root, on the default model."""
    from minds_core.testing import run_minds

    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    monkeypatch.setenv("MINDS_VERIFIERS_PYTHON", vf_python)  # the README's .venv-verifiers, or the one given
    result = run_minds("configs/verifiers_v1.toml", runs_dir=tmp_path / "runs", name="v1")
    assert result.exit_code == 0, result.error
    assert result.steps == [0, 1, 2] and all(m["rollouts/failed"] == 0 for m in result.metrics), result.metrics
    assert result.trained
    first = result.metrics[0]
    for name in ("reward/vf.correct", "reward/vf.digits", "vf/reply_chars", "harness/calls"):
        assert f"env/verifiers_v1/{name}" in first, sorted(first)
    # every reward minds trained on is what verifiers' own scoring gives the same reply
    rollouts = [(int(group["task"].split("-")[1]), rollout) for group in result.rollouts for rollout in group["rollouts"]]
    assert len(rollouts) == 3 * 4
    spec = {"taskset": "minds_sums_v1", "args": {"num_tasks": 10, "seed": 0}, "path": [str(tasksets)]}
    scored = subprocess.run(
        [vf_python, str(SCORER), json.dumps(spec)],
        input=json.dumps([[index, rollout["completion"][-1]] for index, rollout in rollouts]),
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    verifiers_rewards = json.loads(scored.stdout.splitlines()[-1])
    assert [rollout["reward"] for _, rollout in rollouts] == pytest.approx(verifiers_rewards, abs=1e-12)
    for (_, rollout), reward in zip(rollouts, verifiers_rewards):
        parts = rollout["components"]
        assert parts["vf.correct"] + 0.5 * parts["vf.digits"] == pytest.approx(reward, abs=1e-12)
    # the trained policy evaluates on the held-out tasks, with verifiers' components
    from minds_core.cli.command import main

    assert main(["eval", str(result.run_dir), "--tasks", "2", "--samples", "1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {"component/vf.correct", "component/vf.digits"} <= set(summary) and summary["rollouts/failed"] == 0, summary


@pytest.mark.slow
def test_a_multi_turn_v1_env_with_a_tool_trains_exactly_the_sampled_tokens(
    vf_python: str, tasksets: Path, minds_env_run: Any, served_and_trained: Any
) -> None:
    args = {"taskset": "minds_calc_v1", "path": [str(tasksets)], "python": vf_python, "args": {"num_tasks": 2, "turns": 3}}
    overrides = ["rollout.drop_constant_reward_groups=false", "trainer.group_size=3"]  # rewards that differ in a group
    result = minds_env_run("verifiers_v1", args=args, steps=1, overrides=overrides)
    assert result.exit_code == 0, result.error
    metrics = result.metrics[0]
    assert metrics["rollouts/failed"] == 0 and metrics["env/verifiers_v1/harness/calls"] == 3, metrics
    assert metrics["env/verifiers_v1/vf/turns"] == 3
    assert {"env/verifiers_v1/reward/vf.used_tool", "env/verifiers_v1/reward/vf.even"} <= set(metrics)
    recorded = served_and_trained.recorded
    assert len(recorded) == 6 and all(len(calls) == 3 for calls in recorded)
    expected = served_and_trained.assert_trained_as_served()
    # the env's tool results came back as the next turns: a later call's prompt extends the one before it, so the
    # turns train as one sequence (a reply whose bytes are not text starts a new one: its text re-renders otherwise)
    turns = [sum(now and not before for before, now in zip((False, *s.sampled), s.sampled)) for s in expected]
    assert len(expected) >= 6 and sum(turns) == 18 and max(turns) == 3, turns


def test_a_missing_interpreter_is_one_config_error(tmp_path: Path) -> None:
    from minds_verifiers_v1 import load_environment

    with pytest.raises(ConfigError, match=r"no interpreter at .*make verifiers-v1"):
        load_environment(taskset="minds_sums_v1", python=str(tmp_path / "nowhere" / "python"))


def test_a_hanging_load_fails_within_check_timeout(tmp_path: Path) -> None:
    from minds_verifiers_v1 import load_environment

    stuck = tmp_path / "python"
    stuck.write_text("#!/bin/sh\nexec sleep 60\n")  # an interpreter that never answers (a fetch that hangs)
    stuck.chmod(0o755)
    with pytest.raises(ConfigError, match=r"took more than check_timeout = 1 s .*uv"):
        load_environment(taskset="minds_sums_v1", python=str(stuck), check_timeout=1.0)


@pytest.mark.slow
def test_what_verifiers_cannot_load_is_one_config_error_naming_it(vf_python: str) -> None:
    from minds_verifiers_v1 import load_environment

    with pytest.raises(ConfigError, match=r"taskset 'no_such_taskset' cannot be loaded by .*not found"):
        load_environment(taskset="no_such_taskset", python=vf_python)
    assert sys.executable != vf_python  # verifiers ran in its own interpreter, not the run's


@pytest.mark.slow
def test_an_episode_verifiers_cannot_finish_fails_its_rollout_counted(vf_python: str, tasksets: Path, minds_env_run: Any) -> None:
    """Three turns, one call allowed: minds refuses the second, the episode fails, and the rollout is counted failed."""
    args = {"taskset": "minds_calc_v1", "path": [str(tasksets)], "python": vf_python, "max_calls": 1, "args": {"num_tasks": 1}}
    overrides = ["trainer.groups_per_batch=1", "rollout.retries=0", "rollout.max_failing_rollouts=2"]
    result = minds_env_run("verifiers_v1", args=args, steps=1, overrides=overrides)
    assert result.metrics[0]["rollouts/failed"] == 2, result.metrics[0]
    errors = [rollout["error"] for group in result.rollouts for rollout in group["rollouts"]]
    assert all("flooded the endpoint" in error for error in errors), errors
    assert all(rollout["reward"] is None for group in result.rollouts for rollout in group["rollouts"])


SANDBOXED = '''
"""A taskset whose env seats its agent on the docker runtime (a sandbox), as an env author writes it."""

import verifiers.v1 as vf

from minds_sums_v1 import SumsTaskset


class SandboxedConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.DockerConfig())


class SandboxedEnv(vf.Env[SandboxedConfig]):
    async def run(self, task, agents):
        await agents.agent.run(task)


__all__ = ["SandboxedEnv", "SumsTaskset"]
'''


@pytest.mark.slow
def test_a_seat_its_env_puts_in_a_sandbox_is_refused_unless_local_runtime_is_set(vf_python: str, tasksets: Path, tmp_path: Path) -> None:
    """The bridge plays every seat on this machine: a seat the env author sandboxed is named, not silently run here."""
    from minds_verifiers_v1 import load_environment

    (tmp_path / "sandboxed_v1.py").write_text(SANDBOXED)
    args = {"taskset": "sandboxed_v1", "path": [str(tmp_path), str(tasksets)], "python": vf_python, "args": {"num_tasks": 2}}
    with pytest.raises(ConfigError, match=r"'agent' seat asks for the docker runtime .*env\.args\.local_runtime = true"):
        load_environment(**args)
    env = load_environment(**args, local_runtime=True)
    try:
        assert [task.id for task in env.tasks("train")] == ["sum-0", "sum-1"]
    finally:
        env.close()


HANGING = '''
"""minds_sums_v1's tasks, whose env hangs on task 0 (as an env waiting on a sandbox that never answers)."""

import asyncio

import verifiers.v1 as vf

from minds_sums_v1 import SumsTaskset


class HangingConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()


class HangingEnv(vf.Env[HangingConfig]):
    async def run(self, task, agents):
        if task.data.id == "sum-0":
            await asyncio.sleep(3600)
        await agents.agent.run(task)


__all__ = ["HangingEnv", "SumsTaskset"]
'''


@pytest.mark.slow
def test_an_episode_past_its_timeout_fails_counted_while_the_same_runner_plays_the_others(
    vf_python: str, tasksets: Path, tmp_path: Path, minds_env_run: Any
) -> None:
    """One runner plays every episode: the hanging one's relay is killed at rollout.timeout, its episode is counted
    timed out, and the other task's episodes of the same step are played by the same runner and scored."""
    (tmp_path / "hanging_v1.py").write_text(HANGING)
    args = {"taskset": "hanging_v1", "path": [str(tmp_path), str(tasksets)], "python": vf_python, "args": {"num_tasks": 2}}
    # (a played episode takes seconds, more on a loaded machine: the timeout leaves it room, the hanging one never ends)
    overrides = ["rollout.timeout=40", "rollout.retries=0", "rollout.max_failing_rollouts=3", "trainer.group_size=3"]
    result = minds_env_run("verifiers_v1", args=args, steps=1, overrides=overrides)
    # (the one task left gives minds-small's replies one reward, so the step may train on nothing: exit 1, said so)
    assert result.exit_code == 0 or "no step trained" in result.error, result.error
    (metrics,) = result.metrics
    assert metrics["rollouts/timed_out"] == 3 and metrics["rollouts/failed"] == 3 and metrics["rollouts/total"] == 6, metrics
    played = [rollout for group in result.rollouts for rollout in group["rollouts"] if rollout["reward"] is not None]
    assert len(played) == 3 and all(set(rollout["components"]) == {"vf.correct", "vf.digits"} for rollout in played), played


def _runner_pids() -> set[int]:
    """The pids of the `runner.py serve` processes of this machine (linux /proc)."""
    pids = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 2 and argv[1].endswith(b"runner.py") and argv[2] == b"serve":
            pids.add(int(cmdline.parent.name))
    return pids


@pytest.mark.slow
def test_a_runner_that_died_fails_each_episode_naming_it_and_a_killed_run_leaves_no_runner(vf_python: str, tasksets: Path, tmp_path: Path) -> None:
    from minds_verifiers_v1 import load_environment

    before = _runner_pids()
    env = load_environment(taskset="minds_sums_v1", path=[str(tasksets)], python=vf_python, args={"num_tasks": 2})
    try:
        os.killpg(env.runner.process.pid, signal.SIGKILL)
        env.runner.process.wait(timeout=30)
        relay = subprocess.run(
            env.command, input=json.dumps({"index": 0}), capture_output=True, text=True, timeout=30,
            env={**os.environ, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"},
        )  # fmt: skip
        assert relay.returncode == 1
        assert "the verifiers runner at" in relay.stderr and "did not answer" in relay.stderr and "it has exited" in relay.stderr
    finally:
        env.close()
    assert not env.runner.folder.exists()
    # a run killed -9 leaves no runner behind: the runner's stdin closes with the run's process, and it exits
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, vf_python, str(tasksets)], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None
    folder = Path(holder.stdout.readline().strip())
    started = _runner_pids() - before
    assert folder.is_dir() and len(started) == 1, (folder, started)
    holder.kill()
    holder.wait(timeout=30)
    deadline = time.monotonic() + 30
    while (started & _runner_pids() or folder.exists()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not started & _runner_pids() and not folder.exists()


HOLDER = """
import sys, time
from minds_verifiers_v1 import load_environment
env = load_environment(taskset="minds_sums_v1", path=[sys.argv[2]], python=sys.argv[1], args={"num_tasks": 2})
print(env.runner.folder, flush=True)
time.sleep(3600)
"""
