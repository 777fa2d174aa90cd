"""Advantage estimators on hand-computed groups."""

from __future__ import annotations

import math

import pytest

from minds_core.rl.advantages import ESTIMATORS, direct, group_mean, group_norm, is_constant, kl_penalized, kl_terms, rloo


def test_group_mean_centers():
    assert group_mean([1.0, 2.0, 6.0]) == pytest.approx([-2.0, -1.0, 3.0])


def test_group_norm_divides_by_sample_stdev():
    # mean 2, sample variance ((1)^2 + 0 + 1^2) / 2 = 1
    assert group_norm([1.0, 2.0, 3.0]) == pytest.approx([-1.0, 0.0, 1.0])
    std = math.sqrt(((0 - 1) ** 2 + (2 - 1) ** 2) / 1)
    assert group_norm([0.0, 2.0]) == pytest.approx([-1 / std, 1 / std])


def test_group_norm_of_constant_or_single_group_is_zero():
    assert group_norm([0.5, 0.5, 0.5]) == [0.0, 0.0, 0.0]
    assert group_norm([3.0]) == [0.0]


CONSTANT_GROUPS = [[0.1] * 8, [1 / 3] * 6, [0.7] * 3, [-2.2] * 5, [1e-300] * 4, [0.0] * 2]


def test_constant_groups_are_real_float_noise_traps():
    # the naive centered advantage of these groups is not zero: what trained 32 datums on nothing
    assert any(r - sum(g) / len(g) != 0.0 for g in CONSTANT_GROUPS for r in g)
    assert all(is_constant(g) for g in CONSTANT_GROUPS) and not is_constant([0.1, 0.1 + 1e-12])


@pytest.mark.parametrize("name", sorted(set(ESTIMATORS) - {"direct"}))
@pytest.mark.parametrize("rewards", CONSTANT_GROUPS, ids=str)
def test_every_baseline_estimator_gives_exact_zeros_for_a_constant_group(name, rewards):
    advantages = ESTIMATORS[name][0](rewards)
    assert advantages == [0.0] * len(rewards)
    assert all(type(a) is float for a in advantages)


def test_direct_of_a_constant_group_is_the_reward_itself():
    # no baseline by definition: a constant group still trains (drop it with rollout.drop_constant_reward_groups)
    assert direct([1 / 3] * 6) == [1 / 3] * 6


def test_nearly_constant_groups_keep_their_signal():
    rewards = [0.1] * 7 + [0.2]
    assert group_mean(rewards)[-1] == pytest.approx(0.0875) and rloo(rewards)[-1] == pytest.approx(0.1)
    assert sum(group_mean(rewards)) == pytest.approx(0.0, abs=1e-15)


def test_direct_is_the_reward():
    assert direct([1, -2.5]) == [1.0, -2.5]


def test_rloo_uses_the_mean_of_the_others():
    # 1 - (2 + 6) / 2 = -3 ; 2 - (1 + 6) / 2 = -1.5 ; 6 - (1 + 2) / 2 = 4.5
    assert rloo([1.0, 2.0, 6.0]) == pytest.approx([-3.0, -1.5, 4.5])
    assert rloo([7.0]) == [0.0]


def test_kl_penalty_lowers_the_advantage_where_the_policy_drifted_up():
    # tokens: prompt, prompt, sampled, sampled; base logprob of the first is None (no prefix)
    sampler = [0.0, 0.0, -0.5, -2.0]
    base = [None, -1.0, -1.5, -1.0]
    sampled = [False, False, True, True]
    terms = kl_terms(sampler, base, sampled)
    assert terms == pytest.approx([0.0, 0.0, 1.0, -1.0])
    # A = 2, coef 0.5: 2 - 0.5 * 1 = 1.5 where q > p_base; 2 + 0.5 = 2.5 where q < p_base
    assert kl_penalized(2.0, terms, 0.5) == pytest.approx([2.0, 2.0, 1.5, 2.5])
