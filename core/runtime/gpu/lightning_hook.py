"""Lightning, followed: what a LightningModule logs, saves and writes reaches gpu-router.

When the job imports `lightning.pytorch` (also through `import lightning`) or
`pytorch_lightning`, the job's sitecustomize (core/runtime/jobsite) calls `follow(module)`
right after it loads. Three of the Trainer's public methods are wrapped, each calling
Lightning's own (so Lightning behaves, and fails, exactly as it would):

- `Trainer.__init__`: a gpu-router logger (a subclass of Lightning's public `Logger`) is added
  after the trainer's own loggers, so `self.log("train_loss", ...)` reaches `gpu metrics`, the
  dashboard's charts and the tracking pane at the step Lightning's own rule gives it (the
  `step` every Lightning logger receives), on global rank 0 only; the hyperparameters
  (`save_hyperparameters()`) become the run's config; each stage's end writes the final
  numbers. The trainer's CSV or TensorBoard logs folder (`lightning_logs/`) is named to the
  launcher as an output, so it comes home to runs/<id>/ with no `--output`;
- `Trainer.save_checkpoint` (what ModelCheckpoint calls): once Lightning has written the file,
  it is hard-linked (copied where a link cannot be made) into `gpu.checkpoint_dir()/lightning/`
  and `gpu.checkpoint_saved()` marks it, so it is mirrored home and restored on a resume or a
  move; files ModelCheckpoint has since removed (top-k) leave that folder at the next save;
- `Trainer.fit`: on a resumed attempt (`gpu.attempt() > 1`), a first `fit` without `ckpt_path`
  continues from the last checkpoint saved there, as `fit(..., ckpt_path=...)` would.

Why a logger and not reading `metrics.csv`: the CSV is written in batches and rewritten whole
when a new metric name appears; a logger receives every value when Lightning logs it, as its
own loggers do. Why hard links: Lightning saves by writing a temporary file and renaming it
over the old one (fsspec's transaction), so a link keeps the saved bytes as they were.

A failure in here never reaches the job: it is said once in the job log and Lightning carries on.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from . import _quietly as _quiet, _warn, attempt, checkpoint_dir, checkpoint_saved
from . import tracking

SUBDIR = "lightning"  # checkpoint_dir()/lightning/: the Lightning checkpoints gpu-router keeps
LATEST = "latest.json"  # in it: the file of the newest save, which a resumed fit continues from
DECLARED = ".gpu-router-outputs"  # in the output folder: folders the launcher brings home
_lock = threading.Lock()
_sources: dict[str, str] = {}  # name in SUBDIR -> the path Lightning saved it at
_state = {"resumed": False}


def _quietly(what: str) -> Callable:
    """Run gpu-router's part; any error in it is said once and swallowed. (gpu._quietly)"""
    return _quiet("Lightning", what)


def _rank_zero(trainer: Any) -> bool:
    return bool(getattr(trainer, "is_global_zero", True))


# -- metrics and hyperparameters: a logger of Lightning's own kind ------------------------------

# the logger's class for each Lightning package, by the name it is found at in this module
CLASS_NAMES = {"lightning.pytorch": "LightningLogger", "pytorch_lightning": "PytorchLightningLogger"}


def logger_class(base: type, name: str = "GpuRouterLogger", package: str = "") -> type:
    """gpu-router's logger for one Lightning package (`lightning.pytorch` and
    `pytorch_lightning` each have their own `Logger`, and the Trainer checks its own). It is
    kept in this module under `name`, so a trainer pickled for ddp_spawn's processes finds
    it there (module `__getattr__` makes it in a process that has not yet)."""

    class GpuRouterLogger(base):  # type: ignore[misc, valid-type]
        """Lightning's values into gpu-router's metrics stream (one tracking run a trainer)."""

        def __init__(self) -> None:
            super().__init__()
            self._run = tracking.Run()

        def __getstate__(self) -> dict:
            return {k: v for k, v in self.__dict__.items() if k != "_run"}  # a Run holds a lock

        def __setstate__(self, state: dict) -> None:
            self.__dict__.update(state)
            self._run = tracking.Run()

        def _zero(self) -> bool:
            """Global rank 0, by Lightning's own `rank_zero_only.rank` (what its loggers ask)."""
            if not package:
                return True
            rank_zero = importlib.import_module(f"{package}.utilities.rank_zero")
            return getattr(rank_zero.rank_zero_only, "rank", 0) == 0

        @property
        def name(self) -> str:
            return "gpu-router"

        @property
        def version(self) -> int:
            return 0

        @property
        def save_dir(self) -> None:
            return None  # writes no files of its own

        def log_metrics(self, metrics: dict, step: int | None = None) -> None:
            _record_metrics(self, metrics, step)

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            _record_config(self, params)

        def finalize(self, status: str) -> None:
            _record_final(self)

    GpuRouterLogger.__name__ = GpuRouterLogger.__qualname__ = name
    GpuRouterLogger.__module__ = __name__
    globals()[name] = GpuRouterLogger
    return GpuRouterLogger


