"""Honest chart labels: a chart's y axis names the range its curve spans, and its title the
last value.

plotext picks round y ticks inside the data's range and leaves the ends unlabelled: a loss that
fell from 3.83 and now sits at 0.0026 was drawn under the labels 3.83 / 2.56 / 0.64, so the
value a person looks for (where it is now) had no label near it. Here the ticks are the
curve's own minimum and maximum with evenly spaced ones between, printed with as many digits
as it takes to tell them apart, and the title says the last value and the span.
"""

from __future__ import annotations

import math
from typing import Callable

MIN_DIGITS, MAX_DIGITS = 3, 15  # significant digits of a label: the fewest that tell values apart
LAST_DIGITS = 4  # the last value's, as the job table's LAST column (widgets.last_metric_text)


def number(value: float, digits: int = MIN_DIGITS) -> str:
    """A value as a person reads it on a small chart: `0.0026`, `2.65`, `7.5e-06`."""
    if math.isnan(value):
        return "nan"
    text = f"{value:.{digits}g}"
    return "0" if text in ("-0", "0") else text


def distinct_labels(values: list[float]) -> list[str]:
    """`values` printed with the fewest significant digits (at least MIN_DIGITS) that give
    different values different labels, so two ticks never read the same."""
    wanted = len(set(values))
    for digits in range(MIN_DIGITS, MAX_DIGITS + 1):
        labels = [number(v, digits) for v in values]
        if len(set(labels)) >= wanted:
            return labels
    return [number(v, MAX_DIGITS) for v in values]


def y_ticks(lo: float, hi: float, rows: int, shown: Callable[[float], float] = lambda v: v
            ) -> tuple[list[float], list[str]]:
    """Tick positions from `lo` to `hi` (both ends labelled: the span of the curve) and their
    labels, about one per two plot rows, at most 5. `shown` maps a position to the value the
    label names (10**y on a log10 chart, whose positions are logarithms)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [], []
    if hi <= lo:
        return [lo], [number(shown(lo))]
    count = max(2, min(5, rows // 2 + 1))
    ticks = [lo + (hi - lo) * i / (count - 1) for i in range(count)]
    ticks[-1] = hi  # exactly, not lo + (hi - lo)
    return ticks, distinct_labels([shown(t) for t in ticks])


def span_text(lo: float, hi: float) -> str:
    """`0.0021-0.0031`; ` to ` between them when a dash would read as a minus sign
    (`-0.5 to 0.3`, `7.5e-06 to 0.0003`)."""
    low, high = distinct_labels([lo, hi]) if hi != lo else (number(lo), number(hi))
    return f"{low} to {high}" if "-" in low + high else f"{low}-{high}"


def chart_title(key: str, values: list[float], log_scale: bool = False) -> str:
    """`loss 0.0026 (0.0021-0.0031)`: the metric, its last value (to 4 significant digits, as
    the job table's LAST column prints it) and the range its curve spans (the y axis's ends).
    On a log10 chart the values are the metric's own, not logarithms."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return f"{key} (no values)"
    last = values[-1]
    lo, hi = min(finite), max(finite)
    prefix = f"log10 {key}" if log_scale else key
    if lo == hi:
        return f"{prefix} {number(last, LAST_DIGITS)} (flat)"
    return f"{prefix} {number(last, LAST_DIGITS)} ({span_text(lo, hi)})"


def x_ticks(first: float, last: float, width: int) -> tuple[list[float], list[str]]:
    """Steps on x: about one tick per 16 columns, at most 5, both ends labelled; whole
    steps print as whole numbers (`200`, not `200.5`)."""
    if not (math.isfinite(first) and math.isfinite(last)) or last <= first:
        return [first], [number(first, MAX_DIGITS)]
    count = max(2, min(5, width // 16 + 1))
    ticks = [first + (last - first) * i / (count - 1) for i in range(count)]
    if last - first >= count - 1:  # whole steps apart: round to them
        ticks = [float(round(t)) for t in ticks]
        return ticks, [str(int(t)) for t in ticks]
    return ticks, distinct_labels(ticks)
