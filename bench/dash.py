"""Dashboard speed: a 10,000-job store, a 1 GB log, 1,000,000 metric points.

    python bench/dash.py [--log-gb 1.0]

Runs the real DashApp headless (Textual's run_test) in a private GPU_ROUTER_HOME, and prints
each figure next to a naive peer done the way the pitfalls list warns against (clearing and
re-adding every row, reading the whole log, plotting every point), with the ratio.
Targets (issue 4): update tick with 20 changed rows < 50 ms; key press to redrawn screen
< 100 ms; last screen of a 1 GB log < 200 ms; keep up with 50,000 lines/s; chart redraw of
1,000,000 points < 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parse_small  # noqa: E402


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def seed_jobs(n: int) -> list[str]:
    from core.jobs.store import Store

    store = Store()
    now = time.time()
    rows = []
    for i in range(n):
        jid = f"{i:08x}" + "0" * 24
        rows.append((jid, jid[:8], f"job-{i}", "running" if i % 50 == 0 else "done", "local", now - i, now - i,
                     now - i, None, "/p", f"/p/runs/{jid[:8]}", None, f"fp{i}", json.dumps({"script": "a.py"}),
                     json.dumps({"hours": 1, "gpu": "1x T4", "price_per_hour": 0}), "d", None, None, "{}", 1,
                     "{}", None, 0, "", 0, json.dumps({"loss": 0.5}), i + 1))
    with store.write() as db:
        db.executemany(
            "INSERT INTO jobs (id, short_id, name, state, provider, created_at, updated_at, started_at, "
            "ended_at, project_dir, outputs_dir, request_id, fingerprint, request_json, plan_json, digest, "
            "approved_digest, bundle_hash, bundle_json, attempt, handle_json, exit_code, cancel_requested, "
            "reason, metrics_offset, last_metric_json, rev) VALUES (" + ",".join("?" * 27) + ")", rows)
    return [r[0] for r in rows]


async def bench_table(n: int) -> dict:
    from core.jobs.store import Store
    from tui.dash.app import DashApp, JobsChanged
    from tui.dash.widgets import JobsTable

    ids = seed_jobs(n)
    # live, as a person runs it (reads in workers); the store poll is driven by hand below
    app = DashApp(live=True, bell=False, poll_s=3600)
    out: dict = {}
    t0 = time.perf_counter()
    async with app.run_test(size=(160, 48)) as pilot:
        from tui.dash.app import MAX_ROWS

        while app.query_one(JobsTable).row_count < min(n, MAX_ROWS):
            await pilot.pause(0.05)
        out[f"initial load ({n:,} jobs read, {app.query_one(JobsTable).row_count:,} rows shown)"] = time.perf_counter() - t0
        writer = Store()
        ticks, applies, tick_cpu = [], [], []
        for rnd in range(10):
            with writer.write():
                for jid in ids[rnd * 20:(rnd + 1) * 20]:
                    writer.update(jid, reason=f"tick {rnd}", last_metric={"loss": rnd / 10})
            t0, c0 = time.perf_counter(), time.process_time()
            changed = app.watcher.changes()  # the worker's part (a thread in the app)
            t1 = time.perf_counter()
            app.on_jobs_changed(JobsChanged(changed))  # the UI thread's part
            await pilot.pause()
            t2 = time.perf_counter()
            tick_cpu.append(time.process_time() - c0)
            assert len(changed) == 20, len(changed)
            ticks.append(t2 - t0)
            applies.append(t2 - t1)
        out["update tick, 20 rows changed (read + apply + redraw)"] = statistics.median(ticks)
        out["  of which applying on the UI thread"] = statistics.median(applies)
        out["  CPU of the whole tick (the rest is waiting for the next frame)"] = statistics.median(tick_cpu)
        presses, cpu = [], []
        for _ in range(15):
            t0, c0 = time.perf_counter(), time.process_time()
            await pilot.press("j")
            await pilot.pause()
            presses.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        out["key press (j) to redrawn screen, wall (pilot's own waits included)"] = statistics.median(presses)
        out["key press (j) to redrawn screen, CPU of the app's process"] = statistics.median(cpu)
        # the peer: clear and re-add every row, as the pitfalls list warns against
        table = app.query_one(JobsTable)
        jobs = list(app.jobs.values())
        t0 = time.perf_counter()
        table.clear()
        table.upsert(jobs, time.time(), app.created)
        await pilot.pause()
        out["peer: clear() and re-add every row"] = time.perf_counter() - t0
        with writer.write():
            for jid in ids[:20]:
                writer.update(jid, reason="peer tick")
        t0 = time.perf_counter()
        app.on_jobs_changed(JobsChanged(app.watcher.changes()))
        await pilot.pause()
        out[f"peer: update tick with all {n:,} rows in the table"] = time.perf_counter() - t0
    return out


def bench_log(gb: float, root: Path) -> dict:
    from core.display.logtail import Follower, tail_lines

    path = root / "big.log"
    line = b"step 123456  loss 0.123456  lr 0.000300  grad_norm 1.2345  tokens/s 123456.7\n"
    block = line * (8 * 1024 * 1024 // len(line))
    with open(path, "wb") as f:
        while f.tell() < gb * 1e9:
            f.write(block)
    size = path.stat().st_size
    out: dict = {"log size": f"{size / 1e9:.2f} GB"}
    t0 = time.perf_counter()
    lines, _ = tail_lines(path, 60)
    out["last screen (60 lines) of the log"] = time.perf_counter() - t0
    assert len(lines) == 60
    t0 = time.perf_counter()
    os.system(f"tail -n 60 {path} > /dev/null")
    out["peer: tail -n 60 (coreutils)"] = time.perf_counter() - t0
    # following a log that grows by 50,000 lines a second, read every 0.2 s as the app does
    f = Follower(path)
    f.start(60)
    per_tick = 10_000
    chunk = line * per_tick
    behind = []
    t_start = time.perf_counter()
    got = 0
    with open(path, "ab") as w:
        for tick in range(25):  # 5 s of growth
            w.write(chunk)
            w.flush()
            t0 = time.perf_counter()
            new, _ = f.read()
            behind.append(time.perf_counter() - t0)
            got += len(new)
            sleep = 0.2 - (time.perf_counter() - t0)
            if sleep > 0:
                time.sleep(sleep)
    elapsed = time.perf_counter() - t_start
    out["follow: lines written / lines read"] = f"{25 * per_tick} / {got}"
    out["follow: read time per 0.2 s tick (10,000 new lines)"] = statistics.median(behind)
    out["follow: effective rate"] = f"{got / elapsed:,.0f} lines/s (target 50,000)"
    path.unlink()
    return out


async def bench_chart(points: int) -> dict:
    import math

    from textual.app import App, ComposeResult
    from textual_plotext import PlotextPlot

    from tui.dash.watch import Series, downsample

    s = Series(steps=list(range(points)), values=[2 * math.exp(-i / points * 5) + 0.01 * math.sin(i) for i in range(points)])

    class One(App):
        def compose(self) -> ComposeResult:
            yield PlotextPlot()

    out: dict = {}
    app = One()
    async with app.run_test(size=(120, 30)) as pilot:
        plot = app.query_one(PlotextPlot)
        await pilot.pause()
        width = plot.size.width
        t0 = time.perf_counter()
        xs, ys = downsample(s.steps, s.values, width)
        out[f"downsample {points:,} points to {len(xs)} (min/max per column)"] = time.perf_counter() - t0
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            plot.plt.clear_data()
            plot.plt.plot(xs, ys, marker="braille")
            plot.refresh()
            await pilot.pause()
            times.append(time.perf_counter() - t0)
        out["chart redraw (downsampled)"] = statistics.median(times)
        t0 = time.perf_counter()
        plot.plt.clear_data()
        plot.plt.plot(s.steps[:100_000], s.values[:100_000], marker="braille")
        plot.refresh()
        await pilot.pause()
        out["peer: redraw with 100,000 raw points (a tenth of them)"] = time.perf_counter() - t0
    return out


def show(title: str, figures: dict) -> None:
    print(f"\n== {title} ==")
    for k, v in figures.items():
        print(f"{k:58s} {ms(v) if isinstance(v, float) else v}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--log-gb", type=float, default=1.0)
    parser.add_argument("--points", type=int, default=1_000_000)
    args = parse_small(parser, {'jobs': 200, 'log_gb': 0.001, 'points': 2000})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["GPU_ROUTER_HOME"] = str(root / "home")
        os.environ["GPU_ROUTER_CONFIG"] = str(root / "config.yaml")
        print(f"machine: {os.cpu_count()} cores; figures are medians; other work on the machine adds noise")
        table = asyncio.run(bench_table(args.jobs))
        show(f"job table, {args.jobs:,} jobs", table)
        print(f"{'ratio: peer re-add / update tick':58s} {table['peer: clear() and re-add every row'] / table['update tick, 20 rows changed (read + apply + redraw)']:8.1f}x")
        log = bench_log(args.log_gb, root)
        show("log tail", log)
        print(f"{'ratio: last screen / tail -n 60':58s} {log['last screen (60 lines) of the log'] / log['peer: tail -n 60 (coreutils)']:8.2f}x")
        chart = asyncio.run(bench_chart(args.points))
        show(f"chart, {args.points:,} points of one key", chart)


if __name__ == "__main__":
    main()
