"""Learning-rate schedules (``trainer.lr_schedule``): linear warmup, then constant, linear or cosine decay.

With base rate ``lr``, ``W = trainer.lr_warmup_steps``, ``S = trainer.steps``
and ``m = trainer.lr_min_ratio``, the rate of step ``k`` (0-based) is

- warmup, ``k < W``: ``lr * (k + 1) / W``
- after it, with progress ``x = (k - W) / (S - W)`` in ``[0, 1)``:

  - constant: ``lr``
  - linear: ``lr * (1 - (1 - m) * x)``
  - cosine: ``lr * (m + (1 - m) * (1 + cos(pi * x)) / 2)``

so the decay starts at ``lr`` on the first step after warmup and would reach
``m * lr`` one step after the last.
"""

from __future__ import annotations

import math

from minds_core.config.choices import LR_SCHEDULES


def learning_rate(step: int, steps: int, base: float, schedule: str, warmup_steps: int = 0, min_ratio: float = 0.0) -> float:
    """The learning rate of ``step`` (0-based) of a run of ``steps`` steps."""
    if step < warmup_steps:
        return base * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    if schedule == "constant":
        return base
    if schedule == "linear":
        return base * (1.0 - (1.0 - min_ratio) * progress)
    if schedule == "cosine":
        return base * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))
    raise ValueError(f"unknown learning-rate schedule {schedule!r}; expected one of {', '.join(LR_SCHEDULES)}")
