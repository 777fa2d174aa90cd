"""Rollout executors: the hook, the core's ``local`` executor behind ``RLLoop.collect`` and evaluations,
and the config keys that select and set one."""

from __future__ import annotations

from typing import ClassVar

import pytest

from minds_core import GroupOrder, hookimpl
from minds_core.base.errors import ConfigError
from minds_core.config import load_config
from minds_core.contract.names import check_names
from minds_core.contract.plugins import load_plugins
from minds_core.rl.local_executor import LocalExecutor


class RecordingExecutor(LocalExecutor):
    """The local executor, noting every order it is handed and whether it was closed; it reports the start-up
    seconds an executor with workers would (``startup_seconds``), though it starts none."""

    startup_seconds = 1.25

    made: ClassVar[list[RecordingExecutor]] = []

    def __init__(self, session) -> None:
        super().__init__(session)
        self.orders: list[GroupOrder] = []
        self.closed = 0
        RecordingExecutor.made.append(self)

    async def run_groups(self, orders, policy):
        self.orders.extend(orders)
        return await super().run_groups(orders, policy)

    async def close(self) -> None:
        self.closed += 1


class RecordingPlugin:
    @hookimpl
    def minds_register_rollout_executors(self, register):
        register("recording", RecordingExecutor, "the local executor, recording its orders")


@pytest.mark.slow
def test_a_registered_executor_runs_every_group_of_a_run(minds_plugin, tmp_path) -> None:
    from minds_core.testing import run_minds

    RecordingExecutor.made.clear()
    minds_plugin(RecordingPlugin(), name="recording_plugin")
    result = run_minds(
        "--env", "ghost_trace", "--steps", "2", "--backend", "local", runs_dir=tmp_path,
        overrides=["rollout.executor=recording", "trainer.group_size=2", "trainer.groups_per_batch=3", "sampling.max_tokens=4"],
    )  # fmt: skip
    result.assert_trained_unless_said_why()
    (executor,) = RecordingExecutor.made
    assert [o.step for o in executor.orders] == [0, 0, 0, 1, 1, 1]
    assert {o.group_size for o in executor.orders} == {2} and {o.env.id for o in executor.orders} == {"ghost_trace"}
    assert len({o.seed for o in executor.orders}) == 6  # a seed per group
    assert executor.closed == 1
    assert [row["rollouts/total"] for row in result.metrics] == [6, 6]
    assert [row.get("executor/startup_seconds") for row in result.metrics] == [1.25, None]  # the first line only


def test_an_unknown_executor_exits_2_naming_the_key_and_the_registered_ones(tmp_path, capsys) -> None:
    from minds_core.testing import run_minds

    pytest.importorskip("minds_ray", reason="ray is the executor offered: pip install -c constraints.txt -e plugins/ray_executor")

    result = run_minds("--env", "ghost_trace", "--backend", "local", runs_dir=tmp_path, overrides=["rollout.executor=rya"])
    err = capsys.readouterr().err
    assert result.exit_code == 2
    assert "rollout.executor: unknown rollout executor 'rya' (did you mean ray?)" in err
    assert "Available: local, ray." in err and "Traceback" not in err
    assert not (tmp_path / "test").exists()


class ForgetfulPlugin:
    """An executor factory that forgot its ``return``: the session would have no executor."""

    @hookimpl
    def minds_register_rollout_executors(self, register):
        def make(session) -> None:
            LocalExecutor(session)

        register("forgetful", make, "makes a local executor and returns nothing")


def test_an_executor_factory_that_returns_no_executor_stops_the_run_naming_it_and_its_plugin(minds_plugin, tmp_path, capsys) -> None:
    from minds_core.testing import run_minds

    minds_plugin(ForgetfulPlugin(), name="forgetful_plugin")
    result = run_minds("--env", "ghost_trace", "--backend", "local", runs_dir=tmp_path, overrides=["rollout.executor=forgetful"])
    err = capsys.readouterr().err
    assert result.exit_code == 1
    assert (
        "rollout.executor = 'forgetful' (plugin forgetful_plugin): its factory returned NoneType None, "
        "not a RolloutExecutor: it lacks needs_sampler_path, run_groups, close"
    ) in err
    assert "Traceback" not in err
    assert not (tmp_path / "test").exists()  # found before any run folder is made


def test_check_names_lists_the_executor_with_the_other_unknown_names() -> None:
    config = load_config(None, ["env.id=ghost_trace", "rollout.executor=nowhere", "trainer.advantage=nothing"])
    with pytest.raises(ConfigError) as info:
        check_names(config, load_plugins().registry)
    assert "rollout.executor: unknown rollout executor 'nowhere'" in str(info.value)
    assert "trainer.advantage" in str(info.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ray.num_cpus=-1", "ray.num_cpus = -1.0: must be a finite number in [0, 1024]"),
        ("ray.max_in_flight=-2", "ray.max_in_flight = -2: must be an integer in [0, 65536]"),
        ("ray.resources.sandbox=-1", "ray.resources = {'sandbox': -1.0}: must be a table whose every value is a finite number in [0, 1000000.0]: sandbox = -1.0"),
        ("ray.adress=auto", "ray.adress: unknown key (did you mean address?)"),
    ],
)
def test_ray_settings_are_checked_with_the_rest_of_the_config(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert message in str(info.value)
