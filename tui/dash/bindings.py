"""The dashboard's keys: each binding of the main screen with its id, the actions behind the
ones that only move or show, and the help screen's list of every key.

One place for what a key does (posting's model: each binding has an id, and the help screen
lists them with it), so the footer, `?` and a read-only dashboard agree: the changing actions
(CHANGING_ACTIONS) are hidden from all three at once. Approving, denying and cancelling are
tui/dash/decisions.py; the modal screens' own keys are in tui/dash/screens.py.
"""

from __future__ import annotations

from textual.binding import Binding

from tui.dash.screens import HelpScreen
from tui.dash.widgets import Charts, JobsTable, LogTail

CHANGING_ACTIONS = {"approve", "deny", "cancel"}

DASH_BINDINGS = [
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


class KeyActions:
    """The main screen's key actions that change nothing in the store (DashApp mixes it in;
    textual reads BINDINGS from the App class itself, so DashApp sets BINDINGS = DASH_BINDINGS)."""

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
