"""How late the supervisor's event loop runs: a watchdog that measures every stall.

One blocking call on the loop (a store write waiting on SQLite's lock, a DNS lookup, a big
JSON parse) delays every job's polling and every SSH keepalive at once, and nothing else makes
that visible. The watchdog sleeps a short interval over and over; whatever it wakes up late by
is the loop's lag at that moment. A stall over STALL_S is logged with its length, and the
figures (p50, p99, max over the last samples) are written beside the supervisor's log so that
`gpu daemon --status` and the benches read them without asking the process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
from collections import deque
from pathlib import Path

INTERVAL_S = 0.05
STALL_S = 0.1
SAMPLES = 12_000  # ten minutes at INTERVAL_S
RECENT_S = 60.0  # the figures also given for the last minute alone (now, not since the start)
WRITE_EVERY_S = 5.0

log = logging.getLogger("gpu-router.looplag")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _figures(values: list[float]) -> dict:
    return {"p50_ms": round(percentile(values, 50) * 1000, 2),
            "p99_ms": round(percentile(values, 99) * 1000, 2),
            "max_ms": round(max(values, default=0.0) * 1000, 2)}


class LagWatch:
    def __init__(self, path: Path | None = None, *, interval_s: float = INTERVAL_S,
                 stall_s: float = STALL_S) -> None:
        self.path = path
        self.interval_s = interval_s
        self.stall_s = stall_s
        self.samples: deque[float] = deque(maxlen=SAMPLES)
        self.stalls = 0
        self.worst = 0.0

    def stats(self) -> dict:
        values = list(self.samples)
        recent = values[-int(RECENT_S / self.interval_s):]
        return {"samples": len(values), "interval_ms": self.interval_s * 1000,
                **_figures(values), "last_minute": _figures(recent),
                "stalls_over_100ms": self.stalls, "worst_ms": round(self.worst * 1000, 2),
                "at": time.time(), "pid": os.getpid()}

    def _write(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".part")
        try:
            tmp.write_text(json.dumps(self.stats()))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a full disk: the figures wait for the next write

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        written = loop.time()
        while True:
            before = loop.time()
            await asyncio.sleep(self.interval_s)
            lag = max(0.0, loop.time() - before - self.interval_s)
            self.samples.append(lag)
            if lag > self.stall_s:
                self.stalls += 1
                self.worst = max(self.worst, lag)
                log.warning("event loop stalled for %.0f ms", lag * 1000)
            if loop.time() - written >= WRITE_EVERY_S:
                written = loop.time()
                self._write()


def read(path: Path) -> dict | None:
    """The last figures a supervisor wrote, or None."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
