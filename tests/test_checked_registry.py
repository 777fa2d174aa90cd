"""The registry checks what plugins hand it: names against NAME_RULE / REWARD_NAME_RULE, objects against their
kind's protocol. A plugin that breaks the contract is BROKEN, with a message naming the plugin, the name and what
is wrong; its valid parts and every other plugin still load. Plugins come in as third parties write them: through
an entry point of the ``minds`` group (the ``minds_plugin`` fixture in this process, a pip-installed fixture
distribution for the ``minds`` command)."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest

from minds_core import CustomLoss, Register, Rubric, SingleTurnEnvironment, hookimpl
from minds_core.base.errors import PluginError
from minds_core.contract import hookspecs
from minds_core.contract.parts import CONTRACTS
from minds_core.contract.plugins import HOOK_KINDS, load_plugins, singular


def _loader(**args: Any) -> SingleTurnEnvironment:
    return SingleTurnEnvironment({"train": []}, Rubric())


class _Backend:
    def __call__(self, config: Any, run_dir: Path) -> object:
        return object()

    def can_serve(self, config: Any) -> Any:
        raise AssertionError("never asked here")


#: One part per kind that keeps the contract: registered beside each broken one, it must load.
VALID: dict[str, tuple[str, object]] = {
    "environments": ("kept_env", _loader),
    "reward_functions": ("breaker.kept", lambda completion: 1.0),
    "advantage_estimators": ("kept_estimator", lambda rewards: list(rewards)),
    "losses": ("kept_loss", CustomLoss(lambda data, logprobs: (0.0, {}))),
    "metric_sinks": ("kept_sink", lambda config, run_dir: None),
    "backends": ("kept_backend", _Backend()),
    "environment_adapters": ("kept_adapter", lambda obj, env_id: None),
}


def _positional_only_loader(size, /):
    return _loader()


class _AskingNothing:
    def __call__(self, config: Any, run_dir: Path) -> object:
        return object()

    def can_serve(self) -> Any:  # minds calls can_serve(config)
        raise AssertionError("never called")


class _ExportingWithoutService:
    def __call__(self, config: Any, run_dir: Path) -> object:
        return object()

    def export_adapter(self, checkpoint: str, out_dir: Path) -> str:  # minds calls export_adapter(config, service, checkpoint, out_dir)
        raise AssertionError("never called")


#: (kind, name, obj, description, what the message says): one per rule of the contract.
BROKEN = {
    "a name with capitals and spaces": ("environments", "Bad Name!", _loader, "", "breaks NAME_RULE: lower-case words joined by '_', e.g. 'ghost_trace'; say 'bad_name'"),
    "a name with a dash": ("losses", "my-loss", "ppo", "", "breaks NAME_RULE"),
    "a name that is no str": ("advantage_estimators", 42, lambda rewards: rewards, "", "the name is int 42, not a str"),
    "a reward name without its namespace": ("reward_functions", "brevity", lambda completion: 1.0, "", "breaks REWARD_NAME_RULE: '<plugin>.<name>'"),
    "a reward name with capitals": ("reward_functions", "Breaker.Score", lambda completion: 1.0, "", "breaks REWARD_NAME_RULE: '<plugin>.<name>', each lower-case words joined by '_', e.g. 'ghost_trace.latent_logprob'; say 'breaker.score'"),
    "an environment that is no loader": ("environments", "echo", 42, "", "int 42 is not callable as loader(**args) (an EnvironmentLoader)"),
    "a loader taking an argument by position only": ("environments", "sized", _positional_only_loader, "", "_positional_only_loader (size, /) cannot be called as loader(**args) (an EnvironmentLoader): it takes size by position only"),
    "a reward function that is no function": ("reward_functions", "breaker.score", 1.0, "", "float 1.0 is not callable as fn(**inputs) (a RewardFunction)"),
    "an estimator taking two rewards": ("advantage_estimators", "pairwise", lambda rewards, baseline: rewards, "", "cannot be called as fn(rewards) (an AdvantageEstimator): missing a required argument: 'baseline'"),
    "an estimator taking nothing": ("advantage_estimators", "constant", lambda: [0.0], "", "cannot be called as fn(rewards) (an AdvantageEstimator): too many positional arguments"),
    "a loss that is neither a name nor a CustomLoss": ("losses", "clipped", lambda data, logprobs: (0.0, {}), "", "<lambda> is neither the name of a loss the service computes (a str) nor a CustomLoss"),
    "a loss named by an empty str": ("losses", "nameless", "", "", "the loss is an empty str"),
    "a CustomLoss whose function takes only the data": ("losses", "data_only", CustomLoss(lambda data: (0.0, {})), "", "cannot be called as fn(data, logprobs) (the LossFunction of a CustomLoss): too many positional arguments"),
    "a sink factory without run_dir": ("metric_sinks", "printer", lambda config: None, "", "cannot be called as factory(config, run_dir) (a SinkFactory): too many positional arguments"),
    "a backend that is no factory": ("backends", "cluster", "https://cluster.invalid", "", "str 'https://cluster.invalid' is not callable as factory(config, run_dir) (a BackendFactory)"),
    "a backend whose can_serve takes no config": ("backends", "picky", _AskingNothing(), "", "cannot be called as can_serve(config): too many positional arguments"),
    "a backend whose export_adapter takes no config nor service": ("backends", "exporter", _ExportingWithoutService(), "", "cannot be called as export_adapter(config, service, checkpoint, out_dir): too many positional arguments"),
    "an adapter without env_id": ("environment_adapters", "gym", lambda obj: None, "", "cannot be called as adapter(obj, env_id) (an EnvironmentAdapter): too many positional arguments"),
    "a description that is no str": ("metric_sinks", "quiet", lambda config, run_dir: None, 3, "the description is int 3, not a str"),
}


def _hook(kind: str) -> str:
    (hook,) = [hook for hook, k in HOOK_KINDS.items() if k == kind]
    return hook


def _plugin_registering(kind: str, parts: list[tuple[object, object, object]]) -> object:
    """A plugin object (as a third party writes one) whose hook of ``kind`` registers ``parts`` in order."""

    class Plugin:
        pass

    def hook(self, register):
        for name, obj, description in parts:
            register(name, obj, description)

    hook.__name__ = _hook(kind)
    setattr(Plugin, hook.__name__, hookimpl(hook))
    return Plugin()


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_a_part_breaking_the_contract_makes_its_plugin_broken_and_the_rest_load(rule: str, minds_plugin) -> None:
    kind, name, obj, description, says = BROKEN[rule]
    kept_name, kept = VALID[kind]
    minds_plugin(_plugin_registering(kind, [(name, obj, description), (kept_name, kept, "")]), name="breaker")
    loaded = load_plugins()
    assert [p.name for p in loaded.broken] == ["breaker"], [p.errors for p in loaded.broken]
    (breaker,) = loaded.broken
    (error,) = breaker.errors
    assert error.startswith(f"{singular(kind)} {name!r} of plugin 'breaker' is not registered: ")
    assert says in error
    assert breaker.registered == {kind: [kept_name]}  # the plugin's valid part loads
    assert loaded.registry.get(kind, kept_name).obj is kept
    assert name not in loaded.registry.names(kind)
    assert {"local", "tinker"} <= set(loaded.registry.names("backends"))  # the other plugins' parts load
    if isinstance(name, str):
        with pytest.raises(PluginError, match="of plugin 'breaker' is not registered") as info:
            loaded.registry.get(kind, name)
        assert says in str(info.value) and "MINDS_DISABLE_PLUGINS" in str(info.value)


def test_every_problem_of_one_registration_is_named_at_once(minds_plugin) -> None:
    minds_plugin(_plugin_registering("environments", [("Bad Name!", 42, None)]), name="breaker")
    (breaker,) = load_plugins().broken
    (error,) = breaker.errors
    assert "breaks NAME_RULE" in error and "int 42 is not callable" in error and "description is NoneType None" in error


def test_strict_mode_makes_a_broken_registration_fatal(minds_plugin, monkeypatch: pytest.MonkeyPatch) -> None:
    minds_plugin(_plugin_registering("environments", [("echo", 42, "")]), name="breaker")
    monkeypatch.setenv("MINDS_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match=r"plugin 'breaker': environment 'echo' of plugin 'breaker' is not registered: int 42"):
        load_plugins()


def test_every_kind_has_a_contract_and_each_hook_s_register_is_typed_with_its_protocol() -> None:
    assert set(CONTRACTS) == set(HOOK_KINDS.values())
    for hook, kind in HOOK_KINDS.items():
        hints = typing.get_type_hints(getattr(hookspecs, hook))
        assert hints["register"] == Register[CONTRACTS[kind].protocol], hook


def test_every_part_the_core_and_this_repository_s_plugins_register_keeps_the_contract() -> None:
    pytest.importorskip("minds_verifiers", reason="environment adapters come only from the verifiers_bridge plugin: pip install -c constraints.txt -e plugins/verifiers_bridge")
    loaded = load_plugins()
    assert not loaded.broken, [(p.name, p.errors) for p in loaded.broken]
    assert all(loaded.registry.names(kind) for kind in CONTRACTS), "a kind no installed plugin registers goes unchecked here"


@pytest.mark.slow
def test_an_installed_plugin_breaking_the_contract_is_shown_broken_and_its_valid_environment_runs(run_minds) -> None:
    plugins = ["contract_breaking_plugin"]
    listed = run_minds(["plugins", "--json"], plugins=plugins)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    breaking = rows["breaking"]
    assert breaking["status"] == "broken" and breaking["distribution"] == "minds-contract-breaking-plugin"
    assert breaking["registers"] == {"environments": ["fine_env"]}
    assert breaking["errors"] == [
        (
            "environment 'Bad Name!' of plugin 'breaking' is not registered: the name breaks NAME_RULE: lower-case words "
            "joined by '_', e.g. 'ghost_trace'; say 'bad_name'; int 42 is not callable as loader(**args) (an EnvironmentLoader)"
        ),
        (
            "environment 'not_a_loader' of plugin 'breaking' is not registered: str 'load_fine' is not callable as "
            "loader(**args) (an EnvironmentLoader)"
        ),
    ]
    assert all(row["status"] == "ok" for name, row in rows.items() if name != "breaking")
    table = run_minds(["plugins"], plugins=plugins, env={"COLUMNS": "400"})
    assert table.returncode == 0 and "BROKEN: environment 'Bad Name!' of plugin 'breaking'" in table.stdout
    refused = run_minds(["run", "--env", "not_a_loader", "--steps", "1"], plugins=plugins)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "environment 'not_a_loader' of plugin 'breaking' is not registered: str 'load_fine' is not callable" in refused.stderr
    dry = run_minds(["run", "--env", "fine_env", "--steps", "1", "--dry-run"], plugins=plugins)
    assert dry.returncode == 0, dry.stderr
