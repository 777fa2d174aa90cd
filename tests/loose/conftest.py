"""Fixtures of the loose-interface tests: run from this folder, with seedlike_envs importable."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from minds_core.cli.command import main
from minds_core.contract.environment import Context

HERE = Path(__file__).resolve().parent


@pytest.fixture
def loose_dir(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in tests/loose (folder ids are relative) with ``seedlike_envs.*`` importable."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(HERE)
    return HERE


@pytest.fixture
def ctx() -> Context:
    """A context for episodes whose scoring never touches a model."""
    return Context(sampler=None, tokenizer=None, service=None, renderer=None, base_model="none")


@pytest.fixture
def train(loose_dir: Path, tmp_path: Path) -> Callable[..., tuple[list[dict], list[dict]]]:
    """``minds run ARGS`` for two steps of two groups; returns the rows of metrics.jsonl and rollouts.jsonl."""

    def run(*args: str, name: str = "loose") -> tuple[list[dict], list[dict]]:
        code = main(
            [
                "run", *args, "--steps", "2", "--name", name,
                "--set", f"runs_dir={tmp_path}",
                "--set", "trainer.groups_per_batch=2",
                "--set", "metrics.rollouts_per_step=2",
                "--set", "metrics.sinks=[]",
            ]
        )  # fmt: skip
        assert code == 0
        run_dir = tmp_path / name

        def rows(file: str) -> list[dict]:
            return [json.loads(line) for line in (run_dir / file).read_text().splitlines()]

        return rows("metrics.jsonl"), rows("rollouts.jsonl")

    return run


@pytest.fixture
def work_from(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path, set[str]], Path]]:
    """``work_from(root, packages)``: work from a checkout's root, as the seed's runner did; the modules of its
    ``packages`` imported meanwhile are forgotten afterwards."""
    before, forget = set(sys.modules), set()

    def enter(root: Path, packages: set[str]) -> Path:
        monkeypatch.chdir(root)
        monkeypatch.setattr(sys, "path", list(sys.path))
        forget.update(packages)
        return root

    yield enter
    for name in set(sys.modules) - before:
        if name.split(".")[0] in forget:
            del sys.modules[name]
