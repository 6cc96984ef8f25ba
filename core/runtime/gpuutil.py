"""GPU utilisation measured beside the job, so the `gpu_util_below` kill rule has a figure
without the job's help.

While the job runs, a daemon thread of the launcher asks `nvidia-smi` once per interval
(`util_interval_s` in the attempt's spec: GPU_ROUTER_UTIL_INTERVAL_S where the supervisor runs,
default 30 s; the first look comes one interval after the job starts, since a GPU looked at
before the job has loaded anything says nothing) about the job's GPUs: those
CUDA_VISIBLE_DEVICES names (by nvidia-smi's index or by UUID), all of them when it is unset.
Each look appends one row to the job's metrics file, the way `gpu.log` does:
`gpu/util` (mean percent over those GPUs) and `gpu/mem_gb` (GiB in use, summed). The rows
travel as the job's own do (the supervisor reads the file; Kaggle and Modal relay it), so they
reach the store, `gpu metrics`, the charts and the kill rule on every target.

It never hurts the job: each call is bounded (CALL_TIMEOUT_S, after which its process group
is killed), and the first thing that goes wrong (a non-zero exit, a hang, output it cannot
read, none of the job's GPUs among the rows) ends sampling with one line in the job's log; no
nvidia-smi at all (a host without NVIDIA GPUs) ends it silently. A figure the job logs itself wins: once the job's own rows hold `gpu/util` (or
`gpu/mem_gb`), the sampler writes that key no more.

Standard library only: it runs with the target's Python, inside the launcher.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

UTIL_KEY = "gpu/util"
MEM_KEY = "gpu/mem_gb"
KEYS = (UTIL_KEY, MEM_KEY)
QUERY = ["--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total",
         "--format=csv,noheader,nounits"]
INTERVAL_VAR = "GPU_ROUTER_UTIL_INTERVAL_S"
DEFAULT_INTERVAL_S = 30.0
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600.0
CALL_TIMEOUT_S = 5.0
OUTPUT_CAP = 1 << 16  # nvidia-smi's answer for a few GPUs is a few hundred bytes
READ_CHUNK = 1 << 20
_ABSENT = ("", "[N/A]", "[Not Supported]", "N/A")


def interval_s(environ: Mapping[str, str]) -> float:
    """The sampling interval set by GPU_ROUTER_UTIL_INTERVAL_S (bounded), else the default."""
    try:
        value = float(environ.get(INTERVAL_VAR) or DEFAULT_INTERVAL_S)
    except ValueError:
        return DEFAULT_INTERVAL_S
    if value != value:  # NaN
        return DEFAULT_INTERVAL_S
    return min(max(value, MIN_INTERVAL_S), MAX_INTERVAL_S)


@dataclass(frozen=True)
class Reading:
    index: int
    uuid: str
    util: float | None  # percent; None where nvidia-smi says [N/A] (MIG mode, some boards)
    mem_used_mib: float | None
    mem_total_mib: float | None


def _number(text: str) -> float | None:
    if text in _ABSENT:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def parse(text: str) -> list[Reading]:
    """The rows of QUERY's answer (`0, GPU-…, 3, 1024, 81559`); lines of another shape are
    skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5 or not parts[1]:
            continue
        try:
            index = int(parts[0])
        except ValueError:
            continue
        out.append(Reading(index, parts[1], _number(parts[2]), _number(parts[3]), _number(parts[4])))
    return out


def visible(readings: list[Reading], cuda_visible: str | None) -> list[Reading]:
    """The GPUs a job with this CUDA_VISIBLE_DEVICES uses, read as CUDA reads it: unset means
    all; otherwise a comma-separated list of indexes or UUIDs (a unique prefix of one, `GPU-`
    included, is enough), cut at the first entry that names no GPU (so "" and "-1" mean none).
    Indexes are nvidia-smi's (PCI bus order), which is CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID."""
    if cuda_visible is None:
        return list(readings)
    chosen: list[Reading] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        found = _named(readings, entry)
        if found is None or found in chosen:
            break
        chosen.append(found)
    return chosen


