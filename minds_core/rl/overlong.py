"""Length control (DAPO, Yu et al. 2025): overlong filtering and the soft overlong penalty.

- ``trainer.overlong_filter``: a truncated rollout (its last reply stopped at
  the token limit, or the conversation ran out of ``max_total_tokens`` /
  ``max_turns``) gets no gradient. It still counts in its group's baseline, and
  is left out of the loss aggregation's token and sequence counts.
- ``trainer.overlong_penalty_window``: with ``L_max = sampling.max_tokens`` and
  a window of ``L_cache = round(window * L_max)`` tokens, a rollout of ``L``
  sampled tokens gets this added to its reward before advantages::

      0                              if L <= L_max - L_cache
      ((L_max - L_cache) - L) / L_cache   if L_max - L_cache < L <= L_max
      -1                             if L > L_max

  (DAPO's eq. 13; DAPO uses 4096 of 20480 tokens, ``window = 0.2``). ``L``
  counts every sampled token of the rollout, all turns together.
"""

from __future__ import annotations

from typing import Any


def overlong_penalty(length: int, max_length: int, window_tokens: int) -> float:
    """DAPO's soft overlong punishment of a reply of ``length`` tokens; 0 when the window is 0."""
    if window_tokens <= 0:
        return 0.0
    start = max_length - window_tokens
    if length <= start:
        return 0.0
    if length <= max_length:
        return (start - length) / window_tokens
    return -1.0


def window_tokens(window: float, max_tokens: int) -> int:
    """The penalty window in tokens: a share of the generation budget."""
    return round(window * max_tokens)


def is_truncated(conversation: Any) -> bool:
    """Whether the rollout ended cut off: its last reply hit the token limit, or the conversation hit its budget."""
    return bool(conversation.truncated or not conversation.last_stopped)
