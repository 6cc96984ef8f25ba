"""gpu-router's job runtime: where to write, how to log metrics, when to checkpoint.

Shipped into every job and on its PYTHONPATH; stdlib only. Outside gpu-router the functions
still work (folders under the current directory), so a script runs the same on a laptop.

    import gpu
    for step in range(start, steps):
        loss = train_step()
        gpu.log(step=step, loss=loss)
        if gpu.should_checkpoint():
            save(gpu.checkpoint_dir() / "last.pt")

Metric names are 1 to 64 characters from A-Z a-z 0-9 _ . / - (`loss`, `val/acc`,
`lr.group-0`); values are numbers. `log` drops anything else with a warning on stderr (which
the job log shows), and so does a name or value that holds one of the job's secret values in
any form: metrics are stored and shown, so they are no side door for a secret. The supervisor
applies the same name rule where it reads the metrics.
"""

from __future__ import annotations

import importlib.util
import json
import re
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

__all__ = ["job_id", "attempt", "output_dir", "data_dir", "checkpoint_dir", "log",
           "should_checkpoint", "checkpoint_saved", "params"]

COMPLETE_MARKER = ".complete"  # in checkpoint_dir(); core/runtime/ckptscan.py reads it

_checkpoint_requested = threading.Event()
_metrics_lock = threading.Lock()
_warned: set[str] = set()
_VALID_HEAD = re.compile(r"[A-Za-z0-9_./-]{0,64}")
_secrets: dict = {"values": None, "pattern": None}


def _runtime_module(name: str) -> ModuleType:
    """A module of gpu-router's runtime folder (beside this package), loaded from that file:
    a project module of the same name never stands in for it."""
    full = f"_gpu_router_{name}"
    if full not in sys.modules:
        path = Path(__file__).resolve().parent.parent / f"{name}.py"
        spec = importlib.util.spec_from_file_location(full, path)
        if spec is None or not path.is_file():
            raise ImportError(f"{path} is missing: the gpu module ships with gpu-router's runtime "
                              f"folder (launch.py, redact.py, textsafe.py) and needs it beside it")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[full] = module
    return sys.modules[full]


_redact = _runtime_module("redact")


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


def params() -> dict:
    """This run's point of a sweep (`gpu submit --sweep LR=0.1,0.01`): {"LR": 0.1}; {} for a
    job that is not part of one, or outside gpu-router. Each value is also in the environment
    variable named by its key, as text."""
    try:
        doc = json.loads(os.environ.get("GPU_ROUTER_PARAMS") or "{}")
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


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
    row.update(_numbers(metrics))
    bad = _nonfinite(metrics)
    if bad:
        row["nonfinite"] = bad  # kill rules (nan_metric) see them; they are never stored as numbers
    row = _without_secrets(row)
    if row is not None:
        _append(row)


def _numbers(metrics: dict) -> dict[str, float]:
    """The metrics whose names pass the name rule (the others are dropped with a warning) and
    whose values are finite numbers (the others are ignored: a run never crashes on them)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if not _name_ok(key, "metric"):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            continue  # only numbers are metrics; ignore the rest rather than crash a run
        if math.isfinite(number):
            out[key] = number  # nan and inf are not stored: JSON has no number for them
    return out


def _nonfinite(metrics: dict) -> dict[str, str]:
    """The metrics whose value is a float NaN or infinity, as text ("nan", "inf", "-inf")."""
    out: dict[str, str] = {}
    for key, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            continue
        if not math.isfinite(number) and _redact.metric_key_ok(key):
            out[key] = str(number)
    return out


def _name_ok(key: object, what: str) -> bool:
    """The name rule, with the warning that says why a name was dropped."""
    if _redact.metric_key_ok(key):
        return True
    # only the name's leading valid part is echoed: what follows may be an escape
    # sequence's payload, which must not reach a terminal even as inert text
    head = _VALID_HEAD.match(str(key)).group()
    shown = "a name that holds a secret value" if _secret_pattern().holds(str(key)) \
        else f"{head!r}… ({len(str(key))} characters)"
    _warn(f"{what} {shown} dropped: names are {_redact.METRIC_KEY_RULE}")
    return False


def _append(row: dict) -> None:
    """One line of the metrics file, which the supervisor reads (outside a job:
    ./outputs/metrics.jsonl)."""
    line = (json.dumps(row, separators=(",", ":")) + "\n").encode()
    target = os.environ.get("GPU_ROUTER_METRICS_FILE") or str(output_dir() / "metrics.jsonl")
    with _metrics_lock:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)  # one write of a small line: appends never interleave
        finally:
            os.close(fd)


def _secret_env() -> set[str]:
    """The values of the job's secrets: the launcher names them in GPU_ROUTER_SECRET_ENV."""
    names = [n for n in os.environ.get("GPU_ROUTER_SECRET_ENV", "").split(",") if n]
    return {os.environ[n] for n in names if os.environ.get(n)}


