"""The supervisor's event loop never waits on SQLite: its store calls run on the store's own
thread, and a watchdog measures how late the loop runs (and logs any stall over 100 ms).

The proof uses a real lock: another connection holds SQLite's write lock for a second, the
way a CLI's transaction would, while the supervisor writes. The same write made on the loop
stalls it for that second, and the watchdog sees it (so the test can fail).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from core.engine.looplag import LagWatch, percentile
from core.jobs.store import Store
from core.engine.supervisor import Supervisor
from tests.conftest import gpu_json, make_git_project


def _held_job(tmp_path: Path) -> str:
    project = make_git_project(tmp_path / "p", {"a.py": "print(1)\n"})
    return gpu_json("submit", "a.py", "--wait-s", "0", cwd=project)["job"]["id"]  # no hours: held


def _hold_the_write_lock(path: str, seconds: float) -> threading.Thread:
    ready = threading.Event()

    def hold() -> None:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        ready.set()
        time.sleep(seconds)
        other.execute("COMMIT")
        other.close()

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    ready.wait(5)
    return t


async def _lag_while(write, watch: LagWatch) -> None:
    runner = asyncio.create_task(watch.run())
    await asyncio.sleep(0.2)
    await write()
    await asyncio.sleep(0.2)
    runner.cancel()


async def test_a_store_write_waiting_on_the_lock_does_not_stall_the_loop(home: Path, tmp_path: Path) -> None:
    job_id = _held_job(tmp_path)
    store = Store()
    sup = Supervisor(store=store, providers={})
    watch = LagWatch(None)
    holder = _hold_the_write_lock(store.path, 1.0)
    started = time.monotonic()
    await _lag_while(lambda: sup.db(store.add_event, job_id, "written from the supervisor"), watch)
    holder.join()
    assert time.monotonic() - started >= 1.0  # the write did wait for the lock ...
    assert watch.stalls == 0 and max(watch.samples) < 0.1, watch.stats()  # ... but not the loop
    assert any(e.reason == "written from the supervisor" for e in store.events(job_id))


async def test_the_same_write_on_the_loop_stalls_it_and_the_watchdog_says_so(
        home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    job_id = _held_job(tmp_path)
    store = Store()
    watch = LagWatch(None)
    holder = _hold_the_write_lock(store.path, 1.0)

    async def on_the_loop() -> None:
        store.add_event(job_id, "written on the loop")

    with caplog.at_level(logging.WARNING, logger="gpu-router.looplag"):
        await _lag_while(on_the_loop, watch)
    holder.join()
    assert watch.stalls >= 1 and watch.worst > 0.5, watch.stats()
    assert any("event loop stalled for" in r.getMessage() for r in caplog.records)


def test_percentiles_are_nearest_rank() -> None:
    values = [i / 1000 for i in range(1, 101)]
    assert percentile(values, 50) == 0.05 and percentile(values, 99) == 0.099
    assert percentile([], 99) == 0.0


@pytest.mark.slow  # the real supervisor under the installed `gpu` (the quick loop leaves it out)
def test_gpu_daemon_status_shows_the_running_supervisors_loop_lag(home: Path, tmp_path: Path) -> None:
    from tests.conftest import run_gpu

    _held_job(tmp_path)  # a live job: the supervisor stays up
    gpu_json("daemon", "--detach")
    deadline = time.monotonic() + 20
    doc: dict = {}
    while time.monotonic() < deadline:
        doc = gpu_json("daemon", "--status")
        if "loop_lag" in doc:
            break
        time.sleep(0.5)
    lag = doc["loop_lag"]
    assert lag["pid"] == doc["pid"] and lag["samples"] > 10 and lag["p99_ms"] >= lag["p50_ms"] >= 0
    assert "event loop lag: p50" in run_gpu("daemon", "--status").stdout
