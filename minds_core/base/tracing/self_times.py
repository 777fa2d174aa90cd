"""The own time of the spans inside episodes, by part: what splits a step's rollout time (``phase/*``)."""

from __future__ import annotations

from minds_core.base.tracing.spans import Span, Tracer


def category(name: str) -> str:
    """Which part of an episode's time a span's own time counts to: ``sampling``, ``environment``, ``reward`` or ``waiting``."""
    if name == "sample" or name.startswith("sample."):
        return "sampling"
    if name.endswith(" reward") or name == "judge":
        return "reward"
    if name.startswith("env.") or name == "tool":
        return "environment"
    return "waiting"


class SelfTimes:
    """Sums the *own* time of the spans inside episodes (a span's time less its children's) by ``category``;
    ``take()`` returns the sums so far and starts over. The RL loop splits its rollout phase with them."""

    def __init__(self) -> None:
        self._children: dict[int, int] = {}
        self._inside: set[int] = set()  #: open spans that are episodes or inside one
        self._sums: dict[str, float] = {}

    def opened(self, span: Span, tracer: Tracer) -> None:
        if span.name == "episode" or span.parent in self._inside:
            self._inside.add(span.id)

    def closed(self, span: Span, end_ns: int, tracer: Tracer) -> None:
        total = end_ns - span.start_ns
        own = total - self._children.pop(span.id, 0)
        if span.parent is not None and span.parent in self._inside:
            self._children[span.parent] = self._children.get(span.parent, 0) + total
        if span.id in self._inside:
            self._inside.discard(span.id)
            kind = category(span.name)
            self._sums[kind] = self._sums.get(kind, 0.0) + max(own, 0) / 1e9

    def counted(self, name: str, values: dict[str, float], at_ns: int, tracer: Tracer) -> None:
        """Counters are not timed work."""

    def close(self) -> None:
        """Nothing held."""

    def take(self) -> dict[str, float]:
        sums, self._sums = self._sums, {}
        return sums

    def suspend(self) -> None:
        """Nothing held open."""
