"""The metrics file a job writes (`metrics.jsonl`), read under the rules for what is stored.

Each line is one JSON object. `gpu.log` writes flat rows, `{"ts", "step", NAME: NUMBER...}`;
the tracking APIs (`openscience_track`, the `wandb` stand-in and the hook on the real wandb,
see core/runtime/gpu/tracking.py) also group metrics under "metrics" and write the run's
settings under "config" and its final numbers under "summary". The launcher's GPU sampler
(core/runtime/gpuutil.py) writes flat rows without a step: `{"ts", "gpu/util", "gpu/mem_gb"}`.

The job can write this file without any of them, so every rule holds here again: names are
`metric_key_ok` (no pasted value, no terminal codes), metric and summary values are finite
numbers (text is never stored as a number), config values are numbers, true/false, null, text
cut to CONFIG_TEXT_MAX characters, or short lists of those.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from core.runtime.redact import CONFIG_LIST_MAX, CONFIG_TEXT_MAX, metric_key_ok


@dataclass
class Parsed:
    rows: list[tuple[int | None, str, float, float]] = field(default_factory=list)  # step, key, value, ts
    last: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # merged, later rows win
    final: dict[str, float] = field(default_factory=dict)  # merged summary rows
    nonfinite: dict[str, float] = field(default_factory=dict)  # metric -> ts it was NaN/inf


def number(value: Any) -> float | None:
    """A finite number from JSON, or None (text, booleans, nan, and overflowing integers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def _is_nonfinite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, str) and value.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity")


def setting(value: Any) -> tuple[bool, Any]:
    """(kept, value) for one config value under the stored-value rule."""
    if value is None or isinstance(value, bool):
        return True, value
    if isinstance(value, (int, float)):
        n = number(value)
        return n is not None, (value if isinstance(value, int) and n is not None else n)
    if isinstance(value, str):
        return True, value[:CONFIG_TEXT_MAX]
    if isinstance(value, list):
        items = [setting(v) for v in value[:CONFIG_LIST_MAX] if not isinstance(v, (list, dict))]
        return True, [v for ok, v in items if ok]
    return False, None


def parse_rows(data: bytes) -> Parsed:
    out = Parsed()
    for line in data.splitlines():
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):  # a line nested past the parser's depth is no row
            continue
        if not isinstance(doc, dict):
            continue
        step = number(doc.pop("step", None))
        step = int(step) if step is not None and abs(step) < 2 ** 63 else None
        ts = number(doc.pop("ts", None))
        ts = time.time() if ts is None else ts
        bad = doc.pop("nonfinite", None)
        if isinstance(bad, dict):
            out.nonfinite.update({k: ts for k in bad if isinstance(k, str) and metric_key_ok(k)})
        for name, kind in (("config", "config"), ("summary", "summary"), ("metrics", "metrics")):
            part = doc.get(name)
            if not isinstance(part, dict):
                continue
            del doc[name]
            if kind == "config":
                for key, value in part.items():
                    kept, value = setting(value)
                    if kept and metric_key_ok(key):
                        out.config[key] = value
            elif kind == "summary":
                out.final.update({k: n for k, v in part.items()
                                  if metric_key_ok(k) and (n := number(v)) is not None})
            else:
                doc.update(part)  # grouped metrics are metrics like the flat ones
        for key, value in doc.items():
            n = number(value)
            if n is None and _is_nonfinite(value) and metric_key_ok(key):
                out.nonfinite[key] = ts  # NaN written by a script's own json.dumps, or as text
            if n is None or not metric_key_ok(key):
                continue
            out.rows.append((step, key, n, ts))
            out.last[key] = value
    if out.last and out.rows:
        out.last = {**out.last, "_step": out.rows[-1][0]}
    return out


MAX_KEYS = 512  # distinct metric names kept per job; config settings likewise


def cap_keys(parsed: Parsed, known: set[str], limit: int = MAX_KEYS) -> int:
    """Keep rows of at most `limit` distinct names in all (`known` ones first, then new ones
    in the order they came): a job writing a new name each step must not grow the store and
    every report without end. Returns how many rows were dropped."""
    allowed = set(known)
    kept = []
    for row in parsed.rows:
        if row[1] not in allowed and len(allowed) < limit:
            allowed.add(row[1])
        if row[1] in allowed:
            kept.append(row)
    dropped = len(parsed.rows) - len(kept)
    parsed.rows = kept
    parsed.last = {k: v for k, v in parsed.last.items() if k in allowed or k == "_step"}
    if len(parsed.config) > limit:
        parsed.config = dict(list(parsed.config.items())[:limit])
    if len(parsed.final) > limit:
        parsed.final = dict(list(parsed.final.items())[:limit])
    return dropped


def parse_metrics(data: bytes) -> tuple[list[tuple[int | None, str, float, float]], dict]:
    """Rows (step, key, value, ts) and the last values: the metrics alone."""
    parsed = parse_rows(data)
    return parsed.rows, parsed.last
