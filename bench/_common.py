"""Shared helpers for the benchmark scripts: a private gpu-router world, timing, cleanup.

Every script calls `private_world()` first: it points GPU_ROUTER_HOME and GPU_ROUTER_CONFIG
at a fresh temporary directory (so the user's real store, bundles and config are never
touched) and registers a cleanup that stops the supervisor it may have started and kills
any job process group still alive, then deletes the directory.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core.runtime.jobprocs import exists as _alive  # the local target's liveness check

REPO = Path(__file__).resolve().parent.parent


def parse_small(parser: argparse.ArgumentParser, small: dict) -> argparse.Namespace:
    """Parse the command line, with `--small`: the same code path on tiny inputs (`small`, the
    option values it sets), in seconds. tests/project/test_benches.py runs every bench so, so none rots:
    the figures still print, no target is judged, and anything broken still exits non-zero."""
    parser.add_argument("--small", action="store_true",
                        help="CI mode: the same code path on tiny inputs, in seconds (figures "
                             "printed, targets not judged)")
    args = parser.parse_args()
    if args.small:
        for key, value in small.items():
            setattr(args, key, value)
    return args


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def gpu_cmd() -> list[str]:
    """`gpu` as found on PATH (what a user or agent types)."""
    found = shutil.which("gpu")
    if not found:
        sys.exit("the `gpu` command is not on PATH: pip install -e . first")
    return [found]


def gpu_shim() -> list[str] | None:
    """A version manager's shim for `gpu` (pyenv), if there is one: what an interactive shell
    on this machine runs when it types `gpu`. `python bench/x.py` through the pyenv shim puts
    the real bin dir first on PATH, so `which gpu` inside the script skips the shim."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    shim = root / "shims" / "gpu"
    return [str(shim)] if shim.is_file() and os.access(shim, os.X_OK) else None


def gpu_entry_point() -> list[str]:
    """The installed console script itself, bypassing a version-manager shim (pyenv) if any."""
    cand = Path(sys.executable).parent / "gpu"
    if cand.is_file():
        return [str(cand)]
    return gpu_cmd()


class World:
    def __init__(self, tmp: Path, keep: bool = False) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.config = tmp / "config.yaml"
        self.keep = keep
        self._cleaned = False

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "GPU_ROUTER_HOME": str(self.home),
                "GPU_ROUTER_CONFIG": str(self.config), **extra}

    def set_home(self, home: Path) -> None:
        """Point this process (and its children) at another private home, e.g. a cold one."""
        self.home = home
        os.environ["GPU_ROUTER_HOME"] = str(home)

    def write_config(self, text: str) -> None:
        self.config.write_text(text)

    def supervisor_pid(self) -> int | None:
        lock = self.home / "supervisor.lock"
        try:
            pid = int(lock.read_text().strip() or 0)
        except (OSError, ValueError):
            return None
        if pid and _alive(pid):
            return pid
        return None

    def job_pids(self) -> list[dict]:
        out = []
        for pid_file in self.home.glob("jobs/*/attempts/*/pid"):
            try:
                out.append(json.loads(pid_file.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def cleanup(self) -> None:
        if self._cleaned:
            return
        self._cleaned = True
        homes = sorted({self.home, *self.tmp.glob("home*")})
        for home in homes:
            if not home.is_dir():
                continue
            env = {**os.environ, "GPU_ROUTER_HOME": str(home), "GPU_ROUTER_CONFIG": str(self.config)}
            lock = home / "supervisor.lock"
            pid = None
            try:
                pid = int(lock.read_text().strip() or 0) or None
            except (OSError, ValueError):
                pass
            subprocess.run(gpu_entry_point() + ["daemon", "--stop", "--json"], env=env,
                           capture_output=True, timeout=60)
            if pid:
                deadline = time.monotonic() + 30
                while _alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if _alive(pid) and _is_supervisor(pid):
                    os.kill(pid, signal.SIGKILL)
            killed = 0
            for pid_file in home.glob("jobs/*/attempts/*/pid"):
                try:
                    doc = json.loads(pid_file.read_text())
                except (OSError, ValueError):
                    continue
                pgid = doc.get("pgid")
                if pgid and pgid > 1 and _group_alive(pgid):
                    try:
                        os.killpg(pgid, signal.SIGKILL)
                        killed += 1
                    except (ProcessLookupError, PermissionError):
                        pass
            if killed:
                log(f"cleanup: killed {killed} leftover job process group(s) under {home}")
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def private_world(prefix: str) -> World:
    tmp = Path(tempfile.mkdtemp(prefix=f"gpu-bench-{prefix}-"))
    world = World(tmp, keep=bool(os.environ.get("BENCH_KEEP")))
    world.home.mkdir()
    world.config.write_text("{}\n")
    os.environ["GPU_ROUTER_HOME"] = str(world.home)
    os.environ["GPU_ROUTER_CONFIG"] = str(world.config)
    os.environ.pop("GPU_ROUTER_TICK_S", None)  # the default tick unless a script sets one
    atexit.register(world.cleanup)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(1))
    log(f"private world: GPU_ROUTER_HOME={world.home} GPU_ROUTER_CONFIG={world.config}")
    return world


def live_groups(pgids: set[int]) -> set[int]:
    """The process groups among `pgids` that still hold a process that is not a zombie.

    (`killpg(pgid, 0)` also succeeds for a group of zombies, and PID 1 here may take a second
    or more to reap an orphaned launcher.)"""
    alive: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgid = fields[0], int(fields[2])
        if pgid in pgids and state not in ("Z", "X"):
            alive.add(pgid)
    return alive


def _group_alive(pgid: int) -> bool:
    return bool(live_groups({pgid}))


def _is_supervisor(pid: int) -> bool:
    try:
        return b"core.engine.supervisor" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=bench@example.com", "-c", "user.name=bench",
                    "-c", "commit.gpgsign=false", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL)


