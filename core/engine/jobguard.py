"""Is this process a gpu-router job's? The one judgement every approval path asks.

A job runs code the person may never have read; if it could run `gpu approve` in a
pseudo-terminal with every agent marker dropped, it would pass for a person. So approving,
denying and setting the PIN are refused to any process that a job started, judged only from
facts the job cannot change about itself:

(a) its ancestors: a process running gpu-router's job launcher (`PYTHON .../runtime/
    launch.py .../spec.json`, also `--foreground` under Slurm and PBS; `--kill` is a cancel,
    not a job), or a `bwrap` that set up a job's sandbox (its argv binds SANDBOX_MARK). An
    ancestor's argv is fixed by the ancestor; the job cannot rewrite it. Linux reads
    /proc/PID/stat and /proc/PID/cmdline; macOS and the rest ask `ps`.
(b) its cgroup (Linux): the launcher puts every process of an attempt in a cgroup named
    `gpu-router-<job>-<attempt>` where it can (core/runtime/jobprocs.py); a process that
    double-forked and setsid'ed away from its parent chain is still in it.
(c) its namespaces: inside a local job's sandbox the read-only file SANDBOX_MARK exists; the
    pid namespace's first process (/proc/1) is our sandbox's bwrap (its argv binds the mark:
    Flatpak's bwrap, whose terminals a person may use, does not); and where the running
    supervisor is visible in /proc but sits in another pid namespace than this process, this
    process made or entered a namespace of its own (a person's terminal shares the
    supervisor's pid namespace, or, in a container or Flatpak with a /proc of its own, does
    not see the supervisor at all, so it is not compared).

GPU_ROUTER_JOB in the environment is an extra reason, never the only check: a job drops it
with `env -i`, and none of the facts above depends on it.

Why not compare with a namespace recorded in the store: the supervisor may be started from
any front (a person's toolbox, an agent's own sandbox), so a recorded namespace would refuse
people; the live comparison above only fires on a process that sees the supervisor's /proc
entry from a pid namespace of its own, which a person's terminal never does.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from core.runtime.jobprocs import CGROUP_PREFIX, MARKER_VAR, SANDBOX_MARK

MAX_DEPTH = 256  # parent chains are short; a loop in a hostile /proc must end


@dataclass(frozen=True)
class Origin:
    """Why this process is a job's, and which job when that can be told."""

    reason: str
    job_id: str | None = None


# -- parsing (pure: the hypothesis tests drive these) ----------------------------------------


def parse_stat(text: bytes) -> tuple[str, int] | None:
    """(comm, ppid) from a /proc/PID/stat line. comm is in parentheses and may itself hold
    parentheses, spaces and newlines, so it ends at the LAST ')'; the fields after it are
    state and ppid. None when the line is not of that shape."""
    left = text.find(b"(")
    right = text.rfind(b")")
    if left < 0 or right < left:
        return None
    fields = text[right + 1:].split()
    if len(fields) < 2 or not fields[1].lstrip(b"-").isdigit():
        return None
    return text[left + 1:right].decode(errors="replace"), int(fields[1])


def cgroup_job(text: str) -> str | None:
    """The attempt cgroup's name (`gpu-router-<job>-<attempt>`) in a /proc/PID/cgroup text,
    v1 or v2 lines alike (`ID:CONTROLLERS:PATH`), or None."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for component in parts[2].split("/"):
            if component.startswith(CGROUP_PREFIX):
                return component
    return None


def job_of_cgroup(name: str) -> str | None:
    """The job id in an attempt cgroup's name: `gpu-router-<job id>-<attempt>`."""
    rest = name[len(CGROUP_PREFIX):]
    job, sep, attempt = rest.rpartition("-")
    return job if sep and job and attempt.isdigit() else None