def _named(readings: list[Reading], entry: str) -> Reading | None:
    if entry.isdigit():
        return next((r for r in readings if r.index == int(entry)), None)
    if entry.startswith("GPU-") and len(entry) > 4:
        hits = [r for r in readings if r.uuid.startswith(entry)]
        return hits[0] if len(hits) == 1 else None
    return None  # "-1", "", a MIG-… instance (its parent is not in these rows): no GPU


def row(readings: list[Reading], keys: tuple[str, ...] = KEYS, ts: float | None = None) -> dict:
    """One metrics row for these GPUs: `gpu/util` the mean percent, `gpu/mem_gb` the GiB in use
    summed; a key none of them reports is left out."""
    out: dict = {"ts": round(time.time() if ts is None else ts, 3)}
    utils = [r.util for r in readings if r.util is not None]
    mems = [r.mem_used_mib for r in readings if r.mem_used_mib is not None]
    if UTIL_KEY in keys and utils:
        out[UTIL_KEY] = round(sum(utils) / len(utils), 2)
    if MEM_KEY in keys and mems:
        out[MEM_KEY] = round(sum(mems) / 1024, 3)
    return out


class Stop(Exception):
    """Sampling ends, with the reason for the job's log."""


class NoTool(Stop):
    """No nvidia-smi: a host without NVIDIA GPUs, the usual case for a CPU job. Nothing goes in
    the job's log (every CPU job would carry the line); a gpu_util_below rule that therefore
    has no figure is said once in the job's events by the supervisor."""


