"""The real `wandb`, followed: what a job logs to W&B reaches gpu-router as well.

When the job's environment has wandb installed, the job's sitecustomize (core/runtime/jobsite)
calls `follow(wandb)` right after the package is imported. It wraps four public entry points,
each calling wandb's own first (so wandb behaves, and fails, exactly as it would) and then
recording the same call in gpu-router's metrics stream through `gpu.tracking`:

- `wandb.init`: the run's config (again at its first log and at finish, which catches
  `wandb.config.update(...)` after init), and a finish at exit for a script that never calls
  finish (wandb's own exit hook tears its service down without calling `Run.finish`);
- `Run.log` (also `wandb.log`, which init points at the run's bound method): the values, at
  the step wandb's own rule gives them;
- `Summary.update` (also `run.summary[k] = v`): final numbers set by hand;
- `Run.finish` (also `wandb.finish` and leaving `with wandb.init()`): the final numbers.

Why this and not reading wandb's offline files: the run file (`run-*.wandb`) is a private
binary log that wandb-core writes from another process, and it is read whole only after the
run; the calls are wandb's documented API and give the values live. The launcher runs wandb
offline (WANDB_MODE=offline, no account) with its files in the job's outputs, so the offline
run comes home and `wandb sync` can upload it later.

A failure in here never reaches the job: it is said once in the job log and wandb carries on.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import threading
from typing import Any, Callable

from . import _quietly as _quiet
from . import tracking

_runs: dict[int, tracking.Run] = {}  # id(wandb Run) -> its gpu-router twin
_seen: dict[int, int] = {}  # id(wandb Run) -> log calls seen, for the config re-read
_lock = threading.Lock()


def _quietly(what: str) -> Callable:
    """Run the recording part; any error in it is said once and swallowed. (gpu._quietly)"""
    return _quiet("wandb", what)


def _twin(run: Any) -> tracking.Run:
    with _lock:
        twin = _runs.get(id(run))
        if twin is None:
            twin = _runs[id(run)] = tracking.Run()
        return twin


def _config_of(run: Any) -> dict:
    config = getattr(run, "config", None)
    as_dict = getattr(config, "as_dict", None)
    values = as_dict() if callable(as_dict) else dict(config or {})
    return {k: v for k, v in values.items() if not str(k).startswith("_wandb")}


@_quietly("config")
def _record_config(run: Any) -> None:
    _twin(run).set_config(_config_of(run))


@_quietly("log")
def _record_log(run: Any, args: tuple, kwargs: dict) -> None:
    data = args[0] if args else kwargs.get("data", {})
    step = args[1] if len(args) > 1 else kwargs.get("step")
    commit = args[2] if len(args) > 2 else kwargs.get("commit")
    _twin(run).log(data, step=step, commit=commit)
    with _lock:
        _seen[id(run)] = _seen.get(id(run), 0) + 1
        first = _seen[id(run)] == 1
    if first:
        _record_config(run)


@_quietly("finish")
def _record_finish(run: Any) -> None:
    if id(run) not in _runs:
        return
    _record_config(run)
    _twin(run).finish()
    with _lock:
        _runs.pop(id(run), None)
        _seen.pop(id(run), None)


@_quietly("summary")
def _record_summary(summary: Any, values: Any, kwargs: dict) -> None:
    owner = getattr(getattr(summary, "_update_callback", None), "__self__", None)
    twin = _runs.get(id(owner)) if owner is not None else None
    if twin is None and _runs:
        twin = list(_runs.values())[-1]  # the most recent run
    if twin is not None:
        twin.set_summary({**dict(values or {}), **kwargs})


def follow(wandb: Any) -> None:
    """Wrap wandb's entry points (once per process; a no-op for gpu-router's stand-in)."""
    if getattr(wandb, "GPU_ROUTER_SHIM", False) or getattr(wandb, "_gpu_router_followed", False):
        return
    # the real package's own modules, loaded by its __init__ (not a dependency of gpu-router)
    wandb_run = importlib.import_module("wandb.sdk.wandb_run")
    wandb_summary = importlib.import_module("wandb.sdk.wandb_summary")
    run_cls = wandb_run.Run
    original_log, original_finish = run_cls.log, run_cls.finish
    original_update = wandb_summary.Summary.update
    original_init = wandb.init

    @functools.wraps(original_log)
    def log(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_log(self, *args, **kwargs)
        _record_log(self, args, kwargs)
        return result

    @functools.wraps(original_finish)
    def finish(self: Any, *args: Any, **kwargs: Any) -> Any:
        _record_finish(self)  # before wandb's: the run can still be read
        return original_finish(self, *args, **kwargs)

    @functools.wraps(original_update)
    def update(self: Any, d: Any = None, **kwargs: Any) -> Any:
        result = original_update(self, d, **kwargs) if kwargs else original_update(self, d)
        _record_summary(self, d, kwargs)
        return result

    @functools.wraps(original_init)
    def init(*args: Any, **kwargs: Any) -> Any:
        run = original_init(*args, **kwargs)
        _started(run)
        return run

    run_cls.log, run_cls.finish = log, finish
    wandb_summary.Summary.update = update
    wandb.init = init
    wandb._gpu_router_followed = True


@_quietly("init")
def _started(run: Any) -> None:
    if run is None or not hasattr(run, "log"):
        return
    _twin(run)
    _record_config(run)
    # registered after wandb's own exit hooks, so it runs before them, while the run is alive
    atexit.register(_record_finish, run)