def __getattr__(name: str) -> type:
    """A logger class asked for by name (unpickling a trainer in a new process) before its
    package was followed there: import the package, which follows it."""
    for package, class_name in CLASS_NAMES.items():
        if name == class_name:
            follow(importlib.import_module(package))
            if name in globals():
                return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@_quietly("metrics")
def _record_metrics(logger: Any, metrics: dict, step: int | None) -> None:
    if logger._zero():  # at Lightning's step, adding to it (train, then val, share a step)
        logger._run.log(dict(metrics), step=step, commit=False)


@_quietly("hyperparameters")
def _record_config(logger: Any, params: Any) -> None:
    if logger._zero():
        logger._run.set_config(params)


@_quietly("final numbers")
def _record_final(logger: Any) -> None:
    final = logger._run.final() if logger._zero() else {}
    if final:  # at each stage's end (fit, then test): the numbers so far
        tracking.write_summary(final)


# -- the logs folder: named to the launcher as an output ---------------------------------------

def declare_output(path: str) -> bool:
    """Name a folder the launcher brings home with the outputs when the job ends (it reads
    DECLARED in the output folder; core/runtime/workdir.declared_by_job). Only inside a
    gpu-router job, and only once a folder; True when it was written."""
    out = os.environ.get("GPU_ROUTER_OUTPUT_DIR")
    if not out:
        return False
    full = os.path.abspath(path)
    if os.path.realpath(full) != full:
        return False  # through a link (a `checkpoint:` folder, say): outputs follow none
    listing = Path(out) / DECLARED
    with _lock:
        try:
            known = listing.read_text().splitlines()
        except OSError:
            known = []
        if full in known:
            return False
        with open(listing, "a") as fh:
            fh.write(full + "\n")
    return True


@_quietly("logs folder")
def _declare_logs(trainer: Any, pl: Any) -> None:
    """The folder the trainer's CSV or TensorBoard logger writes (`lightning_logs/`)."""
    if not _rank_zero(trainer):
        return
    loggers = importlib.import_module(f"{pl.__name__}.loggers")
    own = tuple(getattr(loggers, n) for n in ("CSVLogger", "TensorBoardLogger") if hasattr(loggers, n))
    for logger in trainer.loggers:
        if own and isinstance(logger, own) and getattr(logger, "root_dir", None):
            declare_output(str(logger.root_dir))


# -- checkpoints: Lightning's saves become gpu-router's ----------------------------------------

def keep_checkpoint(filepath: str) -> Path | None:
    """Link (or copy) a checkpoint file Lightning just saved into checkpoint_dir()/lightning/,
    drop the ones whose file Lightning has since removed, and mark the folder complete. The
    kept path, or None for what is not a local file (a remote URL, a folder a strategy wrote
    as shards) or a scratch save (the tuner's `.lr_find_*.ckpt`, removed right after)."""
    src = os.path.abspath(os.fspath(filepath))
    name = os.path.basename(src)
    if not os.path.isfile(src) or name.startswith("."):
        return None
    folder = checkpoint_dir() / SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / name
    tmp = folder / f".{name}.tmp{os.getpid()}"
    try:
        os.link(src, tmp)
    except OSError:  # another mount (the local sandbox binds ckpt/ apart), or no links here
        shutil.copy2(src, tmp)
    os.replace(tmp, dest)
    with _lock:
        _sources[name] = src
        for other in os.listdir(folder):
            if other in (name, LATEST) or other.startswith("."):
                continue
            # a file saved by an earlier attempt, or one ModelCheckpoint removed (top-k)
            if other not in _sources or not os.path.exists(_sources[other]):
                _sources.pop(other, None)
                try:
                    os.unlink(folder / other)
                except OSError:
                    pass
        latest = folder / f".{LATEST}.tmp{os.getpid()}"
        latest.write_text(json.dumps({"file": name, "saved_as": src}))
        os.replace(latest, folder / LATEST)
    checkpoint_saved()
    return dest


