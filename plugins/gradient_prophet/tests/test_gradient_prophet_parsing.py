"""Parsing replies: JSON arrays in prose and HEADER: lines, on the edge cases models produce."""

import pytest

from minds_gradient_prophet.parsing import header_number, header_text, parse_number_array


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[0.5, -1.25, 3, 0]", [0.5, -1.25, 3.0, 0.0]),
        ("I think the lesson hurts probe 2 most.\nFinal answer: [0.1, -2.5, 0.0, 0.05]", [0.1, -2.5, 0.0, 0.05]),
        ("```json\n[-0.3, -1e-2, 2.5E1]\n```", [-0.3, -0.01, 25.0]),
        ("```\n[1, 2, 3]\n```\nThat is my ranking.", [1.0, 2.0, 3.0]),
        ('["-1.5", "2", "+0.25"]', [-1.5, 2.0, 0.25]),
        ("[1, 2, 3,]", [1.0, 2.0, 3.0]),  # trailing comma: malformed JSON
        ("[\u22120.4, 0.2]", [-0.4, 0.2]),  # typographic minus sign
        ("deltas: [0.5, -0.5, 1.0", [0.5, -0.5, 1.0]),  # never closed
        ("[1 2 3]", [1.0, 2.0, 3.0]),  # no commas
        ("[-.5, .25]", [-0.5, 0.25]),
    ],
)
def test_arrays_are_read_through_prose_fences_and_malformed_json(text, expected):
    assert parse_number_array(text) == pytest.approx(expected)


def test_elements_that_are_not_numbers_keep_their_position():
    assert parse_number_array("[0.5, NaN, n/a, -2]") == [0.5, None, None, -2.0]
    assert parse_number_array("[1,,3]") == [1.0, None, 3.0]
    assert parse_number_array('[0.1, "big", Infinity]') == [0.1, None, None]


def test_the_last_array_wins_unless_one_has_the_expected_length():
    text = "Draft [1, 2, 3, 4]. On reflection [4, 3, 2, 1]. Probe [2] moved most."
    assert parse_number_array(text) == [2.0]
    assert parse_number_array(text, length=4) == [4.0, 3.0, 2.0, 1.0]
    assert parse_number_array(text, length=7) == [2.0]  # no array of that length: the last one


@pytest.mark.parametrize(
    "text",
    ["", "no array here, just 1 2 3", "[]", "[a, b, c]", "[NaN]", '["x"]', "[[]]", "]1, 2["],
)
def test_replies_without_a_numeric_array_give_none(text):
    assert parse_number_array(text) is None


def test_nested_arrays_yield_an_inner_array():
    assert parse_number_array("[[1, 2], [3, -4]]") == [3.0, -4.0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PREDICTION: 0.03\nANSWER: 1, 2, 3, 4, 5", 0.03),
        ("prediction: -0.4 nats\nANSWER: x", -0.4),
        ("**PREDICTION:** -1.5e-2\n**ANSWER:** x", -0.015),
        ("Some thinking.\n  PREDICTION : +2\nANSWER: x", 2.0),
        ("```\nPREDICTION: \u22120.25\nANSWER: 7\n```", -0.25),
        ("PREDICTION: 0.1\nPREDICTION: 0.2\nANSWER: x", 0.2),  # the last header counts
    ],
)
def test_header_numbers(text, expected):
    assert header_number(text, "PREDICTION") == pytest.approx(expected)


@pytest.mark.parametrize(
    "text",
    ["ANSWER: 1, 2, 3", "PREDICTION: none\nANSWER: 1", "PREDICTION:\nANSWER: 1", "My PREDICTION is 0.2", ""],
)
def test_a_missing_header_or_number_gives_none(text):
    assert header_number(text, "PREDICTION") is None


def test_header_text_reads_one_line_or_everything_after():
    reply = "PREDICTION: 0.1\nANSWER: 12, 7, 300,\n45, 9\n"
    assert header_text(reply, "ANSWER") == "12, 7, 300,"
    assert header_text(reply, "ANSWER", to_end=True) == "12, 7, 300,\n45, 9"
    assert header_text("```\nFEELING: torn between two\nENTROPY: 0.3\n```", "FEELING") == "torn between two"
    assert header_text("PREDICTION: 0.1\nANSWER:   \n", "ANSWER", to_end=True) is None
    assert header_text("PREDICTION: 0.1 and then 1, 2, 3", "ANSWER") is None
