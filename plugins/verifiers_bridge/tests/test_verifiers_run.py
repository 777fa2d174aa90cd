"""`minds run --env verifiers` trains SingleTurnEnv, MultiTurnEnv and ToolEnv environments on the local backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minds_core.cli.command import main

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")


def _train(tmp_path: Path, *overrides: str) -> tuple[list[dict], list[dict]]:
    sets = [
        f"runs_dir={tmp_path}", "trainer.group_size=3", "trainer.groups_per_batch=2",
        "sampling.max_tokens=12", "metrics.rollouts_per_step=2", "metrics.sinks=[]", *overrides,
    ]  # fmt: skip
    code = main(["run", "--env", "verifiers", "--backend", "local", "--steps", "2", "--name", "vf", *(a for s in sets for a in ("--set", s))])
    run_dir = tmp_path / "vf"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # exit 1 when no step trained (the untrained tiny model's replies can score alike in every group)
    assert code == (0 if any(m["train/datums"] for m in metrics) else 1)
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    assert all(m["rollouts/failed"] == 0 and m["rollouts/total"] == 6 for m in metrics)
    return metrics, rollouts


@pytest.mark.slow
def test_single_turn_env_trains(vf_environments: Path, tmp_path: Path) -> None:
    metrics, rollouts = _train(tmp_path, "env.args.id=minds_vf_capitals", "env.args.args.num_rows=3")
    for m in metrics:
        assert {"env/verifiers/vf/names_capital", "env/verifiers/vf/shares_letters"} <= set(m)
        assert m["tokens/turns"] == 6
    questions = {g["prompt"][1]["content"] for g in rollouts}
    assert questions <= {f"What is the capital of {c}?" for c in ("France", "Japan", "Peru")}


@pytest.mark.slow
def test_eval_every_evaluates_on_the_eval_dataset(vf_environments: Path, tmp_path: Path) -> None:
    # Split selection asks for "test" first: the environment's lack of it must not stop the run.
    metrics, _ = _train(
        tmp_path, "env.args.id=minds_vf_capitals", "env.args.args.num_rows=3", "trainer.eval_every=1",
        "trainer.eval_tasks=2", "trainer.eval_samples=1",
    )  # fmt: skip
    assert all(any(key.startswith("eval/") for key in m) for m in metrics), metrics


@pytest.mark.slow
def test_multi_turn_env_trains(vf_environments: Path, tmp_path: Path) -> None:
    metrics, rollouts = _train(tmp_path, "env.args.id=minds_vf_interview", "env.args.args.turns=3")
    assert all(m["tokens/turns"] == 3 * 6 and m["env/verifiers/vf/num_turns"] == 3 for m in metrics)
    assert all(len(r["completion"]) == 3 for g in rollouts for r in g["rollouts"])


@pytest.mark.slow
def test_tool_env_trains(vf_environments: Path, tmp_path: Path) -> None:
    metrics, rollouts = _train(tmp_path, "env.args.id=minds_vf_calculator")
    assert all("env/verifiers/vf/add_calls" in m and "env/verifiers/vf/states_sum" in m for m in metrics)
    assert all(g["prompt"][0]["content"].endswith("Use the add tool.") for g in rollouts)


@pytest.mark.slow
def test_minds_eval_falls_back_from_test_to_the_eval_split(vf_environments: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", "--env", "verifiers", "--backend", "local", "--tasks", "2", "--samples", "1", "--json",
                 "--set", "env.args.id=minds_vf_capitals", "--set", "env.args.args.num_rows=3", "--set", "sampling.max_tokens=8"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["splits"] == {"verifiers": "eval"}
