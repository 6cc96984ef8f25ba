"""What following a SkyPilot task's output home costs the supervisor, over a long log.

    python bench/sky_stream.py [--lines 50000] [--per-tick 200] [--width 80]

Feeds `--lines` lines as SkyPilot shows them (the task's prefix, one metric row in ten) through
the stream (core/providers/skypilot/stream.py), storing every `--per-tick` lines as the
supervisor's tick does, and prints the wall and CPU time and the memory the stream held at its
peak. The peer, side by side: the same lines kept whole and written whole every tick through
core/providers/logmirror.py (what Kaggle's and Modal's whole-text mirrors do, and what the
stream did before it appended).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import log, parse_small  # noqa: E402

from core.providers import logmirror  # noqa: E402
from core.providers.skypilot.stream import AttemptStream  # noqa: E402
from core.runtime.relay import METRIC_MARK  # noqa: E402

TASK = "gr-b3nch000-a1"


def lines(n: int, width: int):
    pad = "x" * max(0, width - 30)
    for i in range(n):
        if i % 10 == 9:
            yield f"({TASK}, pid=4242) {METRIC_MARK}" + json.dumps({"step": i, "loss": 1 / (i + 1)})
        else:
            yield f"({TASK}, pid=4242) step {i} {pad}"


def ours(folder: Path, n: int, per_tick: int, width: int) -> None:
    stream = AttemptStream(folder, 1, 1 << 30, task=TASK)
    for i, line in enumerate(lines(n, width), 1):
        stream.line(line)
        if i % per_tick == 0:
            stream.store()
    stream.store()


def peer(folder: Path, n: int, per_tick: int, width: int) -> None:
    prefix = f"({TASK}, pid=4242) "
    text: list[str] = []
    for i, line in enumerate(lines(n, width), 1):
        text.append(line[len(prefix):])
        if i % per_tick == 0:
            logmirror.store(folder, 1, logmirror.split("\n".join(text) + "\n"))
    logmirror.store(folder, 1, logmirror.split("\n".join(text) + "\n"))


def measure(fn, n: int, per_tick: int, width: int) -> tuple[float, float, float, int]:
    with tempfile.TemporaryDirectory(prefix="sky-stream-") as tmp:
        folder = Path(tmp)
        tracemalloc.start()
        wall, cpu = time.perf_counter(), time.process_time()
        fn(folder, n, per_tick, width)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        size = (folder / "job.log").stat().st_size
        rows = (folder / "metrics.jsonl").read_bytes().count(b"\n")
        if rows != n // 10:
            raise SystemExit(f"{fn.__name__}: {rows} metric rows kept, not {n // 10}")
    return wall, cpu, peak / 1e6, size


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=50_000)
    ap.add_argument("--per-tick", type=int, default=200)
    ap.add_argument("--width", type=int, default=80)
    a = parse_small(ap, {"lines": 2_000, "per_tick": 100})
    figures = {}
    for fn in (ours, peer):
        log(f"{fn.__name__}: {a.lines:,} lines, a store every {a.per_tick}")
        figures[fn.__name__] = measure(fn, a.lines, a.per_tick, a.width)
    if figures["ours"][3] != figures["peer"][3]:
        raise SystemExit(f"job.log differs: {figures['ours'][3]} bytes against the peer's {figures['peer'][3]}")
    print()
    print(f"{a.lines:,} lines ({figures['ours'][3] / 1e6:.1f} MB of log), a store every {a.per_tick} lines")
    base = figures["peer"]
    for name, (wall, cpu, peak, _) in figures.items():
        print(f"  {name:<5} wall {wall:7.2f} s  cpu {cpu:7.2f} s  peak memory {peak:8.1f} MB"
              f"  ({wall / base[0]:5.3f}x the peer's wall, {peak / max(base[2], 1e-9):5.3f}x its memory)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
