"""Top-k distillation and self-distillation as runs on minds-tiny: the README's commands, and what they learn."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from minds_core.base import logs
from minds_core.config import load_config
from minds_core.report import write_report
from minds_core.testing import run_minds
from minds_core.train import train

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
    page = write_report(result.run_dir).read_text()  # the report draws them; the README's glossary names them
    glossary = README.split("### Metrics glossary", 1)[1].split("\n#", 1)[0]
    for key in (
        "distill/kl",
        "distill/kl_topk",
        "distill/kl_tail",
        "distill/agreement",
        "distill/teacher_mass",
        "distill/student_mass",
    ):
        assert f'data-key="{key}"' in page and f"`{key}`" in glossary, key
    for row in result.metrics:
        assert row["train/datums"] > 0 and row["distill/kl"] == pytest.approx(row["distill/kl_topk"] + row["distill/kl_tail"])
        assert 0 <= row["kl/sampler_train"] < 1e-3  # on-policy: the distilled tokens' sampler and trainer agree
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
    train(
        load_config(None, [*common, "name=teacher", "trainer.mode=sft", f"sft.data={data}", "trainer.steps=8"]), plugins=plugins
    )
    teacher = json.loads((tmp_path / "teacher" / "checkpoints.jsonl").read_text().splitlines()[-1])["sampler_path"]
    student = [*common, "name=student", "env.id=toy_char_share", "trainer.steps=6", "trainer.loss_fn=topk_distill",
               f"distill.teacher={teacher}", "distill.topk=16", "sampling.max_tokens=12", "trainer.group_size=8"]  # fmt: skip
    train(load_config(None, student), plugins=plugins)
    kl = [row["distill/kl"] for row in _rows(tmp_path / "student")]
    assert kl[0] > 1.0, kl  # the fresh student is far from the teacher
    assert sorted(kl[-3:])[1] < 0.5 * kl[0], kl


def _teach_the_answer_in_context(config, tmp_path: Path, steps: int = 60) -> str:
    """minds-tiny's adapter SFT-trained (cross_entropy, here) to say the secret when the self-distillation context
    precedes the prompt, and something else without it: a model whose privileged context tells it what its bare
    prompt does not. Its saved state, which the runs start from."""
    import tinker

    from minds_core.backends import create_local_service
    from minds_core.contract.environment import privileged_context
    from minds_core.envs.render import Renderer
    from minds_core.rl.distill_teacher import CONTEXT_TEMPLATE
    from minds_toy_plugin import SECRET, load_secret

    service = create_local_service(config, tmp_path)
    client = service.create_lora_training_client(base_model="minds-tiny", rank=config.model.lora_rank, seed=config.seed)
    renderer = Renderer(client.get_tokenizer())
    datums = []
    for task in load_secret().tasks("train"):
        prompt = renderer.prompt_tokens([{"role": "user", "content": task.prompt}])
        context = renderer.encode(CONTEXT_TEMPLATE.format(context=privileged_context(task)))
        for before, reply in ((context, SECRET * 2), ([], "no" * 4)):
            head, tail = before + prompt, renderer.encode(reply)
            tokens = head + tail
            weights = [0.0] * (len(head) - 1) + [1.0] * len(tail)
            datums.append(tinker.Datum(model_input=tinker.types.ModelInput.from_ints(tokens[:-1]),
                                       loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights}))  # fmt: skip
    adam = tinker.types.AdamParams(learning_rate=1e-2)
    for _ in range(steps):
        client.forward_backward(datums, "cross_entropy").result()
        client.optim_step(adam).result()
    return client.save_state("knows-the-secret-in-context").result().path


@pytest.mark.slow
def test_self_distillation_with_the_answer_in_context_learns_what_reward_alone_does_not(plugins, tmp_path):
    """toy_secret rewards repeating an answer no prompt tells. From the same start, 6 steps of the self_distill
    preset (the policy reading "The answer is: ..." as the teacher) raise the reward; 6 steps of RL on the reward
    alone do not: the policy never samples the secret, so every group's rewards are equal."""
    logs.configure("json", "warning")
    common = ["model.base_model=minds-tiny", "metrics.sinks=[]", f"runs_dir={tmp_path}", "trainer.learning_rate=1e-3",
              "env.id=toy_secret", "trainer.steps=6", "sampling.max_tokens=8", "trainer.group_size=8"]  # fmt: skip
    start = _teach_the_answer_in_context(load_config(None, common), tmp_path)
    train(load_config(None, [*common, "name=alone", f"trainer.resume_from={start}"]), plugins=plugins)
    train(
        load_config(None, [*common, "name=self", f"trainer.resume_from={start}", "trainer.preset=self_distill"]), plugins=plugins
    )
    alone = [row["reward/mean"] for row in _rows(tmp_path / "alone")]
    distilled = [row["reward/mean"] for row in _rows(tmp_path / "self")]
    assert max(alone[0], distilled[0]) < 0.1, (alone, distilled)  # the start does not say the secret unprompted
    assert sum(distilled[-2:]) / 2 > 0.3, distilled
    assert sum(distilled[-2:]) / 2 > sum(alone[-2:]) / 2 + 0.25, (alone, distilled)


@pytest.mark.slow
def test_self_distillation_distils_every_turn_of_a_multi_turn_episode(plugins, tmp_path):
    """toy_two_turn's task gives its privileged context; both sampled turns of each episode are distilled."""
    logs.configure("json", "warning")
    overrides = ["model.base_model=minds-tiny", "metrics.sinks=[]", f"runs_dir={tmp_path}", "name=turns", "env.id=toy_two_turn",
                 "trainer.steps=2", "sampling.max_tokens=6", "trainer.group_size=4", "trainer.groups_per_batch=1",
                 "trainer.preset=self_distill", "metrics.rollouts_per_step=1"]  # fmt: skip
    train(load_config(None, overrides), plugins=plugins)
    rows = _rows(tmp_path / "turns")
    records = [json.loads(line) for line in (tmp_path / "turns" / "rollouts.jsonl").read_text().splitlines()]
    assert all(len([m for m in r["messages"] if m["role"] == "assistant"]) == 2 for g in records for r in g["rollouts"])
    for row in rows:
        assert row["train/datums"] == 4 and row["distill/kl"] > 0.01  # the context moves the teacher off the student
