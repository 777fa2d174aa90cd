"""The reply parser on well-formed and malformed replies."""

import pytest

from minds_self_prediction.parsing import DEFAULT_CONFIDENCE, Parsed, parse_response


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("FINAL ANSWER: 42\nCONFIDENCE: 0.8", Parsed("42", 0.8, True)),
        ("<think>6 * 7 is 42</think>\nFINAL ANSWER: 42\nCONFIDENCE: 0.95", Parsed("42", 0.95, True)),
        ("FINAL ANSWER: -123\nCONFIDENCE: 0.3", Parsed("-123", 0.3, True)),
        ("FINAL ANSWER: \u2212123\nCONFIDENCE: 1", Parsed("-123", 1.0, True)),
        ("final answer: 7.\nconfidence: .5", Parsed("7", 0.5, True)),
        ("**FINAL ANSWER:** 1,234\n**CONFIDENCE:** 0.25", Parsed("1,234", 0.25, True)),
        ("FINAL ANSWER: 12 CONFIDENCE: 0.6", Parsed("12", 0.6, True)),
        ("FINAL ANSWER:\n  99\nCONFIDENCE: 0.7", Parsed("99", 0.7, True)),
    ],
)
def test_well_formed_replies(reply: str, expected: Parsed) -> None:
    assert parse_response(reply) == expected


def test_code_fences_are_stripped() -> None:
    reply = "```text\nFINAL ANSWER: 15\nCONFIDENCE: 0.9\n```"
    assert parse_response(reply) == Parsed("15", 0.9, True)


def test_extra_prose_around_the_headers_is_ignored() -> None:
    reply = "Let me add these up carefully.\nFINAL ANSWER: 1500\nCONFIDENCE: 0.6\nI hope that helps!"
    assert parse_response(reply) == Parsed("1500", 0.6, True)


def test_headers_inside_thinking_do_not_count() -> None:
    reply = "<think>I could write FINAL ANSWER: 3 and CONFIDENCE: 0.1 but no.</think>FINAL ANSWER: 4\nCONFIDENCE: 0.9"
    assert parse_response(reply) == Parsed("4", 0.9, True)


def test_the_last_header_wins() -> None:
    reply = "FINAL ANSWER: 10\nCONFIDENCE: 0.2\nWait, I slipped.\nFINAL ANSWER: 11\nCONFIDENCE: 0.7"
    assert parse_response(reply) == Parsed("11", 0.7, True)


def test_missing_confidence_defaults_and_breaks_the_format() -> None:
    assert parse_response("FINAL ANSWER: 42") == Parsed("42", DEFAULT_CONFIDENCE, False)


def test_confidence_without_a_number_defaults() -> None:
    assert parse_response("FINAL ANSWER: 42\nCONFIDENCE: very high") == Parsed("42", DEFAULT_CONFIDENCE, False)


@pytest.mark.parametrize(("stated", "value"), [("1.5", 1.5), ("-0.2", -0.2), ("80%", 80.0)])
def test_confidence_outside_the_unit_interval_is_kept_but_breaks_the_format(stated: str, value: float) -> None:
    assert parse_response(f"FINAL ANSWER: 42\nCONFIDENCE: {stated}") == Parsed("42", value, False)


def test_missing_answer_header_falls_back_to_the_last_sentence() -> None:
    reply = "<think>scratch work 1 + 1</think>Adding them gives a sum. The result is 2.\nCONFIDENCE: 0.9"
    assert parse_response(reply) == Parsed("The result is 2", 0.9, False)


def test_empty_answer_breaks_the_format() -> None:
    assert parse_response("FINAL ANSWER:\nCONFIDENCE: 0.9") == Parsed("", 0.9, False)


def test_unclosed_think_block_leaves_nothing() -> None:
    assert parse_response("<think>adding 17 and 25 gives FINAL ANSWER: 42") == Parsed("", DEFAULT_CONFIDENCE, False)


def test_stray_closing_think_tag_drops_what_came_before() -> None:
    reply = "the sum is 8, CONFIDENCE: 0.1</think>\nFINAL ANSWER: 8\nCONFIDENCE: 0.99"
    assert parse_response(reply) == Parsed("8", 0.99, True)


def test_empty_reply() -> None:
    assert parse_response("") == Parsed("", DEFAULT_CONFIDENCE, False)
