"""The dashboard's panes: the job table, the targets table, the log tail and the charts."""

from __future__ import annotations

import bisect
import time
from typing import Callable

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import DataTable, Log
from textual_plotext import PlotextPlot

from core.jobs.states import State
from tui.dash import axes
from tui.show.output import markup, renderable, safe
from tui.show.render import STATE_STYLE, duration, money

JOB_COLUMNS = (("id", "ID", 8), ("name", "NAME", 14), ("state", "STATE", 16), ("target", "TARGET", 9),
               ("gpu", "GPU", 11), ("time", "ELAPSED/EST", 11), ("cost", "COST", 7), ("metric", "LAST", 14))
# Below this width the table drops GPU and COST and narrows NAME, so 80 columns fit.
COMPACT_BELOW = 110
COMPACT_COLUMNS = (("id", "ID", 8), ("name", "NAME", 11), ("state", "STATE", 16), ("target", "TARGET", 8),
                   ("time", "ELAPSED/EST", 11), ("metric", "LAST", 12))


def state_cell(state: State) -> Text:
    if state == State.AWAITING_APPROVAL:
        # plain text: the SVG font has no glyph for ⏸ (it drew a box)
        return Text("needs approval", style="bold black on yellow")
    return Text(state.value, style=STATE_STYLE.get(state.value, ""))


LAST_WIDTH = min(w for key, _, w in COMPACT_COLUMNS if key == "metric")


def last_metric_text(last: dict, width: int = LAST_WIDTH) -> str:
    """The job's headline metric (a loss first, gpu-router's own gpu/util and gpu/mem_gb
    samples last) for the LAST column: `loss=0.1234` when it fits, else the value first
    (`0.1234 train/lo…`), so the number is never the part that is cut."""
    items = [(k, v) for k, v in last.items() if not k.startswith("_")]
    items.sort(key=lambda kv: (0 if "loss" in kv[0] else 2 if kv[0].startswith("gpu/") else 1, kv[0]))
    if not items:
        return ""
    k, v = items[0]
    value = f"{v:.4g}"
    text = f"{k}={value}"
    return safe(text if len(text) <= width else f"{value} {k}")


def failure_text(job, width: int = LAST_WIDTH) -> str:
    """A failed job's own error for its row's LAST column, in place of its last metric: what
    a person scanning the table needs of it (`ValueError: b…`); the whole reason is in the
    detail and the log pane's title. The status ("exited with status 1: ") is left out."""
    reason = safe(job.reason or "", single_line=True)
    if reason.startswith("exited with status ") and ": " in reason:
        reason = reason.split(": ", 1)[1]
    return reason if len(reason) <= width else reason[:width - 1] + "…"


def job_cells(job, now: float) -> dict[str, object]:
    hours = job.plan.get("hours")
    elapsed = None
    if job.started_at:
        elapsed = (job.ended_at or now) - job.started_at
    spent = (elapsed or 0) / 3600 * float(job.plan.get("price_per_hour") or 0)
    return {
        "id": job.short_id,  # ours (hex), and the sort key: a plain str
        "name": Text(safe(job.name)),
        "state": state_cell(job.state),
        "target": Text(safe(job.provider or "-")),
        "gpu": Text(safe(str(job.plan.get("gpu") or "-"))),
        "time": f"{duration(elapsed)}/{f'{hours:g}h' if hours else '-'}",
        "cost": money(spent) if job.plan.get("price_per_hour") else "free",
        "metric": (Text(failure_text(job), style="red") if job.state == State.FAILED and job.reason
                   else Text(last_metric_text(job.last_metric))),
    }


def group_cells(head, points: list, now: float) -> dict[str, object]:
    """A sweep folded into one row (drawn where its newest point would be): its name and point
    count, its points counted by state, their targets, their cost so far, the best loss."""
    cells = job_cells(head, now)
    counts: dict[str, int] = {}
    spent = 0.0
    best = None
    for job in points:
        counts[job.state.value] = counts.get(job.state.value, 0) + 1
        if job.started_at:
            spent += ((job.ended_at or now) - job.started_at) / 3600 * float(job.plan.get("price_per_hour") or 0)
        loss = job.last_metric.get("loss")
        if isinstance(loss, (int, float)) and (best is None or loss < best):
            best = loss
    base = head.name.split("[", 1)[0] or head.name
    order = [s.value for s in State]
    summary = " ".join(f"{n} {st.replace('awaiting_approval', 'held')}"
                       for st, n in sorted(counts.items(), key=lambda kv: order.index(kv[0])))
    held = counts.get(State.AWAITING_APPROVAL.value)
    cells.update(id=head.group_id[:8] if head.group_id else cells["id"],  # the sweep's own id, as the CLI's
                 name=Text(safe(f"▸{len(points)}× {base}")),
                 state=Text(summary, style="bold yellow" if held else ""),
                 target=Text(safe(",".join(sorted({j.provider or "-" for j in points})))),
                 time="sweep", cost=money(spent) if spent else cells["cost"],
                 metric=Text(f"best={best:.4g}" if best is not None else ""))  # of loss
    return cells


