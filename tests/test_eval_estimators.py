"""Evaluation estimators: unbiased pass@k against enumeration, the t interval against known quantiles."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from minds_core.evaluation.estimators import mean_interval, pass_at_k, pass_at_ks, t_quantile_975


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6])
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_pass(n):
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            exact = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_pass_at_ks_uses_powers_of_two_up_to_the_smallest_task_and_only_binary_rewards():
    tasks = [[1.0, 0.0, 0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]]
    result = pass_at_ks(tasks)
    assert sorted(result) == [1, 2, 4, 5]
    assert result[1] == pytest.approx(statistics.fmean([2 / 6, 0.0]))
    assert result[5] == pytest.approx(statistics.fmean([pass_at_k(6, 2, 5), 0.0]))
    assert pass_at_ks([[1.0, 0.5]]) == {}
    assert pass_at_ks([[], []]) == {}


@pytest.mark.parametrize(("df", "expected"), [(1, 12.7062), (5, 2.5706), (30, 2.0423), (40, 2.0211), (60, 2.0003), (120, 1.9799)])
def test_t_quantiles_match_tables(df, expected):
    assert t_quantile_975(df) == pytest.approx(expected, abs=2e-4)


def test_the_interval_treats_tasks_as_the_unit():
    result = mean_interval([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], []])
    assert result["mean"] == 0.5
    assert result["sem"] == pytest.approx(0.5)  # two task means 1 and 0, not eight samples
    assert result["ci95_low"] == pytest.approx(0.5 - 12.7062 * 0.5, abs=1e-3)
    assert result["ci95_high"] == pytest.approx(0.5 + 12.7062 * 0.5, abs=1e-3)


def test_one_task_uses_its_samples_and_one_value_has_no_interval():
    result = mean_interval([[1.0, 2.0, 3.0]])
    assert result["mean"] == 2.0 and result["sem"] == pytest.approx(1 / math.sqrt(3))
    assert mean_interval([[4.0]]) == {"mean": 4.0, "sem": None, "ci95_low": None, "ci95_high": None}
    assert mean_interval([])["mean"] is None
