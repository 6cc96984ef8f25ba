"""Every process of one attempt, found and stopped: the one kill routine for every target.

A job may start processes that leave its process group and session (`setsid`, a double fork, a
library that daemonises), so signalling the group alone leaves them running after a cancel.
The launcher therefore tracks each attempt in up to two ways, chosen once when it starts:

- a cgroup v2 of its own (`gpu-router-<job id>-<attempt>` beside the launcher's cgroup) where
  the host has one this user may write (delegated, or root): the kernel keeps every descendant
  in it whatever it does to its session or environment, and `cgroup.kill` ends them together;
- always, a marker in the environment: everything the launcher starts gets
  GPU_ROUTER_JOB=<job id>:<attempt>, and a scan finds each process that still carries it
  (/proc/PID/environ on Linux; `ps` with the environment, `ps -E`, on macOS and elsewhere).

The marker misses a process that wiped its environment (`env -i`); the cgroup does not. Which
one an attempt got is recorded in its pid file and said in the job's log. `GPU_ROUTER_TRACKING=
marker` (in the launcher's environment) skips the cgroup.

Both the launcher (when the job ends: nothing it started outlives it) and `launch.py --kill`
(what every target runs to cancel) use `stop`/`sweep` here. Standard library only: this file
runs with the target's Python.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

MARKER_VAR = "GPU_ROUTER_JOB"
TRACKING_VAR = "GPU_ROUTER_TRACKING"
CGROUP_PREFIX = "gpu-router-"
SWEEP_GRACE_S = 3.0
# What a job's end leaves in the middle of exiting (bubblewrap's own process, a child a moment
# from its exit) is given this long to go by itself before it counts as left running.
SETTLE_S = 0.5
STALE_CGROUP_S = 600.0
# Inside a local job's sandbox (core/runtime/sandbox.py) this read-only file exists; the job
# cannot remove it (its mount is locked in the job's namespaces). One of the facts by which a
# process is judged to descend from a job (core/engine/jobguard.py).
SANDBOX_MARK = "/run/gpu-router-job"


def marker_for(job_id: str, attempt: int | str) -> str:
    return f"{job_id}:{attempt}"


# -- finding the attempt's processes -------------------------------------------------------


def environ_carries(blob: bytes, marker: str) -> bool:
    """Does a NUL-separated environment hold exactly MARKER_VAR=marker (not a longer value)?"""
    return f"{MARKER_VAR}={marker}".encode() in blob.split(b"\0")


def ps_line_carries(line: str, marker: str) -> bool:
    """The same question of a `ps` line, where the environment follows the command, by spaces."""
    return f"{MARKER_VAR}={marker}" in line.split()


def marked_pids(marker: str, source: str | None = None) -> set[int]:
    """Every process (but this one) whose environment carries the attempt's marker."""
    if source is None:
        source = "proc" if os.path.exists("/proc/self/environ") else "ps"
    found = _marked_in_proc(marker) if source == "proc" else _marked_in_ps(marker)
    found.discard(os.getpid())
    return found


def _marked_in_proc(marker: str) -> set[int]:
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                blob = f.read()
        except OSError:  # gone, or another user's
            continue
        if environ_carries(blob, marker):
            found.add(int(name))
    return found


def _marked_in_ps(marker: str) -> set[int]:
    cmd = (["ps", "-E", "-ww", "-ax", "-o", "pid=,command="] if sys.platform == "darwin"
           else ["ps", "axeww", "-o", "pid=,command="])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    found = set()
    for line in out.splitlines():
        pid, _, rest = line.strip().partition(" ")
        if pid.isdigit() and ps_line_carries(rest, marker):
            found.add(int(pid))
    return found


