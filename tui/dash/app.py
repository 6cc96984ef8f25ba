"""`gpu dash`: a calm, live, full-screen view of every job and target.

All reading happens in thread workers (StoreWatcher, MetricsFeed, LogFeed: the data feed,
tui/dash/feed.py) that report back by messages (tui/dash/messages.py); the UI thread, here,
only applies what changed. The keys are tui/dash/bindings.py, the command palette
tui/dash/palette.py. Approving here is the same core call as `gpu approve`
(core.engine.approvals, tui/dash/decisions.py), bound to the digest shown in the modal.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable

from textual import on
from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.widgets import Footer, Header, Input, Static

from core.errors import UserError
from core.jobs.states import State
from core.jobs.store import Job, Store
from tui.dash.bindings import DASH_BINDINGS, KeyActions
from tui.dash.decisions import Decisions
from tui.dash.feed import SUPERVISE_CHECK_S, DataFeed, read_accounts, read_budget
from tui.dash.filtering import JobFilter
from tui.dash.header import spend_text
from tui.dash.jobindex import JobIndex, release_to_gc
from tui.dash.messages import JobsChanged, LogLines, MetricsRead, TargetsRead
from tui.dash.palette import JobCommands
from tui.dash.screens import DetailScreen
from tui.dash.watch import LogFeed, MetricsFeed, StoreWatcher, downsample, log10_series
from tui.dash.widgets import Charts, JobsTable, LogTail, TargetsTable
from tui.show.output import markup, safe

__all__ = ["DashApp", "JobCommands", "JobsChanged", "LogLines", "MetricsRead", "TargetsRead", "run"]


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


class DashApp(DataFeed, Decisions, KeyActions, App):
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
    BINDINGS = DASH_BINDINGS  # tui/dash/bindings.py: each with its id

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

    # -- reading, in workers: tui/dash/feed.py ---------------------------------------------

    async def on_unmount(self) -> None:
        # the workers first: one still reading when the reader closes would fail the app's exit
        # ("Cannot operate on a closed database": the whole-suite run met it under load)
        self.workers.cancel_all()
        release_to_gc()  # the first load's jobs, frozen out of full GC passes (jobindex.py)
        await self.watcher.reader.close()

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
        from core.engine.jobfiles import log_path

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
        from tui.dash.job_cells import COMPACT_BELOW

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

    # -- actions (the keys' own: tui/dash/bindings.py; approve, deny, cancel: decisions.py) --

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

    def tell(self, message: str, **kw) -> None:
        """A notification: its text often quotes a job or an error, so it is filtered and
        shown as it is, never read as markup."""
        self.notify(safe(message), markup=False, **kw)


def run(read_only: bool = False) -> int:
    DashApp(read_only=read_only, supervise=True).run()
    return 0
