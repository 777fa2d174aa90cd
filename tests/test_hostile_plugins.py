"""Plugin code cannot end the run, or end it with a lie: one hostile environment per escape (tests/plugins/hostile_plugin).

sys.exit, KeyboardInterrupt, GeneratorExit and CancelledError raised by an episode fail
that rollout, reported and counted; ``env.close()`` calling sys.exit sets no exit code;
``os.chdir`` moves nothing the run writes; a thread left running does not hold the
process; a 20 MB error is stored cut, a 20 MB observation is refused before it is
tokenized, and a 1e308 reward is an invalid reward, not a crash of the statistics.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minds_core.base import logs
from minds_core.base.errors import MindsError
from minds_core.config import load_config
from minds_core.contract.plugin_errors import (
    MAX_ERROR_CHARS,
    PluginExit,
    contained,
    raised_by_plugin,
)
from minds_core.contract.plugins import load_plugins
from minds_core.train import train

FAST = ["env.id=hostile", "sampling.max_tokens=4", "trainer.group_size=2", "trainer.groups_per_batch=2", "trainer.steps=1",
        "metrics.sinks=[]", "name=run"]  # fmt: skip


@pytest.fixture(scope="module")
def hostile_plugins(fixture_plugin_copy):
    """The installed plugins plus the hostile fixture plugin (imported from a copy), registered in-process."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(fixture_plugin_copy("hostile_plugin")))
        import minds_hostile_plugin

        logs.configure("json", "warning")
        yield load_plugins(extra=[("hostile", minds_hostile_plugin)])


def _train(plugins, runs: Path, *overrides: str) -> tuple[dict, list[dict], dict]:
    """One step on the hostile environment: the summary, the metrics row and the rollouts written."""
    summary = train(load_config(None, [*FAST, f"runs_dir={runs}", *overrides]), plugins=plugins)
    run = Path(summary["run_dir"])
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rollouts = [r for group in map(json.loads, (run / "rollouts.jsonl").read_text().splitlines()) for r in group["rollouts"]]
    return summary, rollouts, row


@pytest.mark.parametrize(
    ("escape", "error"),
    [
        ("system_exit", "SystemExit: 0"),
        ("keyboard_interrupt", "KeyboardInterrupt: "),
        ("generator_exit", "GeneratorExit: "),
        ("cancelled", "CancelledError: "),
    ],
)
@pytest.mark.slow
def test_a_base_exception_from_an_episode_fails_only_its_rollouts(hostile_plugins, tmp_path, escape, error):
    summary, rollouts, row = _train(hostile_plugins, tmp_path, f"env.args.escape={escape}")
    assert row["rollouts/failed"] == row["rollouts/total"] == 4
    assert [r["error"] for r in rollouts] == [error] * 4
    assert summary["not_trained"]  # every group failed: the run says so (the command exits 1), never a silent 0


def test_sys_exit_while_loading_the_environment_is_a_load_failure_naming_it(hostile_plugins, tmp_path):
    with pytest.raises(MindsError, match="environment 'hostile' failed to load: SystemExit: 0"):
        train(load_config(None, [*FAST, f"runs_dir={tmp_path}", "env.args.escape=load_exit"]), plugins=hostile_plugins)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_huge_error_is_stored_cut(hostile_plugins, tmp_path):
    _, rollouts, row = _train(hostile_plugins, tmp_path, "env.args.escape=huge_error")
    assert row["rollouts/failed"] == 4
    for rollout in rollouts:
        assert rollout["error"].startswith("ValueError: xxx")
        assert rollout["error"].endswith("... [cut: 20,000,012 characters in all]")
        assert len(rollout["error"]) < MAX_ERROR_CHARS + 100
    assert (tmp_path / "run" / "rollouts.jsonl").stat().st_size < 10 * 4 * MAX_ERROR_CHARS


