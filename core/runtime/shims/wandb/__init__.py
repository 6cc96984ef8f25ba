"""gpu-router's stand-in for `wandb`, for jobs whose environment has no wandb installed.

The job's sitecustomize (core/runtime/jobsite) appends this folder to the END of sys.path, so
`import wandb` finds the real package wherever it is installed and this one only where it is
not. An unchanged W&B script then runs without an account or a network, and what it logs goes
into gpu-router's metrics stream: `gpu metrics`, `gpu status`, the dashboard's charts; its
config into the job's record, its summary as the job's final numbers.

The common API is here: `init` (also as a context manager), `log`, `config`, `summary`,
`finish`, `run`, `define_metric`, `watch`, `save`, `Artifact` with `log_artifact` (copied into
the job's outputs); media and tables (`Image`, `Table`, `Histogram`, ...) are accepted and
ignored, as they are no numbers. Anything else says that the real package is needed.
Standard library only.
"""

from __future__ import annotations

import atexit
import glob
import os
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpu import tracking as _tracking

__version__ = "0.0.0+gpurouter"
GPU_ROUTER_SHIM = True  # what a script may check to tell this from the real package

run: "Run | None" = None


class Config:
    """The run's settings, read and set as attributes or items, as in wandb."""

    def __init__(self, owner: _tracking.Run) -> None:
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_items", {})

    def update(self, values: Any = None, allow_val_change: bool | None = None, **kw: Any) -> None:  # noqa: ARG002
        if values is not None and not isinstance(values, Mapping):
            values = vars(values) if hasattr(values, "__dict__") else dict(values)
        merged = {**(values or {}), **kw}
        self._items.update(merged)
        self._owner.set_config(merged)

    def setdefaults(self, values: Mapping) -> None:
        self.update({k: v for k, v in values.items() if k not in self._items})

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    __setattr__ = __setitem__

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __getattr__(self, key: str) -> Any:
        try:
            return self._items[key]
        except KeyError:
            raise AttributeError(key) from None

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str, default: Any = None) -> Any:
        return self._items.get(key, default)

    def keys(self):
        return self._items.keys()

    def items(self):
        return self._items.items()

    def values(self):
        return self._items.values()

    def as_dict(self) -> dict:
        return dict(self._items)

    def __repr__(self) -> str:
        return f"Config({self._items!r})"


class Summary:
    """The run's final numbers: each metric's last value unless set here, as in wandb."""

    def __init__(self, owner: _tracking.Run) -> None:
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_items", {})

    def _all(self) -> dict:
        return {**self._owner.last, **self._items}

    def update(self, values: Mapping | None = None, **kw: Any) -> None:
        merged = {**(values or {}), **kw}
        self._items.update(merged)
        self._owner.set_summary(merged)

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    __setattr__ = __setitem__

    def __getitem__(self, key: str) -> Any:
        return self._all()[key]

    def __getattr__(self, key: str) -> Any:
        try:
            return self._all()[key]
        except KeyError:
            raise AttributeError(key) from None

    def __contains__(self, key: object) -> bool:
        return key in self._all()

    def __iter__(self):
        return iter(self._all())

    def get(self, key: str, default: Any = None) -> Any:
        return self._all().get(key, default)

    def keys(self):
        return self._all().keys()

    def items(self):
        return self._all().items()

    def __repr__(self) -> str:
        return f"Summary({self._all()!r})"


