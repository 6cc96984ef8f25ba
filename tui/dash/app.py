"""`gpu dash`: a calm, live, full-screen view of every job and target.

All reading happens in thread workers (StoreWatcher, MetricsFeed, LogFeed) that report back
by messages; the UI thread only applies what changed. Approving here is the same core call
as `gpu approve` (core.engine.approvals), bound to the digest shown in the modal.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Callable

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import Hit, Hits, Provider
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import Footer, Header, Input, Static

from core.errors import UserError
from core.jobs.states import ACTIVE, State
from core.jobs.store import Job, Store
from tui.dash.filtering import JobFilter
from tui.dash.jobindex import JobIndex, keep_from_gc, release_to_gc
from tui.dash.screens import ApprovalScreen, ConfirmScreen, DetailScreen, HelpScreen, ReasonScreen
from tui.dash.watch import LogFeed, MetricsFeed, StoreWatcher, downsample, log10_series
from tui.dash.widgets import Charts, JobsTable, LogTail, TargetsTable
from tui.show.output import markup, safe

CHANGING_ACTIONS = {"approve", "deny", "cancel"}
SUPERVISE_CHECK_S = 10.0  # how often the dashboard checks that live jobs have a supervisor


def _unless_closing(method: Callable) -> Callable:
    """For what a late message runs: as the app closes, its panes are removed while a
    worker's read may still arrive; finding a pane gone (NoMatches) then means "closing",
    and the method does nothing instead of failing the app (it did at the end of runs)."""
    import functools

    @functools.wraps(method)
    def guarded(self, *args, **kw):
        try:
            return method(self, *args, **kw)
        except NoMatches:
            return None

    return guarded


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


def read_budget(store: Store) -> dict | None:
    """The last 7 days' spend and the weekly budget, for the header; None if the config is
    unreadable (the targets pane already says why)."""
    from core.engine.spend import agent_day_doc, budget_doc

    try:
        return {**budget_doc(store), "agent_day": agent_day_doc(store)}
    except UserError:
        return None


def spend_text(budget: dict | None) -> str | None:
    """The header's spend: "$3.20 of $20.00 this week" against a weekly budget, "$3.20 this
    week" without one, nothing when there is neither a budget nor any spend."""
    if not budget or (budget.get("weekly") is None and not budget.get("week_spend")):
        return agent_day_text(budget)
    spent = f"${budget['week_spend']:.2f}"
    if budget.get("weekly") is None:
        return f"{spent} this week"
    over = " (over budget)" if budget["week_spend"] > budget["weekly"] else ""
    text = f"{spent} of ${budget['weekly']:.2f} this week{over}"
    day = agent_day_text(budget)
    return f"{text} · {day}" if day else text


def agent_day_text(budget: dict | None) -> str | None:
    """The header's agent's day (issue 37): "agent's day 1.5 of 12 h, $3.00 of $25.00", the
    estimates of the agent's work that went on without a person in the last 24 hours against
    approvals.agent_daily_hours and agent_daily_usd, with "(limit reached)" once either is
    spent (an agent's next job then waits, a free one too once the hours are); nothing when no
    agent started anything in the last 24 hours."""
    day = (budget or {}).get("agent_day")
    if not day or not day.get("starts"):
        return None
    full = day["hours"] >= day["hours_limit"] - 1e-9 or day["usd"] >= day["usd_limit"] - 1e-9
    return (f"agent's day {day['hours']:g} of {day['hours_limit']:g} h, ${day['usd']:.2f} of "
            f"${day['usd_limit']:.2f}" + (" (limit reached)" if full else ""))


def read_accounts() -> list:
    """The accounts' offers and instances for the targets pane: cached figures, or a read that
    waits at most each provider's timeout (a worker runs it); none configured reads nothing."""
    from core.engine import accounts

    try:
        return accounts.snapshot()["accounts"]
    except UserError:
        return []


