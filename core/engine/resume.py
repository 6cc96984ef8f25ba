"""`gpu resume ID` and compute_job's `resume`: an ended job runs again from its checkpoint.

A cancelled or failed job (a cancel, a kill rule, a budget, an exit status) keeps its last
checkpoint in `runs/<id>/checkpoint/` (core/packaging/checkpoints/settling.py settles it there). A
resume takes the same job back to `routing` as its next attempt: routed again (a new plan),
with the resume's attempt and checkpoint in the plan's digest (a new digest, so no earlier
approval carries over), and the approval rules applied again as for whoever resumes it (an
agent's resume is held where an agent's submit would be; an agent never approves). The
supervisor then places it like any routed job (jobsteps.py `_launch`), moves the checkpoint
back home and restores it on the target before the launcher starts.

Done and denied jobs are refused, with why: a done job has nothing left to run, and a denied
one was refused by a person (a resume must not undo that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import UserError
from core.jobs.states import RESUMABLE, TERMINAL, State
from core.jobs.store import Job, Store
from core.packaging import checkpoints
from core.engine.jobfiles import outputs_where


def _refuse(job: Job) -> None:
    """Why this job cannot be resumed, as an error that says what to do instead."""
    short = job.short_id
    if job.state == State.DONE:
        raise UserError(f"job {short} is done ({job.reason}): it finished, so there is nothing to resume",
                        fix="to run it again from the start, submit it again (gpu submit)")
    if job.state == State.DENIED:
        raise UserError(f"job {short} was denied ({job.reason}): a person refused it, and a "
                        "resume would run what they refused",
                        fix="submit it again; a person then approves or denies the new plan")
    if job.state not in TERMINAL:
        raise UserError(f"job {short} is still {job.state.value}: only an ended job is resumed",
                        fix=f"wait for it (gpu logs -f {short}), or stop it first: "
                            f"gpu cancel --checkpoint {short}")


@dataclass
class Resuming:
    """A resume planned and not yet recorded: the ended job, its next attempt's plan, the
    target it was routed to (its probed info, for the rules) and the checkpoint it goes on from."""
    job: Job
    plan: dict
    info: Any
    ckpt: dict | None
    attempt: int
    cfg: Any


def plan_resume(store: Store, job: Job, *, cfg: Any = None) -> Resuming:
    """Route an ended job again as its next attempt (refused, with why, when it cannot be)."""
    from core.config import user as userconfig
    from core.engine import targets
    from core.engine.service import request_from_json
    from core.planning.plan import digest
    from core.planning.router import ROUTE_KEYS, route, route_fields

    if job.state not in RESUMABLE:
        _refuse(job)
    ckpt = checkpoints.settled(job.id, outputs_where(job))
    if ckpt is None and job.request.get("restart", "never") != "allow":
        raise UserError(f"job {job.short_id} has no checkpoint to resume from (none came home "
                        f"before it {job.state.value}), and it would start again from the "
                        "beginning, which its request does not allow",
                        fix="submit it again, or set restart: allow in gpu.yaml for jobs that may "
                            "start over")
    cfg = cfg or userconfig.load()
    req = request_from_json(job.request)
    chosen = route(req, targets.for_request(req, store, cfg), targets.kinds(cfg))
    attempt = job.attempt + 1
    plan = {**job.plan, "target": chosen.target, "gpu": chosen.gpu, "reasons": chosen.reasons,
            "passed_over": chosen.passed_over,
            "resume": {"attempt": attempt, "checkpoint": ckpt and {
                "generation": ckpt["generation"], "sha256": ckpt["sha256"]}}}
    for key in (*ROUTE_KEYS, "holds", "hold_kind", "tell_user", "group_totals"):
        plan.pop(key, None)
    plan.update(route_fields(chosen, req.checkpoint, req.restart))
    plan["digest"] = digest(plan)
    return Resuming(job=job, plan=plan, info=chosen.info, ckpt=ckpt, attempt=attempt, cfg=cfg)


def resume(store: Store, ref: str, *, actor: str, interactive: bool,
           start_supervisor: bool = True) -> Job:
    """Take an ended job back to routing as its next attempt (see the module's docstring).

    `interactive` is whether a person at a terminal asked (core.engine.actor): the approval
    rules judge the resume as that person's or an agent's, through the one judgment of every
    door (core/engine/doors.py: the job's history, its group's totals). Returns the job,
    `routing` or `awaiting_approval`."""
    from core.engine import doors
    from core.engine.service import needs_supervisor

    job = store.resolve(ref)
    if job.state in RESUMABLE:  # a person's no, whatever state an older version stored it in
        history = doors.past(store, job)
        if history.denied is not None:
            raise doors.denied_refusal(job, history.denied)
    r = plan_resume(store, job)
    verdict = doors.judge(store, job, r.plan, door=doors.RESUME, interactive=interactive,
                          cfg=r.cfg, info=r.info)
    job = record(store, r, verdict, actor=actor)
    if start_supervisor and needs_supervisor(job):
        from core.engine.daemon import ensure_running

        ensure_running()
    return job


def record(store: Store, r: Resuming, verdict: Any, *, actor: str, hold_fields: dict | None = None) -> Job:
    """Record a judged resume: back to routing as its next attempt, then held when the verdict
    (doors.judge) says so, with its kind and its plan (an overrun's offer)."""
    from core.engine.service import hold

    job, ckpt, attempt, plan = r.job, r.ckpt, r.attempt, dict(verdict.plan)
    plan["holds"] = list(verdict.holds)
    start = ("from " + checkpoints.describe(ckpt)) if ckpt else "from the beginning (restart: allow)"
    text = (f"resumed by {actor} after it {job.state.value} ({job.reason}): attempt {attempt} "
            f"on {plan['target']}, {start}")
    handle = {**_carried(job), "restore_checkpoint": ckpt is not None,
              "resuming": {"by": actor, "from_state": job.state.value, "from_target": job.provider,
                           "checkpoint": ckpt}}
    with store.write():
        fresh = store.get(job.id)
        if fresh.state != job.state:
            raise UserError(f"job {job.short_id} changed while it was resumed (now {fresh.state.value})",
                            fix=f"look at it (gpu status {job.short_id}) and resume again if it ended")
        job = store.transition(job.id, State.ROUTING, text, actor=actor, expect=[job.state],
                               data={"by": actor, "from_state": job.state.value, "attempt": attempt,
                                     "target": plan["target"], "checkpoint": ckpt,
                                     "digest": plan["digest"]},
                               provider=plan["target"], plan=plan, digest=plan["digest"],
                               handle=handle, cancel_requested=0, exit_code=None)
        if not plan["holds"]:  # an agent's resume is a new start: its rolling day (agentday.py)
            from core.engine import agentday

            plan["holds"] = agentday.admit(store, store.conn, job.id, plan, r.cfg.rules, actor=actor,
                                           why=f"resumed, attempt {attempt}")
        if plan["holds"]:
            job = hold(store, job, plan["holds"], kind=verdict.kind if verdict.holds else "rules",
                       actor=actor, plan=plan, **(hold_fields or {}))
    return job


def _carried(job: Job) -> dict:
    """The counters a job's handle keeps across attempts (jobsteps.CARRIED), imported late:
    jobsteps is the supervisor's half and loads the providers."""
    from core.engine.jobsteps import carried_over

    return carried_over(job.handle)
