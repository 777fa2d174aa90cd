"""Datum assembly on hand-computed single- and multi-turn sequences."""

from __future__ import annotations

import pytest

from minds_core.training.datums import rl_datum


def _columns(datum):
    inputs = datum.loss_fn_inputs
    return (
        datum.model_input.to_ints(),
        inputs["target_tokens"].tolist(),
        inputs["logprobs"].tolist(),
        inputs["advantages"].tolist(),
    )


def test_single_turn_shift_and_mask():
    # prompt 5 6 7, sampled 8 9 (logprobs -0.5 -0.25), advantage 1.5
    tokens = [5, 6, 7, 8, 9]
    sampled = [False, False, False, True, True]
    logprobs = [0.0, 0.0, 0.0, -0.5, -0.25]
    model_input, targets, lps, advs = _columns(rl_datum(tokens, sampled, logprobs, [1.5] * 5))
    assert model_input == [5, 6, 7, 8]
    assert targets == [6, 7, 8, 9]
    assert lps == pytest.approx([0.0, 0.0, -0.5, -0.25])
    assert advs == pytest.approx([0.0, 0.0, 1.5, 1.5])


def test_multi_turn_masks_each_sampled_turn_and_not_the_tool_output():
    # prompt 10 11 | turn 1: 20 21 | tool output 30 31 32 | turn 2: 40
    tokens = [10, 11, 20, 21, 30, 31, 32, 40]
    sampled = [False, False, True, True, False, False, False, True]
    logprobs = [0.0, 0.0, -0.1, -0.2, 0.0, 0.0, 0.0, -0.4]
    model_input, targets, lps, advs = _columns(rl_datum(tokens, sampled, logprobs, [2.0] * 8))
    assert model_input == [10, 11, 20, 21, 30, 31, 32]
    assert targets == [11, 20, 21, 30, 31, 32, 40]
    assert lps == pytest.approx([0.0, -0.1, -0.2, 0.0, 0.0, 0.0, -0.4])
    assert advs == pytest.approx([0.0, 2.0, 2.0, 0.0, 0.0, 0.0, 2.0])


def test_per_token_advantages_are_kept_on_sampled_positions():
    advs = _columns(rl_datum([1, 2, 3], [False, True, True], [0.0, -1.0, -2.0], [9.0, 0.5, -0.5]))[3]
    assert advs == pytest.approx([0.5, -0.5])


@pytest.mark.parametrize(
    ("tokens", "sampled", "logprobs", "advantages", "message"),
    [
        ([1], [True], [0.0], [1.0], "at least two tokens"),
        ([1, 2], [True], [0.0, 0.0], [1.0, 1.0], "lengths differ"),
    ],
)
def test_bad_inputs(tokens, sampled, logprobs, advantages, message):
    with pytest.raises(ValueError, match=message):
        rl_datum(tokens, sampled, logprobs, advantages)
