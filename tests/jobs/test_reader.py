"""The store's async read-only companion (core/jobs/reader.py), which the dashboard reads through."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.jobs.reader import Reader
from tui.dash.demo import seed


async def test_the_reader_reads_what_the_store_reads_and_cannot_write(home: Path) -> None:
    store = seed()
    reader = Reader(store.path)
    try:
        jobs = await reader.jobs()
        assert [j.id for j in jobs] == [j.id for j in store.jobs()]
        assert [j.id for j in await reader.jobs_after(0)] == [j.id for j in store.jobs_after(0)]
        some = jobs[0]
        assert (await reader.get(some.id)).to_json() == store.get(some.id).to_json()
        assert await reader.events(some.id) == store.events(some.id)
        curved = [j for j in jobs if store.metrics_summary(j.id)]
        assert curved, "the demo has a job with a curve"
        assert await reader.metrics_summary(curved[0].id) == store.metrics_summary(curved[0].id)
        assert await reader.metrics_after(curved[0].id) == [tuple(r) for r in store.metrics_after(curved[0].id)]
        before = await reader.data_version()
        store.update(some.id, reason="seen by the reader")
        assert await reader.data_version() != before  # another connection's commit is noticed
        db = await reader._conn()
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await db.execute("UPDATE jobs SET reason = 'x'")
        assert store.get(some.id).reason == "seen by the reader"
    finally:
        await reader.close()
