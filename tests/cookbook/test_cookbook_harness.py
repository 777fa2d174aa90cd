"""The seed harness's three configs whose environments are tinker-cookbook ``Env``s run unchanged on minds.

tests/cookbook/harness is a checkout in the originals' layout; each config trains two steps on the
local backend (only the model and the steps differ from the harness's). No rollout fails, and the
rewards are the originals' own: recomputed here with their functions from each rollout's reply.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from minds_core import PolicySampler
from minds_core.backends.local import create_service_client
from minds_core.cli.command import main

HARNESS = Path(__file__).resolve().parent / "harness"
OWN_MODULES = {"environments", "gradient_prophet", "gradient_intuition", "ghost_trace", "rl_datasets"}

Run = Callable[[str, int], tuple[list[dict], list[dict]]]


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Work from the checkout's root, as the seed's runner did; forget its modules afterwards."""
    monkeypatch.chdir(HARNESS)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    before = set(sys.modules)
    yield HARNESS
    for name in set(sys.modules) - before:
        if name.split(".")[0] in OWN_MODULES:
            del sys.modules[name]


@pytest.fixture
def run(harness: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Run:
    """``minds run configs/NAME.toml --steps 2``; the rows of metrics.jsonl and rollouts.jsonl."""

    def go(config: str, rollouts_per_step: int) -> tuple[list[dict], list[dict]]:
        sets = [f"runs_dir={tmp_path}", "backend=local", "metrics.rollouts_per_step=8", "metrics.sinks=[]"]
        code = main(["run", f"configs/{config}.toml", "--steps", "2", "--name", config, *(a for s in sets for a in ("--set", s))])
        error = capsys.readouterr().err if code else ""
        folder = tmp_path / config
        metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        rollouts = [json.loads(line) for line in (folder / "rollouts.jsonl").read_text().splitlines()]
        # The untrained tiny model's replies may score alike in every group: the run then says so and exits 1.
        assert code == 0 or (code == 1 and "minds: error: no step trained: " in error), error[-3000:]
        assert [m["step"] for m in metrics] == [0, 1]
        assert all(m["rollouts/failed"] == 0 and m["rollouts/total"] == rollouts_per_step for m in metrics)
        assert os_variables_restored()
        return metrics, rollouts

    return go


def os_variables_restored() -> bool:
    """The engine served for the environments' own tinker clients is gone with the run."""
    import os

    return "TINKER_API_KEY" not in os.environ and "TINKER_BASE_URL" not in os.environ


def _replies(rollouts: list[dict], step: int | None = None) -> Iterator[tuple[dict, dict, str]]:
    for group in rollouts:
        if step is None or group["step"] == step:
            for rollout in group["rollouts"]:
                yield group, rollout, rollout["completion"][0]


@pytest.mark.slow
def test_train_prophet_rewards_are_the_originals(run: Run, tmp_path: Path) -> None:
    """The builder's build(sampling_client) envs score with the rollout's policy: at step 0 that is the base
    model, so each reward is recomputed from the reply with the original's parser and its truth, measured here."""
    metrics, rollouts = run("train_prophet", 8)
    prophet = importlib.import_module("gradient_prophet")
    items = prophet.load_environment(num_examples=6, seed=0).items
    model = tomllib.loads((HARNESS / "configs" / "train_prophet.toml").read_text())["model"]["base_model"]
    base = PolicySampler(create_service_client(str(tmp_path / "base")).create_sampling_client(base_model=model).result())
    checked = 0
    for group, rollout, reply in _replies(rollouts):
        predicted = prophet.parse_prediction(reply)
        assert rollout["metrics"]["delta_pred"] == pytest.approx(predicted)
        assert rollout["reward"] == pytest.approx(1 / (1 + (rollout["metrics"]["delta_true"] - predicted) ** 2), rel=1e-5)
        if group["step"] == 0:
            item = items[int(group["task"].split("-")[1])]
            truth = asyncio.run(prophet.GradientProphetEnv(item, base, "qwen3").true_delta())
            assert rollout["metrics"]["delta_true"] == pytest.approx(truth, abs=1e-3)
            checked += 1
    assert checked == 8


@pytest.mark.slow
def test_train_gradient_intuition_measures_with_its_own_shadow_client(run: Run) -> None:
    """The env's own tinker.ServiceClient() reaches the run's engine: every rollout measured a delta with a shadow."""
    metrics, rollouts = run("train_gradient_intuition", 8)
    intuition = importlib.import_module("gradient_intuition")
    for _, rollout, reply in _replies(rollouts):
        prediction, answer = intuition.parse(reply)
        assert rollout["metrics"]["delta_true"] != 0
        if answer is None:
            assert rollout["reward"] == 0
        else:
            inner = rollout["metrics"]["inner"]
            bonus = 0 if prediction is None else 0.35 * max(0.0, 1 - abs(prediction - rollout["metrics"]["delta_true"]))
            assert rollout["reward"] == pytest.approx(inner + bonus)


@pytest.mark.slow
def test_multi_task_mixes_the_rl_dataset_tasks_by_tag(run: Run) -> None:
    """rl_datasets.py's RLDataset: every group's logging tag has its metrics, ghost_trace rewards are its score()."""
    metrics, rollouts = run("multi_task", 12)
    ghost_trace = importlib.import_module("environments.ghost_trace.ghost_trace")
    answers = [row["answer"] for row in ghost_trace.build_dataset(4)]
    tags = {key.split("/")[1] for m in metrics for key in m if key.startswith("tag/")}
    assert tags <= {"ghost_trace", "gradient_prophet", "gradient_intuition"} and len(tags) >= 2
    assert all(m[f"tag/{t}/groups"] >= 1 for m in metrics for t in {k.split("/")[1] for k in m if k.startswith("tag/")})
    for group, rollout, reply in _replies(rollouts):
        index = int(group["task"].split("-")[1])
        if index % 3 == 0:  # the dataset lists each example's tasks in the config's order: ghost_trace first
            assert rollout["reward"] == pytest.approx(ghost_trace.score(reply, answers[index // 3]))
