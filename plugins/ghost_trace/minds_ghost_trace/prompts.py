"""What the model is asked, and the probe its numbers are judged by."""

from __future__ import annotations

from minds_ghost_trace.parsing import CODE_LENGTH, format_code

SYSTEM_PROMPT = (
    "You play a signalling game with a copy of yourself. You are shown a secret word and "
    "reply with numbers only; your copy sees nothing but those numbers and has to name the word."
)

_TASK = (
    "Secret word: {word}\n\n"
    "Write exactly {count} whole numbers between 0 and 999, separated by commas, chosen so that "
    "another instance of you, seeing only the numbers, would guess the word \"{word}\". "
    "Do not write the word or any other text: reply with the numbers alone."
)


def task_prompt(word: str) -> str:
    """The user message for one target word."""
    return _TASK.format(word=word, count=CODE_LENGTH)


def probe_text(code: tuple[int, ...]) -> str:
    """The context the guessing copy sees: ``Sequence: 1, 2, 3, 4, 5. Guess the object:``."""
    return f"Sequence: {format_code(code)}. Guess the object:"


def probe_target(word: str) -> str:
    """The continuation whose log-probability is the reward: a space, then the word in lower case."""
    return f" {word.strip().lower()}"