class JobsTable(ScrollView, can_focus=True):
    """Every job, newest first, as a virtual table: its height is the row count, and only the
    rows on screen are turned into text (render_line). A change touches one list entry, never
    the other rows, so a tick costs the same at 10 or 100,000 jobs; End, paging and the filter
    reach the oldest job.

    `view` is the ids in display order (the filter applied), `_keys` their sort keys
    (-created_at, ascending) for bisecting new jobs in; the app owns the Job objects.
    """

    BINDINGS = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
        Binding("enter", "select_cursor", "Details", show=False),
        Binding("space", "toggle_group", "Open sweep", show=False, id="jobs.toggle_group"),
    ]
    COMPONENT_CLASSES = {"jobs--header", "jobs--cursor", "jobs--even-row"}
    DEFAULT_CSS = """
    JobsTable { background: $surface; color: $foreground; }
    JobsTable:focus { background-tint: $foreground 5%; }
    JobsTable > .jobs--header { text-style: bold; background: $panel; color: $foreground; }
    JobsTable:ansi > .jobs--header { background: ansi_bright_blue; color: ansi_default; }
    JobsTable > .jobs--even-row { background: $surface-lighten-1 50%; }
    JobsTable:dark > .jobs--even-row { background: $surface-darken-1 40%; }
    JobsTable > .jobs--cursor { background: $block-cursor-blurred-background;
        color: $block-cursor-blurred-foreground; text-style: $block-cursor-blurred-text-style; }
    JobsTable:focus > .jobs--cursor { background: $block-cursor-background;
        color: $block-cursor-foreground; text-style: $block-cursor-text-style; }
    """

    class _RowMessage(Message):
        """A message about one job's row (its table is the control, as DataTable's are)."""

        def __init__(self, table: "JobsTable", job_id: str) -> None:
            super().__init__()
            self.table, self.job_id = table, job_id

        @property
        def control(self) -> "JobsTable":
            return self.table

    class RowHighlighted(_RowMessage):
        """The cursor is on another job."""

    class RowSelected(_RowMessage):
        """Enter (or a second click) on a job."""

    class GroupToggled(_RowMessage):
        """Space on a sweep's row: it opens into its points, or they fold into one row again
        (the app shows the rows again, `show_ids`, which folds the closed groups)."""

    compact: bool | None = None
    cursor_row: reactive[int] = reactive(0, always_update=True, repaint=False)

    def __init__(self, jobs: dict | None = None, now: Callable[[], float] | None = None,
                 members: dict[str, list[str]] | None = None, **kw) -> None:
        super().__init__(**kw)
        self.jobs: dict = jobs if jobs is not None else {}
        self.now = now or time.time
        self.view: list[str] = []
        self._keys: list[float] = []
        self.rendered_rows = 0  # rows turned into text since the last reset_count(): tests count it
        # each job's last drawn row: (its Job object, what else the row depends on, the strip);
        # a row is turned into text again only when one of them changed (see render_line)
        self._drawn: dict[str, tuple[object, tuple, Strip]] = {}
        self._frame_styles: tuple | None = None  # the row styles of the frame being drawn
        # sweeps: each group's point ids (the app's JobIndex keeps them as jobs arrive), the
        # groups opened into their points, and each closed group's one row (its point drawn)
        self.members: dict[str, list[str]] = members if members is not None else {}
        self.opened: set[str] = set()
        self.heads: dict[str, str] = {}

    # -- the rows ---------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.set_columns(self.app.size.width < COMPACT_BELOW)

    @property
    def columns(self) -> tuple:
        return COMPACT_COLUMNS if self.compact else JOB_COLUMNS

    def set_columns(self, compact: bool) -> bool:
        """Lay out the columns for this width; True if they changed."""
        if compact == self.compact:
            return False
        self.compact = compact
        self.refresh()
        return True

    @property
    def row_count(self) -> int:
        return len(self.view)

    def _sized(self) -> None:
        width = sum(w + 2 for _, _, w in self.columns)
        self.virtual_size = Size(width, len(self.view) + 1)  # + the header line

    def show_ids(self, ids: list[str], keys: list[float]) -> None:
        """Show these job ids (newest first, filtered; `keys` their -created_at), keeping the
        selected job selected. The lists become the table's own."""
        selected = self.selected_key()
        if self.members:
            ids, keys = self._fold(ids, keys)
            if selected is not None and selected not in ids:  # folded away: its group's row
                group = self.jobs[selected].group_id if selected in self.jobs else None
                selected = self.heads.get(group or "", selected)
        self.view = ids
        self._keys = keys
        self._sized()
        self._place(selected, keep_scroll=False)
        self._repaint()

    def apply(self, changed: list, keep: Callable[[object], bool]) -> None:
        """Jobs that changed: new ones that `keep` accepts are bisected in by age, ones it no
        longer accepts leave; the rest only need drawing again. The cursor stays on its job
        and the rows on screen stay where they were (a new job above them shifts the scroll)."""
        selected = self.selected_key()
        cursor = self.cursor_row
        shown = set(self.view) if len(changed) > 8 else None
        above = 0
        shifted = False  # a row came or went above the screen's bottom
        top = int(self.scroll_y)
        bottom = top + self.scrollable_content_region.height
        for job in changed:
            present = (job.id in shown) if shown is not None else (job.id in self.view)
            wanted = keep(job)
            group = job.group_id if job.group_id and job.group_id not in self.opened else None
            if group is not None:  # a closed sweep shows one row: its first point to arrive
                head = self.heads.get(group)
                if wanted and head not in (None, job.id):
                    wanted = False
                elif wanted:
                    self.heads[group] = job.id
                elif head == job.id:
                    del self.heads[group]
            if present and not wanted:
                i = self.view.index(job.id)
                del self.view[i], self._keys[i]
                above -= i < top
                shifted = shifted or i < bottom
            elif wanted and not present:
                i = bisect.bisect_left(self._keys, -job.created_at)
                self.view.insert(i, job.id)
                self._keys.insert(i, -job.created_at)
                above += i < top or (i == top and top > 0)
                shifted = shifted or i < bottom
        self._sized()
        if above and top:
            self.scroll_to(y=top + above, animate=False, immediate=True)
        self._place(selected, keep_scroll=True)
        if shifted or self.cursor_row != cursor:
            self._repaint()  # rows on screen moved: every line again (unchanged rows from _drawn)
        else:  # a closed sweep's row shows its points' counts: a point's change draws it
            self.refresh_rows({self.heads.get(job.group_id, job.id) if job.group_id and job.group_id not in self.opened
                               else job.id for job in changed})

    def refresh_rows(self, job_ids) -> None:
        """Mark for drawing only the lines of these jobs that are on screen: a tick that
        changed 20 rows, of which 3 are shown, turns 3 rows into text, and the compositor
        repaints only those lines."""
        top = int(self.scroll_y)
        height = self.scrollable_content_region.height
        on_screen = {jid: i for i, jid in enumerate(self.view[top: top + height], 1)}
        width = max(1, self.size.width)
        regions = [Region(0, on_screen[jid], width, 1) for jid in job_ids if jid in on_screen]
        if regions:
            self.refresh(*regions)

    def _repaint(self) -> None:
        """Every line drawn again (the rows moved), rows that did not change from _drawn."""
        self.refresh(self.size.region)

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False):
        """A refresh of the whole widget (a theme, focus or column change) draws every row
        anew; one of regions (rows that changed, a scroll) keeps the rows drawn before."""
        if not regions and repaint:
            self._drawn.clear()
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _fold(self, ids: list[str], keys: list[float]) -> tuple[list[str], list[float]]:
        """`ids` with each closed sweep's points folded into its newest one shown."""
        self.heads = {}
        out_ids: list[str] = []
        out_keys: list[float] = []
        for jid, key in zip(ids, keys):
            job = self.jobs.get(jid)
            group = job.group_id if job is not None else None
            if group and group not in self.opened:
                if group in self.heads:
                    continue
                self.heads[group] = jid
            out_ids.append(jid)
            out_keys.append(key)
        return out_ids, out_keys

    def folded(self, job) -> bool:
        """Whether `job`'s row stands for its whole (closed) sweep."""
        return bool(job.group_id) and job.group_id not in self.opened and self.heads.get(job.group_id) == job.id

    def cells(self, job) -> dict[str, object]:
        if self.folded(job):
            points = [self.jobs[i] for i in self.members.get(job.group_id, []) if i in self.jobs]
            return group_cells(job, points or [job], self.now())
        return job_cells(job, self.now())

    def action_toggle_group(self) -> None:
        key = self.selected_key()
        job = self.jobs.get(key) if key else None
        if job is None or not job.group_id:
            return
        self.opened.symmetric_difference_update({job.group_id})
        self.post_message(self.GroupToggled(self, job.id))

    def _place(self, selected: str | None, keep_scroll: bool) -> None:
        if selected is not None and self.view and (self.cursor_row >= len(self.view)
                                                   or self.view[self.cursor_row] != selected):
            try:
                row = self.view.index(selected)
            except ValueError:
                row = min(self.cursor_row, len(self.view) - 1)
            self.set_reactive(JobsTable.cursor_row, row)
            if not keep_scroll:
                self._scroll_to_cursor()
            if self.view[row] != selected:
                self.post_message(self.RowHighlighted(self, self.view[row]))
        elif self.cursor_row >= len(self.view):
            self.set_reactive(JobsTable.cursor_row, max(0, len(self.view) - 1))

    # -- drawing: only the rows on screen ----------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame_styles = None  # styles are looked up once per frame, not once per row
        return super().render_lines(crop)

    def _row_styles(self) -> tuple:
        """(plain, even, cursor, header) rich styles for this frame."""
        if self._frame_styles is None:
            base = self.rich_style
            self._frame_styles = (base, base + self.get_component_rich_style("jobs--even-row"),
                                  base + self.get_component_rich_style("jobs--cursor"),
                                  self.get_component_rich_style("jobs--header"))
        return self._frame_styles

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        plain, even, cursor, header = self._row_styles()
        if y == 0:
            return self._strip([(label, w) for _, label, w in self.columns], header, width)
        row = int(self.scroll_y) + y - 1
        if row >= len(self.view):
            return Strip.blank(width, plain)
        job_id = self.view[row]
        job = self.jobs.get(job_id)
        style = cursor if row == self.cursor_row else even if row % 2 else plain
        if job is None:
            return Strip.blank(width, style)
        now = self.now()
        # what the row's text depends on besides the Job object: a running job's elapsed time
        # and cost move with the clock (to the second, as duration() shows them)
        moving = int(now) if job.started_at and not job.ended_at else 0
        depends = (style, width, int(self.scroll_x), self.compact, moving, self.folded(job))
        drawn = self._drawn.get(job_id)
        if drawn is not None and drawn[0] is job and drawn[1] == depends:
            return drawn[2]
        self.rendered_rows += 1
        cells = self.cells(job)
        strip = self._strip([(cells[key], w) for key, _, w in self.columns], style, width)
        if not depends[-1]:  # a sweep's folded row depends on its points: drawn each time
            if len(self._drawn) > 4096:  # rows scrolled past long ago
                self._drawn.clear()
            self._drawn[job_id] = (job, depends, strip)
        return strip

    def _strip(self, cells: list, style, width: int) -> Strip:
        """One row's line: each cell cut to its width (an ellipsis where cut) or padded, a space
        either side, in the row's style under the cell's own. Segments are made directly (a
        rich Text per row, rendered, cost more than the rest of a tick together); adjacent
        runs of one style are joined, as Text.render joins them."""
        parts: list[tuple[str, Style]] = []
        get_style = self.app.console.get_style
        for value, w in cells:
            if isinstance(value, Text):
                if value.spans:  # never made by job_cells; drawn the general way
                    parts.append((" ", style))
                    text = value.copy()
                    text.truncate(w, overflow="ellipsis", pad=True)
                    parts += [(seg.text, style + seg.style if seg.style else style)
                              for seg in text.render(self.app.console)]
                    parts.append((" ", style))
                    continue
                plain, own = value.plain, value.style
            else:
                plain, own = str(value), None
            length = cell_len(plain)
            if length > w:
                plain = set_cell_size(plain, w - 1) + "…"
            elif length < w:
                plain += " " * (w - length)
            cell_style = style + (get_style(own) if isinstance(own, str) else own) if own else style
            parts += ((" ", style), (plain, cell_style), (" ", style))
        segments: list[Segment] = []
        text, run = parts[0]
        for piece, piece_style in parts[1:]:
            if piece_style == run:
                text += piece
            else:
                segments.append(Segment(text, run))
                text, run = piece, piece_style
        segments.append(Segment(text, run))
        return Strip(segments).crop_extend(int(self.scroll_x), int(self.scroll_x) + width, style)

    def row_text(self, job_id: str) -> str:
        """The job's row as it is drawn, in plain text (what a person reads in it)."""
        cells = self.cells(self.jobs[job_id])
        strip = self._strip([(cells[key], w) for key, _, w in self.columns], self.rich_style, 10_000)
        return strip.text.rstrip()

    def reset_count(self) -> None:
        self.rendered_rows = 0

    # -- the cursor --------------------------------------------------------------------------

    def watch_cursor_row(self, old: int, new: int) -> None:
        if not self.view:
            return
        clamped = max(0, min(new, len(self.view) - 1))
        if clamped != new:
            self.cursor_row = clamped
            return
        self._scroll_to_cursor()  # a scroll repaints every line itself (rows kept in _drawn)
        rows = [self.view[r] for r in (old, new) if 0 <= r < len(self.view)]
        self.refresh_rows(rows)  # the old and new cursor rows: two lines
        self.post_message(self.RowHighlighted(self, self.view[new]))

    def _scroll_to_cursor(self) -> None:
        height = max(1, self.scrollable_content_region.height - 1)  # rows below the header
        top = int(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + height:
            self.scroll_to(y=self.cursor_row - height + 1, animate=False, immediate=True)

    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - 2)

    def move_cursor(self, row: int, animate: bool = False) -> None:
        self.cursor_row = max(0, min(row, len(self.view) - 1))

    def action_cursor_up(self) -> None:
        self.move_cursor(self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(self.cursor_row - self._page())

    def action_page_down(self) -> None:
        self.move_cursor(self.cursor_row + self._page())

    def action_first(self) -> None:
        self.move_cursor(0)

    def action_last(self) -> None:
        self.move_cursor(len(self.view) - 1)

    def action_select_cursor(self) -> None:
        key = self.selected_key()
        if key:
            self.post_message(self.RowSelected(self, key))

    def on_click(self, event) -> None:
        row = int(self.scroll_y) + event.y - 1
        if event.y >= 1 and 0 <= row < len(self.view):
            if row == self.cursor_row and event.chain > 1:
                self.action_select_cursor()
            self.move_cursor(row)

    def selected_key(self) -> str | None:
        if not self.view or not 0 <= self.cursor_row < len(self.view):
            return None
        return self.view[self.cursor_row]

    def select_key(self, key: str) -> None:
        try:
            self.move_cursor(self.view.index(key))
        except ValueError:
            pass

    def refresh_if_shown(self, which: Callable[[object], bool]) -> None:
        """Draw again if a job on screen is one of `which` (running jobs' elapsed time moved
        on): only the screenful is looked at, whatever the job count."""
        top = int(self.scroll_y)
        moving = [job_id for job_id in self.view[top: top + self.scrollable_content_region.height]
                  if (job := self.jobs.get(job_id)) is not None and which(job)]
        self.refresh_rows(moving)  # their lines only


class TargetsTable(DataTable):
    def on_mount(self) -> None:
        self.cursor_type = "none"
        self.can_focus = False
        for key, label in (("name", "TARGET"), ("kind", "KIND"), ("gpu", "GPU"), ("status", "STATUS"),
                           ("quota", "QUOTA"), ("price", "$/H"), ("jobs", "JOBS")):
            self.add_column(label, key=key)

    ACCOUNT_INSTANCES = 2  # instance rows shown per account: the pane is a few rows high

    def show(self, infos: list, accounts: list | None = None, now: float | None = None) -> None:
        self.clear()
        for i in infos:
            quota = []
            if i.quota_hours_left is not None:
                quota.append(f"{i.quota_hours_left:.1f}h")
            if i.credits_left is not None:
                quota.append(f"${i.credits_left:.0f}")
            gpu = i.gpu_label + (f" {i.vram_gb:g}G" if i.gpus else "")
            status = Text("ok", style="green") if i.available else Text(safe(i.why_unavailable or "off"), style="red")
            self.add_row(Text(safe(i.name)), renderable(i.kind), Text(safe(gpu)), status,
                         " ".join(quota) or "-", money(i.price_per_hour),
                         markup("{running}/{most}", running=i.running, most=i.max_jobs), key=i.name)
        for a in accounts or []:
            self._account_rows(a)

    def _account_rows(self, a: dict) -> None:
        """One row per GPU cloud account (its cheapest offer now, its balance, how many of the
        user's instances run there), then a few of those instances. All of it is provider text:
        each cell is filtered."""
        offers = sorted((o for o in a.get("offers") or [] if o.get("available") != 0),
                        key=lambda o: o["price_per_hour"])
        best = offers[0] if offers else None
        gpu = (f"{best['gpu']}" + (f" {best['vram_gb']:g}G" if best.get("vram_gb") else "")) if best else "-"
        state = a.get("state")
        if state in ("fresh", "cached"):
            status = Text("ok", style="green")
        elif state == "stale":
            status = Text(safe(f"stale {duration(a.get('age_s'))}", single_line=True), style="yellow")
        else:
            status = Text(safe(a.get("error") or state or "?", single_line=True), style="red")
        bal = (a.get("account") or {}).get("balance")
        instances = a.get("instances") or []
        self.add_row(Text(safe(a["provider"], single_line=True)), "account", Text(safe(gpu, single_line=True)),
                     status, Text(f"${bal:.0f}") if isinstance(bal, (int, float)) else "-",
                     money(best["price_per_hour"]) if best else "-", Text(f"{len(instances)} run"),
                     key=f"account:{a['provider']}")
        for inst in instances[: self.ACCOUNT_INSTANCES]:
            cost = inst.get("cost_so_far")
            self.add_row(Text(safe(f" └ {inst.get('name') or inst['id']}", single_line=True)), "instance",
                         Text(safe(inst.get("gpu") or "?", single_line=True)),
                         Text(safe(inst.get("status") or "?", single_line=True)),
                         Text(f"{money(cost)} so far") if cost is not None else "-",
                         money(inst.get("price_per_hour")), "",
                         key=f"instance:{a['provider']}:{inst['id']}")


class LogTail(Log):
    """Follows the log; scrolling up stops following and counts the lines that wait.

    `/` (while the log has the focus) searches the lines shown for a regular expression;
    `n` and `N` step to the next and previous hit, wrapping around. Stepping stops following,
    so the hit stays in view; `f` follows again."""

    MAX_LINES = 10_000
    BINDINGS = [
        Binding("slash", "search", "Search log", id="log.search"),
        Binding("n", "next_hit", "Next hit", id="log.next_hit"),
        Binding("N", "previous_hit", "Previous hit", id="log.previous_hit"),
    ]

    def __init__(self, **kw) -> None:
        super().__init__(max_lines=self.MAX_LINES, auto_scroll=True, **kw)
        self.following = True
        self.waiting: list[str] = []
        self.can_focus = True
        self.pattern: str = ""
        self.hits: list[int] = []  # line numbers (0-based) of the lines the pattern matches
        self.hit = -1  # which of them is shown

    def action_search(self) -> None:
        self.app.open_log_search(self.pattern)  # the app owns the input box

    def search(self, pattern: str) -> str | None:
        """Find `pattern` in the lines shown and go to the first hit at or below the top of
        the view; None, or what was wrong with the pattern (said in the subtitle too)."""
        from core.display.search import BadPattern, compile_search  # linear time: a job's line can't freeze the screen

        self.pattern, self.hits, self.hit = pattern, [], -1
        if not pattern:
            self._subtitle()
            return None
        try:
            rx = compile_search(pattern)
        except BadPattern as e:
            self.pattern = ""
            self.border_subtitle = markup("bad pattern {p}: {e}", p=pattern, e=str(e))
            return str(e)
        self.hits = [i for i, line in enumerate(self.lines) if rx.search(line)]
        if self.hits:
            top = int(self.scroll_y)
            self.hit = next((k for k, line in enumerate(self.hits) if line >= top), 0)
            self._show_hit()
        else:
            self._subtitle()
        return None

    def action_next_hit(self) -> None:
        self._step(1)

    def action_previous_hit(self) -> None:
        self._step(-1)

    def _step(self, by: int) -> None:
        if not self.hits:
            self._subtitle()
            return
        self.hit = (self.hit + by) % len(self.hits)
        self._show_hit()

    def _show_hit(self) -> None:
        """Stop following and put the hit's line in the middle of the view."""
        self.following = False
        self.auto_scroll = False
        line = self.hits[self.hit]
        self.scroll_to(y=max(0, line - self.scrollable_content_region.height // 2), animate=False,
                       immediate=True)
        self._subtitle()

    def reset(self, lines: list[str]) -> None:
        self.clear()
        self.waiting = []
        self.following = True
        self.auto_scroll = True
        self.write_lines(lines[-self.MAX_LINES:])
        self._subtitle()
        self.call_after_refresh(self._keep_at_end)

    def _keep_at_end(self) -> None:
        """Following means the end is on screen: lines written before the widget had its size
        (opening the dashboard on a long log) left it near the top while it said "following"."""
        if self.following:
            self.scroll_end(animate=False, immediate=True)

    def on_resize(self, event) -> None:
        self._keep_at_end()

    def add(self, lines: list[str]) -> None:
        if not lines:
            return
        if self.following:
            self.write_lines(lines)
        else:
            self.waiting.extend(lines)
            if len(self.waiting) > self.MAX_LINES:
                del self.waiting[: len(self.waiting) - self.MAX_LINES]
            self._subtitle()

    def follow(self) -> None:
        self.following = True
        self.auto_scroll = True
        if self.waiting:
            self.write_lines(self.waiting)
            self.waiting = []
        self.scroll_end(animate=False)
        self._subtitle()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self.following and new_value < old_value and new_value < self.max_scroll_y:
            self.following = False
            self.auto_scroll = False
            self._subtitle()

    def _subtitle(self) -> None:
        if self.following:
            state = "following"
        else:
            n = len(self.waiting)
            state = markup("paused: {n} new line{s} (f follows)", n=n, s="s" * (n != 1)).plain
        if self.pattern:
            found = (f"hit {self.hit + 1}/{len(self.hits)} at line {self.hits[self.hit] + 1} (n/N)"
                     if self.hits and self.hit >= 0 else "no hit")
            self.border_subtitle = markup("/{p}/ {found} · {state}", p=self.pattern, found=found, state=state)
        else:
            self.border_subtitle = state if self.following else markup("{state}", state=state)


class Charts(Vertical):
    """One plotext chart per metric key (loss first), step on x, downsampled to the width.

    Only charts with content take rows: the pane is hidden while the job has no metric (the
    log takes the width), and a chart that would get fewer than CHART_MIN_ROWS rows is left
    out (named in the pane's subtitle) rather than squashed to an unreadable strip. Each y
    axis is labelled by the range its curve spans and the title says the last value
    (tui/dash/axes.py)."""

    MAX_CHARTS = 4
    CHART_MIN_ROWS = 8  # title, frame, x labels and 4 rows of curve
    CHART_ROWS = 12  # what a chart asks of the layout when the job table wants the room too
    WIDE_FROM = 160  # terminal columns from which two or more charts sit side by side
    WIDE_COLUMNS = 2  # charts per row then (four charts: two rows of two)
    WIDE_WIDTH = "1.5fr"  # the pane's width then, beside the log's 1fr (at 200 columns: 120 and 80)

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.log_scale = False
        self.keys: list[str] = []  # the metrics with a chart, in order (shown or not)
        self.series: dict = {}
        self.overlay: dict[str, dict] = {}  # a sweep's other points: label -> their series
        self.label = ""
        self._fns: tuple[Callable, Callable] | None = None
        self.terminal_width = 0  # told by the app on resize (0: ask the app)
        self.display = False  # until a job with metrics is selected

    def columns(self) -> int:
        """Charts side by side: one column below WIDE_FROM terminal columns (or with one
        chart), else WIDE_COLUMNS; a wide screen's height is better spent on the job table
        than on charts stretched 100 columns wide."""
        width = self.terminal_width or self.app.size.width
        if len(self.keys) < 2 or width < self.WIDE_FROM:
            return 1
        return min(self.WIDE_COLUMNS, len(self.keys))

    def wanted_rows(self) -> int:
        """The height this pane asks for: its rows of charts at CHART_ROWS each, in its frame."""
        if not self.keys:
            return 0
        return 2 + -(-len(self.keys) // self.columns()) * self.CHART_ROWS

    def show(self, series: dict, downsample: Callable, log10: Callable,
             overlay: dict[str, dict] | None = None, label: str = "") -> None:
        """Chart `series` (the selected job's); `overlay`, by label, the series of the other
        points of its sweep: each chart then holds every point's curve of that metric, the
        selected one labelled `label`, so the points compare at a glance."""
        keys = sorted((k for k, s in series.items() if s.values),
                      key=lambda k: (0 if "loss" in k else 1, k))[: self.MAX_CHARTS]
        self.series, self.keys, self._fns = series, keys, (downsample, log10)
        self.overlay, self.label = overlay or {}, label
        self.display = bool(keys)
        self._arrange()
        self._draw()

    def on_resize(self, event) -> None:
        if self.keys:
            self._arrange()
            self._draw()

    def fit_terminal(self, width: int) -> None:
        """The terminal was resized to `width` columns (the app calls this: crossing WIDE_FROM
        need not change this pane's own size, so its on_resize may not come)."""
        self.terminal_width = width
        if self.keys:
            self._arrange()

    def _arrange(self) -> None:
        """A grid of `columns()` charts a row, the pane wider, on a wide screen; a column of
        charts otherwise. Styles are only set when they change (no layout pass else)."""
        cols = self.columns()
        layout, width = ("grid", self.WIDE_WIDTH) if cols > 1 else ("vertical", "1fr")
        if self.styles.layout is None or self.styles.layout.name != layout:
            self.styles.layout = layout
        if cols > 1 and self.styles.grid_size_columns != cols:
            self.styles.grid_size_columns = cols
        if str(self.styles.width) != width:
            self.styles.width = width

    def _draw(self) -> None:
        keys = self.keys
        inner = self.size.height - 2 if self.size.height else 0  # inside the frame; 0: not laid out yet
        cols = self.columns()
        fits = cols * max(1, inner // self.CHART_MIN_ROWS) if inner > 0 else len(keys)
        shown, left_out = keys[:fits], keys[fits:]
        self.border_subtitle = safe("not shown (too low): " + ", ".join(left_out), single_line=True) if left_out else ""
        plots = list(self.query(PlotextPlot))
        while len(plots) < len(shown):  # charts are mounted once and kept: mounting is slow
            plot = PlotextPlot()
            self.mount(plot)
            plots.append(plot)
        for i, plot in enumerate(plots):
            plot.display = i < len(shown)
        if self._fns is None:
            return
        downsample, log10 = self._fns
        for plot, key in zip(plots, shown):
            s = self.series[key]
            width = max(20, plot.size.width or 60)
            rows = max(1, (plot.size.height or 10) - 4)  # less the title, frame and x labels
            xs, ys = downsample(s.steps, s.values, width)
            if self.log_scale:
                xs, ys = log10(xs, ys)
            plt = plot.plt
            plt.clear_data()
            plt.clear_figure()
            if xs:
                lo, hi = min(ys), max(ys)
                for name, other in self.overlay.items():  # the sweep's other points, under it
                    o = other.get(key)
                    if o is None or not o.values:
                        continue
                    oxs, oys = downsample(o.steps, o.values, width)
                    if self.log_scale:
                        oxs, oys = log10(oxs, oys)
                    if oxs:
                        plt.plot(oxs, oys, marker="braille", label=safe(name, single_line=True)[:24])
                        lo, hi = min(lo, min(oys)), max(hi, max(oys))
                plt.plot(xs, ys, marker="braille",
                         **({"label": safe(self.label, single_line=True)[:24]} if self.overlay else {}))
                ticks, labels = axes.y_ticks(lo, hi, rows, (lambda v: 10 ** v) if self.log_scale else (lambda v: v))
                if hi > lo:
                    plt.ylim(lo, hi)  # the curve spans the height: its ends sit on the end labels
                plt.yticks(ticks, labels)
                xticks, xlabels = axes.x_ticks(xs[0], xs[-1], width)
                plt.xticks(xticks, xlabels)
            plt.title(safe(axes.chart_title(key, s.values, self.log_scale), single_line=True))
            plot.refresh()
