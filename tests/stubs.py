"""Small stand-ins the checkpoint and transport tests share: a job as the checkpoint code reads
it (no store row needed), a bounded wait for a condition inside a test's event loop, and a
working folder that is gone (a job's cwd removed under it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Callable, Iterator


class StubJob:
    """What core/packaging/checkpoints/ and the providers' checkpoint calls read of a job."""

    def __init__(self, job_id: str) -> None:
        self.id = job_id
        self.short_id = job_id[:8]
        self.attempt = 1
        self.handle: dict = {}


async def eventually(cond: Callable[[], object], what: str, tries: int = 600, every: float = 0.05) -> None:
    """Until `cond()` holds: a bound on a wait (tries x every), not a timing assertion."""
    for _ in range(tries):
        if cond():
            return
        await asyncio.sleep(every)
    raise AssertionError(f"never: {what}")


@contextlib.contextmanager
def cwd_gone(tmp_path: Path) -> Iterator[None]:
    """Run the body with the working folder removed under it: code that makes a path relative
    to the cwd (a job's working folder, gone by then) fails there, as it would in a job."""
    here = os.getcwd()
    gone = tmp_path / "cwd"
    gone.mkdir()
    os.chdir(gone)
    try:
        gone.rmdir()
        yield
    finally:
        os.chdir(here)


def at_once(fn: Callable[[], object], n: int = 8) -> tuple[list, list[BaseException]]:
    """`fn` on `n` threads released together (a barrier): what each returned, and what any
    raised. How the idempotency tests race one request_id's inserts."""
    import threading

    results: list = []
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def one() -> None:
        try:
            start.wait()
            results.append(fn())
        except Exception as exc:  # noqa: BLE001 - any error is the test's failure
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors
