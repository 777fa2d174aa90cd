"""Estimators for evaluations: a task-clustered confidence interval and unbiased pass@k.

Samples of one task are correlated, so the interval treats the *task* as the
unit: the mean of per-task means, with a Student-t interval on their spread
(with a single task, its samples are the unit). pass@k is the unbiased
estimator of Chen et al. (2021): with ``n`` samples of a task of which ``c``
pass, ``1 - C(n-c, k) / C(n, k)``, averaged over tasks.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

#: Two-sided 95% Student-t quantiles (0.975) for 1..30 degrees of freedom.
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
_Z975 = 1.959964


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (Cornish-Fisher beyond 30)."""
    if df < 1:
        raise ValueError("degrees of freedom must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_interval(per_task: Sequence[Sequence[float]]) -> dict[str, float | None]:
    """Mean reward with its standard error and 95% interval, tasks as the unit.

    ``per_task`` holds each task's rewards; tasks without any are left out.
    With one task its samples are the unit; with a single value the interval
    is unknown (None).
    """
    tasks = [list(values) for values in per_task if values]
    if not tasks:
        return {"mean": None, "sem": None, "ci95_low": None, "ci95_high": None}
    units = [statistics.fmean(values) for values in tasks] if len(tasks) > 1 else tasks[0]
    mean = statistics.fmean(units)
    if len(units) < 2:
        return {"mean": mean, "sem": None, "ci95_low": None, "ci95_high": None}
    sem = statistics.stdev(units) / math.sqrt(len(units))
    half = t_quantile_975(len(units) - 1) * sem
    return {"mean": mean, "sem": sem, "ci95_low": mean - half, "ci95_high": mean + half}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that at least one of ``k`` draws (of ``n`` samples, ``c`` passing) passes."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def is_binary(values: Sequence[float]) -> bool:
    """Whether every reward is exactly 0 or 1 (then pass@k is meaningful)."""
    return bool(values) and all(v in (0.0, 1.0) for v in values)


def pass_at_ks(per_task: Sequence[Sequence[float]]) -> dict[int, float]:
    """pass@k for k = 1, 2, 4, ... and the smallest task's sample count; {} unless rewards are binary."""
    tasks = [list(values) for values in per_task if values]
    if not tasks or not is_binary([v for values in tasks for v in values]):
        return {}
    n_min = min(len(values) for values in tasks)
    ks = sorted({*(2**i for i in range(n_min.bit_length()) if 2**i <= n_min), n_min})
    return {
        k: statistics.fmean(pass_at_k(len(values), int(sum(values)), k) for values in tasks) for k in ks
    }