class Run:
    """What `wandb.init` returns."""

    def __init__(self, project: str | None, name: str | None, config: Any, run_id: str | None,
                 group: str | None, job_type: str | None, tags: Any, notes: str | None) -> None:
        self._run = _tracking.Run()
        self.id = run_id or uuid.uuid4().hex[:8]
        self.name = name or os.environ.get("GPU_ROUTER_SHORT_ID") or self.id
        self.project = project or "uncategorized"
        self.entity = None
        self.group, self.job_type, self.notes = group, job_type, notes
        self.tags = tuple(tags or ())
        self.dir = str(_tracking.output_dir())
        self.config = Config(self._run)
        self.summary = Summary(self._run)
        self.offline = True
        self.url = None
        if config:
            self.config.update(config)

    @property
    def step(self) -> int:
        return self._run.step

    def log(self, data: Mapping, step: int | None = None, commit: bool | None = None,
            sync: bool | None = None) -> None:  # noqa: ARG002 - wandb's signature
        self._run.log(data, step=step, commit=commit)

    def finish(self, exit_code: int | None = None, quiet: bool | None = None) -> None:  # noqa: ARG002
        global run
        self._run.finish()
        if run is self:
            run = None
            _set_globals(None)

    def define_metric(self, *args: Any, **kwargs: Any) -> None:
        return None  # step axes and summaries of a chart: nothing to do without the W&B UI

    def watch(self, *args: Any, **kwargs: Any) -> None:
        return None  # gradients and parameters of a model: not numbers gpu-router charts

    def unwatch(self, *args: Any, **kwargs: Any) -> None:
        return None

    def alert(self, title: str = "", text: str = "", *args: Any, **kwargs: Any) -> None:
        print(f"wandb alert: {title}: {text}", file=sys.stderr, flush=True)

    def save(self, glob_str: str | os.PathLike | None = None, base_path: str | None = None,
             policy: str = "live") -> list[str]:  # noqa: ARG002
        """Files matching the pattern are copied into the job's outputs."""
        if glob_str is None:
            return []
        saved = []
        for found in glob.glob(str(glob_str), recursive=True):
            rel = os.path.relpath(found, base_path) if base_path else os.path.basename(found)
            saved.append(str(_tracking.artifact(found, rel)))
        return saved

    def log_artifact(self, artifact: Any, name: str | None = None, type: str | None = None,  # noqa: A002
                     aliases: Any = None) -> Any:  # noqa: ARG002
        """An Artifact's files (or a path) copied into outputs/artifacts/NAME/."""
        if isinstance(artifact, (str, os.PathLike)):
            _tracking.artifact(artifact, f"artifacts/{name or Path(artifact).name}")
            return artifact
        for src, rel in getattr(artifact, "_files", []):
            _tracking.artifact(src, f"artifacts/{artifact.name}/{rel}")
        return artifact

    def use_artifact(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("use_artifact downloads from W&B: install wandb in the job's "
                                  "requirements.txt (gpu-router runs it offline)")

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self.finish(exit_code=0 if exc_type is None else 1)
        return False

    def __repr__(self) -> str:
        return f"<wandb Run {self.name} (gpu-router stand-in)>"


class Artifact:
    """Files to keep: `log_artifact` copies them into the job's outputs."""

    def __init__(self, name: str, type: str = "", description: str | None = None,  # noqa: A002
                 metadata: dict | None = None, **kwargs: Any) -> None:
        self.name, self.type, self.description = name, type, description
        self.metadata = dict(metadata or {})
        self._files: list[tuple[str, str]] = []

    def add_file(self, local_path: str, name: str | None = None, **kwargs: Any) -> None:
        self._files.append((local_path, name or os.path.basename(local_path)))

    def add_dir(self, local_path: str, name: str | None = None, **kwargs: Any) -> None:
        self._files.append((local_path, name or os.path.basename(os.path.normpath(local_path))))


class _Ignored:
    """Media, tables and plots: accepted, and not numbers, so ignored by `log`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class Image(_Ignored): pass  # noqa: E701
class Table(_Ignored): pass  # noqa: E701
class Histogram(_Ignored): pass  # noqa: E701
class Video(_Ignored): pass  # noqa: E701
class Audio(_Ignored): pass  # noqa: E701
class Html(_Ignored): pass  # noqa: E701
class Object3D(_Ignored): pass  # noqa: E701
class Molecule(_Ignored): pass  # noqa: E701
class Plotly(_Ignored): pass  # noqa: E701
class Graph(_Ignored): pass  # noqa: E701
class Settings(_Ignored): pass  # noqa: E701


class _Plot:
    """`wandb.plot.line(...)` and friends: charts made from tables, ignored like tables."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: _Ignored()


plot = _Plot()


def init(project: str | None = None, entity: str | None = None, config: Any = None,
         name: str | None = None, id: str | None = None, group: str | None = None,  # noqa: A002
         job_type: str | None = None, tags: Any = None, notes: str | None = None,
         reinit: Any = None, resume: Any = None, mode: str | None = None, dir: Any = None,  # noqa: A002
         settings: Any = None, config_exclude_keys: Any = None, config_include_keys: Any = None,
         **kwargs: Any) -> Run:  # noqa: ARG001 - wandb's signature
    """A new run (the previous one, if any, is finished first, as reinit does)."""
    global run
    if run is not None:
        run.finish()
    if config is not None and (config_exclude_keys or config_include_keys):
        values = dict(config) if isinstance(config, Mapping) else vars(config)
        if config_include_keys:
            values = {k: v for k, v in values.items() if k in set(config_include_keys)}
        config = {k: v for k, v in values.items() if k not in set(config_exclude_keys or ())}
    run = Run(project, name, config, id, group, job_type, tags, notes)
    _set_globals(run)
    return run


def log(data: Mapping, step: int | None = None, commit: bool | None = None,
        sync: bool | None = None) -> None:  # noqa: ARG001
    if run is None:
        raise RuntimeError("You must call wandb.init() before wandb.log()")
    run.log(data, step=step, commit=commit)


def finish(exit_code: int | None = None, quiet: bool | None = None) -> None:
    if run is not None:
        run.finish(exit_code, quiet)


def define_metric(*args: Any, **kwargs: Any) -> None:
    return None


def watch(*args: Any, **kwargs: Any) -> None:
    return None


def unwatch(*args: Any, **kwargs: Any) -> None:
    return None


def save(glob_str: Any = None, base_path: str | None = None, policy: str = "live") -> list[str]:
    return run.save(glob_str, base_path, policy) if run is not None else []


def log_artifact(artifact: Any, name: str | None = None, type: str | None = None,  # noqa: A002
                 aliases: Any = None) -> Any:
    if run is None:
        raise RuntimeError("You must call wandb.init() before wandb.log_artifact()")
    return run.log_artifact(artifact, name, type, aliases)


def alert(title: str = "", text: str = "", *args: Any, **kwargs: Any) -> None:
    if run is not None:
        run.alert(title, text)


def login(*args: Any, **kwargs: Any) -> bool:
    return True  # no account: nothing leaves the job


def setup(*args: Any, **kwargs: Any) -> None:
    return None


def teardown(*args: Any, **kwargs: Any) -> None:
    finish()


def termlog(text: str = "", *args: Any, **kwargs: Any) -> None:
    print(f"wandb: {text}", file=sys.stderr, flush=True)


termwarn = termerror = termlog


class _PreInit:
    """wandb.config / wandb.summary before init: wandb says the same."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__"):
            raise AttributeError(key)
        raise RuntimeError(f"You must call wandb.init() before {self._name}.{key}")

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError(f"You must call wandb.init() before {self._name}[{key!r}]")

    def __setattr__(self, key: str, value: Any) -> None:
        raise RuntimeError(f"You must call wandb.init() before {self._name}.{key}")

    __setitem__ = __setattr__


config: Any = _PreInit("wandb.config")
summary: Any = _PreInit("wandb.summary")


def _set_globals(current: Run | None) -> None:
    global config, summary
    config = current.config if current else _PreInit("wandb.config")
    summary = current.summary if current else _PreInit("wandb.summary")


def _finish_at_exit() -> None:
    """A script that never calls finish still gets its final numbers, as with wandb."""
    if run is not None:
        run.finish()


def __getattr__(name: str) -> Any:
    raise AttributeError(f"wandb.{name} is not part of gpu-router's wandb stand-in (used because "
                         f"wandb is not installed in the job's environment): add wandb to the "
                         f"project's requirements.txt to use it (gpu-router runs it offline)")


atexit.register(_finish_at_exit)
