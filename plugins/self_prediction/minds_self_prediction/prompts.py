"""The instructions and the one worked example that teach the reply format."""

from __future__ import annotations

from minds_core import Message

SYSTEM_PROMPT = (
    "Solve the arithmetic question, then say how sure you are. You may reason briefly inside "
    "<think>...</think>. Then write exactly two lines:\n"
    "FINAL ANSWER: <the number>\n"
    "CONFIDENCE: <a probability between 0 and 1 that your answer is exactly right>\n"
    "A confidence is rewarded for being honest: state a low one when the numbers are too large "
    "to work out reliably, and a high one only when you are sure."
)

_EXAMPLE: list[Message] = [
    {"role": "user", "content": "What is 406 - 519?"},
    {
        "role": "assistant",
        "content": "<think>519 - 406 = 113, and the first number is smaller, so -113.</think>\n"
        "FINAL ANSWER: -113\nCONFIDENCE: 0.9",
    },
]


def task_messages(question: str) -> list[Message]:
    """The worked example, then the question."""
    return [*_EXAMPLE, {"role": "user", "content": question}]
