"""Reading the five code numbers and building the probe text."""

import pytest

from minds_ghost_trace.parsing import integers, parse_code
from minds_ghost_trace.prompts import probe_target, probe_text


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        ("12, 7, 300, 45, 9", (12, 7, 300, 45, 9)),
        ("12 7 300 45 9", (12, 7, 300, 45, 9)),
        ("Here are my numbers: 1, 2, 3, 4, 5.", (1, 2, 3, 4, 5)),
        ("```\n101, 202, 303, 404, 505\n```", (101, 202, 303, 404, 505)),
        ("1, 2, 3, 4, 5, 6, 7", (3, 4, 5, 6, 7)),  # more than five: the last five
        ("-4, 10, -20, 30, 40", (-4, 10, -20, 30, 40)),  # signs are kept
        ("\u22124, 10, 20, 30, 40", (-4, 10, 20, 30, 40)),
        ("007, 08, 9, 10, 11", (7, 8, 9, 10, 11)),
        ("1-2-3-4-5", (1, 2, 3, 4, 5)),  # dashes between numbers are separators
        ("1000, 2000, 3000, 4000, 5000", (1000, 2000, 3000, 4000, 5000)),  # out of range still parses
    ],
)
def test_valid_codes(completion: str, code: tuple[int, ...]) -> None:
    assert parse_code(completion) == code


@pytest.mark.parametrize(
    "completion",
    [
        "",
        "apple",
        "1, 2, 3, 4",  # fewer than five
        "1.5, 2.5, 3.5, 4.5, 5.5",  # decimals are not integers
        "n1 n2 n3 n4 n5",  # digits glued to words are not numbers
    ],
)
def test_invalid_codes(completion: str) -> None:
    assert parse_code(completion) is None


def test_integers_ignore_decimals_and_glued_digits() -> None:
    assert integers("x1 2.5 7 8b 9. 10") == [7, 9, 10]


def test_probe_text_and_target() -> None:
    assert probe_text((1, 22, 333, 4, 5)) == "Sequence: 1, 22, 333, 4, 5. Guess the object:"
    assert probe_target("Teapot ") == " teapot"
