"""The plugin contract itself: plugins use only minds_core's public face, every hook is documented and tested,
and reward functions asking for unknown inputs fail when the rubric is built (registration's checks of names
and objects: tests/test_checked_registry.py)."""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import minds_core
from minds_core import ConfigError, Rubric
from minds_core.contract import hookspecs
from minds_core.contract.plugins import HOOK_KINDS, load_plugins

ROOT = Path(__file__).resolve().parent.parent
#: The project's own plugins, as pyproject.toml's testpaths name them: a folder a user adds under plugins/ is not one.
OWN_PLUGINS = sorted(
    ROOT / path for path in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    if path.startswith("plugins/")
)
PLUGIN_PACKAGES = sorted(p for plugin in OWN_PLUGINS for p in plugin.glob("minds_*") if p.is_dir() and (p / "__init__.py").is_file())

#: Every hook and the test that exercises it (registers through it and uses what was registered).
HOOK_TESTS = {
    "minds_register_environments": "tests/test_plugins.py::test_installed_plugin_is_discovered_and_attributed",
    "minds_register_reward_functions": "tests/test_training.py::test_several_environments_with_weights_and_rubric_overrides",
    "minds_register_advantage_estimators": "tests/test_training.py::test_reward_rises_far_above_its_start",
    "minds_register_losses": "tests/test_training.py::test_reward_rises_far_above_its_start",
    "minds_register_metric_sinks": "tests/test_training.py::test_a_failing_sink_is_disabled_and_training_goes_on",
    "minds_register_backends": "tests/test_backends.py::test_auto_asks_every_registered_backend_and_names_none_in_the_core",
    "minds_register_environment_adapters": (
        "tests/loose/test_loose_harness.py::test_verifiers_single_turn_env_with_a_rubric_group_and_monitors_trains"
    ),
    "minds_register_rollout_executors": "tests/test_executors.py::test_a_registered_executor_runs_every_group_of_a_run",
}


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _hookspecs() -> dict[str, object]:
    return {name: fn for name, fn in vars(hookspecs).items() if hasattr(fn, f"{hookspecs.PROJECT}_spec")}


def _core_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of a minds_core module in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] == "minds_core"]
    return found


def test_every_first_party_plugin_package_is_checked() -> None:
    assert {p.name for p in PLUGIN_PACKAGES} == {
        "minds_ghost_trace", "minds_gradient_prophet", "minds_openreward", "minds_ray", "minds_self_prediction", "minds_verifiers",
        "minds_verifiers_v1",
    }


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_plugin_packages_import_only_the_public_face(package: Path) -> None:
    private = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted(package.rglob("*.py"))
        for line, module in _core_imports(path)
        if module != "minds_core"
    ]
    assert not private, "plugins import only from minds_core:\n" + "\n".join(private)


def test_the_import_check_sees_a_private_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import minds_core\nfrom minds_core import Task\nfrom minds_core.config import RunConfig\n"
                      "def f():\n    import minds_core.contract.environment\n")
    assert [m for _, m in _core_imports(module) if m != "minds_core"] == ["minds_core.config", "minds_core.contract.environment"]


def test_the_public_face_exports_what_it_lists() -> None:
    missing = [name for name in minds_core.__all__ if not hasattr(minds_core, name)]
    assert not missing and len(set(minds_core.__all__)) == len(minds_core.__all__)
    with pytest.raises(AttributeError, match="no attribute 'not_public'"):
        minds_core.not_public  # noqa: B018


