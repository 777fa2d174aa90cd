"""Top-k distillation's loss (``topk_distill``) against the KL computed directly from full logits, and its datums."""

from __future__ import annotations

import asyncio

import pytest
import torch

from minds_core.backends import create_local_service
from minds_core.backends.local.model.builtin_models import builtin_model_path
from minds_core.backends.retry import Backoff
from minds_core.config import load_config
from minds_core.contract.environment import Task
from minds_core.episodes.conversation import Conversation
from minds_core.episodes.groups import Group, Rollout
from minds_core.rl.data_processing import ProcessingSettings, process_batch
from minds_core.rl.distill_teacher import TeacherScorer
from minds_core.rl.topk_distill import DistillSettings, distill_datum, distill_metrics, kl_parts, topk_distill

VOCAB, POSITIONS = 40, 6


def _logits(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(POSITIONS, VOCAB, generator=generator, dtype=torch.float64) * 2
    student = torch.randn(POSITIONS, VOCAB, generator=generator, dtype=torch.float64) * 2
    return teacher, student


def _full_kl(teacher_logits: torch.Tensor, student_logits: torch.Tensor, divergence: str, mix: float = 0.3) -> torch.Tensor:
    """The KL over the whole vocabulary, summed over positions, straight from the logits."""
    a, b = teacher_logits.log_softmax(-1), student_logits.log_softmax(-1)
    forward = (a.exp() * (a - b)).sum(-1)
    reverse = (b.exp() * (b - a)).sum(-1)
    return {"forward": forward, "reverse": reverse, "mixed": mix * forward + (1 - mix) * reverse}[divergence].sum()


def _datum_and_student(teacher_logits, student_logits, k, divergence, mix=0.3, reward=0.0):
    """A datum of a sequence whose every target is sampled, with the teacher's top-k, and the student's log-probs
    ``[N, 1 + k]`` at its targets (differentiable in ``student_logits``)."""
    best = teacher_logits.argmax(-1).tolist()  # every other sampled token is the teacher's top-1
    tokens = [0, *[t if i % 2 == 0 else (t + 1) % VOCAB for i, t in enumerate(best)]]
    top = teacher_logits.log_softmax(-1).topk(k, dim=-1)
    teacher = [None, *[(top.indices[i].tolist(), top.values[i].tolist()) for i in range(POSITIONS)]]
    forward, reverse = {"forward": (1.0, 0.0), "reverse": (0.0, 1.0), "mixed": (mix, 1 - mix)}[divergence]
    settings = DistillSettings(k=k, forward=forward, reverse=reverse, reward=reward)
    sampled = [False] + [True] * POSITIONS
    sampler = [0.0] + [-1.5] * POSITIONS  # the sampler's log-probs of the sampled tokens
    advantages = [0.0] + [reward * 2.0 * (-1) ** i for i in range(POSITIONS)]  # weighed, as process_batch hands them
    datum = distill_datum(tokens, sampled, sampler, advantages, teacher, 1.0, settings)
    targets = datum.loss_fn_inputs["target_tokens"].to_torch()
    student = student_logits.log_softmax(-1).gather(1, targets)
    return datum, student


@pytest.mark.parametrize("divergence", ["forward", "reverse", "mixed"])
def test_with_k_the_vocabulary_the_loss_is_the_full_kl_and_its_gradient_autograds(divergence):
    teacher_logits, student_logits = _logits(1)
    # the datum holds the teacher's log-probs in float32, as on the wire: the direct KL reads the same values
    teacher_logits = teacher_logits.log_softmax(-1).float().double()
    student_logits.requires_grad_(True)
    datum, student = _datum_and_student(teacher_logits, student_logits, VOCAB, divergence)
    loss, _ = topk_distill([datum], [student])
    (grad,) = torch.autograd.grad(loss, student_logits)
    direct = _full_kl(teacher_logits, student_logits, divergence)
    (direct_grad,) = torch.autograd.grad(direct, student_logits)
    assert float(direct.detach()) > 0.5
    assert float(loss.detach()) == pytest.approx(float(direct.detach()), abs=1e-6)
    assert torch.allclose(grad, direct_grad, atol=1e-6), (grad - direct_grad).abs().max()


def test_the_tail_term_is_exact_for_every_k():
    teacher_logits, student_logits = _logits(2)
    a, b = teacher_logits.log_softmax(-1), student_logits.log_softmax(-1)
    for k in range(1, VOCAB + 1):
        top = a.topk(k, dim=-1)
        parts = kl_parts(top.values, b.gather(1, top.indices))
        outside = torch.ones_like(a, dtype=torch.bool).scatter(1, top.indices, False)
        p_tail = (a.exp() * outside).sum(-1)  # the teacher's mass off its top-k, summed token by token
        q_tail = (b.exp() * outside).sum(-1)
        assert torch.allclose(parts["forward_tail"], p_tail * (p_tail.log() - q_tail.log()), atol=1e-9, rtol=1e-9) or k == VOCAB
        assert torch.allclose(parts["reverse_tail"], q_tail * (q_tail.log() - p_tail.log()), atol=1e-9, rtol=1e-9) or k == VOCAB
        assert torch.allclose(parts["teacher_mass"], 1 - p_tail, atol=1e-12)
        # the k + 1 bins merge tokens: never more than the full KL
        full = (a.exp() * (a - b)).sum(-1)
        assert bool((parts["forward_topk"] + parts["forward_tail"] <= full + 1e-9).all())


def test_a_mixed_loss_weighs_forward_by_mix_and_the_reward_term_enters_by_its_weight():
    teacher_logits, student_logits = _logits(3)

    def loss(divergence: str, mix: float = 0.3, reward: float = 0.0) -> float:
        datum, student = _datum_and_student(teacher_logits, student_logits, 5, divergence, mix, reward)
        return float(topk_distill([datum], [student])[0])

    assert loss("mixed", mix=0.25) == pytest.approx(0.25 * loss("forward") + 0.75 * loss("reverse"), rel=1e-12)
    # the reward's importance-sampling term: -w * sum A * exp(log p - log q) over the sampled tokens
    _, student = _datum_and_student(teacher_logits, student_logits, 5, "reverse")
    advantages = torch.tensor([2.0 * (-1) ** i for i in range(POSITIONS)], dtype=torch.float64)
    reinforce = -(advantages * (student[:, 0] - -1.5).exp()).sum()
    assert loss("reverse", reward=0.5) == pytest.approx(loss("reverse") + 0.5 * float(reinforce), rel=1e-9)


def test_the_metrics_read_the_kl_parts_agreement_and_mass_from_the_training_pass():
    teacher_logits, student_logits = _logits(4)
    datum, student = _datum_and_student(teacher_logits, student_logits, 5, "reverse")
    metrics = distill_metrics([datum], [{"logprobs": student.detach()}])
    parts = kl_parts(datum.loss_fn_inputs["teacher_logprobs"].to_torch().double(), student.detach()[:, 1:])
    assert metrics["distill/kl_topk"] == pytest.approx(float(parts["reverse_topk"].mean()), rel=1e-9)
    assert metrics["distill/kl_tail"] == pytest.approx(float(parts["reverse_tail"].mean()), rel=1e-9)
    assert metrics["distill/kl"] == pytest.approx(metrics["distill/kl_topk"] + metrics["distill/kl_tail"])
    assert metrics["distill/agreement"] == pytest.approx(0.5)
    assert 0 < metrics["distill/teacher_mass"] < 1 and 0 < metrics["distill/student_mass"] < 1


# ---------------------------------------------------------------- on the local backend


def _conversation(tokens: list[int], sampled: list[bool], logprobs: list[float]) -> Conversation:
    conv = Conversation(renderer=None, sampler=None, params=None, max_total_tokens=64)
    conv.tokens, conv.sampled, conv.logprobs = tokens, sampled, logprobs
    return conv


def _full_logprobs(model: str, tokens: list[int]) -> torch.Tensor:
    """The model's log-probs over the whole vocabulary at every position, straight from transformers."""
    from transformers import AutoModelForCausalLM

    network = AutoModelForCausalLM.from_pretrained(builtin_model_path(model), torch_dtype=torch.float32)
    with torch.no_grad():
        return network(torch.tensor([tokens])).logits[0].double().log_softmax(-1)


def test_on_minds_tiny_the_sampled_top_k_and_the_training_pass_give_the_full_kl(plugins, tmp_path):
    """Teacher minds-small's top-k from the sampler (k = the vocabulary), student a fresh minds-tiny adapter:
    forward_backward_custom's loss is the KL from the two models' full logits, over the sampled tokens only."""
    vocab = 259
    config = load_config(
        None,
        [
            "model.base_model=minds-tiny",
            "trainer.loss_fn=topk_distill",
            "distill.teacher=minds-small",
            f"distill.topk={vocab}",
            "distill.divergence=mixed",
            "distill.mix=0.25",
            f"runs_dir={tmp_path}",
        ],
    )
    service = create_local_service(config, tmp_path)
    loss = plugins.registry.lookup("losses", "topk_distill", "trainer.loss_fn").obj
    estimator = plugins.registry.lookup("advantage_estimators", "none", "trainer.advantage").obj
    settings = ProcessingSettings.from_config(config, estimator, loss)
    tokens = [72, 105, 33, 10, 97, 98, 99, 100, 32, 120, 121]
    sampled = [False] * 4 + [True] * 4 + [False, True, True]  # a second turn after an observation token
    conv = _conversation(tokens, sampled, [-1.0 if s else 0.0 for s in sampled])
    groups = [Group("env", Task(prompt="p"), [Rollout(conv, reward=1.0)])]

    async def run():
        teacher = await TeacherScorer.start(service, config, Backoff())
        await teacher.score(groups, None, "step 0")
        datums = process_batch(groups, settings).datums
        client = service.create_lora_training_client(base_model="minds-tiny")
        return datums, client.forward_backward_custom(datums, loss.fn).result()

    datums, result = asyncio.run(run())
    assert len(datums) == 1 and datums[0].loss_fn_inputs["target_tokens"].shape == [len(tokens) - 1, vocab + 1]
    a, b = _full_logprobs("minds-small", tokens)[:-1], _full_logprobs("minds-tiny", tokens)[:-1]
    forward, reverse = (a.exp() * (a - b)).sum(-1), (b.exp() * (b - a)).sum(-1)
    trained = torch.tensor(sampled[1:])
    direct = float((0.25 * forward + 0.75 * reverse)[trained].sum())
    assert direct > 0.1
    assert result.metrics["loss:sum"] == pytest.approx(direct, rel=1e-4)
    metrics = distill_metrics(datums, result.loss_fn_outputs)
    assert metrics["distill/teacher_mass"] == pytest.approx(1.0, abs=1e-5)  # k = the vocabulary: no tail
    assert metrics["distill/kl"] == pytest.approx(direct / int(trained.sum()), rel=1e-4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["distill.teacher=policy"], "distill.teacher = 'policy' without distill.privileged_context"),
        (["distill.teacher=no-such-model"], "the teacher 'no-such-model' \\(distill.teacher\\) cannot be sampled from"),
    ],
)
def test_a_teacher_that_cannot_teach_is_a_usage_error(tmp_path, overrides, message):
    from minds_core.base.errors import UsageError

    config = load_config(
        None, ["model.base_model=minds-tiny", "trainer.loss_fn=topk_distill", f"runs_dir={tmp_path}", *overrides]
    )
    with pytest.raises(UsageError, match=message):
        asyncio.run(TeacherScorer.start(create_local_service(config, tmp_path), config, Backoff()))


