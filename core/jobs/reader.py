"""The store's async read-only companion, for a UI on an event loop (the dashboard).

`Store` is synchronous: its queries block the thread that calls them, which is right for the
supervisor (its own store thread) and the CLI, and wrong for an event loop that must draw a
frame every 16 ms. `Reader` runs the same read queries through aiosqlite (a connection on its
own thread; awaiting it never blocks the loop), on a connection opened read-only
(`mode=ro`): whatever the UI does, it cannot write the store. Large reads come in chunks with
a yield to the loop between them, so even turning rows into `Job`s (JSON parsing) never holds
the loop for long.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any, Callable

import aiosqlite

from core import paths
from core.errors import NotFound
from core.jobs.records import Event, Job
from core.jobs.schema import (EVENTS_SQL, JOBS_AFTER_SQL, JOBS_ALL_SQL, METRIC_POINT_SQL, METRICS_AFTER_SQL,
                              METRICS_SUMMARY_SQL)

CHUNK = 256  # rows turned into Jobs between yields to the loop (about 5 ms of parsing)


class Reader:
    """Short read-only queries, awaited. Open lazily on the loop that uses it; `close()` it
    (aiosqlite's thread is not a daemon: an open reader keeps the process alive)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path or paths.db_file())
        self._db: aiosqlite.Connection | None = None
        self._opening = asyncio.Lock()
        self._closed = False

    async def _conn(self) -> aiosqlite.Connection:
        async with self._opening:
            if self._closed:
                # the UI is closing: a read that starts now has no one to read for; ending it as
                # cancelled (not as an error) lets a worker caught mid-way end quietly
                raise asyncio.CancelledError("the reader is closed")
            if self._db is None:
                # the Store that made the file has set WAL; a read-only connection reads it
                db = await aiosqlite.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                             timeout=60)
                db.row_factory = sqlite3.Row
                await db.execute("PRAGMA busy_timeout = 60000")
                self._db = db
            return self._db

    async def close(self) -> None:
        self._closed = True
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    # Each aiosqlite call is a hop to its thread and back (a queue, then a wake-up of the
    # loop): execute, fetch and close are three. The dashboard's tick makes two reads, so
    # they go as one hop each (execute_fetchall); on a loaded machine each hop waits for the
    # scheduler, and the tick's wall time was mostly these waits.

    async def data_version(self) -> int:
        """Changes whenever another connection commits: the cheap "did anything change?"."""
        db = await self._conn()
        return (await db.execute_fetchall("PRAGMA data_version"))[0][0]  # type: ignore[index]

    async def _jobs(self, sql: str, args: tuple = ()) -> list[Job]:
        """A few rows (a tick's changes, one job), fetched in one hop, turned into Jobs in
        chunks that yield to the loop (after a long pause there may be many)."""
        db = await self._conn()
        rows = list(await db.execute_fetchall(sql, args))
        out: list[Job] = []
        for start in range(0, len(rows), CHUNK):
            if start:
                await asyncio.sleep(0)  # let the loop draw between chunks
            out += [Job.from_row(r) for r in rows[start:start + CHUNK]]
        return out

    async def jobs(self, between_chunks: Callable[[], None] | None = None) -> list[Job]:
        """Every job, newest first (as `Store.jobs()`), fetched and parsed a chunk at a time
        (the rows of 100,000 jobs are never all held at once). `between_chunks` is called
        after each chunk is turned into Jobs (the dashboard keeps them out of the garbage
        collector's full passes there: tui/dash/jobindex.keep_from_gc)."""
        db = await self._conn()
        out: list[Job] = []
        async with db.execute(JOBS_ALL_SQL) as cur:
            while rows := await cur.fetchmany(CHUNK):
                out += [Job.from_row(r) for r in rows]
                if between_chunks is not None:
                    between_chunks()
                await asyncio.sleep(0)  # let the loop draw between chunks
        return out

    async def jobs_after(self, rev: int) -> list[Job]:
        """Jobs written after revision `rev`, oldest write first (as `Store.jobs_after`)."""
        return await self._jobs(JOBS_AFTER_SQL, (rev,))

    async def get(self, job_id: str) -> Job:
        found = await self._jobs("SELECT * FROM jobs WHERE id = ?", (job_id,))
        if not found:
            raise NotFound(f"no job {job_id}")
        return found[0]

    async def events(self, job_id: str) -> list[Event]:
        db = await self._conn()
        return [Event.from_row(r) for r in await db.execute_fetchall(EVENTS_SQL, (job_id,))]

    async def metrics_after(self, job_id: str, after_rowid: int = 0, limit: int = 200_000
                            ) -> list[tuple[int, str, int | None, float]]:
        """(rowid, key, step, value) of points newer than `after_rowid`, as `Store.metrics_after`."""
        db = await self._conn()
        # one hop, and no cursor left to close: a read cancelled as the app closes (its
        # reader closed meanwhile) once failed closing its cursor on the closed database
        return [tuple(r) for r in await db.execute_fetchall(METRICS_AFTER_SQL, (job_id, after_rowid, limit))]

    async def metrics_summary(self, job_id: str) -> dict[str, dict[str, Any]]:
        """Per key: points, min, max, last value and last step (as `Store.metrics_summary`)."""
        db = await self._conn()
        out: dict[str, dict[str, Any]] = {}
        groups = await db.execute_fetchall(METRICS_SUMMARY_SQL, (job_id,))
        for key, n, lo, hi, last_id in groups:
            step, value = (await db.execute_fetchall(METRIC_POINT_SQL, (last_id,)))[0]  # type: ignore[index]
            out[key] = {"points": n, "min": lo, "max": hi, "last": value, "last_step": step}
        return out
