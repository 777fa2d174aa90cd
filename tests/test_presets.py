"""Named recipes: config resolution, and the loss of a hand-built batch against each paper's formula in float64."""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch

from minds_core.backends.local.training.losses import token_losses
from minds_core.base.errors import ConfigError
from minds_core.cli import command as cli
from minds_core.config import load_config
from minds_core.config.presets import PRESETS
from minds_core.contract.environment import Task
from minds_core.contract.plugins import load_plugins
from minds_core.episodes.conversation import Conversation, StopReason
from minds_core.episodes.groups import Group, Rollout
from minds_core.rl.data_processing import ProcessingSettings, process_batch
from minds_core.rl.overlong import is_truncated, overlong_penalty, window_tokens
from minds_core.training.loss_aggregation import token_scales

MAX_TOKENS = 7


# ---------------------------------------------------------------- config


def test_a_preset_sets_its_keys_and_explicit_keys_win(tmp_path):
    dapo = load_config(None, ["trainer.preset=dapo"])
    assert dapo.trainer.advantage == "group_norm" and dapo.trainer.loss_fn == "ppo"
    assert dapo.trainer.loss_fn_config == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}
    assert dapo.trainer.loss_aggregation == "token_mean" and dapo.rollout.drop_constant_reward_groups
    file = tmp_path / "run.toml"
    file.write_text('[trainer]\npreset = "grpo"\nadvantage = "rloo"\n')
    grpo = load_config(file, ["trainer.loss_aggregation=sum"])
    assert grpo.trainer.advantage == "rloo" and grpo.trainer.loss_aggregation == "sum"
    assert grpo.trainer.loss_fn == "ppo" and grpo.trainer.loss_fn_config["clip_high_threshold"] == 1.2


def test_the_self_distill_preset_makes_the_policy_with_privileged_context_the_top_k_teacher():
    config = load_config(None, ["trainer.preset=self_distill", "distill.reward_weight=0.5"])
    assert config.trainer.loss_fn == "topk_distill" and config.distill.teacher == "policy" and config.distill.privileged_context
    assert config.distill.reward_weight == 0.5 and config.distill.divergence == "forward"
    assert load_config(None, ["trainer.preset=self_distill", "distill.teacher="]).distill.teacher == ""  # the base model


def test_a_preset_keeps_its_loss_settings_off_a_loss_the_config_chose():
    config = load_config(None, ["trainer.preset=gspo", "trainer.loss_fn=importance_sampling"])
    assert config.trainer.loss_fn == "importance_sampling" and config.trainer.loss_fn_config == {}
    assert config.trainer.advantage == "group_norm"


def test_an_unknown_preset_is_a_config_error_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"trainer.preset = 'dapoo'.*did you mean dapo.*grpo, dr_grpo, dapo, gspo"):
        load_config(None, ["trainer.preset=dapoo"])
    assert cli.main(["run", "--env", "x", "--set", "trainer.preset=ppo2", "--dry-run"]) == 2


