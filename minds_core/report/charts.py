"""Line charts as inline SVG: series over training steps, each with an optional min/max band.

Every series is a ``<g class="series">`` whose ``data-key``, ``data-steps``
and ``data-values`` attributes hold exactly the plotted numbers, so a reader
(or a test) can check the picture against metrics.jsonl.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

import attrs

WIDTH, HEIGHT = 560, 230
LEFT, RIGHT, TOP, BOTTOM = 66, 12, 12, 30
#: Colors of series in order; the first is the reward curve's.
PALETTE = ("#1f5fd6", "#d9480f", "#2b8a3e", "#9c36b5", "#e8590c", "#0b7285", "#c2255c", "#5c940d", "#495057")
#: Colors of a stacked chart's parts in order: the palette less its two near-twins of orange and red.
STACKED = tuple(PALETTE[i] for i in (0, 1, 2, 3, 5, 6, 8))
#: Circles with a tooltip per point up to this many points; beyond, the line alone.
MAX_MARKERS = 300


@attrs.frozen
class Series:
    """One curve: ``values[i]`` at ``steps[i]`` (None = missing); ``low``/``high`` bound a shaded band."""

    key: str
    label: str
    steps: Sequence[int]
    values: Sequence[float | None]
    low: Sequence[float | None] | None = None
    high: Sequence[float | None] | None = None


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values inside [low, high], about ``count`` of them."""
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [k * step for k in range(math.ceil(low / step), math.floor(high / step) + 1)]


def _label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.2g}"
    return f"{value:.4g}"


def line_chart(title: str, series: Sequence[Series], y_label: str = "") -> str:
    """An SVG chart of ``series`` against the training step; a note when there is nothing to draw."""
    drawn = [s for s in series if any(_finite(v) for v in s.values)]
    if not drawn:
        return ""
    ys = [v for s in drawn for band in (s.values, s.low or (), s.high or ()) for v in band if _finite(v)]
    xs = [x for s in drawn for x, v in zip(s.steps, s.values) if _finite(v)]
    y_min, y_max = min(ys), max(ys)
    pad = (y_max - y_min) * 0.05 if y_max - y_min >= 1e-12 else abs(y_max) * 0.1 or 1.0
    y_min, y_max = (y_min - pad if y_min < 0 or y_min - pad >= 0 else 0.0), y_max + pad  # counts never go below 0
    x_min, x_max = min(xs), max(xs)
    if x_max == x_min:
        x_min, x_max = x_min - 1, x_max + 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(step: float) -> float:
        return LEFT + (step - x_min) / (x_max - x_min) * plot_w

    def py(value: float) -> float:
        return TOP + (y_max - value) / (y_max - y_min) * plot_h

    parts = [
        (
            f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
            f'role="img" aria-label="{escape(title)}" data-x-min="{x_min}" data-x-max="{x_max}" '
            f'data-y-min="{y_min!r}" data-y-max="{y_max!r}" data-plot="{LEFT} {TOP} {plot_w} {plot_h}">'
        ),
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#ffffff" stroke="#ced4da"/>',
    ]
    for tick in nice_ticks(y_min, y_max):
        y = py(tick)
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.2f}" y2="{y:.2f}" stroke="#f1f3f5"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.2f}" text-anchor="end" class="tick">{_label(tick)}</text>')
    for tick in nice_ticks(x_min, x_max, 6):
        if float(tick).is_integer():
            x = px(tick)
            parts.append(f'<text x="{x:.2f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle" class="tick">{int(tick)}</text>')
    parts.append(f'<text x="{LEFT + plot_w}" y="{HEIGHT - 2}" text-anchor="end" class="axis">step</text>')
    if y_label:
        middle = f"{TOP + plot_h / 2:.0f}"
        parts.append(
            f'<text x="11" y="{middle}" transform="rotate(-90 11 {middle})" text-anchor="middle" class="axis">{escape(y_label)}</text>'
        )
    for index, s in enumerate(drawn):
        parts.append(_series_svg(s, PALETTE[index % len(PALETTE)], px, py))
    parts.append("</svg>")
    legend = "".join(
        f'<span class="key"><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{escape(s.label)}{" (band: min–max)" if s.low else ""}</span>'
        for i, s in enumerate(drawn)
    )
    return f'<figure><figcaption>{escape(title)}</figcaption>{"".join(parts)}<div class="legend">{legend}</div></figure>'


