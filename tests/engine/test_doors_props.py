"""A state machine over every door into running, by an agent and by a person (issue 37).

Submit, hold, approve, deny, cancel, resume, retry, migrate, a sweep's resume: any sequence of
them, over the real store, the real policy and the supervisor's own door code
(Supervisor._launch, jobmoves' _resume and _migrate), with a fake target whose launch is where
work would start, and faked hours (usage rows) instead of real minutes. At each launch the
model, kept apart from core/engine/doors.py, checks:

- no job a person denied runs again;
- a job held (for anything) runs only after a person's yes given after that hold: a cancel,
  a resume (a person's too: it is no yes), a retry or a move never clears it;
- no plan carries more hours than a person approved (or than the submit passed);
- an agent's work over the rules' limits (agent_max_hours) never runs without a person's yes.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from tests.conftest import make_git_project, write_user_config

UNIQUE = (f"run-{n}" for n in itertools.count())  # each request its own: no idempotent return
AGENT_MAX_HOURS = 1.0  # the default rules (core.config.user.Rules)
OVERRUN = 1.25


class Model:
    """What a person has said about each job, observed from the outside."""

    def __init__(self) -> None:
        self.denied: set[str] = set()
        self.pending: set[str] = set()  # held since the last person's yes
        self.yes_hours: dict[str, float] = {}  # the hours a person approved, or the submit passed
        self.launches: list[tuple[str, int]] = []
        self.violations: list[str] = []


class FakeTarget:
    """The local target as the supervisor sees it; launch is where work would start."""

    options: dict = {}

    def __init__(self, model: Model, name: str) -> None:
        self.model, self.name = model, name

    async def launch(self, job: Any, env_secrets: dict) -> dict:
        """Where work starts: what the model forbids is noted (the supervisor catches what a
        launch raises, so the invariant says it)."""
        m = self.model
        hours = job.plan.get("hours")
        if job.id in m.denied:
            m.violations.append(f"denied job {job.short_id} launched")
        if job.id in m.pending:
            m.violations.append(f"job {job.short_id} launched while held without a person's yes")
        if hours is None or float(hours) > m.yes_hours[job.id] + 1e-9:
            m.violations.append(f"job {job.short_id} launched carrying {hours} h; a person "
                                f"approved {m.yes_hours[job.id]}")
        m.launches.append((job.id, job.attempt))
        return {"launched_at": time.time()}

    async def cancel(self, job: Any, force: bool = False) -> None:
        return None

    async def poll(self, job: Any) -> Any:
        from core.providers.base import Poll

        return Poll("running")


class Doors(RuleBasedStateMachine):
    """Drives the engine's doors; `project` and `store` come from the test."""

    project: Path

    def __init__(self) -> None:
        super().__init__()
        from core.engine.supervisor import Supervisor
        from core.jobs.store import Store

        # a store of its own for each run: a replayed run meets the same world
        self.store = Store(Path(self.project).parent / f"store-{next(UNIQUE)}.db")
        self.model = Model()
        self.sup = Supervisor(store=self.store, providers={
            name: FakeTarget(self.model, name) for name in ("local", "other")})
        self.jobs: list[str] = []
        self.groups: list[str] = []
        self.n = 0

    # -- observing -----------------------------------------------------------------------

    def _observe(self) -> None:
        """After every call: a job now held waits for a person's yes."""
        for jid in self.jobs:
            job = self.store.get(jid)
            if job.state.value == "awaiting_approval":
                self.model.pending.add(jid)
            if job.state.value == "denied":
                self.model.denied.add(jid)

    def _job(self, data: st.DataObject, states: set[str]) -> Any:
        live = [j.short_id for j in (self.store.get(x) for x in self.jobs) if j.state.value in states]
        if not live:
            return None
        return self.store.resolve(data.draw(st.sampled_from(live)))  # drawn by short id: a short report

    def _submitted(self, jid: str) -> None:
        job = self.store.get(jid)
        self.jobs.append(jid)
        held = job.state.value == "awaiting_approval"
        who = job.plan.get("submitted_by")
        if who == "agent" and float(job.plan["hours"]) > AGENT_MAX_HOURS:
            assert held, "an agent's job over its hours was not held at submit"
        self.model.yes_hours[jid] = float(job.plan["hours"])

    # -- the doors -------------------------------------------------------------------------

    @initialize()
    def first(self) -> None:
        self.submit(agent=True, hours=0.2)

    @rule(agent=st.booleans(), hours=st.sampled_from([0.2, 0.5, 3.0]))
    def submit(self, agent: bool, hours: float) -> None:
        from core.config.request import build_request
        from core.engine.service import submit

        req = build_request(self.project, {"script": "a.py", "args": [next(UNIQUE)], "hours": hours,
                                           "wait_s": 0})
        result = submit(req, actor="agent" if agent else "person", interactive=not agent,
                        store=self.store, start_supervisor=False)
        self._submitted(result.job.id)
        self._observe()

    @rule(hours=st.sampled_from([0.2, 0.4]))
    def submit_sweep(self, hours: float) -> None:
        from core.config.request import build_request
        from core.engine.sweeps import submit_group

        req = build_request(self.project, {"script": "a.py", "args": [next(UNIQUE)], "hours": hours, "wait_s": 0,
                                           "sweep": [{"LR": str(v)} for v in range(4)]})
        result = submit_group(req, actor="agent", interactive=False, store=self.store,
                              start_supervisor=False)
        self.groups.append(result.group.id)
        for job in result.jobs:
            self._submitted(job.id)
        if hours * 4 > AGENT_MAX_HOURS:
            assert all(j.state.value == "awaiting_approval" for j in result.jobs)
        self._observe()

    @rule()
    def tick(self) -> None:
        """The supervisor's tick places every routed job (jobsteps._launch: the last door)."""
        for jid in self.jobs:
            job = self.store.get(jid)
            if job.state.value == "routing":
                asyncio.run(self.sup._launch(job))
        self._observe()

    @rule(data=st.data(), over=st.booleans())
    def runs(self, data: st.DataObject, over: bool) -> None:
        """A launched attempt runs some hours; past its hours x overrun_factor it is stopped
        and held (jobsteps._hold_overrun), as the watch does."""
        job = self._job(data, {"provisioning"})
        if job is None:
            return
        from core.jobs.states import State

        granted = self.model.yes_hours[job.id]
        used = granted * (OVERRUN + 0.5) if over else granted * 0.3
        now = time.time()
        self.store.usage_start(job.id, job.attempt, job.provider or "local", 0.0, at=now - used * 3600)
        self.store.usage_end(job.id, job.attempt, at=now)
        job = self.store.transition(job.id, State.RUNNING, "started")
        if over:
            self.sup._hold_overrun(self.store.get(job.id))
        self._observe()

    @rule(data=st.data(), ok=st.booleans())
    def ends(self, data: st.DataObject, ok: bool) -> None:
        job = self._job(data, {"running", "provisioning"})
        if job is None:
            return
        from core.jobs.states import State

        self.store.transition(job.id, State.DONE if ok else State.FAILED, "ended")
        self._observe()

    @rule(data=st.data())
    def approve(self, data: st.DataObject) -> None:
        """A person's yes to a held job, or to its whole sweep."""
        from core.engine.approvals import approve
        from core.engine.sweeps import approve_group

        job = self._job(data, {"awaiting_approval"})
        if job is None:
            return
        if job.plan.get("hold_kind") == "group":
            group = self.store.group(job.group_id)
            points = approve_group(self.store, group, digest=group.digest, actor="person")
        else:
            points = [approve(self.store, job.id, digest=job.digest, actor="person")]
        for p in points:
            self.model.pending.discard(p.id)
            self.model.yes_hours[p.id] = float(p.plan["hours"])
        self._observe()

    @rule(data=st.data(), agent=st.booleans())
    def deny(self, data: st.DataObject, agent: bool) -> None:
        from core.engine.approvals import deny

        job = self._job(data, {"awaiting_approval"})
        if job is None or job.plan.get("hold_kind") == "group":
            return
        deny(self.store, job.id, actor="agent" if agent else "person")
        self._observe()

    @rule(data=st.data(), group=st.booleans())
    def cancel(self, data: st.DataObject, group: bool) -> None:
        """An agent's cancel, of a job or its whole sweep; a launched one ends cancelled as the
        supervisor would end it."""
        from core.engine.cancelling import cancel
        from core.engine.sweeps import cancel_group
        from core.jobs.states import LAUNCHED, State

        job = self._job(data, {"awaiting_approval", "routing", "provisioning", "running"})
        if job is None:
            return
        if group and job.group_id:
            cancel_group(self.store, self.store.group(job.group_id), actor="agent", wait_s=0)
        else:
            cancel(self.store, job.id, actor="agent", wait_s=0)
        for j in [self.store.get(x) for x in self.jobs]:
            if j.state in LAUNCHED and j.cancel_requested:
                self.store.transition(j.id, State.CANCELLED, "cancelled by request")
        self._observe()

    @rule(data=st.data(), agent=st.booleans(), group=st.booleans())
    def resume(self, data: st.DataObject, agent: bool, group: bool) -> None:
        from core.engine.resume import resume
        from core.engine.sweeps import resume_group
        from core.errors import UserError

        job = self._job(data, {"cancelled", "failed", "denied", "done"})
        if job is None:
            return
        try:
            if group and job.group_id:
                resume_group(self.store, self.store.group(job.group_id), actor="agent" if agent else "person",
                             interactive=not agent)
            else:
                resume(self.store, job.id, actor="agent" if agent else "person", interactive=not agent,
                       start_supervisor=False)
        except UserError:
            pass  # refused (done, denied, no checkpoint): nothing ran, which the target would see
        self._observe()

    @rule(data=st.data(), how=st.sampled_from(["retry", "requeue", "migrate"]))
    def session_ends(self, data: st.DataObject, how: str) -> None:
        """A retry on an exit code or a requeue (same target), or a session lost and the job
        moved (jobmoves: _resume, _migrate -> doors.replan)."""
        from core.jobs.states import State

        job = self._job(data, {"running"})
        if job is None:
            return
        same = how != "migrate"
        handle = {**job.handle, "resume_same_target": same, "lost_target": job.provider,
                  "move_why": "session ended"}
        if how == "retry":
            handle["retry_exit"] = 3
        self.store.transition(job.id, State.MIGRATING, "session ended", handle=handle)
        fresh = self.store.get(job.id)
        asyncio.run(self.sup._resume(fresh) if same else self.sup._migrate(fresh))
        self._observe()

    @invariant()
    def nothing_ran_that_a_rule_holds(self) -> None:
        assert not self.model.violations, self.model.violations

    @invariant()
    def denied_stay_denied(self) -> None:
        for jid in self.model.denied:
            assert self.store.get(jid).state.value == "denied"


@pytest.mark.slow
def test_no_sequence_of_an_agents_calls_runs_what_a_rule_holds(home: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import core.engine.daemon as daemon

    monkeypatch.setattr(daemon, "ensure_running", lambda *a, **k: None)  # the test is the supervisor
    write_user_config("targets:\n  local: {kind: local}\n  other: {kind: local}\n")
    Doors.project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n",
                                                      "gpu.yaml": "restart: allow\n"})
    run_state_machine_as_test(Doors, settings=settings(
        max_examples=300, stateful_step_count=25, deadline=None, database=None,
        suppress_health_check=list(HealthCheck)))