def launcher_spec(argv: list[str]) -> str | None:
    """The spec path a job launcher was started with, '' when it has none; None when argv is
    not a launcher's. A launcher runs `launch.py` from a gpu-router runtime folder (beside
    jobprocs.py, or under a folder named runtime); `--kill` runs a cancel, not a job."""
    if "--kill" in argv:
        return None
    for i, arg in enumerate(argv[1:5], start=1):
        path = Path(arg)
        if path.name != "launch.py":
            continue
        if "runtime" in path.parts[-3:-1] or (path.parent / "jobprocs.py").is_file():
            rest = [a for a in argv[i + 1:] if not a.startswith("-")]
            return rest[0] if rest else ""
    return None


def job_of_spec(spec: str) -> str | None:
    """A job id from a launcher's spec path: JOBS/<job id>/attempts/<n>/spec.json."""
    parts = Path(spec).parts
    if "attempts" in parts:
        at = len(parts) - 1 - parts[::-1].index("attempts")
        if at >= 1:
            return parts[at - 1]
    return None


def is_job_bwrap(argv: list[str], exe: str = "") -> bool:
    """A bwrap that made a job's sandbox: it is bwrap and binds the sandbox mark."""
    named = bool(argv) and (os.path.basename(argv[0]) == "bwrap" or os.path.basename(exe) == "bwrap")
    return named and SANDBOX_MARK in argv


# -- reading a process ----------------------------------------------------------------------


def _proc() -> bool:
    return os.path.isdir("/proc/self") and os.path.exists("/proc/self/stat")