def committed_project(root: Path, files: dict[str, str]) -> Path:
    """A new git project at `root` holding `files` (path: text), all committed: what a bench
    submits."""
    root.mkdir(parents=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "bench project")
    return root


def timed(cmd: list[str] | str, *, env: dict | None = None, cwd: Path | None = None,
          shell: bool = False, check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, shell=shell, capture_output=True)
    dt = time.perf_counter() - t0
    if check and out.returncode != 0:
        raise RuntimeError(f"{cmd!r} failed ({out.returncode}): "
                           f"{out.stderr.decode(errors='replace')[-2000:]}")
    return dt, out


def timed_cpu(cmd: list[str], *, env: dict | None = None, cwd: Path | None = None,
              check: bool = True) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds, result): the CPU is user+sys of the command and every child
    it waited for (getrusage(RUSAGE_CHILDREN) around it), which a loaded machine inflates far
    less than the wall clock."""
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    dt, out = timed(cmd, env=env, cwd=cwd, check=check)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return dt, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), out


def stats_ms(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p90 = ms[max(0, math.ceil(0.9 * len(ms)) - 1)]  # nearest rank
    return (f"median {statistics.median(ms):7.1f} ms  p90 {p90:7.1f} ms  "
            f"min {ms[0]:7.1f} ms  max {ms[-1]:7.1f} ms  (n={len(ms)})")


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def gpu_doc(*args: str, input: str | None = None, check: bool = True) -> dict:
    """Run the installed `gpu` and read its JSON answer (an empty dict when it printed none)."""
    out = subprocess.run(gpu_entry_point() + list(args), capture_output=True, text=True, timeout=600,
                         input=input)
    if check and out.returncode != 0:
        raise SystemExit(f"gpu {' '.join(args)} failed: {out.stderr}")
    return json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}


def make_code_project(root: Path, files: int, mb: float, job: str) -> Path:
    """A committed git project of `files` Python files (~`mb` MB, half incompressible) and job.py."""
    root.mkdir(parents=True)
    per = int(mb * 1024 * 1024 / files)
    for i in range(files):
        d = root / "pkg" / f"m{i % 40}"
        d.mkdir(parents=True, exist_ok=True)
        body = os.urandom(per // 2).hex() if i % 2 else ("x = 1\n" * (per // 6))
        (d / f"f{i}.py").write_text(f"# file {i}\n{body}\n")
    (root / "job.py").write_text(job)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "bench")
    return root