def latest_checkpoint() -> Path | None:
    """The checkpoint a resumed fit continues from: the newest save gpu-router kept."""
    folder = checkpoint_dir() / SUBDIR
    try:
        name = json.loads((folder / LATEST).read_text())["file"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    path = folder / str(name)
    return path if os.path.basename(str(name)) == str(name) and path.is_file() else None


def forget_checkpoint(filepath: str) -> bool:
    """Lightning removed a checkpoint it had saved (ModelCheckpoint keeps the top k, and
    removes the one a newer save replaced right after that save): its copy leaves
    checkpoint_dir()/lightning/ too, and the folder is marked again without it. True when one
    was kept."""
    src = os.path.abspath(os.fspath(filepath))
    with _lock:
        names = [n for n, s in _sources.items() if s == src]
        folder = checkpoint_dir() / SUBDIR
        for name in names:
            _sources.pop(name, None)
            try:
                os.unlink(folder / name)
            except OSError:
                pass
    if names:
        checkpoint_saved()
    return bool(names)


@_quietly("checkpoint removal")
def _removed(filepath: Any) -> None:
    forget_checkpoint(filepath)


@_quietly("checkpoint")
def _saved(trainer: Any, filepath: Any) -> None:
    if _rank_zero(trainer):
        keep_checkpoint(filepath)


@_quietly("resume")
def _resume_from(fit: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """(args, kwargs) of a first fit on a resumed attempt, with ckpt_path set to the restored
    checkpoint; None to call fit as given."""
    if _state["resumed"] or attempt() <= 1:
        return None
    _state["resumed"] = True  # the first fit only: a second is the script's own
    bound = inspect.signature(fit).bind(None, *args, **kwargs)
    if bound.arguments.get("ckpt_path") is not None:
        return None  # the script chose
    found = latest_checkpoint()
    if found is None:
        _warn(f"attempt {attempt()}: no Lightning checkpoint was restored; fit starts from the beginning")
        return None
    bound.arguments["ckpt_path"] = str(found)
    print(f"[gpu] attempt {attempt()}: Lightning resumes from {found} (the last checkpoint saved; "
          "pass ckpt_path to fit to choose another)", file=sys.stderr, flush=True)
    return bound.args[1:], bound.kwargs


@_quietly("logger")
def _attach(trainer: Any, logger_cls: type, pl: Any) -> None:
    """gpu-router's logger after the trainer's own. `logger=False` (no loggers) is left alone:
    the first logger names the checkpoint folder, and Lightning logs nothing without one."""
    loggers = list(trainer.loggers)
    if not loggers or any(isinstance(lg, logger_cls) for lg in loggers):
        return
    trainer.loggers = [*loggers, logger_cls()]
    _declare_logs(trainer, pl)


def follow(pl: Any) -> None:
    """Wrap the Trainer of `lightning.pytorch` or `pytorch_lightning` (once per package)."""
    if getattr(pl, "_gpu_router_followed", False):
        return
    trainer_cls = pl.Trainer
    logger_cls = logger_class(importlib.import_module(f"{pl.__name__}.loggers.logger").Logger,
                              CLASS_NAMES.get(pl.__name__, "GpuRouterLogger"), pl.__name__)
    original_init = trainer_cls.__init__
    original_fit = trainer_cls.fit
    original_save = trainer_cls.save_checkpoint
    torch_io = importlib.import_module(f"{pl.__name__}.plugins.io").TorchCheckpointIO
    original_remove = torch_io.remove_checkpoint

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        _attach(self, logger_cls, pl)

    @functools.wraps(original_fit)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        resumed = _resume_from(original_fit, args, kwargs)
        if resumed is not None:
            args, kwargs = resumed
        return original_fit(self, *args, **kwargs)

    @functools.wraps(original_save)
    def save_checkpoint(self: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_save(self, filepath, *args, **kwargs)
        _saved(self, filepath)
        return result

    @functools.wraps(original_remove)
    def remove_checkpoint(self: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_remove(self, path, *args, **kwargs)
        _removed(path)
        return result

    trainer_cls.__init__, trainer_cls.fit, trainer_cls.save_checkpoint = __init__, fit, save_checkpoint
    if not getattr(original_remove, "_gpu_router", False):  # one class for both packages' fabric? once
        remove_checkpoint._gpu_router = True  # type: ignore[attr-defined]
        torch_io.remove_checkpoint = remove_checkpoint
    pl._gpu_router_followed = True
