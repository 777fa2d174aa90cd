"""RunResult.assert_trained_unless_said_why: a run test passes only when the run trained or said why it could not;
RunResult.assert_trained: only when it trained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from minds_core.testing import RunResult

WHY = "no step trained: all rewards within each group were equal (rewards seen: -10), so every advantage is 0"


def _group(step: int, *rewards: float | None, dropped: str | None = None) -> dict[str, Any]:
    return {"step": step, "dropped": dropped, "rollouts": [{"reward": r} for r in rewards]}


def _run(code: int, datums: list[int], groups: list[dict[str, Any]], checkpoints: list[int], error: str | None = None) -> RunResult:
    metrics = [{"step": step, "train/datums": n} for step, n in enumerate(datums)]
    return RunResult(code, Path("runs/test"), metrics, groups, [{"step": s} for s in checkpoints], error)


def test_a_run_that_trained_passes() -> None:
    _run(0, [4, 0], [_group(0, 1.0, 0.0), _group(1, 0.5, 0.5)], [1]).assert_trained_unless_said_why()


def test_a_run_that_trained_nothing_and_said_why_passes() -> None:
    _run(1, [0, 0], [_group(0, -10.0, -10.0), _group(1, -10.0, None)], [1], WHY).assert_trained_unless_said_why()


def test_a_dropped_group_may_differ_without_training() -> None:
    run = _run(1, [0], [_group(0, 1.0, 0.0, dropped="failures")], [0], WHY)
    run.assert_trained_unless_said_why()


@pytest.mark.parametrize(
    ("run", "complaint"),
    [
        (_run(1, [0, 0], [_group(0, 1.0, 1.0)], [1]), "did not say why"),
        (_run(0, [0, 0], [_group(0, 1.0, 1.0)], [1]), "did not say why"),
        (_run(1, [0, 0], [_group(0, 1.0, 1.0)], [1], "cannot write metrics.jsonl"), "did not say why"),
        (_run(1, [0, 0], [_group(1, 1.0, 0.0)], [1], WHY), "step 1 trained on nothing though rewards differ"),
        (_run(1, [3, 0], [_group(0, 1.0, 0.0)], [1], WHY), "the run trained but exited 1"),
        (_run(0, [3, 0], [_group(0, 1.0, 0.0)], [0]), "checkpoints"),
        (_run(0, [3, 0], [_group(0, 1.0, 0.0)], []), "checkpoints"),
    ],
    ids=["silent-exit-1", "exit-0-untrained", "other-error", "differing-rewards-untrained", "trained-exit-1",
         "checkpoint-not-last", "no-checkpoint"],
)  # fmt: skip
def test_a_run_that_did_not_train_as_it_should_fails(run: RunResult, complaint: str) -> None:
    with pytest.raises(AssertionError, match=complaint):
        run.assert_trained_unless_said_why()


def test_assert_trained_passes_a_run_that_trained() -> None:
    _run(0, [4, 0], [_group(0, 1.0, 0.0), _group(1, 0.5, 0.5)], [1]).assert_trained()


@pytest.mark.parametrize(
    ("run", "complaint"),
    [
        (_run(1, [0, 0], [_group(0, -10.0, -10.0)], [1], WHY), "no step trained"),
        (_run(0, [0, 0], [_group(0, 1.0, 1.0)], [1]), "no step trained"),
        (_run(1, [3, 0], [_group(0, 1.0, 0.0)], [1], WHY), "the run trained but exited 1"),
        (_run(0, [3, 0], [_group(0, 1.0, 0.0)], [0]), "checkpoints"),
    ],
    ids=["said-why", "exit-0-untrained", "trained-exit-1", "checkpoint-not-last"],
)  # fmt: skip
def test_assert_trained_fails_a_run_that_did_not_train(run: RunResult, complaint: str) -> None:
    with pytest.raises(AssertionError, match=complaint):
        run.assert_trained()
