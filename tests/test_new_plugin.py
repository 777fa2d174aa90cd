"""`minds new-plugin NAME` writes a plugin distribution that installs, registers its parts and passes its own tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from minds_core.cli.command import main
from minds_core.contract.plugins import load_plugins

FILES = [
    "README.md", "minds_demo/__init__.py", "minds_demo/environment.py", "minds_demo/rewards.py", "pyproject.toml",
    "tests/test_demo.py",
]  # fmt: skip


def test_the_plugin_is_written_where_asked(tmp_path, capsys):
    assert main(["new-plugin", "demo", "--dir", str(tmp_path)]) == 0
    folder = tmp_path / "demo"
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == FILES
    out = capsys.readouterr().out
    root = Path(__file__).resolve().parents[1]
    # minds-core is not on PyPI: the hint installs it from this checkout, with the constraints, into this Python
    assert f"{sys.executable} -m pip install -c {root / 'constraints.txt'} -e {root} -e {folder}\n" in out
    assert f"{sys.executable} -m pytest {folder}" in out
    # the README gives the very commands the command printed, runnable from any folder
    printed = [line.strip() for line in out.splitlines()[1:] if line.strip()]
    assert len(printed) == 4 and all(line in (folder / "README.md").read_text().splitlines() for line in printed)
    assert f"{Path(sys.executable).with_name('minds')} run --env demo --steps 2 --backend local" in printed
    pyproject = (folder / "pyproject.toml").read_text()
    assert 'name = "minds-plugin-demo"' in pyproject
    assert '[project.entry-points.minds]\ndemo = "minds_demo"' in pyproject


def test_the_written_package_registers_through_minds(tmp_path, monkeypatch, minds_plugin):
    main(["new-plugin", "demo", "--dir", str(tmp_path)])
    monkeypatch.syspath_prepend(str(tmp_path / "demo"))
    import minds_demo
    from minds_demo.environment import load_environment

    minds_plugin(minds_demo, name="demo")
    registry = load_plugins().registry
    assert registry.get("environments", "demo").obj is load_environment
    assert registry.get("reward_functions", "demo.sum_score").obj(" 7", "7") == 1.0
    env = load_environment(num_tasks=2)
    assert [t.id for t in env.tasks("test")] == ["test/0", "test/1"]


@pytest.mark.parametrize("name", ["Demo", "2x", "my-env", "demo_", "my__env"])  # the last two break NAME_RULE too
def test_a_bad_name_is_refused(tmp_path, capsys, name):
    assert main(["new-plugin", name, "--dir", str(tmp_path)]) == 2
    assert "lower-case words" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_an_existing_folder_is_left_alone(tmp_path, capsys):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "mine.txt").write_text("keep")
    assert main(["new-plugin", "demo", "--dir", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "demo").iterdir()] == ["mine.txt"]


@pytest.mark.slow
def test_new_plugin_then_install_then_pytest_passes(tmp_path):
    """`minds new-plugin demo && pip install demo && pytest demo`, installed into a private folder (not the venv)."""
    bin_dir = Path(sys.executable).parent
    site = tmp_path / "site"
    subprocess.run([str(bin_dir / "minds"), "new-plugin", "demo"], cwd=tmp_path, check=True, capture_output=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target", str(site),
         str(tmp_path / "demo")],
        check=True, capture_output=True,
    )  # fmt: skip
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    environ["PYTHONPATH"] = str(site)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "demo"],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "4 passed" in result.stdout


@pytest.mark.slow
def test_the_scaffold_reward_rises_on_minds_tiny(tmp_path, monkeypatch, minds_plugin, minds_env_run):
    """minds-tiny is a random byte-level model: the scaffold's partial credit (a reply of digits) is what it can learn."""
    main(["new-plugin", "climb", "--dir", str(tmp_path)])
    monkeypatch.syspath_prepend(str(tmp_path / "climb"))
    import minds_climb

    minds_plugin(minds_climb, name="climb")
    overrides = ["model.base_model=minds-tiny", "trainer.learning_rate=1e-3", "trainer.group_size=8", "trainer.groups_per_batch=4", "sampling.max_tokens=8"]
    run = minds_env_run("climb", steps=12, overrides=overrides)
    assert run.exit_code == 0 and run.steps == list(range(12))
    rewards = [row["reward/mean"] for row in run.metrics]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.1, rewards
