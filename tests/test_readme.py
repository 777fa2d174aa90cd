"""The README's examples stay true: its config reference loads, its plugin examples register and run."""

from __future__ import annotations

import re
import types
from pathlib import Path

from minds_core.config import load_config
from minds_core.plugins import load_plugins

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
