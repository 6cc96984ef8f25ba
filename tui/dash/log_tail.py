"""The dashboard's log pane: the selected job's log, followed as it grows, searchable.

Its own module because following (and stopping to follow when a person scrolls up, counting
the lines that wait) and the search's hits are state of their own, apart from what the app
reads (tui/dash/feed.py's poll_log) and shows.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import Log

from tui.show.output import markup


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
