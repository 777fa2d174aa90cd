"""The README's examples stay true: its config reference loads, its plugin examples register and run."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from minds_core.config import load_config
from minds_core.contract.plugins import load_plugins

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def _module(name: str, marker: str) -> types.ModuleType:
    (code,) = [b for b in _blocks("python") if marker in b]
    module = types.ModuleType(name)
    exec(compile(code, f"README:{name}", "exec"), module.__dict__)  # noqa: S102 - our own README
    return module


def test_the_config_reference_is_a_valid_config(tmp_path):
    (block,) = [b for b in _blocks("toml") if 'name = "my-run"' in b]
    path = tmp_path / "reference.toml"
    path.write_text(block)
    config = load_config(path)
    assert config.env is not None and config.env.id == "ghost_trace"


def test_the_plugin_examples_register_and_score():
    capitals = _module("capitals", "load_capitals")
    brevity = _module("brevity", "style.brevity")
    plugins = load_plugins(extra=[("capitals", capitals), ("brevity", brevity)])
    env = plugins.registry.get("environments", "capitals").obj()
    task = env.tasks("train")[0]
    assert env.rubric.funcs[0](completion=f" {task.answer} ", answer=task.answer) == 1.0
    assert plugins.registry.get("reward_functions", "style.brevity").obj("one two three") == 0.25


def test_every_shell_command_uses_the_venv_or_make():
    """One command style: the README's commands run as written from a fresh clone, the venv not activated."""
    lines = [line.strip() for block in _blocks("bash") for line in block.splitlines()]
    commands = [line for line in lines if line and not line.startswith(("#", "export "))]

    def venv_style(command: str) -> bool:
        program = command.split()[0]
        return program in ("make", "cd") or command.startswith("python3 -m venv ") or ".venv/bin/" in program

    assert commands and [c for c in commands if not venv_style(c)] == []


@pytest.mark.slow
def test_the_capitals_example_reward_rises_on_minds_tiny(minds_plugin, minds_env_run):
    """As the README says: minds-tiny knows no capital, but climbs the example's partial credit in 20 steps."""
    minds_plugin(_module("capitals", "load_capitals"), name="capitals")
    defaults = ["trainer.group_size=8", "trainer.groups_per_batch=4", "sampling.max_tokens=48"]
    run = minds_env_run("capitals", steps=20, overrides=defaults)
    assert run.exit_code == 0
    rewards = [row["reward/mean"] for row in run.metrics]
    assert len(rewards) == 20 and sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.05, rewards


def _anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings (code blocks left out)."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    titles = re.findall(r"^#+ (.+)$", prose, re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


def test_every_link_between_the_readme_and_docs_resolves():
    """The README points to pages under docs/ and they point back: every such link reaches a file and a heading."""
    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text())):
                broken.append(f"{page.relative_to(root)}: {target}")
    assert len(pages) > 1 and broken == []


def test_the_readmes_install_has_what_minds_serve_downloads_need():
    # `minds serve` installed as the README says must save and download age-encrypted weights (the SDK's
    # save_weights_external default, `tinker checkpoint download`, the cookbook's weights.download): pyrage
    import tomllib

    from packaging.requirements import Requirement

    (install,) = re.findall(r'pip install -c constraints\.txt -e "\.\[([a-z,]+)\]"', README)
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    installed = {Requirement(r).name for r in pyproject["dependencies"]}
    for extra in install.split(","):
        installed |= {Requirement(r).name for r in pyproject["optional-dependencies"][extra]}
    assert "pyrage" in installed, f"README installs .[{install}], which lacks pyrage"
    serve_doc = (Path(__file__).resolve().parents[1] / "docs" / "serve.md").read_text()
    assert "pyrage" in serve_doc and "`local` extra" in serve_doc


@pytest.mark.slow
def test_the_agent_program_example_trains_as_written(tmp_path, monkeypatch):
    """"Train an agent program": the README's agent, tasks and config, run with its command, train 3 steps."""
    from minds_core.testing import run_minds

    (agent,) = [b for b in _blocks("python") if b.startswith("# agent.py")]
    (tasks,) = [b for b in _blocks("jsonl") if b.startswith("# tasks.jsonl")]
    (config,) = [b for b in _blocks("toml") if b.startswith("# agent.toml")]
    (command,) = [line.strip() for b in _blocks("bash") for line in b.splitlines() if "agent.toml" in line]
    (tmp_path / "agent.py").write_text(agent)
    (tmp_path / "tasks.jsonl").write_text(tasks.split("\n", 1)[1])  # the block's first line names the file
    (tmp_path / "agent.toml").write_text(config)
    (tmp_path / ".venv").symlink_to(Path(__file__).resolve().parents[1] / ".venv")  # the config names .venv/bin/python
    monkeypatch.chdir(tmp_path)
    assert command.startswith(".venv/bin/minds run ")
    result = run_minds(*command.split()[2:], runs_dir=tmp_path / "runs")
    assert result.exit_code == 0, result.error
    assert len(result.metrics) == 3 and all(m["rollouts/failed"] == 0 and m["train/datums"] > 0 for m in result.metrics)
