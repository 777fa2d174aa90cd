"""Reward parts on hand-computed values, and the rubric the environment builds."""

import pytest

from minds_core import Context, Task
from minds_self_prediction.environment import load_environment
from minds_self_prediction.scoring import accuracy_reward, calibration_reward, format_reward, is_correct


@pytest.mark.parametrize(
    ("prediction", "answer", "aliases", "correct"),
    [
        ("-123", "-123", [], True),
        ("123", "-123", [], False),  # the original dropped the sign and called this right
        ("-123", "123", [], False),
        ("\u2212123", "-123", [], True),
        ("1,234,567", "1234567", ["1,234,567"], True),
        ("1 234 567", "1234567", [], True),
        ("1234567.0", "1234567", [], True),
        ("The answer is -45", "-45", [], True),
        ("42 or maybe 43", "43", [], False),
        ("forty-two", "42", [], False),
        ("", "0", [], False),
        ("0", "0", [], True),
    ],
)
def test_is_correct(prediction: str, answer: str, aliases: list[str], correct: bool) -> None:
    assert is_correct(prediction, answer, aliases) is correct


def test_correct_and_confident() -> None:
    reply = "FINAL ANSWER: 85\nCONFIDENCE: 0.9"
    assert format_reward(reply) == 1.0
    assert accuracy_reward(reply, "85") == 1.0
    assert calibration_reward(reply, "85") == pytest.approx(1 - 0.1**2)  # 0.99


def test_wrong_sign_is_wrong_and_overconfidence_costs() -> None:
    reply = "FINAL ANSWER: 113\nCONFIDENCE: 0.8"
    assert accuracy_reward(reply, "-113") == 0.0
    assert calibration_reward(reply, "-113") == pytest.approx(1 - 0.8**2)  # 0.36


def test_confidence_is_clipped_for_calibration() -> None:
    reply = "FINAL ANSWER: 7\nCONFIDENCE: 1.7"
    assert format_reward(reply) == 0.0
    assert calibration_reward(reply, "7") == 1.0  # clip(1.7) = 1, accuracy 1
    assert calibration_reward(reply, "8") == 0.0  # clip(1.7) = 1, accuracy 0


def test_missing_confidence_scores_a_half() -> None:
    reply = "FINAL ANSWER: 7"
    assert calibration_reward(reply, "7") == pytest.approx(0.75)  # 1 - (0.5 - 1)^2
    assert calibration_reward(reply, "6") == pytest.approx(0.75)  # 1 - (0.5 - 0)^2


def test_alias_from_info_is_accepted() -> None:
    reply = "FINAL ANSWER: one thousand and one\nCONFIDENCE: 0.5"
    assert accuracy_reward(reply, "1001", {"aliases": ["one thousand and one"]}) == 1.0
    assert accuracy_reward(reply, "1001", {}) == 0.0


def test_a_missing_answer_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="task's answer"):
        accuracy_reward("FINAL ANSWER: 1\nCONFIDENCE: 1", None)


@pytest.mark.parametrize(
    ("reply", "answer", "total"),
    [
        ("FINAL ANSWER: 85\nCONFIDENCE: 0.9", "85", 0.2 + 0.5 + 0.3 * 0.99),  # 0.997
        ("FINAL ANSWER: 84\nCONFIDENCE: 0.9", "85", 0.2 + 0.0 + 0.3 * 0.19),  # 0.257
        ("FINAL ANSWER: 84\nCONFIDENCE: 0", "85", 0.2 + 0.0 + 0.3 * 1.0),  # 0.5
        ("It is 85.", "85", 0.0 + 0.5 + 0.3 * 0.75),  # 0.725: fallback answer, default confidence
        ("no idea", "85", 0.0 + 0.0 + 0.3 * 0.75),  # 0.225
    ],
)
async def test_environment_rubric_total(reply: str, answer: str, total: float) -> None:
    env = load_environment(num_examples=4, seed=1)
    task = Task(prompt="What is 40 + 45?", answer=answer, info={"aliases": []})
    ctx = Context(sampler=None, tokenizer=None, service=None, renderer=None, base_model="none")
    result = await env.episode(task, ctx).step(reply)
    assert result.done
    assert result.reward == pytest.approx(total)
    assert set(result.metrics) == {
        "reward/self_prediction.format",
        "reward/self_prediction.accuracy",
        "reward/self_prediction.calibration",
    }
