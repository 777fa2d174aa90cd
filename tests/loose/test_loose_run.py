"""`minds run` trains every loose shape on the local backend, and reads the seed's TOML layout."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from minds_core.cli.command import main

ROOT = Path(__file__).resolve().parents[2]

TINY = ["--backend", "local", "--model", "minds-tiny", "--set", "trainer.group_size=3", "--set", "sampling.max_tokens=12"]

Train = Callable[..., tuple[list[dict], list[dict]]]


def _check(metrics: list[dict], rollouts: list[dict], group_size: int = 3) -> None:
    assert [m["step"] for m in metrics] == [0, 1]
    for m in metrics:
        assert m["rollouts/failed"] == 0 and m["rollouts/total"] == 2 * group_size
    assert len(rollouts) == 4 and all(len(g["rollouts"]) == group_size for g in rollouts)


@pytest.mark.slow
def test_seed_toml_layout_runs_a_folder_environment(train: Train, tmp_path: Path) -> None:
    config = tmp_path / "train_echo.toml"
    config.write_text(
        """
[env]
id = "./environments/word_echo"

[env.args]
seed = 5
prefix = "Echo:"

[trainer]
rollouts_per_example = 2
loss_fn = "importance_sampling"

[trainer.args]
max_new_tokens = 10

[model]
base_model = "minds-tiny"

[tinker]
api_key_env = "MINDS_LOOSE_TEST_UNSET_KEY"
"""
    )
    metrics, rollouts = train(str(config))
    _check(metrics, rollouts, group_size=2)
    resolved = yaml.safe_load((tmp_path / "loose" / "config.yaml").read_text())
    assert resolved["trainer"]["group_size"] == 2 and resolved["sampling"]["max_tokens"] == 10
    assert resolved["tinker"]["api_key_env"] == "MINDS_LOOSE_TEST_UNSET_KEY"
    assert all(m["tokens/sampled"] <= 10 * 4 for m in metrics)
    for group in rollouts:
        assert group["prompt"][0]["content"].startswith("Echo: ")
        assert all(0.0 <= r["reward"] <= 1.0 for r in group["rollouts"])


@pytest.mark.slow
def test_async_module_environment_trains_two_turns(train: Train) -> None:
    metrics, rollouts = train(*TINY, "--set", "env.id=seedlike_envs.async_steps")
    _check(metrics, rollouts)
    assert all(m["tokens/turns"] == 2 * 6 for m in metrics)
    for group in rollouts:
        assert group["prompt"][0]["content"].startswith("What is ")
        assert all(len(r["completion"]) == 2 for r in group["rollouts"])


@pytest.mark.parametrize("style", ["cookbook", "mapping"])
@pytest.mark.slow
def test_cookbook_style_multi_turn_environment_trains_two_turns(train: Train, style: str) -> None:
    metrics, rollouts = train(*TINY, "--set", "env.id=seedlike_envs.cookbook_turns", "--set", f"env.args.style={style}")
    _check(metrics, rollouts)
    assert all(m["tokens/turns"] == 2 * 6 for m in metrics)
    for group in rollouts:
        assert all(len(r["completion"]) == 2 for r in group["rollouts"])


@pytest.mark.slow
def test_rubric_dataset_environment_trains(train: Train) -> None:
    metrics, rollouts = train(*TINY, "--set", "env.id=seedlike_envs.rubric_rows", "--set", "env.args.max_chars=8")
    _check(metrics, rollouts)
    for m in metrics:
        for part in ("mentions_answer", "shares_letters", "short_reply"):
            assert f"env/seedlike_envs.rubric_rows/reward/{part}" in m
    assert {g["prompt"][0]["content"] for g in rollouts} <= {f"What is the capital of {c}?" for c in ("France", "Japan", "Peru", "Kenya", "Chile")}


@pytest.mark.slow
def test_step_dataset_environment_trains(train: Train) -> None:
    metrics, rollouts = train(*TINY, "--set", "env.id=seedlike_envs.step_rows")
    _check(metrics, rollouts)
    assert all(g["prompt"][0] == {"role": "system", "content": "Be brief."} for g in rollouts)


@pytest.mark.slow
def test_model_aware_environment_builds_with_each_policy(train: Train) -> None:
    module = importlib.import_module("seedlike_envs.model_aware")
    module.BUILT_WITH.clear()
    metrics, rollouts = train(*TINY, "--set", "env.id=seedlike_envs.model_aware")
    _check(metrics, rollouts)
    assert len(module.BUILT_WITH) == 2 and module.BUILT_WITH[0] is not module.BUILT_WITH[1]
    assert all(r["reward"] < 0 for g in rollouts for r in g["rollouts"])
    assert all("env/seedlike_envs.model_aware/reward/keeps_talking" in m for m in metrics)


@pytest.mark.slow
def test_example_config_runs_from_the_repository_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    args = ["run", "configs/loose_example.toml", "--steps", "2", "--name", "example"]
    # two groups: with one, the tiny model's replies all scored 0 and the run (rightly) exited 1, having trained nothing
    sets = [f"runs_dir={tmp_path}", "trainer.groups_per_batch=2", "metrics.sinks=[]"]
    assert main([*args, *(a for s in sets for a in ("--set", s))]) == 0
    metrics = [json.loads(line) for line in (tmp_path / "example" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1] and all(m["rollouts/total"] == 8 for m in metrics)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["single_turn", "stepwise"])
def test_a_modules_load_environment_may_return_a_minds_environment(train: Train, kind: str) -> None:
    # the plugin docs' contract (tasks + episode; SingleTurnEnvironment), kept in a module rather than a plugin
    metrics, rollouts = train(*TINY, "--set", "env.id=seedlike_envs.minds_contract", "--set", f"env.args.kind={kind}")
    _check(metrics, rollouts)
    assert all(m["tokens/turns"] == (1 if kind == "single_turn" else 2) * 6 for m in metrics)
    assert {g["prompt"][0]["content"] for g in rollouts} <= {f"Say {w}." for w in ("apple", "river", "stone", "cloud")}
    if kind == "single_turn":
        assert all("env/seedlike_envs.minds_contract/reward/words.shares_letters" in m for m in metrics)
