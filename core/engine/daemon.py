"""Starting, finding and waking the supervisor process: what every front needs of it.

The supervisor itself (core/engine/supervisor.py) drives jobs and so imports the service; the
service, approvals and the command line only need to make sure one runs, which lives here so
that neither side imports the other.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from core import paths

# -- starting and waking it ----------------------------------------------------------------


def try_lock() -> int | None:
    fd = os.open(paths.daemon_lock_file(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def running_pid(wait_s: float = 1.0) -> int | None:
    """The pid of the live supervisor, or None when none holds the lock.

    A supervisor writes its pid just after it takes the lock: a look in between finds the lock
    held and no pid yet, and waits for it (up to `wait_s`) rather than answer "none runs",
    which would start a second supervisor that waits for the lock and takes over the moment
    the first one goes."""
    deadline = time.monotonic() + wait_s
    while True:
        fd = try_lock()
        if fd is not None:
            os.close(fd)
            return None
        try:
            pid = int(paths.daemon_lock_file().read_text().strip() or 0) or None
        except (OSError, ValueError):
            pid = None
        if pid is not None or time.monotonic() >= deadline:
            return pid
        time.sleep(0.02)


def ensure_running(wait_s: float = 0.0) -> int | None:
    """Start a detached supervisor unless one runs; wake the one that runs.

    With `wait_s`, wait until the new one holds its lock and return its pid.
    """
    pid = running_pid()
    if pid:
        wake(pid)
        return pid
    # said before the start, by the process that asks: the log tells who started each
    # supervisor, and the line is there the moment this returns (the new one logs its own
    # start only once it holds the lock)
    log_line("INFO", f"starting a supervisor (asked by pid {os.getpid()})")
    logf = open(paths.daemon_log_file(), "ab")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "core.engine.supervisor"], stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=logf, start_new_session=True,
                                cwd=str(paths.home()), close_fds=True,
                                env={**os.environ, "PYTHONPATH": _package_parent()})
    finally:
        logf.close()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pid = running_pid()
        if pid:
            return pid
        if proc.poll() is not None:  # it found another one holding the lock, or failed
            return running_pid()
        time.sleep(0.02)
    return proc.pid


def supervise_live(store) -> int | None:
    """Start a supervisor when live jobs wait for one and none runs.

    A submit (or approve, or cancel) killed between committing its job and starting the
    supervisor would otherwise leave that job waiting for ever; every command that reads the
    store calls this, so the next look at the jobs (`gpu status`, `gpu jobs`, `gpu logs -f`,
    the dashboard) starts one. Cheap: one indexed query, and one lock probe only when there
    are live jobs."""
    from core.jobs.states import SUPERVISED

    if not store.jobs(states=SUPERVISED, limit=1):
        return None
    if running_pid():
        return None
    return ensure_running()


def log_line(level: str, text: str, now: float | None = None) -> None:
    """Append one line to the supervisor's log, in its own format (`gpu daemon` and its log
    show it beside the supervisor's lines), from any process. One O_APPEND write, so lines
    from several processes never interleave; a log that cannot be written is skipped."""
    from core.display.sanitize import printable

    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"
    line = f"{stamp} {level} {printable(text, single_line=True)}\n".encode()
    try:
        fd = os.open(paths.daemon_log_file(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        os.write(fd, line)
    except OSError:
        pass
    finally:
        os.close(fd)


def _package_parent() -> str:
    parent = str(Path(__file__).resolve().parents[2])
    existing = os.environ.get("PYTHONPATH")
    return os.pathsep.join([parent, existing]) if existing else parent


def wake(pid: int | None = None) -> None:
    pid = pid or running_pid()
    if pid:
        try:
            os.kill(pid, signal.SIGUSR2)
        except (ProcessLookupError, PermissionError):
            pass
