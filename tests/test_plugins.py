"""Plugin discovery, attribution, isolation and duplicates, with real pip-installed distributions."""

from __future__ import annotations

import json
import re

import pytest

from minds_core.base.errors import PluginError, UnknownNameError
from minds_core.contract.plugins import Registry


def _plugins(result) -> dict[str, dict]:
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


@pytest.mark.slow
def test_core_builtins_register_through_the_hooks(run_minds):
    core = _plugins(run_minds(["plugins", "--json"]))["minds_core"]
    assert core["builtin"] is True and core["status"] == "ok"
    assert core["registers"]["advantage_estimators"] == ["group_mean", "group_norm", "direct", "rloo", "none"]
    assert {"importance_sampling", "ppo", "cispo", "dro", "gspo", "sequence_mean_reinforce"} <= set(core["registers"]["losses"])
    assert core["registers"]["reward_functions"] == ["minds.judge", "minds.length_penalty"]
    assert core["registers"]["backends"] == ["local", "tinker"]
    assert core["registers"]["metric_sinks"] == ["console", "report", "wandb"]


@pytest.mark.slow
def test_installed_plugin_is_discovered_and_attributed(run_minds):
    rows = _plugins(run_minds(["plugins", "--json"], plugins=["example_plugin"]))
    example = rows["example"]
    assert example["distribution"] == "minds-example-plugin"
    assert example["version"] == "1.2.3"
    assert example["registers"] == {
        "environments": ["echo_example"],
        "reward_functions": ["example.shortness"],
        "advantage_estimators": ["example_sign"],
    }
    envs = json.loads(run_minds(["envs", "--json"], plugins=["example_plugin"]).stdout)
    assert {"name": "echo_example", "plugin": "example", "distribution": "minds-example-plugin",
            "description": "say a word back (test fixture)"} in envs


@pytest.mark.slow
def test_broken_plugin_is_reported_and_others_keep_working(run_minds):
    result = run_minds(["plugins", "--json"], plugins=["example_plugin", "broken_plugin"])
    rows = _plugins(result)
    assert rows["broken"]["status"] == "broken"
    assert "missing_dependency is not installed" in rows["broken"]["errors"][0]
    assert rows["example"]["status"] == "ok"
    envs = run_minds(["envs"], plugins=["example_plugin", "broken_plugin"])
    assert envs.returncode == 0
    assert "echo_example" in envs.stdout
    assert "broken" in envs.stderr and "missing_dependency" in envs.stderr


@pytest.mark.slow
def test_broken_plugin_shows_as_broken_in_the_table(run_minds):
    result = run_minds(["plugins"], plugins=["broken_plugin"], env={"COLUMNS": "200"})
    assert result.returncode == 0
    assert "BROKEN" in result.stdout and "missing_dependency" in result.stdout


@pytest.mark.slow
def test_strict_mode_makes_a_broken_plugin_fatal(run_minds):
    result = run_minds(["envs"], plugins=["broken_plugin"], env={"MINDS_STRICT_PLUGINS": "1"})
    assert result.returncode == 2
    assert "plugin 'broken'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_disabled_plugins_are_skipped(run_minds):
    rows = _plugins(run_minds(["plugins", "--json"], plugins=["example_plugin", "broken_plugin"],
                              env={"MINDS_DISABLE_PLUGINS": "broken, minds-example-plugin"}))
    assert "broken" not in rows and "example" not in rows


@pytest.mark.slow
def test_duplicate_names_are_an_error_naming_both_plugins(run_minds):
    plugins = ["example_plugin", "clashing_plugin"]
    rows = _plugins(run_minds(["plugins", "--json"], plugins=plugins))
    assert "'example' and 'clashing'" in rows["clashing"]["errors"][0]
    result = run_minds(["run", "--env", "echo_example", "--steps", "1"], plugins=plugins)
    assert result.returncode == 2
    assert "example" in result.stderr and "clashing" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_unknown_environment_lists_what_exists_and_the_providing_package(run_minds):
    result = run_minds(["run", "--env", "ghost_trace_x"], plugins=["example_plugin"])
    assert result.returncode == 2
    assert "echo_example" in result.stderr and "Traceback" not in result.stderr
    assert "provided by" not in result.stderr
    result = run_minds(["run", "--env", "ghost_trace"], plugins=["example_plugin"], env={"MINDS_DISABLE_PLUGINS": "ghost_trace"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "'ghost_trace' is provided by minds-plugin-ghost-trace, installed but not loaded" in result.stderr


def test_registry_lookup_errors():
    registry = Registry()
    registry.add("losses", "ppo", "ppo", "", "core")
    with pytest.raises(UnknownNameError, match="did you mean ppo"):
        registry.get("losses", "ppoo")
    with pytest.raises(PluginError, match="'core' and 'other'"):
        registry.add("losses", "ppo", "ppo", "", "other")
    with pytest.raises(PluginError, match="several plugins"):
        registry.get("losses", "ppo")
    with pytest.raises(UnknownNameError, match="provided by minds-plugin-ghost-trace, installed but not loaded"):
        registry.get("environments", "ghost_trace")


def test_a_plugin_whose_requirement_is_installed_in_another_version_is_reported():
    import importlib.metadata

    from minds_core.contract.plugins import unmet_requirements

    pytest.importorskip("minds_verifiers", reason="reads the verifiers_bridge plugin's needs: pip install -c constraints.txt -e plugins/verifiers_bridge")
    requires = importlib.metadata.requires("minds-plugin-verifiers")  # verifiers>=0.3,<0.4, as the plugin declares
    installed = {"verifiers": "0.4.0", "minds-core": "0.1.0"}.get  # named fake: what another machine has installed
    (message,) = unmet_requirements(requires, installed)
    assert message.startswith("needs verifiers<0.4,>=0.3, and verifiers 0.4.0 is installed") or message.startswith(
        "needs verifiers>=0.3,<0.4, and verifiers 0.4.0 is installed"
    )
    assert unmet_requirements(requires, {"verifiers": "0.3.2"}.get) == []
    assert unmet_requirements(["torch>=2; extra == 'local'", "x<1; sys_platform == 'nonesuch'"], {"torch": "1.0", "x": "2"}.get) == []


@pytest.mark.slow
def test_a_plugin_made_for_another_version_of_a_library_is_not_ok(run_minds):
    # as minds-plugin-verifiers (verifiers>=0.3,<0.4) is with verifiers 0.4 installed: it imports, yet cannot work
    rows = _plugins(run_minds(["plugins", "--json"], plugins=["outdated_plugin", "example_plugin"]))
    assert rows["outdated"]["status"] == "broken"
    (error,) = rows["outdated"]["errors"]
    assert re.match(r"needs pluggy<1, and pluggy \d+\.\d+\S* is installed: pip install 'pluggy<1'", error), error
    assert rows["example"]["status"] == "ok"
