"""Top-k distillation through ``minds serve`` and the real SDK: the same numbers as the in-process local backend.

Over HTTP the teacher's top-k comes back in the SDK's ``topk_prompt_logprobs`` and the loss runs through the
SDK's ``forward_backward_custom`` (a forward pass, the loss on the client, then a backward pass with
``[N, 1 + k]`` target tokens and their weights); in process the local backend runs autograd straight through.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import KEY, Served

pytestmark = pytest.mark.slow

ARGS = [
    "--model", "minds-tiny", "--steps", "2", "--set", "trainer.group_size=4",
    "--set", "trainer.groups_per_batch=2", "--set", "sampling.max_tokens=8", "--set", "metrics.sinks=[]", "--set", "seed=5",
    "--set", "trainer.learning_rate=1e-2", "--set", "distill.topk=8", "--set", "distill.divergence=mixed",
]  # fmt: skip
COMPARED = ("reward/mean", "train/loss:sum", "distill/kl", "distill/kl_topk", "distill/kl_tail", "distill/agreement",
            "distill/teacher_mass", "distill/student_mass")  # fmt: skip


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# self-distillation on tasks with an answer: without a context the teacher is the student itself, whose KL
# gradient is 0 but for round-off, which Adam's normalised step would blow up into updates of its own
@pytest.mark.parametrize("recipe", [["--env", "toy_char_share", "--set", "trainer.loss_fn=topk_distill", "--set", "distill.teacher=minds-small"],
                                    ["--env", "toy_secret", "--set", "trainer.preset=self_distill"]])  # fmt: skip
def test_a_distillation_run_through_the_sdk_matches_the_in_process_run(served: Served, run_minds, tmp_path: Path, recipe) -> None:
    hosted = run_minds(["run", *ARGS, *recipe, "--backend", "tinker", "--set", f"tinker.base_url={served.url}", "--name", "hosted"],
                       plugins=["toy_plugin"], env={"TINKER_API_KEY": KEY})  # fmt: skip
    assert hosted.returncode == 0, hosted.stderr[-4000:]
    local = run_minds(["run", *ARGS, *recipe, "--backend", "local", "--name", "local"], plugins=["toy_plugin"])
    assert local.returncode == 0, local.stderr[-4000:]
    over_http, in_process = (
        _rows(tmp_path / "runs" / "hosted" / "metrics.jsonl"),
        _rows(tmp_path / "runs" / "local" / "metrics.jsonl"),
    )
    assert len(over_http) == len(in_process) == 2
    for got, want in zip(over_http, in_process):
        assert got["train/datums"] == want["train/datums"] > 0
        for key in COMPARED:
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), (got["step"], key, got[key], want[key])
