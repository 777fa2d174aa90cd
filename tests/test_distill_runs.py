"""Top-k distillation and self-distillation as runs on minds-tiny: the README's commands, and what they learn."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from minds_core import logs
from minds_core.config import load_config
from minds_core.testing import run_minds
from minds_core.training import train

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _readme_commands(marker: str) -> list[str]:
    lines = [line.strip() for block in re.findall(r"```bash\n(.*?)```", README, re.S) for line in block.splitlines()]
    return [line for line in lines if marker in line]


@pytest.mark.slow
@pytest.mark.parametrize("marker", ["trainer.loss_fn=topk_distill", "trainer.preset=self_distill"])
def test_the_readmes_distillation_commands_run_as_written(tmp_path, marker):
    (command,) = _readme_commands(marker)
    assert command.startswith(".venv/bin/minds run ")
    result = run_minds(*command.split()[2:], runs_dir=tmp_path)
    assert result.exit_code == 0, result.error
    assert len(result.metrics) == 2
    for row in result.metrics:
        assert row["train/datums"] > 0 and row["distill/kl"] == pytest.approx(row["distill/kl_topk"] + row["distill/kl_tail"])
        assert 0 <= row["distill/agreement"] <= 1 and 0 < row["distill/teacher_mass"] <= 1 + 1e-6


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_teacher_sft_to_a_format_distils_into_a_fresh_student(plugins, tmp_path):
    """The teacher: minds-tiny after a few SFT steps on replies in one format; the student, a fresh minds-tiny,
    halves its top-k KL to it within a few steps of topk_distill on the same prompts."""
    logs.configure("json", "warning")
    data = tmp_path / "format.jsonl"
    chats = [{"messages": [{"role": "user", "content": f"Write the letter a many times. ({i})"},
                           {"role": "assistant", "content": "<a>aaaa</a>"}]} for i in range(16)]  # fmt: skip
    data.write_text("".join(json.dumps(chat) + "\n" for chat in chats))
    common = ["model.base_model=minds-tiny", "metrics.sinks=[]", f"runs_dir={tmp_path}", "trainer.learning_rate=1e-2"]
    train(load_config(None, [*common, "name=teacher", "trainer.mode=sft", f"sft.data={data}", "trainer.steps=8"]), plugins=plugins)
    teacher = json.loads((tmp_path / "teacher" / "checkpoints.jsonl").read_text().splitlines()[-1])["sampler_path"]
    student = [*common, "name=student", "env.id=toy_char_share", "trainer.steps=6", "trainer.loss_fn=topk_distill",
               f"distill.teacher={teacher}", "distill.topk=16", "sampling.max_tokens=12", "trainer.group_size=8"]  # fmt: skip
    train(load_config(None, student), plugins=plugins)
    kl = [row["distill/kl"] for row in _rows(tmp_path / "student")]
    assert kl[0] > 1.0, kl  # the fresh student is far from the teacher
    assert sorted(kl[-3:])[1] < 0.5 * kl[0], kl
