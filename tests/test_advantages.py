"""Advantage estimators on hand-computed groups."""

from __future__ import annotations

import math

import pytest

from minds_core.advantages import direct, group_mean, group_norm, kl_penalized, kl_terms, rloo


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
