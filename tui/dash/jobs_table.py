"""The dashboard's job table: a virtual table of every job, newest first, drawn a screenful
at a time.

Its own module because it is the dashboard's one costly widget: its drawing (only the rows on
screen, each kept until its job or the clock changes), its folding of sweeps and its cursor are
what bench/dash.py measures at 100,000 jobs. What each cell says is tui/dash/job_cells.py.
"""

from __future__ import annotations

import bisect
import time
from typing import Callable

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.dash.job_cells import COMPACT_BELOW, COMPACT_COLUMNS, JOB_COLUMNS, group_cells, job_cells


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