@pytest.mark.slow
def test_a_huge_observation_is_refused_before_it_is_tokenized(hostile_plugins, tmp_path):
    _, rollouts, row = _train(hostile_plugins, tmp_path, "env.args.escape=huge_observation", "rollout.max_total_tokens=64")
    assert row["rollouts/failed"] == 4
    for rollout in rollouts:
        assert "the initial observation of 20,000,000 characters cannot fit in the 64 tokens left" in rollout["error"]
        assert "it was not tokenized" in rollout["error"]


@pytest.mark.slow
def test_a_huge_reply_ends_the_episode_truncated_before_it_is_tokenized(hostile_plugins, tmp_path):
    _, rollouts, row = _train(hostile_plugins, tmp_path, "env.args.escape=huge_reply", "rollout.max_total_tokens=64")
    assert row["rollouts/failed"] == 0 and row["rollouts/truncated"] == 4
    assert all(r["truncated"] and r["reward"] is not None and len(r["completion"]) == 1 for r in rollouts)
    assert row["tokens/total"] <= 4 * 64


@pytest.mark.parametrize("policy", ["zero", "fail"])
@pytest.mark.slow
def test_a_1e308_reward_is_an_invalid_reward_and_the_statistics_stay_finite(hostile_plugins, tmp_path, policy):
    _, rollouts, row = _train(hostile_plugins, tmp_path, "env.args.escape=huge_reward", f"rollout.invalid_reward={policy}",
                              "rollout.drop_constant_reward_groups=false")  # fmt: skip
    assert row["rollouts/invalid_reward"] == 4
    if policy == "fail":
        assert row["rollouts/failed"] == 4
        assert all(r["error"] == "invalid reward [1e+308]: a reward must be a finite number within ±1e+12" for r in rollouts)
    else:
        assert row["rollouts/failed"] == 0 and row["reward/mean"] == 0.0


