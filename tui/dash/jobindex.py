"""The dashboard's jobs, kept ready for the table: by id, counted by state, in display order
(newest first), each with its search text.

At 100,000 jobs, doing this in one go on the event loop (count the states, sort every job,
build every job's search text for the filter) held the loop for up to 914 ms. Here the order is
kept sorted as jobs arrive (a bisect each, never a sort of all), each job's search text is made
once when its row arrives or changes (never again per keystroke), and the first load goes in
chunks that yield to the loop between them, so no single step holds it long.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
from collections import Counter
from itertools import islice

from core.jobs.states import State
from core.jobs.store import Job
from tui.dash.filtering import JobFilter, search_text

CHUNK = 2000  # jobs put or filtered between yields to the loop (a few ms each)


def keep_from_gc() -> None:
    """Move every object the garbage collector tracks so far out of its future passes
    (gc.freeze), called between chunks of the first load.

    Why: a 100,000-job load makes about a million tracked objects (each Job and its parsed
    JSON dicts), and Python's full collection, which the growing heap sets off every time it
    has grown by a quarter, walks all of them with the GIL held: 200-750 ms stalls of the
    event loop measured during one load (bench/dash.py --scroll-jobs). The jobs live as long as
    the dashboard, so leaving them out costs nothing; the young collections still run and
    still free the load's own short-lived cycles (freeze only moves what has survived to this
    point, plus the few objects made since the last young pass). What is frozen is not
    collected until `release_to_gc()` (the app's unmount): a cycle among it that dies
    meanwhile waits until then, which is why only the first load calls this."""
    gc.freeze()


def release_to_gc() -> None:
    """Give what keep_from_gc froze back to the collector (the dashboard closes; in a test
    process, the next app's garbage must not stay frozen)."""
    gc.unfreeze()


class JobIndex:
    """Jobs by id (`jobs`, shared with the JobsTable, which draws from it), `counts` by state,
    `order` (ids, newest first; equal times keep the order they arrived in) with `keys` beside
    it (-created_at, ascending, for bisecting), `texts`, each job's search text, and `members`,
    each sweep's point ids (shared with the table too, which folds a closed sweep into one row:
    kept here so that the first load, which never passes through the app's handler one job at
    a time, counts them as every later read does)."""

    def __init__(self, jobs: dict[str, Job] | None = None) -> None:
        self.jobs: dict[str, Job] = jobs if jobs is not None else {}
        self.counts: Counter[State] = Counter()
        self.order: list[str] = []
        self.keys: list[float] = []
        self.texts: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}

    def __len__(self) -> int:
        return len(self.jobs)

    def put(self, job: Job, *, read_in_order: bool = False) -> Job | None:
        """Take a job's new row; the one it replaces (None for a new job) is returned. A new
        job goes above those of the same age (it is the newer row, as the store orders them),
        except while `read_in_order` (the first read, newest first: each goes below)."""
        before = self.jobs.get(job.id)
        moved = before is not None and before.created_at != job.created_at  # never in practice
        if before is not None:
            self.counts[before.state] -= 1
            if moved:
                i = self.order.index(job.id)
                del self.order[i], self.keys[i]
        self.counts[job.state] += 1
        self.jobs[job.id] = job
        self.texts[job.id] = search_text(job)  # the row changed: its text is made again, once
        if before is None and job.group_id:
            self.members.setdefault(job.group_id, []).append(job.id)
        if before is None or moved:
            key = -job.created_at
            i = (bisect.bisect_right if read_in_order else bisect.bisect_left)(self.keys, key)
            self.order.insert(i, job.id)
            self.keys.insert(i, key)
        return before

    async def load(self, jobs: list[Job]) -> None:
        """Put many jobs (the first read: newest first, so each lands at the end of `order`),
        yielding to the loop every CHUNK jobs."""
        for start in range(0, len(jobs), CHUNK):
            for job in jobs[start:start + CHUNK]:
                self.put(job, read_in_order=True)
            keep_from_gc()  # the search texts are strings (untracked); the lists grew
            await asyncio.sleep(0)

    def matching(self, job_filter: JobFilter) -> tuple[list[str], list[float]]:
        """The ids the filter shows, newest first, and their keys: one pass over the kept order
        and the kept texts (no sort, no text built)."""
        if not job_filter:
            return list(self.order), list(self.keys)
        return self._match(job_filter, 0, len(self.order))

    async def amatching(self, job_filter: JobFilter) -> tuple[list[str], list[float]]:
        """`matching`, in chunks that yield to the loop (for the first load's view)."""
        if not job_filter:
            return list(self.order), list(self.keys)
        ids: list[str] = []
        keys: list[float] = []
        for start in range(0, len(self.order), CHUNK):
            i, k = self._match(job_filter, start, start + CHUNK)
            ids += i
            keys += k
            await asyncio.sleep(0)
        return ids, keys

    def _match(self, job_filter: JobFilter, start: int, stop: int) -> tuple[list[str], list[float]]:
        texts, rows = self.texts, enumerate(islice(self.order, start, stop), start)
        if len(job_filter.include) == 1 and not job_filter.exclude:  # the usual case, inlined
            word = job_filter.include[0]
            hits = [i for i, jid in rows if word in texts[jid]]
        else:
            test = job_filter.matches_text
            hits = [i for i, jid in rows if test(texts[jid])]
        return [self.order[i] for i in hits], [self.keys[i] for i in hits]

    def newest(self, n: int) -> list[Job]:
        """The n newest jobs (the command palette's), without sorting them all."""
        return [self.jobs[jid] for jid in self.order[:n]]