@pytest.mark.parametrize("reward_weight", [0.0, 0.5])
def test_the_reward_weight_weighs_the_reward_term_and_not_the_kl_penalty(reward_weight):
    """With distill.reward_weight w and trainer.kl_penalty c, a sampled token's advantage is w * A - c * (log q - log p_ref)."""
    tokens = [72, 105, 33, 10, 97, 98]
    sampled = [False, False, False, True, True, True]
    sampler = [0.0, 0.0, 0.0, -1.0, -2.0, -0.5]
    reference = [None, None, None, -1.5, -1.0, -0.5]
    rollout = Rollout(_conversation(tokens, sampled, sampler), reward=3.0, reference_logprobs=reference)
    rollout.teacher_topk = [None, None, None, *[([97, 98], [-0.1, -2.5])] * 3]
    groups = [Group("env", Task(prompt="p"), [rollout])]
    distill = DistillSettings(k=2, forward=1.0, reverse=0.0, reward=reward_weight)
    settings = ProcessingSettings(estimator=lambda rewards: list(rewards), kl_penalty=0.25, distill=distill)
    (datum,) = process_batch(groups, settings).datums
    advantages = datum.loss_fn_inputs["advantages"].tolist()
    expected = [reward_weight * 3.0 - 0.25 * (q - p) if p is not None else 0.0 for q, p in zip(sampler[1:], reference[1:])]
    assert advantages == pytest.approx(expected)
    assert advantages[2] == pytest.approx(reward_weight * 3.0 - 0.25 * 0.5)  # the penalty stays when the weight is 0