def test_dry_run_shows_what_the_preset_set(capsys):
    assert cli.main(["run", "--env", "ghost_trace", "--set", "trainer.preset=dr_grpo", "--set", "trainer.loss_fn_config={clip_low_threshold: 0.7, clip_high_threshold: 1.2}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# preset dr_grpo set trainer.advantage = 'group_mean'" in out
    assert "# preset dr_grpo set trainer.loss_aggregation = 'fixed_length'" in out
    assert "# preset dr_grpo would set trainer.loss_fn_config" in out and "overridden by the config" in out
    assert "preset: dr_grpo" in out and "loss_aggregation: fixed_length" in out


# ---------------------------------------------------------------- the loss of a hand-built batch

# (rewards of each group, sampled-token count of each rollout); the last group is constant
GROUPS = [([1.0, 0.0, 0.5, 0.0], [3, 5, 2, 7]), ([0.2, 0.9, 0.9, 0.1], [4, 1, 6, 3]), ([1.0, 1.0, 1.0, 1.0], [2, 3, 2, 4])]
PROMPT = 3


def _hand_built_batch(rng: random.Random, tiny_ratios: bool, drop_constant: bool) -> tuple[list[Group], dict[int, list[float]]]:
    """Groups of single-turn rollouts with sampler log-probs q, and the policy's log-probs p of every token."""
    groups, policy = [], {}
    for g, (rewards, lengths) in enumerate(GROUPS):
        rollouts = []
        for reward, length in zip(rewards, lengths):
            n = PROMPT + length
            sampled = [False] * PROMPT + [True] * length
            q = [-rng.randint(1, 48) / 16 if s else 0.0 for s in sampled]  # exact in float32
            spread = 2e-4 if tiny_ratios and rng.random() < 0.5 else 0.4
            conv = Conversation(renderer=None, sampler=None, params=None, max_total_tokens=64)
            conv.tokens, conv.sampled, conv.logprobs = [rng.randrange(256) for _ in range(n)], sampled, q
            conv.stop_reasons = [StopReason.STOP if length < MAX_TOKENS else StopReason.LENGTH]  # a reply of MAX_TOKENS was cut off
            rollout = Rollout(conversation=conv, reward=reward)
            policy[id(rollout)] = [lp + rng.uniform(-spread, spread) if s else -1.0 for lp, s in zip(q, sampled)]
            rollouts.append(rollout)
        constant = len(set(rewards)) == 1
        groups.append(Group(f"env{g}", Task(prompt="p"), rollouts, dropped="constant" if constant and drop_constant else None))
    return groups, policy


def _ppo_term(ratio: float, advantage: float, low: float, high: float) -> float:
    return min(ratio * advantage, min(max(ratio, low), high) * advantage)


def _dapo_length_penalty(length: int, l_max: int, l_cache: int) -> float:
    if length <= l_max - l_cache:
        return 0.0
    return ((l_max - l_cache) - length) / l_cache if length <= l_max else -1.0


def _datums(config, plugins, groups: list[Group]) -> list:
    """The datums the run's data processing makes of ``groups``."""
    estimator = plugins.registry.lookup("advantage_estimators", config.trainer.advantage, "trainer.advantage").obj
    loss = plugins.registry.lookup("losses", config.trainer.loss_fn, "trainer.loss_fn").obj
    return process_batch(groups, ProcessingSettings.from_config(config, estimator, loss)).datums


def _paper_loss(preset: str, groups: list[Group], policy: dict[int, list[float]]) -> float:
    """Each paper's objective, written out in float64 Python (negated: a loss)."""
    sequences = []  # (advantage, [(p, q) of sampled tokens])
    for group in groups:
        if group.dropped:
            continue
        rewards = [r.reward for r in group.rollouts]
        if preset == "dapo":  # soft overlong punishment, L_max = 7, L_cache = round(0.2 * 7) = 1
            rewards = [r + _dapo_length_penalty(ro.conversation.sampled_tokens, MAX_TOKENS, 1) for r, ro in zip(rewards, group.rollouts)]
        mean = statistics.fmean(rewards)
        std = statistics.stdev(rewards)
        for reward, rollout in zip(rewards, group.rollouts):
            conv = rollout.conversation
            if preset == "dapo" and not conv.last_stopped:
                continue  # overlong filtering: a truncated reply has no loss
            if preset == "dr_grpo":
                advantage = reward - mean
            else:
                advantage = (reward - mean) / std if std > 1e-8 else 0.0
            tokens = [(p, q) for p, q, s in zip(policy[id(rollout)], conv.logprobs, conv.sampled) if s]
            sequences.append((advantage, tokens))
    n = len(sequences)
    if preset == "grpo":  # 1/G sum_i 1/|o_i| sum_t min(r A, clip(r, 1-0.2, 1+0.2) A)
        return -sum(sum(_ppo_term(math.exp(p - q), a, 0.8, 1.2) for p, q in t) / len(t) for a, t in sequences) / n
    if preset == "dr_grpo":  # 1/G sum_i sum_t min(...) / L_max
        return -sum(sum(_ppo_term(math.exp(p - q), a, 0.8, 1.2) for p, q in t) / MAX_TOKENS for a, t in sequences) / n
    if preset == "dapo":  # 1/sum|o_i| sum_i sum_t min(r A, clip(r, 1-0.2, 1+0.28) A)
        total = sum(len(t) for _, t in sequences)
        return -sum(_ppo_term(math.exp(p - q), a, 0.8, 1.28) for a, t in sequences for p, q in t) / total
    if preset == "gspo":  # 1/G sum_i min(s_i A, clip(s_i, 1-3e-4, 1+4e-4) A), s_i = (p/q)^(1/|o_i|)
        terms = []
        for a, t in sequences:
            s = math.exp(sum(p - q for p, q in t) / len(t))
            terms.append(_ppo_term(s, a, 1 - 3e-4, 1 + 4e-4))
        return -sum(terms) / n
    raise AssertionError(preset)


@pytest.fixture(scope="module")
def plugins():
    return load_plugins()


#: The presets of an RL paper's formula (self_distill's top-k KL: tests/test_topk_distill.py, tests/test_distill_runs.py).
RL_PRESETS = [name for name in PRESETS if name != "self_distill"]


@pytest.mark.parametrize("preset", RL_PRESETS)
def test_the_loss_of_a_hand_built_batch_is_the_papers_formula(plugins, preset):
    config = load_config(None, [f"trainer.preset={preset}", f"sampling.max_tokens={MAX_TOKENS}"])
    groups, policy = _hand_built_batch(random.Random(preset), tiny_ratios=preset == "gspo",
                                       drop_constant=config.rollout.drop_constant_reward_groups)
    datums = _datums(config, plugins, groups)
    assert datums
    by_tokens = {tuple(r.conversation.tokens[:-1]): r for g in groups for r in g.rollouts}
    total = torch.zeros((), dtype=torch.float64)
    for datum in datums:
        rollout = by_tokens[tuple(datum.model_input.to_ints())]
        inputs = {k: v.to_torch().to(torch.float64) for k, v in datum.loss_fn_inputs.items()}
        logp = torch.tensor(policy[id(rollout)][1:], dtype=torch.float64)
        total = total + token_losses(config.trainer.loss_fn, logp, inputs, config.trainer.loss_fn_config).sum()
    expected = _paper_loss(preset, groups, policy)
    assert abs(expected) > 1e-3  # the batch is not degenerate
    assert float(total) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("preset", RL_PRESETS)
def test_the_presets_differ_from_the_service_default_on_the_same_batch(plugins, preset):
    """The comparison above can fail: the default (summed importance sampling) gives another number."""
    config = load_config(None, [f"trainer.preset={preset}", f"sampling.max_tokens={MAX_TOKENS}"])
    groups, policy = _hand_built_batch(random.Random(preset), tiny_ratios=preset == "gspo", drop_constant=False)
    plain = load_config(None, [f"sampling.max_tokens={MAX_TOKENS}"])
    datums = _datums(plain, plugins, groups)
    by_tokens = {tuple(r.conversation.tokens[:-1]): r for g in groups for r in g.rollouts}
    total = sum(
        float(token_losses("importance_sampling", torch.tensor(policy[id(by_tokens[tuple(d.model_input.to_ints())])][1:], dtype=torch.float64),
                           {k: v.to_torch().to(torch.float64) for k, v in d.loss_fn_inputs.items()}).sum())
        for d in datums
    )
    assert abs(total - _paper_loss(preset, groups, policy)) > 1e-3
    assert config.trainer.loss_aggregation != "sum"


# ---------------------------------------------------------------- aggregation and the gspo loss


def test_token_scales_follow_their_definitions():
    lengths = [2, 4, 10]
    assert token_scales("sum", lengths, 16) == [1.0, 1.0, 1.0]
    assert token_scales("token_mean", lengths, 16) == pytest.approx([1 / 16] * 3)
    assert token_scales("sequence_mean", lengths, 16) == pytest.approx([1 / 6, 1 / 12, 1 / 30])
    assert token_scales("fixed_length", lengths, 16) == pytest.approx([1 / 48] * 3)
    with pytest.raises(ValueError, match="unknown loss aggregation 'median'"):
        token_scales("median", lengths, 16)


def test_gspo_value_and_gradient_in_float64():
    q = torch.tensor([0.0, -1.0, -2.0, -0.5], dtype=torch.float64)
    mask = torch.tensor([0.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    advantages = torch.tensor([0.0, 1.5, 1.5, 1.5], dtype=torch.float64)
    inputs = {"logprobs": q, "sequence_ratio_mask": mask, "advantages": advantages}
    for deltas, clipped in (([0.0, 1e-4, -2e-4, 3e-4], False), ([0.0, 0.1, 0.2, 0.0], True)):
        logp = (q + torch.tensor(deltas, dtype=torch.float64)).requires_grad_(True)
        loss = token_losses("gspo", logp, inputs).sum()
        loss.backward()
        s = math.exp(sum(deltas[1:]) / 3)
        value = min(s, 1 + 4e-4) if clipped else s
        assert float(loss.detach()) == pytest.approx(-3 * 1.5 * value, abs=1e-12)
        # unclipped: every sampled token gets d(-s*A)/d logp_t = -s * A; clipped above with A > 0: no gradient
        expected_grad = [0.0] + [0.0 if clipped else -s * 1.5] * 3
        assert logp.grad.tolist() == pytest.approx(expected_grad, abs=1e-12)


# ---------------------------------------------------------------- length control


def test_the_soft_overlong_penalty_follows_dapo():
    # L_max = 20480, L_cache = 4096 (window 0.2): free up to 16384, then linear down to -1 at 20480
    window = window_tokens(0.2, 20480)
    assert window == 4096
    assert overlong_penalty(16384, 20480, window) == 0.0
    assert overlong_penalty(16384 + 1024, 20480, window) == pytest.approx(-0.25, abs=1e-15)
    assert overlong_penalty(20480, 20480, window) == -1.0
    assert overlong_penalty(20481, 20480, window) == -1.0
    assert overlong_penalty(20480, 20480, 0) == 0.0


def test_truncation_is_a_reply_cut_at_the_limit_or_an_exhausted_budget():
    conv = Conversation(renderer=None, sampler=None, params=None, max_total_tokens=8)
    assert not is_truncated(conv)
    conv.stop_reasons = [StopReason.LENGTH]
    assert is_truncated(conv)
    conv.stop_reasons, conv.truncated = [StopReason.STOP], True
    assert is_truncated(conv)