@pytest.mark.slow
def test_chdir_in_an_episode_moves_nothing_the_run_writes(hostile_plugins, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    summary = train(load_config(None, [*FAST, "runs_dir=runs", "trainer.steps=2", "env.args.escape=chdir",
                                       f"env.args.elsewhere={elsewhere}"]), plugins=hostile_plugins)  # fmt: skip
    assert Path.cwd() == elsewhere  # the plugin did move the process
    run = tmp_path / "runs" / "run"
    assert summary["run_dir"] == str(run)
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    assert not (elsewhere / "runs").exists()


@pytest.mark.slow
def test_a_step_that_sets_a_signal_based_timeout_runs_as_in_a_script(hostile_plugins, tmp_path):
    """Sync plugin code runs on the main thread (math_verify's timeouts need it), not in a thread of its own."""
    summary, rollouts, row = _train(hostile_plugins, tmp_path, "env.args.escape=alarm")
    assert row["rollouts/failed"] == 0 and all(r["error"] is None for r in rollouts)
    assert summary["trained_steps"] == 1


@pytest.mark.slow
def test_a_close_that_never_returns_is_given_up_after_the_rollout_timeout(hostile_plugins, tmp_path):
    began = time.monotonic()
    summary, rollouts, row = _train(hostile_plugins, tmp_path, "env.args.escape=close_block", "rollout.timeout=1")
    assert time.monotonic() - began < 60  # each episode's close() and the environment's sleep for an hour
    assert row["rollouts/failed"] == 0 and all(r["error"] is None for r in rollouts)  # the episodes were played and scored
    assert summary["trained_steps"] == 1


def _minds(installed_plugin, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    environ["PYTHONPATH"] = str(installed_plugin("hostile_plugin"))
    return subprocess.run(
        [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json", "run", "--env", "hostile", "--backend", "local",
         "--name", "run", "--set", f"runs_dir={tmp_path}", *(f"--set={o}" for o in FAST[1:6]), *args],
        check=False, capture_output=True, text=True, cwd=tmp_path, env=environ, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_sys_exit_0_in_every_episode_ends_the_command_with_1_not_0(installed_plugin, tmp_path):
    done = _minds(installed_plugin, tmp_path, "--set", "env.args.escape=system_exit")
    assert done.returncode == 1, done.stderr
    assert "no step trained" in done.stderr and "Traceback" not in done.stderr
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert row["rollouts/failed"] == 4


@pytest.mark.slow
def test_sys_exit_in_close_does_not_set_the_exit_code(installed_plugin, tmp_path):
    done = _minds(installed_plugin, tmp_path, "--set", "env.args.escape=close_exit")
    assert done.returncode == 0, done.stderr
    assert any(
        event.get("event") == "close failed" and event.get("error") == "SystemExit: 4"
        for event in map(json.loads, (line for line in done.stderr.splitlines() if line.startswith("{")))
    ), done.stderr


@pytest.mark.slow
def test_a_thread_left_running_does_not_keep_minds_from_exiting(installed_plugin, tmp_path):
    done = _minds(installed_plugin, tmp_path, "--set", "env.args.escape=thread")
    assert done.returncode == 0, done.stderr
    assert "exiting without waiting for thread(s) still running after 10 s: hostile-forever" in done.stderr
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 1


def test_minds_own_cancellation_and_the_users_ctrl_c_still_stop_the_run():
    async def cancelled_by_minds() -> None:
        work = asyncio.create_task(contained(asyncio.sleep(3600)))
        await asyncio.sleep(0)
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work

    async def cancelled_by_plugin() -> None:
        async def plugin() -> None:
            raise asyncio.CancelledError

        with pytest.raises(PluginExit, match="CancelledError"):
            await contained(plugin())

    asyncio.run(cancelled_by_minds())
    asyncio.run(cancelled_by_plugin())
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert not raised_by_plugin(KeyboardInterrupt())  # Python's own handler: the user pressed Ctrl-C
        signal.signal(signal.SIGINT, lambda *_: None)
        assert raised_by_plugin(KeyboardInterrupt())  # Ctrl-C is handled elsewhere: code raised this one
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "escape", "blocked"),
    # async_block: an async step that blocks between its awaits; episode_block: the environment's episode();
    # sync_close_block: an episode's sync close() (the first signal printed nothing for any of them)
    [
        (signal.SIGINT, "block", "episode HostileEpisode.step"),
        (signal.SIGTERM, "block", "episode HostileEpisode.step"),
        (signal.SIGINT, "async_block", "episode HostileEpisode.step"),
        (signal.SIGTERM, "episode_block", "environment HostileEnvironment.episode"),
        (signal.SIGINT, "sync_close_block", "episode HostileEpisode.close"),
    ],
)
def test_while_a_sync_step_blocks_a_second_signal_exits_at_once(installed_plugin, tmp_path, signum, escape, blocked):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    environ["PYTHONPATH"] = str(installed_plugin("hostile_plugin"))
    log = tmp_path / "stderr.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json", "run", "--env", "hostile", "--name", "run",
         "--set", f"runs_dir={tmp_path}", *(f"--set={o}" for o in FAST[1:6]), "--set", f"env.args.escape={escape}",
         "--set", "rollout.timeout=0"],
        cwd=tmp_path, env=environ, stdout=subprocess.DEVNULL, stderr=log.open("w"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while '"event": "training"' not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        time.sleep(2)  # the episodes are asleep in step()
        proc.send_signal(signum)  # asks for a stop after the step in flight, which never ends
        deadline = time.monotonic() + 1  # said at once, from the handler: the event loop is blocked
        while "stopping: waiting for" not in log.read_text():
            assert time.monotonic() < deadline, f"the first signal printed nothing: {log.read_text()[-2000:]}"
            time.sleep(0.05)
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == 128 + signum
    finally:
        proc.kill()
    said = log.read_text()
    assert re.search(rf"stopping: waiting for {re.escape(blocked)} \(blocked \d+s\); press Ctrl-C again to exit now", said), said
    assert f"{signal.Signals(signum).name} again: exiting now" in said
