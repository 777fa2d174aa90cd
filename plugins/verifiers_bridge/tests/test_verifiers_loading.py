"""Loading verifiers environments: the installed entry point, tasks per split, and clear refusals."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from minds_core.base.errors import ConfigError, UsageError
from minds_verifiers import load_environment


@pytest.mark.slow
def test_the_installed_distribution_registers_verifiers_without_importing_it() -> None:
    script = (
        "import importlib.metadata as md, sys\n"
        "(ep,) = [e for e in md.entry_points(group='minds') if e.name == 'verifiers']\n"
        "assert (ep.value, ep.dist.name) == ('minds_verifiers', 'minds-plugin-verifiers'), ep\n"
        "from minds_core.contract.plugins import load_plugins\n"
        "entry = load_plugins().registry.get('environments', 'verifiers')\n"
        "assert entry.obj is ep.load().load_environment\n"
        "assert 'verifiers' not in sys.modules, 'minds_verifiers imported verifiers at import time'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_tasks_come_from_the_train_and_eval_datasets(vf_environments: Path) -> None:
    env = load_environment(id="minds_vf_capitals", args={"num_rows": 4})
    train, evaluation = env.tasks("train"), env.tasks("eval")
    assert [t.id for t in train] == ["train-0", "train-1", "train-2", "train-3"]
    assert [t.answer for t in evaluation] == ["Paris", "Tokyo"]
    assert train[2].prompt[-1] == {"role": "user", "content": "What is the capital of Peru?"}
    with pytest.raises(KeyError, match="has the splits train, eval, not 'test'"):
        env.tasks("test")


@pytest.mark.parametrize(
    ("env_id", "expected"),
    [
        ("minds_vf_missing", "cannot import it"),
        ("minds_vf_group_scored", "group-level reward functions"),
        ("minds_vf_not_classic", "returned a GymLike"),
    ],
)
def test_unusable_environments_are_refused(vf_environments: Path, env_id: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as raised:
        load_environment(id=env_id)
    assert repr(env_id) in str(raised.value)


def test_loading_off_the_main_thread_is_refused(vf_environments: Path) -> None:
    errors: list[BaseException] = []

    def load() -> None:
        try:
            load_environment(id="minds_vf_capitals")
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    worker = threading.Thread(target=load)
    worker.start()
    worker.join()
    assert len(errors) == 1 and isinstance(errors[0], UsageError)
    assert "main thread" in str(errors[0])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"id": "minds_vf_capitals", "arsg": {}}, r"env\.args\.arsg: unknown key \(did you mean args\?\)"),
        ({"args": {"num_rows": 4}}, r"env\.args\.id: required, not given"),
        ({"id": 7}, r"env\.args\.id = 7: must be a string"),
        ({"id": "minds_vf_capitals", "args": [1]}, r"env\.args\.args = \[1\]: must be a table"),
    ],
)
def test_bad_arguments_are_named_before_verifiers_is_asked(args: dict, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as raised:
        load_environment(**args)
    assert "accepted arguments: id, args (default {}); required: id" in str(raised.value)


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("0.3.0", None),
        ("0.3.7.post1", None),
        ("0.4.0", "verifiers 0.4.0 is installed (the 0.4+ API"),
        ("0.4.2.dev3", "verifiers 0.4.2.dev3 is installed (the 0.4+ API"),
        ("1.0.0", "verifiers 1.0.0 is installed (the 0.4+ API"),
        ("0.1.2", "verifiers 0.1.2 is installed (an older, pre-0.3 API)"),
        (None, "verifiers is not installed"),
    ],
)
def test_the_installed_verifiers_generation_is_named_with_what_the_bridge_needs(version, says) -> None:
    from minds_verifiers import verifiers_generation

    problem = verifiers_generation(version)
    if says is None:
        assert problem is None
    else:
        assert says in problem and "verifiers>=0.3,<0.4" in problem


def test_the_installed_verifiers_is_one_the_bridge_trains() -> None:
    from minds_verifiers import installed_verifiers, verifiers_generation

    assert verifiers_generation(installed_verifiers()) is None


def test_an_environment_under_verifiers_0_4_is_refused_naming_both_versions(monkeypatch) -> None:
    import minds_verifiers

    monkeypatch.setattr(minds_verifiers, "installed_verifiers", lambda: "0.4.1")  # named fake: the installed version
    with pytest.raises(ConfigError, match=r"'minds_vf_capitals': verifiers 0\.4\.1 is installed .* needs verifiers>=0\.3,<0\.4"):
        load_environment(id="minds_vf_capitals", args={"num_rows": 4})
