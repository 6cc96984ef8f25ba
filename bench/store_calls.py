"""The supervisor's store calls three ways, side by side: on the loop, on the store thread, and
through aiosqlite (the peer).

    pip install aiosqlite && python bench/store_calls.py [--jobs 200] [--rounds 10]

Each round does, for every job at once (asyncio.gather), what a supervisor tick does for a
running job: read the job, then append 5 metric rows and move its read offset in one write
transaction. Three ways:
  - loop: the Store's own methods called on the event loop (what the supervisor did before);
  - thread: the same methods through core/jobs/storethread.py (what it does now: one thread
    owns the connection, one hop per call, the store's rules unchanged);
  - aiosqlite: the same SQL through aiosqlite 0.22 (its thread, one hop per statement; the
    transition rules would have to be written a second time in this form).
Figures per way: calls per second, the loop's lag while they run (p50/p99/max, sampled every
10 ms by a task on the same loop), and the process CPU. Then each way again while another
process holds SQLite's write lock for 1 s, the case the store thread exists for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import parse_small, log, private_world  # noqa: E402

HOLD_S = 1.0


class LagSampler:
    def __init__(self) -> None:
        self.samples: list[float] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            self.samples.append(max(0.0, (time.perf_counter() - t - 0.01) * 1000))

    def __enter__(self) -> "LagSampler":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc) -> None:
        assert self._task is not None
        self._task.cancel()

    def figures(self) -> str:
        s = sorted(self.samples) or [0.0]
        pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
        return f"lag p50 {pick(0.5):6.1f} ms  p99 {pick(0.99):6.1f} ms  max {s[-1]:7.1f} ms"


def _jobs(store, n: int) -> list[str]:
    ids = []
    for i in range(n):
        job_id = f"{i:032x}"
        store.insert_job({"id": job_id, "short_id": job_id[-8:], "name": "bench", "project_dir": "/p",
                          "outputs_dir": "/p/runs", "fingerprint": str(i), "request": {}, "plan": {},
                          "bundle": {}, "handle": {}}, reason="bench", actor="cli")
        ids.append(job_id)
    return ids


def _rows(round_no: int) -> list[tuple[int, str, float, float]]:
    return [(round_no * 5 + k, "loss", 1.0 / (k + 1), time.time()) for k in range(5)]


async def way_loop(store, ids: list[str], rounds: int) -> None:
    async def one(job_id: str, r: int) -> None:
        store.get(job_id)
        store.add_metrics(job_id, _rows(r), r * 100, {"loss": 0.5})
    for r in range(rounds):
        await asyncio.gather(*(one(j, r) for j in ids))


async def way_thread(store, ids: list[str], rounds: int) -> None:
    from core.jobs.storethread import StoreThread

    db = StoreThread()

    async def one(job_id: str, r: int) -> None:
        await db(store.get, job_id)
        await db(store.add_metrics, job_id, _rows(r), r * 100, {"loss": 0.5})
    try:
        for r in range(rounds):
            await asyncio.gather(*(one(j, r) for j in ids))
    finally:
        db.close()


async def way_aiosqlite(path: Path, ids: list[str], rounds: int) -> None:
    import aiosqlite

    async with aiosqlite.connect(path, isolation_level=None, timeout=60) as conn:
        conn.row_factory = sqlite3.Row
        await conn.execute("PRAGMA busy_timeout = 60000")
        lock = asyncio.Lock()  # one write transaction at a time on the one connection

        async def one(job_id: str, r: int) -> None:
            async with conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)) as cur:
                await cur.fetchone()
            async with lock:
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    await conn.executemany(
                        "INSERT INTO metrics (job_id, step, key, value, ts) VALUES (?, ?, ?, ?, ?)",
                        [(job_id, *row) for row in _rows(r)])
                    await conn.execute(
                        "UPDATE jobs SET metrics_offset = ?, last_metric_json = ?, "
                        "rev = (SELECT COALESCE(MAX(rev), 0) + 1 FROM jobs) WHERE id = ?",
                        (r * 100, json.dumps({"loss": 0.5}), job_id))
                    await conn.execute("COMMIT")
                except BaseException:
                    await conn.execute("ROLLBACK")
                    raise
        for r in range(rounds):
            await asyncio.gather(*(one(j, r) for j in ids))


def _holder(path: Path) -> subprocess.Popen:
    """Another process (a CLI submitting, say) holding the write lock for HOLD_S."""
    code = (f"import sqlite3, sys, time; c = sqlite3.connect({str(path)!r}, isolation_level=None); "
            f"c.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep({HOLD_S}); c.execute('COMMIT')")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=10)
    a = parse_small(ap, {'jobs': 10, 'rounds': 2})
    world = private_world("store-calls")
    from core.jobs.store import Store

    store = Store()
    ids = _jobs(store, a.jobs)
    path = Path(store.path)
    ways = {"loop": lambda r: way_loop(store, ids, r), "thread": lambda r: way_thread(store, ids, r),
            "aiosqlite": lambda r: way_aiosqlite(path, ids, r)}
    log(f"{a.jobs} jobs, {a.rounds} rounds of (read the job; 5 metric rows + offset in one "
        f"transaction) per job per way; SQLite {sqlite3.sqlite_version}, WAL")
    results = []
    for held in (False, True):
        for name, way in ways.items():
            async def run() -> tuple[float, float, str]:
                holder = _holder(path) if held else None  # started before the sampling
                with LagSampler() as lag:
                    await asyncio.sleep(0.05)
                    t, c = time.perf_counter(), time.process_time()
                    await way(1 if held else a.rounds)
                    wall, cpu = time.perf_counter() - t, time.process_time() - c
                    await asyncio.sleep(0.05)  # the sampler records the wake-up a stall delayed
                if holder:
                    holder.wait()
                return wall, cpu, lag.figures()
            wall, cpu, lag = asyncio.run(run())
            calls = 2 * a.jobs * (1 if held else a.rounds)
            results.append((held, name, wall, cpu, calls, lag))
            log(f"  {'lock held 1 s' if held else 'free'}: {name} done in {wall:.2f} s")
    print()
    print(f"== store calls, {a.jobs} jobs at once (aiosqlite "
          f"{__import__('aiosqlite').__version__} as the peer) ==")
    for held, name, wall, cpu, calls, lag in results:
        print(f"{'another process holds the write lock 1 s' if held else 'no other writer':40} "
              f"{name:10} {calls / wall:8.0f} calls/s  CPU {cpu:5.2f} s  {lag}")
    base = {name: calls / wall for held, name, wall, _, calls, _ in results if not held}
    print(f"throughput, store thread / aiosqlite: {base['thread'] / base['aiosqlite']:.2f}x; "
          f"store thread / on the loop: {base['thread'] / base['loop']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
