"""Kill rules: when a running job is stopped for its own good, read in one place.

They come from the user's config (`rules: kill_rules:`) and from the job's gpu.yaml
(`kill_rules:`); the job's list only adds to the user's (every rule added is stricter, none can
be taken away). Each rule is a one-key mapping:

    kill_rules:
      - nan_metric: true                   # any metric that becomes NaN or infinite
      - nan_metric: [loss, val/loss]       # only these
      - no_improvement: {metric: val/loss, minutes: 30, mode: min}
      - gpu_util_below: {percent: 10, minutes: 15}
      - over_budget: true                  # spend past budget.per_job while it runs
      - over_budget: {dollars: 2.5}        # or a lower limit of the job's own

`gpu_util_below` reads the metric `gpu/util` (percent, 0 to 100). The launcher writes it on
every target (core/runtime/gpuutil.py: `nvidia-smi` once per GPU_ROUTER_UTIL_INTERVAL_S, default
30 s, the mean over the job's GPUs by CUDA_VISIBLE_DEVICES), unless the job logs `gpu/util`
itself, whose figure then wins. Where there is no working nvidia-smi there is no figure and the
rule cannot fire: the job log says why sampling stopped, and the supervisor notes once in the
job's events that the rule has had no figure for its window. It never fires on fewer samples
than its window holds.

This module reads them (`parse` raises ValueError with the problem; the callers add where)
and says what they are; core/planning/killjudge.py judges a running job by them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from core.runtime.redact import metric_key_ok

KINDS = ("nan_metric", "no_improvement", "gpu_util_below", "over_budget")
UTIL_METRIC = "gpu/util"
MAX_RULES = 20
MAX_MINUTES = 7 * 24 * 60


@dataclass(frozen=True)
class Rule:
    kind: str
    metrics: tuple[str, ...] = ()  # nan_metric: empty means any
    metric: str = ""
    minutes: float = 0.0
    mode: str = "min"
    percent: float = 0.0
    dollars: float | None = None

    def text(self) -> str:
        if self.kind == "nan_metric":
            return "nan_metric" + (f" ({', '.join(self.metrics)})" if self.metrics else "")
        if self.kind == "no_improvement":
            return f"no_improvement ({self.metric}, {self.mode}, {self.minutes:g} min)"
        if self.kind == "gpu_util_below":
            return f"gpu_util_below ({self.percent:g}% for {self.minutes:g} min)"
        return "over_budget" + (f" (${self.dollars:g})" if self.dollars is not None else "")


def _minutes(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or not 0 < v <= MAX_MINUTES:
        raise ValueError(f"{what} must be a number of minutes above 0, at most {MAX_MINUTES}")
    return float(v)


def _metric(v: Any, what: str) -> str:
    if not isinstance(v, str) or not metric_key_ok(v):
        raise ValueError(f"{what} must be a metric name like loss or val/acc")
    return v


def parse_one(item: Any) -> Rule:
    if not isinstance(item, dict) or len(item) != 1:
        raise ValueError("each kill rule is a one-key mapping, e.g. {nan_metric: true}")
    kind, body = next(iter(item.items()))
    if kind not in KINDS:
        raise ValueError(f"unknown kill rule {str(kind)[:40]!r}: rules are {', '.join(KINDS)}")
    if kind == "nan_metric":
        if body is True:
            return Rule(kind)
        if isinstance(body, str):
            body = [body]
        if not isinstance(body, list) or not body:
            raise ValueError("nan_metric is true (any metric) or a list of metric names")
        return Rule(kind, metrics=tuple(_metric(m, "nan_metric") for m in body))
    if kind == "over_budget":
        if body is True:
            return Rule(kind)
        if isinstance(body, dict) and set(body) == {"dollars"}:
            d = body["dollars"]
            if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or d <= 0:
                raise ValueError("over_budget.dollars must be a number above 0")
            return Rule(kind, dollars=float(d))
        raise ValueError("over_budget is true (budget.per_job) or {dollars: N}")
    if not isinstance(body, dict):
        raise ValueError(f"{kind} takes a mapping, e.g. "
                         + ("{metric: loss, minutes: 30, mode: min}" if kind == "no_improvement"
                            else "{percent: 10, minutes: 15}"))
    if kind == "no_improvement":
        if set(body) - {"metric", "minutes", "mode"} or not {"metric", "minutes"} <= set(body):
            raise ValueError("no_improvement takes metric, minutes and mode (min or max)")
        mode = body.get("mode", "min")
        if mode not in ("min", "max"):
            raise ValueError("no_improvement.mode is min (lower is better) or max")
        return Rule(kind, metric=_metric(body["metric"], "no_improvement.metric"),
                    minutes=_minutes(body["minutes"], "no_improvement.minutes"), mode=mode)
    if set(body) != {"percent", "minutes"}:
        raise ValueError("gpu_util_below takes percent and minutes")
    p = body["percent"]
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 100:
        raise ValueError("gpu_util_below.percent must be a number above 0, at most 100")
    return Rule(kind, percent=float(p), minutes=_minutes(body["minutes"], "gpu_util_below.minutes"))


def parse(value: Any) -> list[Rule]:
    if value is None:
        return []
    if isinstance(value, dict):
        value = [{k: v} for k, v in value.items()]
    if not isinstance(value, list):
        raise ValueError("kill_rules is a list of rules, e.g. [{nan_metric: true}]")
    if len(value) > MAX_RULES:
        raise ValueError(f"at most {MAX_RULES} kill rules")
    return [parse_one(item) for item in value]


def to_json(rules: Iterable[Rule]) -> list[dict]:
    out = []
    for r in rules:
        if r.kind == "nan_metric":
            out.append({r.kind: list(r.metrics) if r.metrics else True})
        elif r.kind == "over_budget":
            out.append({r.kind: {"dollars": r.dollars} if r.dollars is not None else True})
        elif r.kind == "no_improvement":
            out.append({r.kind: {"metric": r.metric, "minutes": r.minutes, "mode": r.mode}})
        else:
            out.append({r.kind: {"percent": r.percent, "minutes": r.minutes}})
    return out


def combined(user: Iterable[Rule], job: Iterable[Rule]) -> list[Rule]:
    """The user's rules, then the job's additions (duplicates once)."""
    return list(dict.fromkeys([*user, *job]))