_SECRETS_AT_IMPORT = _secret_env()  # a job may pop a secret from its environment once read


def _secret_pattern() -> _redact.SecretPattern:
    """The job's secret values as one pattern, rebuilt only when they change."""
    values = tuple(sorted(_secret_env() | _SECRETS_AT_IMPORT))
    if values != _secrets["values"]:
        _secrets.update(values=values, pattern=_redact.SecretPattern(list(values)))
    return _secrets["pattern"]


def _without_secrets(row: dict) -> dict | None:
    """The row less any field whose name or value holds a secret; None if nothing is left."""
    row = _secret_free(row, "a metric")
    if row is None or set(row) <= {"ts", "step"}:
        return None
    return row


def _secret_free(fields: dict, what: str) -> dict | None:
    """`fields` less every entry whose name or value holds one of the job's secret values in
    any form (each dropped with a warning), or None when even the rest would show one."""
    pattern = _secret_pattern()
    if not pattern or not pattern.holds(json.dumps(fields, default=str)):
        return fields
    for key in [k for k in fields if pattern.holds(json.dumps({k: fields[k]}, default=str))]:
        del fields[key]
        _warn(f"{what} was dropped: its name or value holds one of the job's secret values")
    if pattern.holds(json.dumps(fields, default=str)):
        return None
    return fields


def _warn(text: str) -> None:
    """Once per message: a training loop logs the same bad metric at every step."""
    if text in _warned or len(_warned) > 1000:
        return
    _warned.add(text)
    print(f"[gpu] {text}", file=sys.stderr, flush=True)


def _quietly(library: str, what: str):
    """gpu-router's part of a call it follows in a library the job uses (wandb, Lightning):
    any error in it is said once in the job log and swallowed, so neither the job nor the
    library ever notices gpu-router was there."""
    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the job and the library must not notice
                _warn(f"{library} {what} not recorded by gpu-router: {type(exc).__name__}: {exc}")
                return None
        return inner
    return wrap


def should_checkpoint() -> bool:
    """True once gpu-router asks the job to save its state (time is nearly up, or it moves)."""
    if _checkpoint_requested.is_set():
        return True
    control = os.environ.get("GPU_ROUTER_CONTROL_DIR")
    if control and os.path.exists(os.path.join(control, "checkpoint")):
        _checkpoint_requested.set()
        return True
    return False


def checkpoint_saved() -> int:
    """Mark the files now in checkpoint_dir() as one complete checkpoint; returns its number.

    gpu-router mirrors the folder home while the job runs and resumes a moved job from the
    last complete checkpoint: call this after the last file of a save is written (and closed).
    The marker lists each file's size and modification time, so a save that has begun to
    overwrite them is never taken for this one. Where gpu-router mirrors the folder, the
    marked files are also frozen into a generation folder beside checkpoint_dir() (hard links
    where the job replaces files by rename, copies otherwise: core/runtime/ckptgen.py), which
    the copy home reads at leisure while the job saves on. Without calls to it, a folder that
    stops changing between two looks counts as complete."""
    folder = checkpoint_dir()
    marker = folder / COMPLETE_MARKER
    try:
        generation = int(json.loads(marker.read_text()).get("generation", 0)) + 1
    except (OSError, ValueError, AttributeError):
        generation = 1
    files: dict[str, list[int]] = {}
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in names:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, folder).replace(os.sep, "/")
            if rel == COMPLETE_MARKER or rel.startswith(COMPLETE_MARKER + ".") or os.path.islink(full):
                continue
            try:
                st = os.stat(full)
            except OSError:
                continue
            files[rel] = [st.st_size, st.st_mtime_ns]
    doc = {"generation": generation, "at": round(time.time(), 3), "attempt": attempt(), "files": files}
    tmp = folder / f"{COMPLETE_MARKER}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(doc, separators=(",", ":")))
    os.replace(tmp, marker)  # the marker appears whole, after the files it names
    gens = os.environ.get("GPU_ROUTER_CHECKPOINT_GENERATIONS")
    if gens:  # frozen where it was written, so the mirror never races the next save
        try:
            _runtime_module("ckptgen").capture(str(folder), gens, generation, files, doc)
        except OSError as exc:  # a full disk, say: the live folder is still marked
            _warn(f"checkpoint {generation} was marked but not frozen for the copy home: {exc}")
    return generation


def _on_usr1(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    _checkpoint_requested.set()


def _install_handler() -> None:
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR1"):
        try:
            signal.signal(signal.SIGUSR1, _on_usr1)
        except (ValueError, OSError):
            pass


_install_handler()
