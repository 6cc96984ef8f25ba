"""The dashboard's metrics pane: one chart per metric of the selected job, a sweep's other
points overlaid.

Its own module because fitting charts to the screen (how many, side by side or stacked, which
are left out when too low) is layout of its own; the axes' labels are tui/dash/axes.py and
the series come from the app's metric feed (tui/dash/watch.py).
"""

from __future__ import annotations

from typing import Callable

from textual.containers import Vertical
from textual_plotext import PlotextPlot

from tui.dash import axes
from tui.show.output import safe


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
