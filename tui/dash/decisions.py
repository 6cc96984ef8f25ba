"""The dashboard's changing actions: approving, denying and cancelling a job or a whole sweep.

The one part of the dashboard that changes the store, kept apart so it is read in one place:
each flow opens its modal (tui/dash/screens.py), then a worker makes the same core call as the
command line (core.engine.approvals, core.engine.sweeps, core.engine.cancelling), bound to the
digest shown and to who is at the keyboard.
"""

from __future__ import annotations

from textual import work

from core.errors import UserError
from core.jobs.states import ACTIVE, State
from core.jobs.store import Job, Store
from tui.dash.screens import ApprovalScreen, ConfirmScreen, ReasonScreen
from tui.dash.widgets import JobsTable
from tui.show.output import markup


class Decisions:
    """Approve, deny and cancel (DashApp mixes it in); a read-only dashboard hides their keys
    (tui/dash/bindings.py)."""

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
        from core.engine.cancelling import cancel
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


def _actor():
    """Who drives the dashboard: `gpu dash` refuses to start without a terminal, so only the
    environment can make it an agent's (an agent running it in a pseudo-terminal)."""
    from core.engine.actor import current

    return current(terminal=True)
