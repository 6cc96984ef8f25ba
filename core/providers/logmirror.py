"""The job's log and metrics, mirrored home from a target that shows only an attempt's standard
output (a Kaggle kernel's log, a Modal call's log stream).

On such a target core/runtime/relay.py prints the launcher's (already masked) log lines and the
metric rows behind METRIC_MARK. Here that text is split back into the two files, one pair per
attempt (each session's output starts empty), and the attempts are joined into `job.log` and
`metrics.jsonl` in the job's local folder, which only ever grow: the supervisor reads metrics
from a byte offset, so a file that shrank or changed under it would lose or repeat rows. A line
still being written is left for the next read.

What is new is appended (to the attempt's file and the joined one), never the whole rewritten:
a day's log was written whole every tick, and a `tail -f job.log` lost the file each time. A
joined file is rebuilt from the attempts' only where it is shorter than they are end to end (a
write cut off between the two appends); one longer keeps what is there (an attempt on another
target wrote its lines into job.log first) and new text goes on at its end.
"""

from __future__ import annotations

import asyncio
import os
import shutil
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


def _newer(path: Path, body: bytes, rows: bool) -> tuple[bytes, bool] | None:
    """What `body` (an attempt's fuller text) adds to the kept `path`: (bytes to append, False),
    or (the whole new text, True) where a log is no extension of what is kept; None when it
    adds nothing (an older, shorter read). Metric rows only ever extend what is kept: a fuller
    text that is not an extension (the stream had dropped a row) adds the rows it lacks at the
    end instead of rewriting the past."""
    old = path.read_bytes() if path.exists() else b""
    if len(body) <= len(old) and not rows:
        return None
    if body.startswith(old):
        return (body[len(old):], False) if len(body) > len(old) else None
    if not rows:
        return body, True
    kept = set(old.splitlines())
    extra = [line for line in body.splitlines() if line and line not in kept]
    if not extra:
        return None
    return (b"" if not old or old.endswith(b"\n") else b"\n") + b"\n".join(extra) + b"\n", False


def store(local_dir: Path, attempt: int, bodies: dict[str, bytes]) -> None:
    """Keep this attempt's text (where longer than what is kept; metric rows only appended) and
    add what it adds to the joined files."""
    d = local_dir / "mirror"
    d.mkdir(parents=True, exist_ok=True)
    for name, body in bodies.items():
        path = d / f"{attempt}.{name}"
        new = _newer(path, body, rows=name == "metrics")
        if new is None:
            continue
        if new[1]:
            tmp = path.with_name(path.name + ".part")
            tmp.write_bytes(new[0])
            os.replace(tmp, path)
            rejoin(local_dir, attempt)
        else:
            append(local_dir, attempt, {name: new[0]})


def append(local_dir: Path, attempt: int, added: dict[str, bytes]) -> None:
    """Text new at the end of an attempt's output, appended to its file and the joined one (made
    whole first where a write was cut off between the two)."""
    d = local_dir / "mirror"
    d.mkdir(parents=True, exist_ok=True)
    for name, body in added.items():
        if not body:
            continue
        path, joined = d / f"{attempt}.{name}", local_dir / NAMES[name]
        behind = _sizes(local_dir, attempt, name) - _size(joined)
        with open(path, "ab") as f:
            f.write(body)
        if behind > 0:
            rejoin(local_dir, attempt)
        else:
            with open(joined, "ab") as f:
                f.write(body)


def rejoin(local_dir: Path, attempt: int) -> None:
    """The joined files made whole again where they are shorter than the attempts' files end
    to end (a write cut off between its two appends); a longer one is kept."""
    d = local_dir / "mirror"
    for name, out in NAMES.items():
        joined = local_dir / out
        if _size(joined) >= _sizes(local_dir, attempt, name):
            continue
        tmp = joined.with_name(joined.name + ".part")
        with open(tmp, "wb") as f:
            for a in range(1, attempt + 1):
                if (d / f"{a}.{name}").exists():
                    with open(d / f"{a}.{name}", "rb") as src:
                        shutil.copyfileobj(src, f)
        os.replace(tmp, joined)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _sizes(local_dir: Path, attempt: int, name: str) -> int:
    return sum(_size(local_dir / "mirror" / f"{a}.{name}") for a in range(1, attempt + 1))


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
    thread) reads the attempt's output and calls `store`.

    `read_metrics` reads the joined metrics.jsonl, which holds every earlier attempt's rows
    (and those a local attempt appended there): a move onto such a target goes on reading
    where the job's read of that file stopped, never from 0 (`metrics_at_home`, read by
    core/engine/jobsteps.py: metrics_offset_for)."""

    metrics_at_home = True

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
