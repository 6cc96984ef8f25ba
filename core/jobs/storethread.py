"""The supervisor's store calls, run on one thread of their own so the event loop never waits.

SQLite calls block: a write waits up to the busy timeout for another process's transaction (a
CLI submitting, the dashboard approving), a read of many jobs takes milliseconds. On the loop,
every such wait stalls every job's polling and every SSH keepalive. Here each call is handed to
one dedicated worker thread that owns the supervisor's connection (the shape aiosqlite has: a
connection on a thread behind a queue), so the loop only awaits. The store's own methods stay
the one place for its rules (transitions, events, `BEGIN IMMEDIATE`); they run unchanged, one
at a time, in order, on that thread, so no two of them interleave either.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class StoreThread:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpu-router-store")

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on the store thread; its result or its exception, here."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