def test_type_checkers_see_every_public_name_where_it_is_imported_from() -> None:
    tree = ast.parse((ROOT / "minds_core" / "__init__.py").read_text())
    (block,) = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    seen = {alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert seen == minds_core._PUBLIC
    assert (ROOT / "minds_core" / "py.typed").is_file()  # a type checker reads an installed minds-core's types


def test_importing_the_public_face_loads_a_name_s_module_only_when_it_is_used() -> None:
    # a fresh process: this one has long imported everything
    code = (
        "import sys, minds_core\n"
        "before = sorted(m for m in sys.modules if m.startswith('minds_core.'))\n"
        "from minds_core import Task\n"
        "print(before, 'minds_core.contract.environment' in sys.modules, 'minds_core.config' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[]", "True", "False"], done.stdout + done.stderr


def test_every_hook_has_a_kind_a_documented_parameter_per_argument_an_example_a_guide_section_and_a_test() -> None:
    guide = (ROOT / "docs" / "plugins.md").read_text()
    specs = _hookspecs()
    assert set(specs) == set(HOOK_KINDS) == set(HOOK_TESTS)
    for name, fn in specs.items():
        doc = inspect.getdoc(fn) or ""
        params = list(inspect.signature(fn).parameters)
        assert doc and params, f"{name} has no docstring or no arguments"
        assert "Example::" in doc, f"{name}: no example in its docstring"
        assert f"### `{name}`" in guide, f"{name} missing from docs/plugins.md"
        for param in params:
            assert f":param {param}:" in doc, f"{name}: no ':param {param}:' in its docstring"


def test_the_guides_table_of_public_names_is_minds_core_all() -> None:
    guide = (ROOT / "docs" / "plugins.md").read_text()
    table = guide.split("## The public face", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    listed = [name for row in rows for name in re.findall(r"`([^`]+)`", row)]
    assert len(listed) == len(set(listed)), "a name is listed twice"
    missing, unknown = set(minds_core.__all__) - set(listed), set(listed) - set(minds_core.__all__)
    assert not missing and not unknown, f"the table lacks {sorted(missing)}; names that do not exist: {sorted(unknown)}"


def test_the_guide_declares_loader_arguments_one_way() -> None:
    guide = (ROOT / "docs" / "plugins.md").read_text()
    loaders = re.findall(r"^def (load_\w+)\(([^)]*)\):\n((?:    .*\n)+)", guide, re.MULTILINE)
    assert len(loaders) >= 2
    for name, params, body in loaders:
        assert params.split(", ")[-1] == "**args" and "env_args(" in body, f"{name} declares its arguments another way"


@pytest.mark.parametrize(("hook", "test"), sorted(HOOK_TESTS.items()))
def test_the_test_named_for_each_hook_exists(hook: str, test: str) -> None:
    path, function = test.split("::")
    tree = ast.parse((ROOT / path).read_text())
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert function in defined, f"{hook}: {test} does not exist"


def test_hook_object_protocols_document_every_field_and_parameter() -> None:
    from minds_core.contract import parts as contracts

    for name in ("Register", "OpenEnvironment", "EnvironmentLoader", "RewardFunction", "AdvantageEstimator",
                 "LossFunction", "MetricSink", "SinkFactory", "BackendFactory", "EnvironmentAdapter",
                 "RolloutExecutor", "ExecutorFactory"):
        protocol = getattr(contracts, name)
        assert inspect.getdoc(protocol), name
        for method in ("__call__", "write", "close", "run_groups"):
            fn = protocol.__dict__.get(method)
            if fn is None:
                continue
            doc = inspect.getdoc(fn) or ""
            for param in list(inspect.signature(fn).parameters)[1:]:
                assert f":param {param.lstrip('*')}:" in doc, f"{name}.{method}: {param} is not documented"


def test_plugin_distributions_declare_exactly_the_environments_they_register() -> None:
    projects = {pyproject: tomllib.loads(pyproject.read_text())["project"] for pyproject in (p / "pyproject.toml" for p in OWN_PLUGINS)}
    missing = [str(pyproject.parent.relative_to(ROOT)) for pyproject, project in projects.items() if not _installed(project["name"])]
    if missing:
        pytest.skip(f"these plugins are not installed: pip install -c constraints.txt {' '.join('-e ' + m for m in missing)}")
    registry = load_plugins().registry
    for pyproject, project in projects.items():
        (plugin,) = project["entry-points"]["minds"]
        declared = set(project["entry-points"].get("minds.environments", {}))  # an executor plugin declares none
        registered = {e.name for e in registry.entries("environments") if e.plugin == plugin}
        assert declared == registered, pyproject


def test_a_reward_function_asking_for_an_unknown_input_fails_when_the_rubric_is_built() -> None:
    def wants_score(completion, score):
        return 1.0

    with pytest.raises(ConfigError, match=re.escape("reward function 'mine.score' asks for 'score'")) as info:
        Rubric([wants_score], [1.0], ["mine.score"])
    assert "completion, prompt, task, answer, info, state, ctx, messages" in str(info.value)
    rubric = Rubric([lambda completion: 1.0])
    with pytest.raises(ConfigError, match="group reward function 'tally' asks for 'answer'"):
        rubric.add(lambda completions, answer: [1.0], name="tally")
    assert rubric.names == ["<lambda>"]
    Rubric([lambda completion, bonus=1.0, **rest: bonus, lambda completions, ctx: [0.0]])  # defaults and ** ask nothing


def test_an_unknown_reward_input_in_a_config_fails_at_load() -> None:
    from minds_core.config import EnvConfig, RewardRef
    from minds_core.contract.plugins import Registry
    from minds_core.envs.loading import build_environment

    registry = Registry()
    registry.add("environments", "echo", lambda: minds_core.SingleTurnEnvironment({"train": []}, Rubric()), "", "t")
    registry.add("reward_functions", "t.bad", lambda completion, grade: 0.0, "", "t")
    with pytest.raises(ConfigError, match="reward function 't.bad' asks for 'grade'"):
        build_environment(EnvConfig(id="echo", extra_rewards=[RewardRef("t.bad")]), registry)


def test_a_loader_gets_open_environment_only_when_it_asks_and_configs_cannot_set_it() -> None:
    from minds_core.config import EnvConfig
    from minds_core.contract.plugins import Registry
    from minds_core.envs.loading import build_environment

    inner = minds_core.SingleTurnEnvironment({"train": []}, Rubric())
    registry = Registry()
    registry.add("environments", "inner", lambda size=1: inner, "", "t")
    registry.add("environments", "outer", lambda open_environment, of: open_environment(of, {"size": 2}), "", "t")
    assert build_environment(EnvConfig(id="outer", args={"of": "inner"}), registry) is inner
    with pytest.raises(ConfigError, match="env.args.open_environment is reserved"):
        build_environment(EnvConfig(id="inner", args={"open_environment": 1}), registry)
    with pytest.raises(ConfigError, match=re.escape("bad [env.args] ['off']: missing a required argument: 'of'; accepted arguments: of;")):
        build_environment(EnvConfig(id="outer", args={"off": "inner"}), registry)


def test_the_makefile_installs_the_projects_own_plugins_and_no_others() -> None:
    match = re.search(r"^OWN_PLUGINS := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, "the Makefile names the project's plugins in OWN_PLUGINS"
    assert sorted(match.group(1).split()) == [p.name for p in OWN_PLUGINS]
