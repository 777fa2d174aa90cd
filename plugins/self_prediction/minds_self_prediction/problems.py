"""Synthetic arithmetic problems: mostly three-digit operands, some huge ones."""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Collection

import attrs

OPERATIONS: dict[str, Callable[[int, int], int]] = {"+": operator.add, "-": operator.sub, "*": operator.mul}

#: Share of problems whose operands are huge (1e7..1e12) instead of 0..999.
HUGE_FRACTION = 0.15
SMALL_RANGE = (0, 999)
HUGE_RANGE = (10**7, 10**12)


@attrs.frozen
class Problem:
    """One question with its exact answer and metadata."""

    a: int
    op: str
    b: int

    @property
    def question(self) -> str:
        return f"What is {self.a} {self.op} {self.b}?"

    @property
    def answer(self) -> int:
        return OPERATIONS[self.op](self.a, self.b)

    @property
    def difficulty(self) -> str:
        """Bucket by the digits of the larger operand: tiny (1), small (2), medium (3), huge (8+)."""
        digits = len(str(max(self.a, self.b)))
        return {1: "tiny", 2: "small", 3: "medium"}.get(digits, "huge")

    @property
    def aliases(self) -> list[str]:
        """Other accepted spellings of the answer: the comma-grouped form of large numbers."""
        grouped = f"{self.answer:,}"
        return [grouped] if grouped != str(self.answer) else []


def random_problem(rng: random.Random) -> Problem:
    """One problem; HUGE_FRACTION of them use huge operands."""
    low, high = HUGE_RANGE if rng.random() < HUGE_FRACTION else SMALL_RANGE
    op = rng.choice(list(OPERATIONS))
    return Problem(rng.randint(low, high), op, rng.randint(low, high))


def make_problems(count: int, rng: random.Random, exclude: Collection[str] = ()) -> list[Problem]:
    """``count`` problems with distinct questions, none of them in ``exclude``."""
    seen = set(exclude)
    problems: list[Problem] = []
    while len(problems) < count:
        problem = random_problem(rng)
        if problem.question not in seen:
            seen.add(problem.question)
            problems.append(problem)
    return problems
