"""What the dashboard's workers report to it: one message per kind of read.

The workers (tui/dash/feed.py) read off the UI thread and post these; the app applies them on
the UI thread (its on_* handlers, tui/dash/app.py). Kept apart so the two sides share only
these shapes (harlequin's workers report the same way), and a bench can post one itself.
"""

from __future__ import annotations

from textual.message import Message

from core.jobs.store import Job
from tui.dash.filtering import JobFilter
from tui.dash.watch import MetricsFeed


class JobsChanged(Message):
    """Jobs read from the store. `view` is set for the first live load, which the worker has
    already put into the index in chunks: the filter it was computed for and the rows it shows."""

    def __init__(self, jobs: list[Job], initial: bool = False,
                 view: tuple[JobFilter, list[str], list[float]] | None = None) -> None:
        super().__init__()
        self.jobs = jobs
        self.initial = initial
        self.view = view


class LogLines(Message):
    def __init__(self, job_id: str, lines: list[str], reset: bool) -> None:
        super().__init__()
        self.job_id, self.lines, self.reset = job_id, lines, reset


class MetricsRead(Message):
    def __init__(self, job_id: str, feed: MetricsFeed) -> None:
        super().__init__()
        self.job_id, self.feed = job_id, feed


class TargetsRead(Message):
    def __init__(self, infos: list, accounts: list | None = None, budget: dict | None = None) -> None:
        super().__init__()
        self.infos = infos
        self.accounts = accounts or []  # the GPU cloud accounts' documents (core.engine.accounts)
        self.budget = budget  # this week's spend against the budget (core.engine.spend.budget_doc)
