"""Where gpu-router keeps its state on this machine.

One module so that every process (CLI, supervisor, dashboard, tests) agrees on the same
locations; `GPU_ROUTER_HOME` moves all of it, which is how each test gets a private world.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def home() -> Path:
    """The data dir: the store, bundles, job dirs, venvs and the supervisor's lock."""
    env = os.environ.get("GPU_ROUTER_HOME")
    if env:
        path = Path(env).expanduser()
    elif sys.platform == "darwin":
        path = Path.home() / "Library" / "Application Support" / "gpu-router"
    else:
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        path = Path(base) / "gpu-router"
    path.mkdir(parents=True, exist_ok=True)
    return path


def user_config_file() -> Path:
    """The user's own config (targets, rules, budgets); never the project's gpu.yaml."""
    env = os.environ.get("GPU_ROUTER_CONFIG")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpu-router" / "config.yaml"


def db_file() -> Path:
    return home() / "store.sqlite3"


def bundles_dir() -> Path:
    return _sub("bundles")


def objects_dir() -> Path:
    """Every shipped file's content once, named by its sha256 (core.packaging.objects)."""
    return _sub("objects")


def jobs_dir() -> Path:
    return _sub("jobs")


def venvs_dir() -> Path:
    return _sub("venvs")


def cache_dir() -> Path:
    return _sub("cache")


def hf_data_dir() -> Path:
    """hf:// data sets downloaded at submit, OWNER/NAME/SHA/SELECTION (`core.packaging.hfdata`):
    inside the home, yet data to ship, not gpu-router's own state."""
    return cache_dir() / "hf"


def daemon_lock_file() -> Path:
    return home() / "supervisor.lock"


def daemon_log_file() -> Path:
    return home() / "supervisor.log"


def error_log_file() -> Path:
    """Tracebacks of the CLI's internal errors: the terminal gets one line, this file the rest."""
    return home() / "errors.log"


def _sub(name: str) -> Path:
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