def process_args(pid: int) -> str | None:
    """A process's command line, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
    except OSError:
        pass
    try:
        out = subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.strip() or None


def exists(pid: int) -> bool:
    """A process with this pid exists (ours or another user's; a zombie too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped has ended and counts as gone)."""
    if not exists(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


# -- the attempt's cgroup ------------------------------------------------------------------


def _own_cgroup_dir() -> str | None:
    """This process's cgroup v2 folder, or None (no cgroup v2, or not Linux)."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((ln.strip()[3:] for ln in f if ln.startswith("0::")), None)
        with open("/proc/self/mountinfo") as f:
            mounts = [ln.split() for ln in f]
    except OSError:
        return None
    if rel is None:
        return None
    for fields in mounts:
        sep = fields.index("-") if "-" in fields else -1
        if sep > 0 and fields[sep + 1] == "cgroup2":
            root, point = fields[3], fields[4]
            if rel == root or rel.startswith(root.rstrip("/") + "/") or root == "/":
                inner = rel[len(root):] if root != "/" else rel
                return os.path.join(point, inner.lstrip("/"))
    return None


def cgroup_create(name: str) -> str | None:
    """A fresh cgroup for the attempt that this user may move processes into, or None."""
    if os.environ.get(TRACKING_VAR, "").lower() == "marker":
        return None
    own = _own_cgroup_dir()
    if own is None:
        return None
    _remove_stale(own)
    path = os.path.join(own, name)
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError:
        return None
    procs = os.path.join(path, "cgroup.procs")
    if not (os.access(procs, os.W_OK) and os.access(os.path.join(own, "cgroup.procs"), os.W_OK)):
        cgroup_remove(path)
        return None
    return path


def _remove_stale(own: str, min_age_s: float = STALE_CGROUP_S) -> None:
    """Empty attempt cgroups whose launcher was killed before it could remove them (an old,
    empty one belongs to no attempt: a starting one is seconds old, a running one has
    processes, and rmdir refuses a cgroup that has any)."""
    try:
        names = [n for n in os.listdir(own) if n.startswith(CGROUP_PREFIX)]
    except OSError:
        return
    now = time.time()
    for name in names:
        path = os.path.join(own, name)
        try:
            if now - os.stat(path).st_mtime > min_age_s and not cgroup_pids(path):
                cgroup_remove(path)
        except OSError:
            pass


def cgroup_join(path: str | None) -> None:
    """Move the calling process into the cgroup (a child's preexec step: never raises)."""
    if not path:
        return
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError:
        pass


def cgroup_pids(path: str) -> set[int]:
    """Every process in the cgroup and in any cgroup the job made below it."""
    found = set()
    for dirpath, _, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(dirpath, "cgroup.procs")) as f:
                    found |= {int(x) for x in f.read().split() if x.isdigit()}
            except OSError:
                pass
    return found


def cgroup_kill(path: str) -> bool:
    """SIGKILL everything in the cgroup at once (cgroup.kill, Linux 5.14+); False if not there."""
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")
        return True
    except OSError:
        return False


def cgroup_remove(path: str) -> None:
    """Remove the cgroup and any below it, once they are empty (otherwise leave them)."""
    for dirpath, _, _ in sorted(os.walk(path), key=lambda w: -len(w[0])):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass


# -- tracking set up by the launcher, and stopping --------------------------------------


def start_tracking(job_id: str, attempt: int | str) -> dict:
    """How this attempt's processes will be found: the marker, and a cgroup where possible."""
    mark = marker_for(job_id, attempt)
    cgroup = cgroup_create(f"{CGROUP_PREFIX}{job_id}-{attempt}")
    return {"marker": mark, "cgroup": cgroup, "tracking": "cgroup" if cgroup else "marker"}


def describe(record: dict) -> str:
    """One line for the job's log: which tracking this attempt got and what cancel will do."""
    if record.get("cgroup"):
        return (f"process tracking: cgroup {record['cgroup']} and the marker "
                f"{MARKER_VAR}={record['marker']}: cancel ends every process the job starts")
    return (f"process tracking: the marker {MARKER_VAR}={record['marker']} in each process's "
            "environment (no writable cgroup v2 here): cancel ends every process that carries it")


def tracked_pids(record: dict) -> set[int]:
    """The attempt's processes, by cgroup and by marker (never this process)."""
    pids: set[int] = set()
    if record.get("cgroup"):
        pids |= cgroup_pids(record["cgroup"])
    if record.get("marker"):
        pids |= marked_pids(record["marker"])
    pids.discard(os.getpid())
    return {p for p in pids if alive(p)}


def _send(pids: set[int], sig: int) -> int:
    sent = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def signal_group(record: dict, sig: int) -> int | None:
    """Signal the launcher's process group; returns the group signalled, or None. Only while
    the launcher recorded is alive and still carries its tag: a pid file outlives its
    attempt, and with pids wrapping (32768 on many hosts) its group number may by then be
    another program's. Every signal to a recorded group goes through here."""
    pid, tag = record.get("pid"), record.get("tag")
    if not (pid and alive(pid) and tag and tag in (process_args(pid) or "")):
        return None
    try:
        os.killpg(record["pgid"], sig)
    except (ProcessLookupError, PermissionError, KeyError):
        return None
    return record["pgid"]


def stop(record: dict, force: bool = False) -> int:
    """Signal every process of the attempt, the launcher included (SIGTERM, or SIGKILL with
    `force`); returns how many were signalled. The launcher's process group is signalled only
    while the launcher recorded there is still alive and still ours (`signal_group`)."""
    sig = signal.SIGKILL if force else signal.SIGTERM
    pid = record.get("pid")
    group = signal_group(record, sig)
    sent = 0 if group is None else 1
    if force and record.get("cgroup"):
        cgroup_kill(record["cgroup"])
    # each process once: those in the launcher's group have just had the signal
    return sent + _send({p for p in tracked_pids(record) - {pid} if _group_of(p) != group}, sig)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def sweep(record: dict, grace_s: float = SWEEP_GRACE_S, exclude: set[int] | None = None) -> int:
    """End what the attempt left running: SIGTERM, up to `grace_s` to exit, then SIGKILL.
    Returns how many processes were found."""
    # a zombie (the launcher, the job's subreaper, adopts what the job left, and reaps it when
    # it ends) has ended already: only the running count as left running
    found = {p for p in tracked_pids(record) - (exclude or set()) if alive(p)}
    settle = time.monotonic() + SETTLE_S  # one exiting on its own was not left running: "stopped
    while found and time.monotonic() < settle:  # 1 process(es)" read as the script's fault
        time.sleep(0.02)
        found = {p for p in found if alive(p)}
    if not found:
        return 0
    _send(found, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        left = {p for p in found if alive(p)}
        if not left:
            break
        time.sleep(0.05)
    if record.get("cgroup"):
        cgroup_kill(record["cgroup"])
    _send(tracked_pids(record) - (exclude or set()), signal.SIGKILL)
    return len(found)


def read_record(attempt_dir: str) -> dict | None:
    try:
        with open(os.path.join(attempt_dir, "pid")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def kill_attempt(attempt_dir: str, force: bool = False, log_path: str | None = None) -> dict:
    """Cancel one attempt: what `launch.py --kill` does on every target. Says what it did in
    the job's log (when `log_path` is given) and returns it."""
    record = read_record(attempt_dir)
    if record is None:
        return {"signalled": 0, "tracking": None}
    sent = stop(record, force=force)
    if force and record.get("cgroup"):
        cgroup_remove(record["cgroup"])  # only once empty; the launcher removes it otherwise
    result = {"signalled": sent, "tracking": record.get("tracking", "process group"),
              "signal": "SIGKILL" if force else "SIGTERM"}
    if log_path and sent:
        try:
            fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, (f"\n[gpu-router] cancel: sent {result['signal']} to {sent} "
                              f"process(es) of attempt {record.get('marker', '?')} "
                              f"(tracking: {result['tracking']})\n").encode())
            finally:
                os.close(fd)
        except OSError:
            pass
    return result
