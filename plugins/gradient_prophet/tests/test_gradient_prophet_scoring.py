"""Reward arithmetic against values computed by hand."""

import math

import pytest

from minds_gradient_prophet.scoring import (
    average_ranks,
    closeness,
    in_context_score,
    kl_from_topk,
    linear_closeness,
    normalized_entropy,
    ranking_positions,
    spearman,
    surprise_score,
)


def test_closeness_scores():
    assert closeness(0.5, 0.0) == pytest.approx(0.8)  # 1 / (1 + 0.25)
    assert closeness(-1.0, 1.0) == pytest.approx(0.2)  # 1 / (1 + 4)
    assert closeness(3.0, 3.0) == 1.0
    assert linear_closeness(0.3, 0.5) == pytest.approx(0.8)
    assert linear_closeness(-0.2, 0.3) == pytest.approx(0.5)
    assert linear_closeness(0.0, 1.5) == 0.0  # never negative


def test_average_ranks_share_ties():
    assert average_ranks([30, 10, 20]) == [3.0, 1.0, 2.0]
    assert average_ranks([1, 2, 2, 3]) == [1.0, 2.5, 2.5, 4.0]


def test_spearman_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)  # 1 - 6*2 / (3*8)
    # ties: ranks [1, 2.5, 2.5, 4] vs [1, 2, 3, 4] -> 4.5 / sqrt(4.5 * 5) = 3 / sqrt(10)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(3 / math.sqrt(10))
    assert spearman([5, 5, 5], [1, 2, 3]) == 0.0  # no spread: no information
    assert spearman([1], [2]) == 0.0
    with pytest.raises(ValueError, match="equal lengths"):
        spearman([1, 2], [1, 2, 3])


def test_ranking_positions_ignore_bad_entries_and_share_last_place():
    assert ranking_positions([2, 1, 4, 3], 4) == [2.0, 1.0, 4.0, 3.0]
    # 9 and 0 are out of range, the second 2 repeats, 1.5 is no index: only probe 2 is placed
    assert ranking_positions([9, 2, 2, 1.5, 0, None], 3) == [2.5, 1.0, 2.5]
    assert ranking_positions([], 2) == [1.5, 1.5]


def test_surprise_score_by_hand():
    # positions [2, 1, 4, 3] vs KL ranks [2, 4, 1, 3]: d^2 sums to 2 -> 1 - 12/60
    assert surprise_score([2, 1, 4, 3], [0.1, 0.5, 0.05, 0.2]) == pytest.approx(0.8)
    # positions [3, 1, 4, 2] -> ranks [2, 4, 1, 3] vs KL ranks [4, 1, 3, 2]: d^2 sums to 18 -> 1 - 108/60
    assert surprise_score([2, 4, 1, 3], [0.5, 0.1, 0.3, 0.2]) == pytest.approx(-0.8)
    assert surprise_score([1, 3, 4, 2], [0.5, 0.1, 0.3, 0.2]) == pytest.approx(1.0)
    assert surprise_score([1, 2, 3], [0.3, 0.2, 0.1]) == pytest.approx(1.0)
    # only probe 3 listed: the rest share last place -> 3 / sqrt(15)
    assert surprise_score([3], [0.1, 0.2, 0.9, 0.3]) == pytest.approx(3 / math.sqrt(15))


def test_surprise_score_keeps_indices_when_a_probe_was_not_measured():
    # probe 2 failed: probes 1, 3, 4 keep their predicted positions 2, 4, 3 -> ranks [3, 1, 2] vs [2, 1, 3]
    assert surprise_score([2, 1, 4, 3], [0.1, None, 0.05, 0.2]) == pytest.approx(0.5)


def test_in_context_score_by_hand():
    truths = [0.5, -1.0, None, 2.0]  # probe 3 was not measured
    # (0.5 vs 0) -> 0.8, (-1 vs -1) -> 1, probe 4 has no prediction -> (2 vs 0) -> 0.2
    assert in_context_score(truths, [0.0, -1.0, 7.0]) == pytest.approx(2 / 3)
    # unparsable reply: every prediction is 0 -> (0.8 + 0.5 + 0.2) / 3
    assert in_context_score(truths, None) == pytest.approx(0.5)
    assert in_context_score(truths, [None, -1.0, None, 2.0]) == pytest.approx((0.8 + 1 + 1) / 3)
    with pytest.raises(ValueError, match="no measured probe"):
        in_context_score([None, None], [1.0, 2.0])


def test_kl_from_topk_by_hand():
    post = {1: math.log(0.5), 2: math.log(0.3)}  # rest 0.2
    prior = {1: math.log(0.25), 2: math.log(0.25), 3: math.log(0.4)}  # rest of post's tokens: 0.5
    expected = 0.5 * math.log(0.5 / 0.25) + 0.3 * math.log(0.3 / 0.25) + 0.2 * math.log(0.2 / 0.5)
    assert kl_from_topk(post, prior) == pytest.approx(expected)
    assert kl_from_topk(post, post) == pytest.approx(0.0)
    full = {1: math.log(0.5), 2: math.log(0.5)}
    assert kl_from_topk(full, {1: math.log(0.9), 2: math.log(0.1)}) == pytest.approx(
        0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    )
    with pytest.raises(ValueError, match="missing for tokens"):
        kl_from_topk(post, {1: math.log(0.25)})


def test_normalized_entropy_by_hand():
    assert normalized_entropy([0.5, 0.5]) == pytest.approx(1.0)
    assert normalized_entropy([0.25] * 4) == pytest.approx(1.0)
    assert normalized_entropy([1.0]) == 0.0
    # leftover 0.05 is a fourth bucket; divided by log(3)
    h = -(0.6 * math.log(0.6) + 0.3 * math.log(0.3) + 2 * 0.05 * math.log(0.05))
    assert normalized_entropy([0.6, 0.3, 0.05]) == pytest.approx(h / math.log(3))
    # one allowed outcome: it against the leftover, over log(2)
    assert normalized_entropy([0.8]) == pytest.approx(-(0.8 * math.log(0.8) + 0.2 * math.log(0.2)) / math.log(2))
    assert normalized_entropy([0.7, 0.2]) == 1.0  # the leftover bucket can push past log(K): clipped
    with pytest.raises(ValueError, match="at least one"):
        normalized_entropy([])
