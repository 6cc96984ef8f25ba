"""openscience_track: gpu-router's own small tracking module (standard library only).

    import openscience_track as ost
    ost.init(project="yolo", config={"lr": 0.01, "epochs": 10})
    for step in range(steps):
        ost.log({"loss": loss, "val": {"acc": acc}}, step=step)   # val/acc
    ost.summary(best_acc=best)             # final numbers (else each metric's last value)
    ost.artifact("model.pt")               # a copy in the job's outputs: it comes home
    ost.finish()

In a gpu-router job the values go where `gpu.log` sends them (`gpu metrics`, `gpu status`,
the dashboard), the config into the job's record and the summary into its final numbers.
Outside gpu-router (a plain `python train.py`) it works the same as the `gpu` module does
there: rows in ./outputs/metrics.jsonl, artifacts copied into ./outputs/.

Steps follow wandb's rule (`log` without a step moves on one step; `commit=False` adds to the
current one), names the metric name rule (1 to 64 of A-Z a-z 0-9 _ . / -), values numbers.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpu import tracking as _tracking

__all__ = ["init", "log", "config", "summary", "artifact", "finish", "run"]

_state: dict[str, Any] = {"run": None, "project": None}
_lock = threading.Lock()


def _current() -> _tracking.Run:
    """The run, started on first use: a script may log without calling init."""
    with _lock:
        if _state["run"] is None or _state["run"].finished:
            _state["run"] = _tracking.Run()
        return _state["run"]


def init(project: str | None = None, config: Mapping | Any = None, name: str | None = None,
         **_ignored: Any) -> _tracking.Run:
    """Start a run (finishing the one before, if any) with its settings; `project` and
    `name` are kept for the script (gpu-router's job has its own name)."""
    with _lock:
        previous = _state["run"]
    if previous is not None and not previous.finished:
        previous.finish()
    with _lock:
        _state.update(run=_tracking.Run(), project=project, name=name)
    current = _current()
    if config is not None:
        current.set_config(config)
    return current


def run() -> _tracking.Run:
    """The current run (its step, config, last values and summary)."""
    return _current()


def log(metrics: Mapping[str, Any], step: int | None = None, commit: bool | None = None) -> None:
    """Numbers at a step; nested mappings become "outer/inner" names."""
    _current().log(metrics, step=step, commit=commit)


def config(values: Mapping | Any = None, **kwargs: Any) -> dict[str, Any]:
    """Merge settings into the run's config (a mapping, an argparse.Namespace, or keywords);
    returns the whole config."""
    current = _current()
    if values is not None:
        current.set_config(values)
    if kwargs:
        current.set_config(kwargs)
    return dict(current.config)


def summary(values: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, float]:
    """Final numbers set by hand (a mapping or keywords); returns the run's final numbers."""
    current = _current()
    merged = {**(values or {}), **kwargs}
    if merged:
        current.set_summary(merged)
    return current.final()


def artifact(path: str | os.PathLike, name: str | None = None) -> Path:
    """Copy a file or folder into the job's output folder (it comes home to runs/<id>/);
    `name` is its path there (default: its own name). Returns where the copy is."""
    return _tracking.artifact(path, name)


def finish() -> None:
    """Write the final numbers (also done at exit when a script never calls it)."""
    with _lock:
        current = _state["run"]
    if current is not None:
        current.finish()


atexit.register(finish)