class JobCommands(Provider):
    """The command palette: approve, deny, cancel, open, filter, for each job."""

    async def search(self, query: str) -> Hits:
        app: DashApp = self.app  # type: ignore[assignment]
        matcher = self.matcher(query)
        for job in app.index.newest(300):
            options: list[tuple[str, Callable, str]] = [
                (f"open logs of {job.short_id} ({job.name})", lambda j=job: app.select_job(j.id), "select it"),
                (f"show details of {job.short_id} ({job.name})", lambda j=job: app.open_detail(j.id), "the detail screen"),
            ]
            if not app.read_only:
                if job.state == State.AWAITING_APPROVAL:
                    options.append((f"approve job {job.short_id} ({job.name})", lambda j=job: app.open_approval(j.id), "review its plan"))
                    options.append((f"deny job {job.short_id} ({job.name})", lambda j=job: app.open_deny(j.id), "refuse it"))
                if job.state in ACTIVE:
                    options.append((f"cancel job {job.short_id} ({job.name})", lambda j=job: app.open_cancel(j.id), "stop it"))
            for text, fn, help_ in options:
                text = safe(text, single_line=True)
                score = matcher.match(text)
                if score > 0:
                    yield Hit(score, _highlight(matcher, text), fn, text=text, help=help_)
        for state in State:
            text = f"filter: {state.value}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, _highlight(matcher, text), lambda s=state.value: app.apply_filter(s),
                          help="show only these jobs")


def _highlight(matcher, text: str):
    """The matched letters of `text` highlighted; Matcher.highlight would read `text` as
    markup, and a job's name is not gpu-router's markup."""
    from textual.content import Content

    content = Content(text)
    _, offsets = matcher.fuzzy_search.match(matcher.query, text)
    for offset in offsets:
        if not text[offset].isspace():
            content = content.stylize(matcher.match_style, offset, offset + 1)
    return content