class Sampler:
    """The thread that samples while the job runs: `start` when the job starts, `stop` when it
    has ended (that also ends a call in flight)."""

    def __init__(self, metrics_file: str, job_env: Mapping[str, str], say: Callable[[str], None],
                 interval: float, tool_env: Mapping[str, str] | None = None) -> None:
        self.metrics_file = metrics_file
        self.cuda_visible = job_env.get("CUDA_VISIBLE_DEVICES")
        self.tool_env = dict(tool_env if tool_env is not None else os.environ)
        # found on the launcher's own PATH, never the job's: it runs outside the sandbox, so a
        # job naming its own folder first would run its `nvidia-smi` as the person
        self.path = self.tool_env.get("PATH")
        self.say = say
        self.interval = interval
        self.done = threading.Event()
        self.lock = threading.Lock()  # the call in flight and the stop, one at a time
        self.proc: subprocess.Popen | None = None
        self.owned: set[str] = set()  # keys the job logs itself
        self.mine: set[bytes] = set()  # our rows written and not yet read back
        self.offset = _size(metrics_file)  # earlier attempts' rows are not this one's
        self.partial = b""
        self.exe: str | None = None
        self.thread = threading.Thread(target=self._loop, name="gpu-util", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        with self.lock:
            _kill(self.proc)
        if self.thread.ident is not None:
            self.thread.join(CALL_TIMEOUT_S + 1)

    def _loop(self) -> None:
        while not self.done.wait(self.interval):
            try:
                self._tick()
            except Stop as why:
                if not self.done.is_set() and not isinstance(why, NoTool):
                    self.say(f"GPU utilisation: {why}")
                return
            except Exception as exc:  # noqa: BLE001 - the job goes on whatever happens here
                if not self.done.is_set():
                    self.say(f"GPU utilisation: sampling stopped ({type(exc).__name__}: {exc})")
                return

    def _tick(self) -> None:
        readings = parse(self._query())
        if not readings:
            raise Stop("nvidia-smi listed no GPU; gpu/util is not sampled (a gpu_util_below "
                       "kill rule cannot fire unless the job logs gpu/util)")
        ours = visible(readings, self.cuda_visible)
        if not ours:
            raise Stop(f"CUDA_VISIBLE_DEVICES={self.cuda_visible[:80]!r} names none of the "
                       f"{len(readings)} GPU(s) nvidia-smi lists; gpu/util is not sampled")
        with self.lock:
            if self.done.is_set():
                return
            self._read_back()  # just before writing: a figure the job logged since wins
            keys = tuple(k for k in KEYS if k not in self.owned)
            if not keys:
                raise Stop("the job logs gpu/util and gpu/mem_gb itself; gpu-router's "
                           "sampler stops (the job's figures are the ones the kill rule reads)")
            doc = row(ours, keys)
            if len(doc) == 1:
                raise Stop("nvidia-smi reports no utilisation or memory for the job's GPUs "
                           "([N/A]); gpu/util is not sampled")
            line = json.dumps(doc, separators=(",", ":")).encode()
            _append(self.metrics_file, line + b"\n")
            self.mine.add(line)

    def _query(self) -> str:
        if self.exe is None:
            self.exe = shutil.which("nvidia-smi", path=self.path)
            if self.exe is None:
                raise NoTool("no nvidia-smi on this host")
        with self.lock:
            if self.done.is_set():
                return ""
            self.proc = subprocess.Popen([self.exe, *QUERY], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         env=self.tool_env, start_new_session=True, close_fds=True)
        proc = self.proc
        try:
            out, err = proc.communicate(timeout=CALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with self.lock:
                _kill(proc)
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
            raise Stop(f"nvidia-smi did not answer in {CALL_TIMEOUT_S:g} s; gpu/util is not "
                       "sampled any more") from None
        finally:
            with self.lock:
                self.proc = None
        if self.done.is_set():
            return ""
        if proc.returncode != 0:
            said = (err or out).decode("utf-8", "replace").strip().splitlines()
            raise Stop(f"nvidia-smi exited with status {proc.returncode}"
                       + (f" ({said[0][:160]})" if said else "") + "; gpu/util is not sampled")
        return out[:OUTPUT_CAP].decode("utf-8", "replace")

    def _read_back(self) -> None:
        """The metrics file's new lines: the job's own gpu/util or gpu/mem_gb (any line that
        names one and is not a row of ours) makes that key the job's."""
        try:
            with open(self.metrics_file, "rb") as f:
                f.seek(self.offset)
                while True:
                    chunk = f.read(READ_CHUNK)
                    if not chunk:
                        break
                    self.offset += len(chunk)
                    lines = (self.partial + chunk).split(b"\n")
                    self.partial = lines.pop()
                    for line in lines:
                        self._seen(line)
        except OSError:
            return
        if len(self.partial) > READ_CHUNK:  # a line without an end: look at what is there
            self._seen(self.partial)
            self.partial = b""

    def _seen(self, line: bytes) -> None:
        if line in self.mine:
            self.mine.discard(line)
            return
        for key in KEYS:
            if f'"{key}"'.encode() in line:
                self.owned.add(key)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _append(path: str, line: bytes) -> None:
    """One write of one small line with O_APPEND, as `gpu.log` writes: rows never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _kill(proc: subprocess.Popen | None) -> None:
    """End a call in flight and whatever it started (it leads its own session)."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def start(spec: dict, job_env: Mapping[str, str], say: Callable[[str], None],
          tool_env: Mapping[str, str] | None = None) -> Sampler | None:
    """A running sampler for this attempt, or None when it has no metrics file to write to."""
    metrics_file = (spec.get("env") or {}).get("GPU_ROUTER_METRICS_FILE")
    if not metrics_file:
        return None
    try:
        interval = float(spec.get("util_interval_s") or DEFAULT_INTERVAL_S)
    except (TypeError, ValueError):
        interval = DEFAULT_INTERVAL_S
    sampler = Sampler(metrics_file, job_env, say,
                      min(max(interval, MIN_INTERVAL_S), MAX_INTERVAL_S), tool_env)
    sampler.start()
    return sampler
