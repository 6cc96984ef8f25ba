"""gpu-router's job runtime: where to write, how to log metrics, when to checkpoint.

Shipped into every job and on its PYTHONPATH; stdlib only. Outside gpu-router the functions
still work (folders under the current directory), so a script runs the same on a laptop.

    import gpu
    for step in range(start, steps):
        loss = train_step()
        gpu.log(step=step, loss=loss)
        if gpu.should_checkpoint():
            save(gpu.checkpoint_dir() / "last.pt")
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from pathlib import Path

__all__ = ["job_id", "attempt", "output_dir", "data_dir", "checkpoint_dir", "log",
           "should_checkpoint"]

_checkpoint_requested = threading.Event()
_metrics_lock = threading.Lock()


def _dir(var: str, fallback: str) -> Path:
    path = Path(os.environ.get(var) or fallback)
    path.mkdir(parents=True, exist_ok=True)
    return path


def job_id() -> str | None:
    """The gpu-router job id, or None when the script runs outside gpu-router."""
    return os.environ.get("GPU_ROUTER_JOB_ID")


def attempt() -> int:
    """1 for the first run; higher after a resume or a migration (then load a checkpoint)."""
    return int(os.environ.get("GPU_ROUTER_ATTEMPT", "1"))


def output_dir() -> Path:
    """Everything written here comes home to runs/<short_id>/ of the project."""
    return _dir("GPU_ROUTER_OUTPUT_DIR", "outputs")


def data_dir() -> Path:
    """Data sets passed with --data NAME=PATH are at data_dir()/NAME."""
    return _dir("GPU_ROUTER_DATA_DIR", "data")


def checkpoint_dir() -> Path:
    """Survives resumes and migrations: save here, and load from here when attempt() > 1."""
    return _dir("GPU_ROUTER_CHECKPOINT_DIR", "checkpoints")


def log(step: int | None = None, **metrics: float) -> None:
    """Record metric values (numbers) at a step; they reach `gpu metrics` and the dashboard."""
    row: dict = {"ts": round(time.time(), 3)}
    if step is not None:
        row["step"] = int(step)
    for key, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue  # only numbers are metrics; ignore the rest rather than crash a run
        if math.isfinite(number):
            row[key] = number
        else:
            row[key] = str(number)  # nan/inf survive as text, JSON has no literal for them
    line = (json.dumps(row, separators=(",", ":")) + "\n").encode()
    target = os.environ.get("GPU_ROUTER_METRICS_FILE") or str(output_dir() / "metrics.jsonl")
    with _metrics_lock:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)  # one write of a small line: appends never interleave
        finally:
            os.close(fd)


def should_checkpoint() -> bool:
    """True once gpu-router asks the job to save its state (time is nearly up, or it moves)."""
    if _checkpoint_requested.is_set():
        return True
    control = os.environ.get("GPU_ROUTER_CONTROL_DIR")
    if control and os.path.exists(os.path.join(control, "checkpoint")):
        _checkpoint_requested.set()
        return True
    return False


def _on_usr1(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    _checkpoint_requested.set()


def _install_handler() -> None:
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR1"):
        try:
            signal.signal(signal.SIGUSR1, _on_usr1)
        except (ValueError, OSError):
            pass


_install_handler()
