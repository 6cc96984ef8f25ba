"""Kill rules judged: which rule, if any, stops a running job now, and why.

The rules are read with the config (core/config/killrules.py); here `evaluate` is pure: the
supervisor hands it what it knows of the job (`Facts`) and gets the first rule that fires, as
text. `gpu_util_below` never fires on fewer samples than its window holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from core.config.killrules import UTIL_METRIC, Rule


@dataclass
class Facts:
    """What the supervisor knows of a running job when it asks."""

    now: float
    started_at: float | None = None  # when this attempt began running
    nonfinite: dict[str, float] = field(default_factory=dict)  # metric -> when it was seen
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # name -> [(ts, value)]
    spent: float = 0.0  # dollars so far
    budget_per_job: float | None = None


def _nan(rule: Rule, facts: Facts) -> str | None:
    hit = sorted(k for k in facts.nonfinite if not rule.metrics or k in rule.metrics)
    return f"metric {hit[0]} became NaN or infinite" if hit else None


def _no_improvement(rule: Rule, facts: Facts) -> str | None:
    points = facts.series.get(rule.metric) or []
    if not points:
        return None
    best, best_at = None, None
    for ts, value in points:
        if best is None or (value < best if rule.mode == "min" else value > best):
            best, best_at = value, ts
    if best_at is not None and facts.now - best_at > rule.minutes * 60:
        return (f"{rule.metric} has not improved for {rule.minutes:g} min "
                f"(best {best:.6g}, {'lowest' if rule.mode == 'min' else 'highest'})")
    return None


def _util(rule: Rule, facts: Facts) -> str | None:
    points = facts.series.get(UTIL_METRIC) or []
    window = rule.minutes * 60
    if not points or points[0][0] > facts.now - window:
        return None  # no samples, or none as old as the window: never a false alarm
    recent = [v for ts, v in points if ts >= facts.now - window]
    if recent and max(recent) < rule.percent:
        return f"GPU utilisation stayed below {rule.percent:g}% for {rule.minutes:g} min"
    return None


def _budget(rule: Rule, facts: Facts) -> str | None:
    limits = [x for x in (rule.dollars, facts.budget_per_job) if x is not None]
    if not limits:
        return None
    limit = min(limits)
    if facts.spent > limit:
        return f"it spent ${facts.spent:.2f}, past its ${limit:.2f} budget"
    return None


CHECKS = {"nan_metric": _nan, "no_improvement": _no_improvement, "gpu_util_below": _util,
          "over_budget": _budget}


def evaluate(rules: Iterable[Rule], facts: Facts) -> tuple[Rule, str] | None:
    """The first rule that fires and why, or None."""
    for rule in rules:
        why = CHECKS[rule.kind](rule, facts)
        if why:
            return rule, why
    return None


def needs_series(rules: Iterable[Rule]) -> set[str]:
    """The metrics whose history the rules read."""
    out = set()
    for r in rules:
        if r.kind == "no_improvement":
            out.add(r.metric)
        elif r.kind == "gpu_util_below":
            out.add(UTIL_METRIC)
    return out
