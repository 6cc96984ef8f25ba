"""What the dashboard reads, off the UI thread: cheap change checks, then only what changed.

`PRAGMA data_version` tells whether any other process committed since the last look; only
then are the jobs updated since the newest timestamp seen read again. Metric points and log
lines are read incrementally too, so a tick costs the same with 10 or 10,000 jobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from core.display.logtail import Follower
from core.jobs.reader import Reader
from core.jobs.store import Job, Store


class StoreWatcher:
    """The job table's reads. Live, through the async read-only `Reader` (aiosqlite: the loop
    never waits on SQLite); `initial()` is the synchronous read of a still picture."""

    def __init__(self, store: Store | None = None, reader: Reader | None = None) -> None:
        self.store = store or Store()
        self.reader = reader or Reader(self.store.path)
        self.version: int | None = None
        self.rev = 0

    def initial(self, limit: int | None = None) -> list[Job]:
        self.version = self.store.data_version()
        jobs = self.store.jobs(limit=limit)
        self.rev = max((j.rev for j in jobs), default=0)
        return jobs

    async def load(self, between_chunks: Callable[[], None] | None = None) -> list[Job]:
        """Every job, newest first, read in chunks that yield to the loop (`between_chunks`
        called after each)."""
        self.version = await self.reader.data_version()
        jobs = await self.reader.jobs(between_chunks)
        self.rev = max((j.rev for j in jobs), default=0)
        return jobs

    async def changes(self) -> list[Job]:
        """Jobs written since the last call; [] without touching the jobs table if none were."""
        version = await self.reader.data_version()
        if version == self.version:
            return []
        self.version = version
        jobs = await self.reader.jobs_after(self.rev)
        if jobs:
            self.rev = jobs[-1].rev
        return jobs


@dataclass
class Series:
    steps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


class MetricsFeed:
    """One job's metric series, grown by the points added since the last read."""

    def __init__(self, store: Store | Reader, job_id: str) -> None:
        self.store = store
        self.job_id = job_id
        self.last_rowid = 0
        self.series: dict[str, Series] = {}
        self.read_once = False  # a read has answered: no series now means the job has no metric

    def read(self) -> bool:
        """The synchronous read (a `Store`: a still picture)."""
        return self._grow(self.store.metrics_after(self.job_id, self.last_rowid))  # type: ignore[arg-type]

    async def aread(self) -> bool:
        """The live read (a `Reader`): awaited, so the loop draws meanwhile."""
        return self._grow(await self.store.metrics_after(self.job_id, self.last_rowid))  # type: ignore[misc]

    def _grow(self, rows: list) -> bool:
        self.read_once = True
        if not rows:
            return False
        for rowid, key, step, value in rows:
            s = self.series.setdefault(key, Series())
            s.steps.append(step if step is not None else len(s.steps))
            s.values.append(value)
        self.last_rowid = rows[-1][0]
        return True


def downsample(xs: list[float], ys: list[float], width: int) -> tuple[list[float], list[float]]:
    """About 2 x width points: the min and max of each bucket, so spikes stay visible."""
    n = len(ys)
    buckets = max(1, width)
    if n <= 2 * buckets:
        return list(xs), list(ys)
    size = n / buckets
    out_x: list[float] = []
    out_y: list[float] = []
    for b in range(buckets):
        lo, hi = int(b * size), int((b + 1) * size)
        chunk = ys[lo:hi]
        if not chunk:
            continue
        mid = xs[(lo + hi - 1) // 2]
        out_x += [mid, mid]
        out_y += [min(chunk), max(chunk)]
    out_x.append(xs[-1])
    out_y.append(ys[-1])
    return out_x, out_y


def log10_series(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """log10 of the positive points, for a linear axis (plotext's own log axis crashes)."""
    pairs = [(x, math.log10(y)) for x, y in zip(xs, ys) if y > 0]
    return [p[0] for p in pairs], [p[1] for p in pairs]


class LogFeed:
    """The selected job's log: the last lines at once, then what is appended."""

    def __init__(self, path: Path, first: int = 2000) -> None:
        self.follower = Follower(path)
        self.first = first
        self.started = False

    def read(self) -> tuple[list[str], bool]:
        if not self.started:
            self.started = True
            return self.follower.start(self.first), True
        return self.follower.read()