def read_bytes(path: str) -> bytes | None:
    """A small file's bytes (a /proc entry), or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def process(pid: int) -> tuple[int, list[str], str] | None:
    """(ppid, argv, exe) of a process, or None when it cannot be read."""
    if _proc():
        stat = read_bytes(f"/proc/{pid}/stat")
        parsed = parse_stat(stat) if stat else None
        if parsed is None:
            return None
        raw = read_bytes(f"/proc/{pid}/cmdline") or b""
        argv = [a.decode(errors="replace") for a in raw.split(b"\0")[:-1 if raw.endswith(b"\0") else None]]
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            exe = ""
        return parsed[1], argv, exe
    try:
        out = subprocess.run(["ps", "-o", "ppid=,command=", "-p", str(pid)], capture_output=True,
                             text=True, errors="replace", timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    ppid, _, command = out.partition(" ")
    if not ppid.strip().isdigit():
        return None
    return int(ppid), command.split(), ""


def ancestors(pid: int | None = None) -> list[tuple[int, list[str], str]]:
    """(pid, argv, exe) of each ancestor of `pid` (this process by default), parent first."""
    pid = os.getpid() if pid is None else pid
    found = []
    seen = {pid}
    info = process(pid)
    while info is not None and len(found) < MAX_DEPTH:
        ppid = info[0]
        if ppid <= 0 or ppid in seen:
            break
        seen.add(ppid)
        info = process(ppid)
        if info is None:
            break
        found.append((ppid, info[1], info[2]))
    return found


# -- the facts ------------------------------------------------------------------------------


def by_ancestors(pid: int | None = None) -> Origin | None:
    return _launcher_among(ancestors(pid))


def _launcher_among(chain: list[tuple[int, list[str], str]]) -> Origin | None:
    for apid, argv, exe in chain:
        spec = launcher_spec(argv)
        if spec is not None:
            job = job_of_spec(spec) if spec else None
            return Origin(f"it descends from the job launcher (pid {apid}"
                          + (f", job {job}" if job else "") + ")", job)
        if is_job_bwrap(argv, exe):
            return Origin(f"it descends from a job's sandbox (bwrap, pid {apid})")
    return None


def by_cgroup(text: str | None = None) -> Origin | None:
    if text is None:
        raw = read_bytes("/proc/self/cgroup")
        if raw is None:
            return None
        text = raw.decode(errors="replace")
    name = cgroup_job(text)
    if name is None:
        return None
    job = job_of_cgroup(name)
    return Origin(f"it is in a job's cgroup ({name})", job)


def by_namespace() -> Origin | None:
    if os.path.lexists(SANDBOX_MARK):
        return Origin(f"it is inside a job's sandbox ({SANDBOX_MARK} exists)", _mark_job())
    if _proc():
        raw = read_bytes("/proc/1/cmdline") or b""
        argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        if is_job_bwrap(argv):
            return Origin("it is inside a job's sandbox (its pid namespace was made by bwrap for a job)")
        other = _supervisor_elsewhere()
        if other:
            return Origin(other)
    return None


def _mark_job() -> str | None:
    """The job id the sandbox wrote into its mark, if it wrote one (`<job id>:<attempt>`)."""
    raw = read_bytes(SANDBOX_MARK) or b""
    first = raw.decode(errors="replace").strip().split()
    return first[0].split(":")[0] if first and first[0].split(":")[0] else None


def _supervisor_elsewhere() -> str | None:
    """Where the running supervisor is visible in this /proc as the supervisor, but its pid
    namespace is not ours: this process is in a namespace a job made."""
    from core import paths

    try:
        pid = int(paths.daemon_lock_file().read_text().strip() or 0)
    except (OSError, ValueError):
        return None
    if pid <= 1 or pid == os.getpid():
        return None
    raw = read_bytes(f"/proc/{pid}/cmdline") or b""
    if b"core.engine.supervisor" not in raw:
        return None
    try:
        theirs, ours = os.readlink(f"/proc/{pid}/ns/pid"), os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    if theirs != ours:
        return f"it is in another pid namespace than the supervisor ({ours}, not {theirs})"
    return None


def by_environment() -> Origin | None:
    mark = os.environ.get(MARKER_VAR, "")
    if mark:
        return Origin(f"{MARKER_VAR} is set in its environment", mark.split(":")[0] or None)
    return None


def detect(pid: int | None = None) -> Origin | None:
    """The first fact that makes this process a job's, or None. Cheap: a few small reads of
    /proc per ancestor (a `ps` per ancestor off Linux)."""
    for check in (by_namespace, by_cgroup, lambda: by_ancestors(pid), by_environment):
        found = check()
        if found is not None:
            return found
    return None


def peer_origin(pid: int) -> Origin | None:
    """The facts of `detect`, asked of another process (a warm server's client, by the pid the
    kernel gave its socket): its ancestors, its cgroup, its sandbox mark as its root sees it,
    and its namespaces, which must be this process's own. A process that cannot be read is
    counted as a job's (fail closed: its command then runs in its own process and is judged
    there)."""
    if not _proc():
        return Origin("its process cannot be read here")
    chain = ancestors(pid)  # walked once: this runs before every warm request
    found = _launcher_among(chain)
    if found is not None:
        return found
    top = process(chain[-1][0] if chain else pid)
    if top is None or (top[0] > 0 and len(chain) < MAX_DEPTH):
        return Origin("its ancestors cannot all be read")
    raw = read_bytes(f"/proc/{pid}/cgroup")
    if raw is None:
        return Origin("its cgroup cannot be read")
    found = by_cgroup(raw.decode(errors="replace"))
    if found is not None:
        return found
    try:
        os.lstat(f"/proc/{pid}/root{SANDBOX_MARK}")
        return Origin(f"it is inside a job's sandbox ({SANDBOX_MARK} exists)")
    except FileNotFoundError:
        pass
    except OSError:
        return Origin("its root cannot be looked into")
    for ns in ("pid", "mnt", "user"):
        try:
            theirs, ours = os.readlink(f"/proc/{pid}/ns/{ns}"), os.readlink(f"/proc/self/ns/{ns}")
        except OSError:
            return Origin(f"its {ns} namespace cannot be read")
        if theirs != ours:
            return Origin(f"it is in another {ns} namespace ({theirs}, not {ours})")
    return None


def job_origin() -> str | None:
    """The reason this process is a job's, or None when it is not."""
    found = detect()
    return found.reason if found else None

