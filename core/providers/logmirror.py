"""The job's log and metrics, mirrored home from a target that shows only an attempt's standard
output (a Kaggle kernel's log, a Modal call's log stream).

On such a target core/runtime/relay.py prints the launcher's (already masked) log lines and the
metric rows behind METRIC_MARK. Here that text is split back into the two files, one pair per
attempt (each session's output starts empty), and the attempts are joined into `job.log` and
`metrics.jsonl` in the job's local folder, which only ever grow: the supervisor reads metrics
from a byte offset, so a file that shrank or changed under it would lose or repeat rows. A line
still being written is left for the next read.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from core import paths
from core.jobs.store import Job
from core.runtime.relay import METRIC_MARK

NAMES = {"log": "job.log", "metrics": "metrics.jsonl"}


def split(text: str) -> dict[str, bytes]:
    """Relayed standard output as {"log": ..., "metrics": ...}, whole lines only."""
    text = text[: text.rfind("\n") + 1]
    lines: list[str] = []
    metrics: list[str] = []
    for line in text.splitlines():
        (metrics if line.startswith(METRIC_MARK) else lines).append(line.removeprefix(METRIC_MARK))
    return {name: ("\n".join(rows) + "\n").encode() if rows else b""
            for name, rows in (("log", lines), ("metrics", metrics))}


def _grow(path: Path, body: bytes) -> None:
    if not path.exists() or path.stat().st_size < len(body):
        tmp = path.with_suffix(path.suffix + ".part")
        tmp.write_bytes(body)
        os.replace(tmp, path)


def _extend(path: Path, body: bytes) -> None:
    """Metric rows only ever extend what is kept: the supervisor has read up to a byte offset
    in it. A later, fuller text of the attempt (its result) that is not an extension (the
    stream had dropped a row) adds the rows it lacks at the end instead of rewriting the past."""
    old = path.read_bytes() if path.exists() else b""
    if body.startswith(old):
        _grow(path, body)
        return
    kept = set(old.splitlines())
    extra = [line for line in body.splitlines() if line and line not in kept]
    if extra:
        _grow(path, old + b"\n".join(extra) + b"\n")


def store(local_dir: Path, attempt: int, bodies: dict[str, bytes]) -> None:
    """Keep this attempt's text (longer than what is kept; metric rows only appended) and
    rebuild the joined files."""
    d = local_dir / "mirror"
    d.mkdir(parents=True, exist_ok=True)
    for name, body in bodies.items():
        (_extend if name == "metrics" else _grow)(d / f"{attempt}.{name}", body)
    for name, out in NAMES.items():
        whole = b"".join((d / f"{a}.{name}").read_bytes() for a in range(1, attempt + 1)
                         if (d / f"{a}.{name}").exists())
        _grow(local_dir / out, whole)


def add_missing(local_dir: Path, rows: bytes) -> int:
    """Metric rows the job's own file has (read from the target after a session ended without
    handing its output back: rows written in its last moments never reached the stream) that
    no attempt's kept text has, appended to the newest attempt's text, so the joined file only
    grows at its end. Returns how many were added."""
    d = local_dir / "mirror"
    kept: set[bytes] = set()
    newest = 0
    for f in d.glob("*.metrics") if d.is_dir() else []:
        kept.update(f.read_bytes().splitlines())
        stem = f.name.split(".", 1)[0]
        newest = max(newest, int(stem) if stem.isdigit() else 0)
    extra = [line for line in rows.splitlines() if line.strip() and line not in kept]
    if not extra or newest == 0:
        return 0
    path = d / f"{newest}.metrics"
    old = path.read_bytes()
    store(local_dir, newest, {"metrics": old + (b"" if not old or old.endswith(b"\n") else b"\n")
                              + b"\n".join(extra) + b"\n"})
    return len(extra)


class MirroredLog:
    """`log_path`, `sync_log` and `read_metrics` for a provider whose `_sync(job)` (run in a
    thread) reads the attempt's output and calls `store`."""

    def local_dir(self, job: Job) -> Path:
        return paths.jobs_dir() / job.id

    def log_path(self, job: Job) -> Path:
        return self.local_dir(job) / "job.log"

    async def sync_log(self, job: Job) -> None:
        try:
            await asyncio.to_thread(self._sync, job)
        except Exception:  # noqa: BLE001 - a log that cannot be read now is read next tick
            pass

    async def read_metrics(self, job: Job, offset: int) -> tuple[bytes, int]:
        path = self.local_dir(job) / "metrics.jsonl"
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return b"", offset
        end = data.rfind(b"\n") + 1
        return data[:end], offset + end