def _series_svg(s: Series, color: str, px: Callable[[float], float], py: Callable[[float], float]) -> str:
    """One series: its band, its line (broken where values are missing), a marker with a tooltip per point."""
    points = [(x, v) for x, v in zip(s.steps, s.values) if _finite(v)]
    out = [
        (
            f'<g class="series" data-key="{escape(s.key)}" data-color="{color}" '
            f'data-steps="{" ".join(str(x) for x, _ in points)}" data-values="{" ".join(repr(float(v)) for _, v in points)}">'
        )
    ]
    if s.low is not None and s.high is not None:
        band = [(x, lo, hi) for x, lo, hi in zip(s.steps, s.low, s.high) if _finite(lo) and _finite(hi)]
        if len(band) > 1:
            upper = " ".join(f"{px(x):.2f},{py(hi):.2f}" for x, _, hi in band)
            lower = " ".join(f"{px(x):.2f},{py(lo):.2f}" for x, lo, _ in reversed(band))
            out.append(f'<polygon class="band" points="{upper} {lower}" fill="{color}" fill-opacity="0.15" stroke="none"/>')
    for segment in _segments(s.steps, s.values):
        if len(segment) > 1:
            coords = " ".join(f"{px(x):.2f},{py(v):.2f}" for x, v in segment)
            out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
    if len(points) <= MAX_MARKERS:
        for x, v in points:
            out.append(
                f'<circle cx="{px(x):.2f}" cy="{py(v):.2f}" r="{3 if len(points) < 60 else 2}" fill="{color}">'
                f"<title>step {x}: {escape(s.label)} = {v:.6g}</title></circle>"
            )
    out.append("</g>")
    return "".join(out)


def _segments(steps: Sequence[int], values: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    """Runs of consecutive finite values: a missing value breaks the line."""
    segments: list[list[tuple[int, float]]] = [[]]
    for x, v in zip(steps, values):
        if _finite(v):
            segments[-1].append((x, v))
        elif segments[-1]:
            segments.append([])
    return [s for s in segments if s]


def stacked_chart(title: str, series: Sequence[Series], y_label: str = "") -> str:
    """An SVG chart of one bar per step, ``series`` stacked in order (missing values count 0); as ``line_chart``,
    each series is a ``<g class="series">`` holding its plotted numbers, and each bar piece has a tooltip."""
    drawn = [s for s in series if any(_finite(v) for v in s.values)]
    if not drawn:
        return ""
    steps = sorted({x for s in drawn for x in s.steps})
    by_step = [{x: float(v) for x, v in zip(s.steps, s.values) if _finite(v)} for s in drawn]
    totals = [sum(values.get(x, 0.0) for values in by_step) for x in steps]
    y_max = max(totals) * 1.05 or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / len(steps)
    bar = max(slot * 0.8, 1.0)

    def py(value: float) -> float:
        return TOP + (y_max - value) / y_max * plot_h

    parts = [
        (
            f'<svg class="chart stacked" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
            f'height="{HEIGHT}" role="img" aria-label="{escape(title)}" data-y-max="{y_max!r}" data-plot="{LEFT} {TOP} {plot_w} {plot_h}">'
        ),
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#ffffff" stroke="#ced4da"/>',
    ]
    for tick in nice_ticks(0.0, y_max):
        parts.append(f'<text x="{LEFT - 6}" y="{py(tick) + 4:.2f}" text-anchor="end" class="tick">{_label(tick)}</text>')
    for index in range(0, len(steps), max(1, len(steps) // 6)):
        x = LEFT + slot * (index + 0.5)
        parts.append(f'<text x="{x:.2f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle" class="tick">{steps[index]}</text>')
    parts.append(f'<text x="{LEFT + plot_w}" y="{HEIGHT - 2}" text-anchor="end" class="axis">step</text>')
    if y_label:
        middle = f"{TOP + plot_h / 2:.0f}"
        parts.append(f'<text x="11" y="{middle}" transform="rotate(-90 11 {middle})" text-anchor="middle" class="axis">{escape(y_label)}</text>')
    below = [0.0] * len(steps)
    for index, (s, values) in enumerate(zip(drawn, by_step)):
        color = STACKED[index % len(STACKED)]
        points = [(x, values[x]) for x in steps if x in values]
        out = [
            f'<g class="series" data-key="{escape(s.key)}" data-color="{color}" '
            f'data-steps="{" ".join(str(x) for x, _ in points)}" data-values="{" ".join(repr(v) for _, v in points)}">'
        ]
        for column, x in enumerate(steps):
            value = values.get(x, 0.0)
            if value > 0:
                top = py(below[column] + value)
                out.append(
                    f'<rect x="{LEFT + slot * column + (slot - bar) / 2:.2f}" y="{top:.2f}" width="{bar:.2f}" '
                    f'height="{py(below[column]) - top:.2f}" fill="{color}"><title>step {x}: {escape(s.label)} = {value:.4g}</title></rect>'
                )
            below[column] += value
        out.append("</g>")
        parts.append("".join(out))
    parts.append("</svg>")
    legend = "".join(f'<span class="key"><i style="background:{STACKED[i % len(STACKED)]}"></i>{escape(s.label)}</span>' for i, s in enumerate(drawn))
    return f'<figure><figcaption>{escape(title)}</figcaption>{"".join(parts)}<div class="legend">{legend}</div></figure>'