class DashApp(App):
    TITLE = "gpu-router"
    COMMANDS = App.COMMANDS | {JobCommands}
    CSS = """
    #targets { height: auto; max-height: 7; }
    #jobs { height: 1fr; min-height: 4; }  /* fit_layout sets its height: rows, or a share */
    #filter { display: none; height: 3; }
    #filter.shown { display: block; }
    #logsearch { display: none; height: 3; }
    #logsearch.shown { display: block; }
    #bottom { height: 1fr; min-height: 8; }
    #log { width: 1fr; border: round $primary-darken-2; border-title-align: left;
           scrollbar-size-horizontal: 0; }
    #charts { width: 1fr; border: round $primary-darken-2; }
    #paused { display: none; background: $warning; color: $text; text-align: center; }
    #paused.shown { display: block; }
    PlotextPlot { height: 1fr; min-height: 4; }
    """
    BINDINGS = [
        Binding("a", "approve", "Approve", id="dash.approve"),
        Binding("d", "deny", "Deny", id="dash.deny"),
        Binding("c", "cancel", "Cancel", id="dash.cancel"),
        Binding("enter", "detail", "Details", id="dash.detail"),
        Binding("slash", "filter", "Filter", id="dash.filter"),
        Binding("f", "follow", "Follow", id="dash.follow"),
        Binding("l", "log_scale", "log10", id="dash.log_scale"),
        Binding("p", "pause", "Pause", id="dash.pause"),
        Binding("j", "down", "Down", show=False, id="dash.down"),
        Binding("k", "up", "Up", show=False, id="dash.up"),
        Binding("g", "top", "First", show=False, id="dash.top"),
        Binding("G", "bottom", "Last", show=False, id="dash.bottom"),
        Binding("question_mark", "help", "Keys", id="dash.help"),
        Binding("q", "quit", "Quit", id="dash.quit"),
    ]

    def __init__(self, *, store: Store | None = None, read_only: bool = False,
                 clock: Callable[[], float] = time.time, bell: bool | None = None,
                 poll_s: float = 0.5, live: bool = True, supervise: bool = False) -> None:
        super().__init__()
        self.supervise = supervise  # `gpu dash`: start a supervisor for live jobs that lack one
        self.store = store or Store()
        self.read_only = read_only
        self.clock = clock
        self.poll_s = poll_s
        self.live = live
        self.index = JobIndex()
        self.jobs: dict[str, Job] = self.index.jobs  # shared with the JobsTable, which draws from it
        self.counts: Counter[State] = self.index.counts
        self.job_filter = JobFilter()
        self.budget: dict | None = None  # this week's spend and the budget, read with the targets
        self.paused = False
        self._detail_loading = False
        self.selected: str | None = None
        self.watcher = StoreWatcher(Store(self.store.path))
        self._reading = False  # a store read is under way (the async workers never overlap)
        self._feeding: set[MetricsFeed] = set()
        self.log_feed: LogFeed | None = None
        self.metrics_feed: MetricsFeed | None = None
        self.overlay_feeds: dict[str, MetricsFeed] = {}  # the selected sweep point's siblings
        if bell is None:
            try:
                from core.config.user import load

                bell = load().bell
            except UserError:
                bell = True
        self.ring_bell = bell
        if read_only:
            self.sub_title = "read-only"

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Static("updates paused: p resumes", id="paused")
        yield TargetsTable(id="targets")
        yield Input(placeholder="filter: words match id, name, state, target; !word excludes; esc closes",
                    id="filter")
        yield JobsTable(self.jobs, self.clock, self.index.members, id="jobs")
        yield Input(placeholder="search the log: a regular expression; enter finds, n/N step, esc closes",
                    id="logsearch")
        with Horizontal(id="bottom"):
            yield LogTail(id="log")
            yield Charts(id="charts")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#log", LogTail).border_title = "log"
        self.query_one("#charts", Charts).border_title = "metrics"
        self.query_one(JobsTable).focus()
        if not self.live:
            # a still picture (screenshots, snapshot tests): read everything now, in order,
            # so what is drawn never depends on which worker finished first
            from core.engine import targets

            self.on_targets_read(TargetsRead(list(targets.infos(Store(self.store.path)).values()),
                                             read_accounts(), read_budget(Store(self.store.path))))
            self.on_jobs_changed(JobsChanged(self.watcher.initial(), initial=True))
            return
        self.load_initial()
        self.load_targets()
        if self.live:
            self.set_interval(self.poll_s, self.poll_store)
            self.set_interval(0.2, self.poll_log)
            self.set_interval(1.0, self.poll_metrics)
            self.set_interval(1.0, self.tick_elapsed)
            self.set_interval(15.0, self.load_targets)
        if self.supervise:
            self.keep_supervised()
            self.set_interval(SUPERVISE_CHECK_S, self.keep_supervised)

    # -- reading, in workers -----------------------------------------------------------------

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

    async def on_unmount(self) -> None:
        # the workers first: one still reading when the reader closes would fail the app's exit
        # ("Cannot operate on a closed database": the whole-suite run met it under load)
        self.workers.cancel_all()
        release_to_gc()  # the first load's jobs, frozen out of full GC passes (jobindex.py)
        await self.watcher.reader.close()

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

    # -- applying, on the UI thread ------------------------------------------------------------

    @_unless_closing
    def on_jobs_changed(self, message: JobsChanged) -> None:
        table = self.query_one(JobsTable)
        newly_pending = []
        for job in message.jobs:
            before = self.index.put(job, read_in_order=message.initial)
            if (job.state == State.AWAITING_APPROVAL and not message.initial
                    and (before is None or before.state != State.AWAITING_APPROVAL)):
                newly_pending.append(job)
        if message.view is not None and message.view[0] == self.job_filter:
            table.show_ids(message.view[1], message.view[2])  # computed in chunks by the worker
            self._header_counts()
        elif message.initial:
            self.apply_filter(self.job_filter.describe())
        else:
            # rows already shown are drawn again if on screen; new ones are bisected in by age
            table.apply(message.jobs, self.job_filter.matches)
        if message.initial or (self.selected is None and table.row_count):
            key = table.selected_key()
            if key:
                self.select_job(key)
        elif self.selected in {j.id for j in message.jobs}:
            self._title_log()
        if isinstance(self.screen, DetailScreen):  # its title follows the job's reason (an install's bytes)
            for job in message.jobs:
                self.screen.show_state(job)
        for job in newly_pending:
            self.tell(f"job {job.short_id} ({job.name}) needs your approval: select it and press a",
                      title="approval needed", severity="warning", timeout=15)
            if self.ring_bell:
                self.bell()
        self._header_counts()
        self.fit_layout()

    def on_targets_read(self, message: TargetsRead) -> None:
        self.query_one(TargetsTable).show(message.infos, message.accounts, now=self.clock())
        if message.budget is not None:
            self.budget = message.budget
            self._header_counts()
        self.fit_layout()

    def on_log_lines(self, message: LogLines) -> None:
        if message.job_id != self.selected:
            return
        try:
            log = self.query_one(LogTail)
        except NoMatches:
            return  # the app is closing: a thread's read arrived after its panes were removed
        if message.reset:
            log.reset(message.lines)
        else:
            log.add(message.lines)
        self.fit_layout()

    def on_metrics_read(self, message: MetricsRead) -> None:
        if message.job_id != self.selected:
            return
        try:
            self.query_one(Charts)
        except NoMatches:
            return  # the app is closing (as in on_log_lines)
        self._show_charts()
        self._title_log()
        self.fit_layout()

    def tick_elapsed(self) -> None:
        """Running jobs' elapsed time moves on even when nothing is written."""
        if self.paused:
            return
        self.query_one(JobsTable).refresh_if_shown(lambda j: j.state in (State.RUNNING, State.CHECKPOINTING))

    @_unless_closing
    def _header_counts(self) -> None:
        pending = self.counts[State.AWAITING_APPROVAL]
        parts = [f"{self.counts[State.RUNNING]} running"]
        if pending:
            parts.append(f"{pending} awaiting approval")
        table = self.query_one(JobsTable)
        rows = table.row_count
        if table.heads:  # a closed sweep's row stands for all its points
            rows += sum(len(table.members.get(g, ())) - 1 for g in table.heads)
        shown = f"{rows:,} of {len(self.jobs):,} jobs match" if rows < len(self.jobs) else f"{len(self.jobs):,} jobs"
        if table.heads:
            shown += f" ({len(table.heads)} sweep{'s' * (len(table.heads) != 1)} folded: space opens)"
        parts.append(shown)
        if self.job_filter:
            parts.append(f"filter: {self.job_filter.describe()}")
        spent = spend_text(self.budget)
        if spent:
            parts.append(spent)
        if self.read_only:
            parts.append("read-only")
        self.sub_title = safe(" · ".join(parts), single_line=True)

    @_unless_closing
    def _title_log(self) -> None:
        job = self.jobs.get(self.selected or "")
        if job:
            state = job.state.value  # a failed job's title says why (its error: core/engine/failure.py)
            if job.state == State.FAILED and job.reason:
                state += ": " + job.reason.removeprefix(f"exited with status {job.exit_code}: ")
            charts = self.query_one(Charts)
            self.query_one(LogTail).border_title = markup(
                "log {short} {name} ({state}){none}", short=job.short_id, name=safe(job.name, single_line=True),
                state=safe(state, single_line=True),
                none=" · no metrics" if not charts.keys and self.metrics_feed and self.metrics_feed.read_once else "")
            self.query_one(Charts).border_title = markup(
                "metrics {short}{scale}", short=job.short_id,
                scale=" (log10)" if self.query_one(Charts).log_scale else "")

    # -- selection ---------------------------------------------------------------------------

    @on(JobsTable.RowHighlighted, "#jobs")
    def _row_highlighted(self, event: JobsTable.RowHighlighted) -> None:
        if event.job_id != event.table.selected_key():
            return  # a stale event from a rebuild (filter): the cursor has moved on
        if event.job_id != self.selected:
            self.select_job(event.job_id)

    @on(JobsTable.GroupToggled, "#jobs")
    def _group_toggled(self, event: JobsTable.GroupToggled) -> None:
        """A sweep opened into its points (the cursor stays on the point it was on), or folded
        into one row again (the cursor goes to that row)."""
        table = event.table
        table.show_ids(*self.index.matching(self.job_filter))
        job = self.jobs.get(event.job_id)
        if job is not None and job.group_id not in table.opened:
            table.select_key(table.heads.get(job.group_id or "", event.job_id))
        self.fit_layout()

    @on(JobsTable.RowSelected, "#jobs")
    def _row_selected(self, event: JobsTable.RowSelected) -> None:
        """Enter on a row (the table's own binding) opens the job's detail screen."""
        self.open_detail(event.job_id)

    @_unless_closing
    def select_job(self, job_id: str) -> None:
        from core.engine.service import log_path

        table = self.query_one(JobsTable)
        if table.selected_key() != job_id:
            table.select_key(job_id)
        self.selected = job_id
        job = self.jobs.get(job_id)
        if job is None:
            return
        self.query_one(LogTail).reset([])
        self.log_feed = LogFeed(log_path(job))
        self.metrics_feed = MetricsFeed(self.watcher.reader if self.live else Store(self.store.path), job.id)
        self.overlay_feeds = self._sibling_feeds(job)
        charts = self.query_one(Charts)
        charts.show({}, downsample, log10_series)
        self._title_log()
        if self.live:
            self.poll_log()
            self.poll_metrics()
        else:
            lines, _ = self.log_feed.read()
            self.query_one(LogTail).reset(lines)
            self.metrics_feed.read()
            for other in self.overlay_feeds.values():
                other.read()
            self._show_charts()
            self._title_log()
            self.fit_layout()

    OVERLAY_MAX = 7  # a sweep's other points charted under the selected one

    def _sibling_feeds(self, job: Job) -> dict[str, MetricsFeed]:
        """The metric feeds of the other points of the selected job's sweep (by their point's
        label), whose curves the charts overlay; none for a job that is not a sweep's."""
        if not job.group_id:
            return {}
        from core.config.sweep import label

        source = self.watcher.reader if self.live else Store(self.store.path)
        others = [j for j in Store(self.store.path).group_jobs(job.group_id) if j.id != job.id]
        return {label(j.plan.get("point") or {}) or j.short_id: MetricsFeed(source, j.id)
                for j in others[: self.OVERLAY_MAX]}

    def _show_charts(self) -> None:
        from core.config.sweep import label

        job = self.jobs.get(self.selected or "")
        overlay = {name: f.series for name, f in self.overlay_feeds.items()}
        self.query_one(Charts).show(self.metrics_feed.series if self.metrics_feed else {}, downsample,
                                    log10_series, overlay=overlay,
                                    label=label(job.plan.get("point") or {}) if job is not None else "")

    def on_resize(self, event) -> None:
        from tui.dash.widgets import COMPACT_BELOW

        narrow = event.size.width < COMPACT_BELOW
        footer = self.query_one(Footer)
        # at 80 columns the palette key, docked right, covered `?` and `q`: a narrow footer
        # is compact and leaves the palette to ctrl+p and the help screen
        footer.compact = narrow
        footer.show_command_palette = not narrow
        table = self.query_one(JobsTable)
        if table.compact is not None:
            table.set_columns(event.size.width < COMPACT_BELOW)
        self.query_one(Charts).fit_terminal(event.size.width)  # side by side from Charts.WIDE_FROM columns
        self.fit_layout(event.size.height)

    # Heights, in rows, the layout keeps for each pane when both want more than there is.
    TABLE_MIN = 4  # the header and 3 jobs
    BOTTOM_MIN = 8  # the log's frame and 6 lines

    @_unless_closing
    def fit_layout(self, height: int | None = None) -> None:
        """Give the screen to what has content. The job table is as tall as its rows (six jobs
        take seven lines, not half the screen over blank lines); the log and charts below get
        the rest. When the table has more rows than fit, the bottom keeps what its content asks
        for (its log lines, or its charts at a readable height), at most half, and the table
        takes the remainder. Called when the size, the row count, the charts or the boxes
        shown change; it sets a height only when it differs (a tick that changes nothing lays
        nothing out)."""
        height = height or self.size.height
        if not height:
            return
        table = self.query_one(JobsTable)
        fixed = 2 + min(7, self.query_one(TargetsTable).row_count + 1)  # header, footer, targets
        # the two boxes by id (query_one is cached; a query with two selectors walks the DOM)
        fixed += self.paused + sum(3 for box in ("#filter", "#logsearch") if self.query_one(box).has_class("shown"))
        room = height - fixed
        log = self.query_one(LogTail)
        wants = max(self.BOTTOM_MIN, self.query_one(Charts).wanted_rows(), log.line_count + 2)
        bottom = min(wants, room // 2)
        rows = max(self.TABLE_MIN, min(table.row_count + 1, room - max(bottom, self.BOTTOM_MIN)))
        if table.styles.height is None or table.styles.height.value != rows:
            table.styles.height = rows

    def current(self) -> Job | None:
        key = self.query_one(JobsTable).selected_key()
        return self.jobs.get(key) if key else None

    # -- actions -----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action in CHANGING_ACTIONS and self.read_only:
            return False  # hidden from the footer, help and palette
        return True

    def action_down(self) -> None:
        self.query_one(JobsTable).action_cursor_down()

    def action_up(self) -> None:
        self.query_one(JobsTable).action_cursor_up()

    def action_top(self) -> None:
        table = self.query_one(JobsTable)
        table.action_first()

    def action_bottom(self) -> None:
        table = self.query_one(JobsTable)
        table.action_last()

    def action_follow(self) -> None:
        self.query_one(LogTail).follow()

    def action_log_scale(self) -> None:
        charts = self.query_one(Charts)
        charts.log_scale = not charts.log_scale
        if self.metrics_feed:
            self._show_charts()
        self._title_log()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.query_one("#paused").set_class(self.paused, "shown")
        self.fit_layout()
        if not self.paused:
            self.poll_store()

    def action_help(self) -> None:
        rows = []
        for binding in self.BINDINGS:
            if binding.action in CHANGING_ACTIONS and self.read_only:
                continue
            rows.append((binding.key.replace("question_mark", "?").replace("slash", "/"),
                         binding.description, binding.id or ""))
        if not self.read_only:
            rows += [("y", "in the approval window: approve the plan shown", "approval.approve"),
                     ("d", "in the approval window: deny (with an optional reason)", "approval.deny"),
                     ("n / esc", "in a window: back without changing anything", "approval.back")]
        rows += [("space", "on a sweep's row: open it into its points, or fold them into one row",
                  "jobs.toggle_group"),
                 ("ctrl+p", "command palette: approve, cancel, open logs, filter", "app.command_palette"),
                 ("tab", "move focus between the job table and the log", "app.focus_next"),
                 ("up/down", "move in the focused table or log", ""),
                 ("/ in the log", "search the log shown (a regular expression)", "log.search"),
                 ("n / N in the log", "next / previous hit", "log.next_hit")]
        self.push_screen(HelpScreen(rows))

    def action_detail(self) -> None:
        job = self.current()
        if job:
            self.open_detail(job.id)

    def open_detail(self, job_id: str) -> None:
        if isinstance(self.screen, DetailScreen) or self._detail_loading:
            return  # enter reaches both the table (RowSelected) and the app binding
        self._detail_loading = True
        if self.live:
            self._load_detail(job_id)
        else:
            self._show_detail(*self._read_detail(job_id))

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

    def _show_detail(self, job: Job, events: list, summary: dict, journey: dict) -> None:
        self._detail_loading = False
        if not isinstance(self.screen, DetailScreen):
            self.push_screen(DetailScreen(job, events, summary, self.clock, journey=journey))

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        self.fit_layout()
        box.value = self.job_filter.describe()
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_typed(self, event: Input.Changed) -> None:
        self.apply_filter(event.value)

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        self.query_one(JobsTable).focus()
        if not event.value.strip():
            self.query_one("#filter").remove_class("shown")
            self.fit_layout()

    @on(Input.Blurred, "#filter")
    def _filter_left(self, event: Input.Blurred) -> None:
        """An empty filter box has nothing to show: it goes when the focus leaves it."""
        if not event.value.strip():
            event.input.remove_class("shown")
            self.fit_layout()

    def open_log_search(self, pattern: str) -> None:
        """`/` in the log pane: the search box, above the log, holding the last pattern."""
        box = self.query_one("#logsearch", Input)
        box.add_class("shown")
        self.fit_layout()
        box.value = pattern
        box.focus()

    @on(Input.Submitted, "#logsearch")
    def _log_search_done(self, event: Input.Submitted) -> None:
        log = self.query_one(LogTail)
        problem = log.search(event.value.strip())
        if problem:
            self.tell(f"bad pattern: {problem}", severity="error")
            return
        event.input.remove_class("shown")
        self.fit_layout()
        log.focus()

    def on_key(self, event) -> None:
        search = self.query_one("#logsearch", Input)
        if event.key == "escape" and search.has_focus:
            search.remove_class("shown")
            self.fit_layout()
            self.query_one(LogTail).focus()
            event.stop()
            return
        box = self.query_one("#filter", Input)
        if event.key == "escape" and box.has_focus:
            box.value = ""
            box.remove_class("shown")
            self.fit_layout()
            self.query_one(JobsTable).focus()
            event.stop()

    def apply_filter(self, text: str) -> None:
        self.job_filter = JobFilter.parse(text)
        box = self.query_one("#filter", Input)
        if not text.strip() and not box.has_focus:
            box.remove_class("shown")  # cleared from the palette: no empty box left behind
        # one pass over the kept order and search texts: no sort, no text built per keystroke
        self.query_one(JobsTable).show_ids(*self.index.matching(self.job_filter))
        self._header_counts()
        self.fit_layout()

    def action_approve(self) -> None:
        job = self.current()
        if job is None:
            return
        if job.state != State.AWAITING_APPROVAL:
            self.tell(f"job {job.short_id} is {job.state.value}: nothing to approve", severity="information")
            return
        self.open_approval(job.id)

    def open_approval(self, job_id: str) -> None:
        from core.engine.approvals import pin_is_set, require_person

        job = Store(self.store.path).get(job_id)  # the freshest plan: the digest shown is the one approved
        if job.state != State.AWAITING_APPROVAL:
            self.tell(f"job {job.short_id} no longer awaits approval", severity="information")
            return
        try:
            # a job's process or an agent driving the dashboard is never asked
            require_person(_actor(), job.short_id, store=Store(self.store.path), job=job)
            needs_pin = pin_is_set()
        except UserError as exc:
            self.tell(exc.message(), severity="error", title="approve")
            return
        group = None
        if job.group_id and job.plan.get("hold_kind") == "group":  # a sweep is approved as one
            group = Store(self.store.path).group(job.group_id)
        screen = ApprovalScreen(job, needs_pin=needs_pin, group=group)

        def decided(decision: str | None) -> None:
            if decision == "approve":
                self._decide(job, "approve", None, pin=screen.pin, group=group)
            elif decision == "deny":
                self.open_deny(job.id)

        self.push_screen(screen, decided)

    def action_deny(self) -> None:
        job = self.current()
        if job is None:
            return
        if job.state != State.AWAITING_APPROVAL:
            self.tell(f"job {job.short_id} is {job.state.value}: only a held job can be denied", severity="information")
            return
        self.open_deny(job.id)

    def open_deny(self, job_id: str) -> None:
        from core.engine.approvals import require_not_job

        store = Store(self.store.path)
        job = store.get(job_id)
        try:
            require_not_job("denial", store=store, job=job, undone="nothing was denied")
        except UserError as exc:
            self.tell(exc.message(), severity="error", title="deny")
            return

        def reasoned(reason: str | None) -> None:
            if reason is not None:
                self._decide(job, "deny", reason or None)

        self.push_screen(ReasonScreen(job), reasoned)

    def action_cancel(self) -> None:
        job = self.current()
        if job is None:
            return
        if job.state not in ACTIVE:
            self.tell(f"job {job.short_id} already ended ({job.state.value})", severity="information")
            return
        self.open_cancel(job.id)

    def open_cancel(self, job_id: str) -> None:
        job = self.jobs[job_id]
        table = self.query_one(JobsTable)
        if table.folded(job):  # a sweep's one row: every live point of it
            live = [i for i in table.members.get(job.group_id or "", []) if i in self.jobs
                    and self.jobs[i].state in ACTIVE]

            def all_of_it(yes: bool | None) -> None:
                if yes:
                    self._decide(job, "cancel_group", None)

            short = str((job.plan.get("group") or {}).get("short_id") or (job.group_id or "")[:8])
            self.push_screen(ConfirmScreen(markup("Cancel sweep [b]{short}[/b]: its {n} live points? Their "
                                                  "whole process groups stop (space opens it, to cancel one).",
                                                  short=short, n=len(live))), all_of_it)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._decide(job, "cancel", None)

        self.push_screen(ConfirmScreen(markup("Cancel job [b]{short}[/b] ({name})? It is {state}; its whole "
                                              "process group stops.", short=job.short_id, name=job.name,
                                              state=job.state.value)), answered)

    @work(thread=True, group="decisions")
    def _decide(self, job: Job, what: str, reason: str | None, pin: str | None = None,
                group=None) -> None:
        from core.engine.approvals import approve, deny, require_person, require_pin
        from core.engine.service import cancel
        from core.engine.sweeps import approve_group, deny_group

        store = Store(self.store.path)
        actor = _actor()
        if what == "deny" and job.group_id and job.plan.get("hold_kind") == "group":
            group = store.group(job.group_id)  # held with its sweep: denied with it
        try:
            if what == "cancel_group":
                from core.engine.sweeps import cancel_group

                points = cancel_group(store, store.group(job.group_id or ""), actor=actor.label("dashboard"),
                                      wait_s=0)
                text = f"cancel sent to the {sum(p.state in ACTIVE for p in points)} live points of its sweep"
            elif group is not None and what in ("approve", "deny"):
                if what == "approve":
                    require_person(actor, group.short_id, store=store, job=job)
                    checked = require_pin(pin, where="gpu dash", store=store, job=job,
                                          actor=actor.label("dashboard"))
                    points = approve_group(store, group, digest=group.digest, actor=actor.label("dashboard"),
                                           pin_checked=checked)
                    text = f"approved sweep {group.short_id}: its {len(points)} points will run"
                else:
                    points = deny_group(store, group, actor=actor.label("dashboard"), reason=reason)
                    text = f"sweep {group.short_id}: {len(points)} points denied"
            elif what == "approve":
                require_person(actor, job.short_id, store=store, job=job)
                checked = require_pin(pin, where="gpu dash", store=store, job=job,
                                      actor=actor.label("dashboard"))  # a wrong one waits, in the worker
                done = approve(store, job.id, digest=job.digest or "", actor=actor.label("dashboard"),
                               pin_checked=checked)
                text = f"approved job {done.short_id}: it will run"
            elif what == "deny":
                done = deny(store, job.id, actor=actor.label("dashboard"), reason=reason)
                text = f"job {done.short_id}: {done.state.value}"
            else:
                done = cancel(store, job.id, actor=actor.label("dashboard"), wait_s=0)
                text = f"cancel sent to job {done.short_id}"
        except UserError as exc:
            self.call_from_thread(self.tell, exc.message(), severity="error", title=what)
            return
        self.call_from_thread(self.tell, text, title=what)
        self.call_from_thread(self.poll_store)

    def tell(self, message: str, **kw) -> None:
        """A notification: its text often quotes a job or an error, so it is filtered and
        shown as it is, never read as markup."""
        self.notify(safe(message), markup=False, **kw)


def _actor():
    """Who drives the dashboard: `gpu dash` refuses to start without a terminal, so only the
    environment can make it an agent's (an agent running it in a pseudo-terminal)."""
    from core.engine.actor import current

    return current(terminal=True)


def run(read_only: bool = False) -> int:
    DashApp(read_only=read_only, supervise=True).run()
    return 0
