"""The arithmetic of the rewards: closeness scores, rank correlation, KL and entropy."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def closeness(true: float, predicted: float) -> float:
    """``1 / (1 + (true - predicted)^2)``: 1 for an exact prediction, towards 0 as it drifts."""
    return 1.0 / (1.0 + (true - predicted) ** 2)


def linear_closeness(true: float, predicted: float) -> float:
    """``max(0, 1 - |true - predicted|)``: 1 for an exact prediction, 0 once off by 1 or more."""
    return max(0.0, 1.0 - abs(true - predicted))


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks in ascending order; tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (ties averaged); 0 when either side has no spread."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman needs equal lengths, got {len(xs)} and {len(ys)}")
    if len(xs) < 2:
        return 0.0
    rx, ry = average_ranks(xs), average_ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    if vx == 0 or vy == 0:
        return 0.0
    return cov / math.sqrt(vx * vy)


def ranking_positions(order: Sequence[float | None], count: int) -> list[float]:
    """Position (1 = first) of each of ``count`` items in a predicted order of 1-based indices.

    Entries that are not whole numbers in 1..count, and repeats, are ignored;
    items the order leaves out share the last place.
    """
    positions: dict[int, float] = {}
    for entry in order:
        if entry is None or entry != int(entry) or not 1 <= entry <= count:
            continue
        positions.setdefault(int(entry) - 1, float(len(positions) + 1))
    shared = (len(positions) + 1 + count) / 2
    return [positions.get(i, shared) for i in range(count)]


def kl_from_topk(post: Mapping[int, float], prior: Mapping[int, float]) -> float:
    """KL(post || prior) in nats over post's top-k tokens plus one bucket for all other tokens.

    ``post`` holds the top-k log-probabilities of the post-lesson distribution;
    ``prior`` must hold the prior log-probability of each of those tokens.
    Lumping the rest into one bucket can only lower the KL (it never overstates it).
    """
    missing = [t for t in post if t not in prior]
    if missing:
        raise ValueError(f"prior log-probabilities are missing for tokens {missing[:5]}")
    post_mass = sum(math.exp(lp) for lp in post.values())
    prior_mass = sum(math.exp(prior[t]) for t in post)
    kl = sum(math.exp(lp) * (lp - prior[t]) for t, lp in post.items())
    rest_post = max(0.0, 1.0 - post_mass)
    rest_prior = max(0.0, 1.0 - prior_mass)
    if rest_post > 0:
        kl += rest_post * (math.log(rest_post) - math.log(max(rest_prior, 1e-12)))
    return max(0.0, kl)


def normalized_entropy(probabilities: Sequence[float]) -> float:
    """Shannon entropy of the allowed outcomes plus a leftover bucket, over log(K), in [0, 1].

    ``probabilities`` are the policy's probabilities of the K allowed outcomes;
    the mass they leave (1 - sum) is one extra outcome. With K = 1 the scale is
    log(2) (the one outcome against everything else).
    """
    if not probabilities:
        raise ValueError("normalized_entropy needs at least one probability")
    leftover = max(0.0, 1.0 - sum(probabilities))
    entropy = -sum(p * math.log(p) for p in (*probabilities, leftover) if p > 0)
    return min(1.0, max(0.0, entropy / math.log(max(len(probabilities), 2))))


def in_context_score(truths: Sequence[float | None], predicted: Sequence[float | None] | None) -> float:
    """Mean closeness over the measured probes (truth not None), pairing probe i with prediction i.

    A missing or non-numeric prediction counts as 0. Raises when no probe was measured.
    """
    guesses = list(predicted or [])
    pairs = [(t, (guesses[i] if i < len(guesses) else None) or 0.0) for i, t in enumerate(truths) if t is not None]
    if not pairs:
        raise ValueError("no measured probe to score")
    return sum(closeness(t, g) for t, g in pairs) / len(pairs)


def surprise_score(order: Sequence[float | None], kls: Sequence[float | None]) -> float:
    """Spearman correlation between the predicted order (most surprising first) and the measured KLs.

    Probes whose KL is None (not measured) are left out; the others keep their indices.
    """
    positions = ranking_positions(order, len(kls))
    pairs = [(positions[i], kl) for i, kl in enumerate(kls) if kl is not None]
    return spearman([-position for position, _ in pairs], [kl for _, kl in pairs])
