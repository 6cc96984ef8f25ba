"""The dashboard's data feed: the workers that read the store, the logs, the metrics and the
targets off the UI thread, and report what they found by messages (tui/dash/messages.py).

Kept apart from the app (harlequin's split of its core from its UI): nothing here draws; the
app's on_* handlers apply what arrives. What is read, and how cheaply, is tui/dash/watch.py.
"""

from __future__ import annotations

import asyncio

from textual import work

from core.errors import UserError
from core.jobs.store import Job, Store
from tui.dash.jobindex import keep_from_gc
from tui.dash.messages import JobsChanged, LogLines, MetricsRead, TargetsRead

SUPERVISE_CHECK_S = 10.0  # how often the dashboard checks that live jobs have a supervisor


def read_budget(store: Store) -> dict | None:
    """The last 7 days' spend and the weekly budget, for the header; None if the config is
    unreadable (the targets pane already says why)."""
    from core.engine.spend import agent_day_doc, budget_doc

    try:
        return {**budget_doc(store), "agent_day": agent_day_doc(store)}
    except UserError:
        return None


def read_accounts() -> list:
    """The accounts' offers and instances for the targets pane: cached figures, or a read that
    waits at most each provider's timeout (a worker runs it); none configured reads nothing."""
    from core.engine import accounts

    try:
        return accounts.snapshot()["accounts"]
    except UserError:
        return []


class DataFeed:
    """The app's workers (DashApp mixes it in): each reads on a thread or through the async
    Reader and hands the UI thread what it found (a message; the detail screen's read calls
    `_show_detail`); none draws."""

    # The store's reads are awaited through the async read-only Reader (aiosqlite): the loop
    # draws while SQLite works. A read is never cancelled half-way (that would lose the
    # changes between two data versions): a poll that finds one running leaves it be.

    @work(group="store")
    async def load_initial(self) -> None:
        """Read every job, put them into the index and compute the first view, all in chunks
        that yield to the loop (at 100,000 jobs no step holds it long); the UI's part is then
        only showing the view. Polls wait (`_reading`), and their messages come after this one."""
        self._reading = True
        try:
            jobs = await self.watcher.load(keep_from_gc)  # no full GC pass over them: see there
            await self.index.load(jobs)
            shown = self.job_filter
            ids, keys = await self.index.amatching(shown)
            self.post_message(JobsChanged([], initial=True, view=(shown, ids, keys)))
        finally:
            self._reading = False

    @work(group="store")
    async def poll_store(self) -> None:
        if self.paused or self._reading:
            return
        self._reading = True
        try:
            jobs = await self.watcher.changes()
        finally:
            self._reading = False
        if jobs:
            self.post_message(JobsChanged(jobs))

    @work(thread=True, exclusive=True, group="supervise")
    def keep_supervised(self) -> None:
        """Live jobs with no supervisor (one was killed, or a submit died after its commit)
        get one, as every command that reads the store does."""
        from core.engine.daemon import supervise_live

        supervise_live(Store(self.store.path))

    @work(thread=True, exclusive=True, group="targets")
    def load_targets(self) -> None:
        from core.engine import targets

        try:
            infos = list(targets.infos(Store(self.store.path)).values())
        except UserError as exc:
            self.call_from_thread(self.tell, exc.message(), severity="error", title="config")
            return
        self.post_message(TargetsRead(infos, read_accounts(), read_budget(Store(self.store.path))))

    @work(thread=True, exclusive=True, group="log")
    def poll_log(self) -> None:
        feed, job_id = self.log_feed, self.selected
        if feed is None or job_id is None or self.paused:
            return
        lines, reset = feed.read()
        if lines or reset:
            self.post_message(LogLines(job_id, lines, reset))

    @work(group="metrics")
    async def poll_metrics(self) -> None:
        feed, job_id = self.metrics_feed, self.selected
        if feed is None or job_id is None or self.paused or feed in self._feeding:
            return
        self._feeding.add(feed)
        try:
            grew = await feed.aread()
            for other in list(self.overlay_feeds.values()):  # a sweep's other points' curves
                grew = await other.aread() or grew
        finally:
            self._feeding.discard(feed)
        if grew or not feed.series:  # none: the charts pane collapses, the log says so
            self.post_message(MetricsRead(job_id, feed))

    def _read_journey(self, job: Job) -> dict:
        """The job's attempts and moves (core.engine.reports.journey), on a thread of its own:
        it reads the events and, for a failed job, its log's end."""
        from core.engine.reports import journey

        return journey(Store(self.store.path), job, iso=False)

    def _read_detail(self, job_id: str) -> tuple:
        from core.engine.reports import journey

        store = Store(self.store.path)
        job = store.get(job_id)
        return job, store.events(job_id), store.metrics_summary(job_id), journey(store, job, iso=False)

    @work(group="detail")
    async def _load_detail(self, job_id: str) -> None:
        """Events and a metric summary can be large: awaited through the Reader, the loop draws."""
        reader = self.watcher.reader
        try:
            job = await reader.get(job_id)
            found = (job, await reader.events(job_id), await reader.metrics_summary(job_id),
                     await asyncio.to_thread(self._read_journey, job))
        except Exception:
            self._detail_loading = False
            raise
        self._show_detail(*found)
