"""The dashboard's panes: the job table, the targets table, the log tail and the charts."""

from __future__ import annotations

from typing import Callable

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Log, Static
from textual_plotext import PlotextPlot

from core.jobs.states import State
from tui.output import markup, renderable, safe
from tui.render import STATE_STYLE, duration, money

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


class JobsTable(DataTable):
    """Rows keyed by job id, updated in place so the cursor and selection survive updates."""

    compact: bool | None = None

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.set_columns(self.app.size.width < COMPACT_BELOW)

    def set_columns(self, compact: bool) -> bool:
        """Lay out the columns for this width; True if they changed (rows must be added again)."""
        if compact == self.compact:
            return False
        self.compact = compact
        self.clear(columns=True)
        for key, label, width in (COMPACT_COLUMNS if compact else JOB_COLUMNS):
            self.add_column(label, key=key, width=width)
        return True

    def upsert(self, jobs: list, now: float, created: dict[str, float]) -> bool:
        """Update changed rows by key; add new ones. True if rows were added (order changed)."""
        added = False
        existing = self.rows
        keys = [c[0] for c in (COMPACT_COLUMNS if self.compact else JOB_COLUMNS)]
        for job in jobs:
            all_cells = job_cells(job, now)
            cells = {k: all_cells[k] for k in keys}
            if job.id in existing:
                for col, value in cells.items():
                    self.update_cell(job.id, col, value)
            else:
                self.add_row(*cells.values(), key=job.id)
                added = True
            created[job.short_id] = job.created_at
        return added

    def sort_newest_first(self, created: dict[str, float]) -> None:
        """Newest first (DataTable appends new rows), keeping the selected job selected."""
        selected = self.selected_key()
        self.sort("id", key=lambda short_id: -created.get(short_id, 0.0))
        if selected:
            self.select_key(selected)

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # noqa: BLE001 - an empty or changing table has no selection
            return None

    def select_key(self, key: str) -> None:
        try:
            self.move_cursor(row=self.get_row_index(key), animate=False)
        except Exception:  # noqa: BLE001
            pass


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
        import re

        self.pattern, self.hits, self.hit = pattern, [], -1
        if not pattern:
            self._subtitle()
            return None
        try:
            rx = re.compile(pattern)
        except re.error as e:
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
    """One plotext chart per metric key (the first few), step on x, downsampled to the width."""

    MAX_CHARTS = 4

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.log_scale = False
        self.empty = Static("no metrics yet: the job calls gpu.log(step=..., loss=...)", classes="empty")

    def compose(self):
        yield self.empty

    def show(self, series: dict, downsample: Callable, log10: Callable) -> None:
        keys = sorted(series, key=lambda k: (0 if "loss" in k else 1, k))[: self.MAX_CHARTS]
        plots = list(self.query(PlotextPlot))
        self.empty.display = not keys
        while len(plots) < len(keys):  # charts are mounted once and kept: mounting is slow
            plot = PlotextPlot()
            self.mount(plot)
            plots.append(plot)
        for i, plot in enumerate(plots):
            plot.display = i < len(keys)
        for plot, key in zip(plots, keys):
            s = series[key]
            width = max(20, plot.size.width or 60)
            xs, ys = downsample(s.steps, s.values, width)
            if self.log_scale:
                xs, ys = log10(xs, ys)
            plt = plot.plt
            plt.clear_data()
            plt.clear_figure()
            if xs:
                plt.plot(xs, ys, marker="braille")
            label = f"log10({key})" if self.log_scale else key
            last = s.values[-1] if s.values else float("nan")
            plt.title(safe(f"{label}  last {last:.4g}  ({len(s.values)} pts)"))
            plot.refresh()
