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
from core.jobs.store import (EVENTS_SQL, JOBS_AFTER_SQL, JOBS_ALL_SQL, METRIC_POINT_SQL, METRICS_AFTER_SQL,
                             METRICS_SUMMARY_SQL, Event, Job)

CHUNK = 256  # rows turned into Jobs between yields to the loop (about 5 ms of parsing)


class Reader:
    """Short read-only queries, awaited. Open lazily on the loop that uses it; `close()` it
    (aiosqlite's thread is not a daemon: an open reader keeps the process alive)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path or paths.db_file())
        self._db: aiosqlite.Connection | None = None
        self._opening = asyncio.Lock()

    async def _conn(self) -> aiosqlite.Connection:
        async with self._opening:
            if self._db is None:
                # the Store that made the file has set WAL; a read-only connection reads it
                db = await aiosqlite.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                             timeout=60)
                db.row_factory = sqlite3.Row
                await db.execute("PRAGMA busy_timeout = 60000")
                self._db = db
            return self._db

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    async def data_version(self) -> int:
        """Changes whenever another connection commits: the cheap "did anything change?"."""
        db = await self._conn()
        async with db.execute("PRAGMA data_version") as cur:
            return (await cur.fetchone())[0]

    async def _jobs(self, sql: str, args: tuple = (), between: Callable[[], None] | None = None
                    ) -> list[Job]:
        db = await self._conn()
        out: list[Job] = []
        async with db.execute(sql, args) as cur:
            while rows := await cur.fetchmany(CHUNK):
                out += [Job.from_row(r) for r in rows]
                if between is not None:
                    between()
                await asyncio.sleep(0)  # let the loop draw between chunks
        return out

    async def jobs(self, between_chunks: Callable[[], None] | None = None) -> list[Job]:
        """Every job, newest first (as `Store.jobs()`). `between_chunks` is called after each
        chunk of rows is turned into Jobs (the dashboard keeps them out of the garbage
        collector's full passes there: tui/dash/jobindex.keep_from_gc)."""
        return await self._jobs(JOBS_ALL_SQL, between=between_chunks)

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
        async with db.execute(EVENTS_SQL, (job_id,)) as cur:
            return [Event.from_row(r) for r in await cur.fetchall()]

    async def metrics_after(self, job_id: str, after_rowid: int = 0, limit: int = 200_000
                            ) -> list[tuple[int, str, int | None, float]]:
        """(rowid, key, step, value) of points newer than `after_rowid`, as `Store.metrics_after`."""
        db = await self._conn()
        async with db.execute(METRICS_AFTER_SQL, (job_id, after_rowid, limit)) as cur:
            return [tuple(r) for r in await cur.fetchall()]

    async def metrics_summary(self, job_id: str) -> dict[str, dict[str, Any]]:
        """Per key: points, min, max, last value and last step (as `Store.metrics_summary`)."""
        db = await self._conn()
        out: dict[str, dict[str, Any]] = {}
        async with db.execute(METRICS_SUMMARY_SQL, (job_id,)) as cur:
            groups = await cur.fetchall()
        for key, n, lo, hi, last_id in groups:
            async with db.execute(METRIC_POINT_SQL, (last_id,)) as cur:
                step, value = await cur.fetchone()
            out[key] = {"points": n, "min": lo, "max": hi, "last": value, "last_step": step}
        return out
