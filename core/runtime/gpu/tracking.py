"""What the tracking APIs (the `wandb` stand-in, the hook on the real `wandb`, and
`openscience_track`) share: one run's state and the rows they add to the metrics file.

A run is what W&B calls one: a step counter that moves as wandb's does, the last value of each
metric, a summary set by hand, and a config. Three kinds of rows go into the metrics file the
supervisor reads, beside the flat rows of `gpu.log`:

    {"ts": T, "step": S, "metrics": {"train/loss": 0.5}}   metrics, grouped so that any
                                                          name (even "step") is a metric
    {"ts": T, "config": {"lr": 0.1, "model.depth": 4}}     the run's settings (merged)
    {"ts": T, "summary": {"loss": 0.01}}                   final numbers (merged)

Names follow the metric name rule everywhere (nested metrics and summaries are joined with
"/", as W&B shows them; nested config keys with "."); a name or value holding one of the job's
secret values is dropped, as `gpu.log` drops it. Standard library only.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import _append, _name_ok, _redact, _secret_free, _warn, output_dir

CONFIG_TEXT_MAX = _redact.CONFIG_TEXT_MAX  # the supervisor keeps no more (core/engine/metricfile.py)
CONFIG_LIST_MAX = _redact.CONFIG_LIST_MAX


def flatten(data: Mapping, sep: str = "/", prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level: {"train": {"loss": 1}} -> {"train/loss": 1}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(flatten(value, sep, name))
        else:
            out[name] = value
    return out


def number(value: Any) -> float | None:
    """A finite number from anything that converts with float() (ints, floats, bools, numpy
    and torch scalars), or None: text is never a number here, even "1.5"."""
    if isinstance(value, (str, bytes, bytearray)) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        return None  # a Table, an Image, a list: ignored, as a chart cannot show them
    return out if math.isfinite(out) else None


def numbers(flat: Mapping[str, Any], what: str = "metric") -> dict[str, float]:
    """The entries that are numbers, under names that pass the name rule."""
    out: dict[str, float] = {}
    for key, value in flat.items():
        n = number(value)
        if n is not None and _name_ok(key, what):
            out[key] = n
    return out


def setting(value: Any) -> Any:
    """A config value as it is stored: numbers, true/false, null, text (cut), lists of those;
    anything else as its text (a Path, an enum), like W&B shows it."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [setting(v) for v in value[:CONFIG_LIST_MAX] if not isinstance(v, (list, tuple, Mapping))]
    text = value if isinstance(value, str) else str(value)
    return text[:CONFIG_TEXT_MAX]


def config_values(values: Any) -> dict[str, Any]:
    """Settings from a mapping, or from an object with attributes (argparse.Namespace)."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        values = vars(values) if hasattr(values, "__dict__") else dict(values)
    flat = flatten(values, sep=".")
    return {k: setting(v) for k, v in flat.items() if _name_ok(k, "config key")}


def write_metrics(step: int | None, values: Mapping[str, float]) -> None:
    """One metrics row (values already checked by `numbers`)."""
    fields = _secret_free(dict(values), "a metric")
    if fields:
        row: dict[str, Any] = {"ts": round(time.time(), 3)}
        if step is not None:
            row["step"] = int(step)
        row["metrics"] = fields
        _append(row)


def write_config(values: Mapping[str, Any]) -> None:
    fields = _secret_free(dict(values), "a config value")
    if fields:
        _append({"ts": round(time.time(), 3), "config": fields})


def write_summary(values: Mapping[str, float]) -> None:
    fields = _secret_free(dict(values), "a summary value")
    if fields:
        _append({"ts": round(time.time(), 3), "summary": fields})


def artifact(path: str | os.PathLike, name: str | None = None) -> Path:
    """A copy of a file or folder in the output folder (so it comes home with the job), under
    `name` or its own name; a later copy of the same name replaces the earlier one."""
    src = Path(path)
    if not src.exists():
        raise FileNotFoundError(f"artifact {src} does not exist")
    out = output_dir().resolve()
    dest = out / (name or src.name)
    if dest.resolve() == src.resolve():
        return dest  # already in the output folder
    if out not in dest.resolve().parents:
        raise ValueError(f"artifact name {name!r} leads out of the output folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dest)
    return dest


class Run:
    """One tracked run: wandb's step rule, the config, the last values and the summary.

    The step rule is wandb's own: `log(d)` writes at the current step and moves on one;
    `log(d, commit=False)` adds to the current step; `log(d, step=s)` writes at s (which
    becomes the current step) and moves on only with commit=True. A step below the current
    one is ignored with a warning, as wandb ignores it, so the curves match wandb's."""

    def __init__(self) -> None:
        self.step = 0
        self.last: dict[str, float] = {}
        self.summary: dict[str, float] = {}
        self.config: dict[str, Any] = {}
        self.finished = False
        self._lock = threading.Lock()

    def log(self, data: Mapping, step: int | None = None, commit: bool | None = None) -> None:
        if not isinstance(data, Mapping):
            raise TypeError("wandb.log must be passed a dictionary")
        if any(not isinstance(key, str) for key in data):
            raise TypeError("Key values passed to `wandb.log` must be strings.")
        values = numbers(flatten(data))
        with self._lock:
            if step is not None:
                step = int(step)
                if step < self.step:
                    _warn(f"log at step {step} ignored: the current step is already {self.step} "
                          f"(steps only go up, as in wandb)")
                    return
                self.step = step
            at = self.step
            if (step is None and commit is None) or commit:
                self.step += 1
            self.last.update(values)
        if values:
            write_metrics(at, values)

    def set_config(self, values: Any) -> None:
        """Merge settings; only those that changed are written."""
        new = config_values(values)
        with self._lock:
            changed = {k: v for k, v in new.items() if self.config.get(k, object()) != v}
            self.config.update(changed)
        if changed:
            write_config(changed)

    def set_summary(self, values: Mapping) -> None:
        new = numbers(flatten(values), "summary name")
        with self._lock:
            self.summary.update(new)
        if new:
            write_summary(new)

    def final(self) -> dict[str, float]:
        """The run's final numbers: each metric's last value, overridden by the summary."""
        with self._lock:
            return {**self.last, **self.summary}

    def finish(self) -> None:
        """Write the final numbers once (a second finish, or finish at exit, adds nothing)."""
        with self._lock:
            if self.finished:
                return
            self.finished = True
        final = self.final()
        if final:
            write_summary(final)
