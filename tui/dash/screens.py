"""The dashboard's modal screens: approve, deny, confirm, job detail and help.

Each confirmation is a ModalScreen whose key hints are printed inside it (posting's model),
so a person never has to guess which key does what.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Static

from tui.show.output import joined, markup, renderable
from tui.show.render import local_time, bundle_panel, journey_panel, metrics_table, plan_panel, state_text, tracked_rows


class ApprovalScreen(ModalScreen[str | None]):
    """The plan of a held job; `y` approves exactly this digest, `d` denies, `n`/esc returns.

    With an approval PIN set (`needs_pin`), `y` opens a hidden-input field instead: enter
    approves with what was typed (kept in `pin` for the app to check, never shown or logged)."""

    DEFAULT_CSS = """
    ApprovalScreen { align: center middle; }
    ApprovalScreen > Vertical { width: 90%; max-width: 110; height: auto; max-height: 90%;
        border: thick $warning; background: $surface; padding: 0 1; }
    ApprovalScreen .hints { color: $text; background: $warning 20%; padding: 0 1; }
    ApprovalScreen VerticalScroll { height: auto; max-height: 24; }
    ApprovalScreen #pin { display: none; }
    ApprovalScreen #pin.shown { display: block; }
    """
    BINDINGS = [
        Binding("y", "decide('approve')", "Approve", id="approval.approve"),
        Binding("d", "decide('deny')", "Deny", id="approval.deny"),
        Binding("n,escape", "decide(None)", "Back", id="approval.back"),
    ]

    def __init__(self, job, needs_pin: bool = False, group=None) -> None:
        super().__init__()
        self.job = job
        self.needs_pin = needs_pin
        self.pin: str | None = None
        self.group = group  # a sweep held as one: y approves every point of it (its digest)

    def compose(self) -> ComposeResult:
        job, group = self.job, self.group
        holds = job.plan.get("holds") or []
        with Vertical():
            if group is not None:
                spec = group.spec
                yield Static(markup("[b]Approve sweep {short} [/b]({name}): all {n} points, {hours} h in all, "
                                    "${price} estimated, on {where}?", short=group.short_id, name=group.name,
                                    n=len(spec.get("points", [])),
                                    hours=f"{spec['hours']:g}" if spec.get("hours") is not None else "?",
                                    price=f"{spec.get('estimated_price') or 0:.2f}",
                                    where=", ".join(f"{k} ({v})" for k, v in spec.get("targets", {}).items())),
                             id="approval-title")
            else:
                yield Static(markup("[b]Approve job {short} [/b]({name})?", short=job.short_id, name=job.name),
                             id="approval-title")
            with VerticalScroll():
                yield Static(plan_panel(job.plan, job.bundle))
            yield Static(markup("held by: {rules}   digest {digest}",
                                rules=", ".join(h["rule"] for h in holds) or "rules",
                                digest=(group.digest if group is not None else job.digest or "-")[:16]))
            if self.needs_pin:
                yield Input(placeholder="your approval PIN, then enter", password=True, id="pin")
            yield Static(self._hints(), classes="hints", id="approval-hints")

    def _hints(self) -> str:
        if self.needs_pin and self.query("#pin.shown"):
            return "type your approval PIN   [b]enter [/b]approve this plan   [b]esc [/b]back"
        extra = " (asks for your approval PIN)" if self.needs_pin else ""
        return f"[b]y [/b]approve this plan{extra}   [b]d [/b]deny   [b]n[/b]/[b]esc [/b]back"

    def action_decide(self, decision: str | None) -> None:
        if decision == "approve" and self.needs_pin:
            box = self.query_one("#pin", Input)
            box.add_class("shown")
            box.focus()
            self.query_one("#approval-hints", Static).update(self._hints())
            return
        self.dismiss(decision)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "pin":
            event.stop()
            self.pin = event.value
            event.input.value = ""
            self.dismiss("approve")


class ReasonScreen(ModalScreen[str | None]):
    """Deny with an optional reason: enter confirms, esc returns without denying."""

    DEFAULT_CSS = """
    ReasonScreen { align: center middle; }
    ReasonScreen > Vertical { width: 70; height: auto; border: thick $error; background: $surface; padding: 0 1; }
    ReasonScreen .hints { background: $error 20%; padding: 0 1; }
    """
    BINDINGS = [Binding("escape", "back", "Back", id="reason.back")]

    def __init__(self, job) -> None:
        super().__init__()
        self.job = job

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(markup("[b]Deny job {short} [/b]({name})", short=self.job.short_id, name=self.job.name))
            yield Input(placeholder="reason (optional)", id="reason")
            yield Static("[b]enter [/b]deny   [b]esc [/b]back", classes="hints")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_back(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question with its keys printed inside; the question is markup() Text."""

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 64; height: auto; border: thick $error; background: $surface; padding: 0 1; }
    ConfirmScreen .hints { background: $error 20%; padding: 0 1; }
    """
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: object) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(renderable(self.question))
            yield Static("[b]y [/b]yes   [b]n[/b]/[b]esc [/b]no", classes="hints")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class DetailScreen(Screen):
    """Everything about one job: its journey first (a failed job's error and log tail, then
    each attempt: where, why it moved, from which checkpoint), then request, plan and digest,
    bundle, events, outputs, metrics."""

    BINDINGS = [Binding("escape,q,enter", "app.pop_screen", "Back", id="detail.back")]
    DEFAULT_CSS = "DetailScreen VerticalScroll { padding: 0 1; }"

    def __init__(self, job, events: list, metrics: dict, clock, journey: dict | None = None) -> None:
        super().__init__()
        self.job, self.events, self.metrics, self.clock = job, events, metrics, clock
        self.journey = journey

    @staticmethod
    def _title(job) -> Text:  # noqa: ANN001 - a core Job
        return markup("[b]job {short}  [/b]{name}  {state}" + ("  [dim]{reason}[/dim]" if job.reason else ""),
                      short=job.short_id, name=job.name, state=state_text(job.state.value), reason=job.reason)

    def show_state(self, job) -> None:  # noqa: ANN001 - a core Job
        """The job's state and reason as they change while the screen is open (an install's
        "fetching 12 packages, 412.0 MB of 1.2 GB" moves on each second)."""
        if job.id == self.job.id:
            self.query_one("#detail-title", Static).update(self._title(job))

    def compose(self) -> ComposeResult:
        job = self.job
        with VerticalScroll():
            # each separating space ends the styled run before it: a renderer of the SVG that
            # drops a run's leading spaces ran "job 01c0ffee" and the name together
            yield Static(self._title(job), id="detail-title")
            if self.journey is not None:
                moves = self.journey.get("moves") or 0
                title = "journey" + (f" ({moves} move{'s' * (moves != 1)})" if moves else "")
                yield Static(Group(Text(title, style="bold underline"),
                                   journey_panel(self.journey, when=local_time)), id="journey")

            req = Table.grid(padding=(0, 2))
            req.add_column(style="bold")
            req.add_column()
            r = job.request
            for key in ("script", "args", "env", "secrets", "include", "hours", "gpu", "vram_gb",
                        "provider", "request_id"):
                value = r.get(key)
                if value not in (None, [], {}, ""):
                    req.add_row(key, renderable(value))
            req.add_row("data", renderable(joined((f"{joined([d['name']])}={joined([d['source']])}"
                                                   for d in r.get("data", [])), ", ") or "-"))
            req.add_row("project", renderable(job.project_dir))
            req.add_row("outputs", renderable(job.outputs_dir))
            kept = job.handle.get("outputs_kept")  # runs/<id>/ was refused: where they are instead
            if kept:
                req.add_row("kept at", renderable(f"{kept.get('dir')} ({kept.get('why')})"))
            yield Static(Group(Text("request", style="bold underline"), req))
            yield Static(Group(Text("plan", style="bold underline"), plan_panel(job.plan, state=job.state.value)))
            yield Static(Group(Text("bundle", style="bold underline"), bundle_panel(job.bundle)))
            ev = Table(box=None, header_style="bold", pad_edge=False)
            for col in ("time", "change", "who", "reason"):
                ev.add_column(col)
            import time as _t

            for e in self.events:
                change = f"{e.src or ''} -> {e.dst}" if e.dst else "note"
                ev.add_row(*(renderable(c) for c in (_t.strftime("%m-%d %H:%M:%S", _t.localtime(e.ts)),
                                                     change, e.actor, e.reason)))
            yield Static(Group(Text("events", style="bold underline"), ev))
            if self.metrics:
                yield Static(Group(Text("metrics", style="bold underline"), metrics_table(self.metrics)))
            tracked = tracked_rows(job)
            if tracked:  # what wandb or openscience_track reported
                grid = Table.grid(padding=(0, 2))
                grid.add_column(style="bold")
                grid.add_column()
                for key, value in tracked:
                    grid.add_row(key, renderable(value))
                yield Static(Group(Text("tracking", style="bold underline"), grid))
        yield Footer()

    def on_resize(self, event) -> None:
        """As the dashboard's own footer: narrow, it is compact and leaves out the palette
        label (it wrapped at 80 columns); ctrl+p still opens the palette."""
        from tui.dash.job_cells import COMPACT_BELOW

        narrow = event.size.width < COMPACT_BELOW
        footer = self.query_one(Footer)
        footer.compact = narrow
        footer.show_command_palette = not narrow


class HelpScreen(ModalScreen[None]):
    """Every key of the dashboard, from the same Bindings the footer and palette use."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 76; height: 80%; border: thick $primary; background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "Close", id="help.close")]

    def __init__(self, rows: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        table = Table(box=None, header_style="bold", pad_edge=False)
        table.add_column("key", style="bold cyan", no_wrap=True)
        table.add_column("action")
        table.add_column("id", style="dim")
        for key, desc, bid in self.rows:
            table.add_row(key, desc, bid)
        with VerticalScroll():
            yield Static("[b]gpu dash: keys   [/b](ctrl+p opens the command palette; esc closes this)")
            yield Static(table)

