"""A person's yes or no to a held job, bound to the plan digest they were shown.

`gpu approve`, the interactive submit and the dashboard all call these, so the binding
(a changed plan needs a new approval), the gate (an agent never approves; with an approval
PIN set, a person types it) and the record (who, when, which digest, whether a PIN was
checked) are one rule.

Only a yes is a person's alone. A no (`deny`) spends nothing, so whoever gives it at a
terminal is recorded under their name, an agent too, as a cancel is.

A job is not the person: a process that a gpu-router job started (core.engine.jobguard judges
it from its ancestors, cgroup and namespaces, never from its environment) may neither approve
nor deny, whatever its terminal and environment say. `approve` and `deny` check it themselves,
so no front can forget; the fronts check it first too, so a job is never shown a prompt.
"""

from __future__ import annotations

from core.engine import jobguard
from core.engine.actor import FORCE_VAR, Actor
from core.jobs.states import State
from core.jobs.store import Job, Store
from core.errors import NotFound, UserError

HOW_A_PERSON_APPROVES = ("a person runs `gpu approve {ref}` in a terminal of their own, or presses "
                         "`a` on the job in `gpu dash`")


HOW_A_PERSON_DECIDES = ("a person approves or denies from a terminal of their own (`gpu approve "
                        "{ref}`, `gpu deny {ref}`) or from `gpu dash`, never from a job's process")


def require_not_job(what: str, *, store: Store | None = None, job: Job | None = None,
                    undone: str = "nothing was approved") -> None:
    """Refuse `what` ("approval", "denial", ...) when this process runs inside a gpu-router job, saying which fact showed
    it; with the held `job` at hand, its history records the refused try (and so does the
    asking job's, when it is a job of this store)."""
    origin = jobguard.detect()
    if origin is None:
        return
    ref = job.short_id if job is not None else "ID"
    if store is not None and job is not None:
        _record_refusal(store, job, what, origin)
    raise UserError(f"{what} refused: this process runs inside a gpu-router job ({origin.reason}); "
                    f"{undone}", fix=HOW_A_PERSON_DECIDES.format(ref=ref))


def _record_refusal(store: Store, job: Job, what: str, origin: jobguard.Origin) -> None:
    asker = f"job {origin.job_id}" if origin.job_id else "a job"
    text = f"{what} refused: asked from inside {asker}'s process ({origin.reason})"
    data = {"decision": "refused", "asked": what, "asking_job": origin.job_id, "why": origin.reason}
    store.add_event(job.id, text, actor=f"{asker}'s process", data=data)
    if origin.job_id and origin.job_id != job.id:
        try:
            other = store.get(origin.job_id)
        except NotFound:  # not a job of this store (a remote one): the held job's note says it
            return
        store.add_event(other.id, f"{what} of job {job.short_id} refused: asked from inside this "
                                  f"job's process ({origin.reason})", actor=f"{asker}'s process", data=data)


def require_person(actor: Actor, ref: str = "ID", *, store: Store | None = None,
                   job: Job | None = None) -> None:
    """Refuse a job's process, then an agent's approval, saying which fact decided it and what
    a person does.

    Every front calls this before it asks for a yes or a PIN, so an agent is never prompted."""
    require_not_job("approval", store=store, job=job)
    if actor.is_person:
        return
    fix = HOW_A_PERSON_APPROVES.format(ref=ref)
    if actor.marker and actor.marker != FORCE_VAR:
        fix += f" (its environment must not have {actor.marker}, which an agent's shell sets)"
    elif actor.marker == FORCE_VAR:
        fix += f" (without {FORCE_VAR} in its environment)"
    raise UserError(f"approve needs a person at a terminal, and this run is an agent's: {actor.why}",
                    fix=fix)


def require_pin(entered: str | None, *, where: str, store: Store | None = None,
                job: Job | None = None, actor: str = "") -> bool:
    """With an approval PIN set, `entered` must be it and the PIN not locked (see
    core.engine.pin: each wrong try is counted in the store, an event on `job` and a line in
    the supervisor's log); True when one was checked."""
    from core.engine import pin

    return pin.require(entered, where=where, store=store, job=job, actor=actor)


def pin_is_set() -> bool:
    from core.engine import pin

    return pin.stored() is not None


def _held(store: Store, ref: str) -> Job:
    job = store.resolve(ref)
    if job.state != State.AWAITING_APPROVAL:
        raise UserError(f"job {job.short_id} is {job.state.value}, not awaiting approval",
                        fix="see `gpu jobs --state awaiting_approval` for the jobs that wait")
    return job


def approve(store: Store, ref: str, *, digest: str, actor: str, pin_checked: bool = False) -> Job:
    """Approve exactly the plan with `digest`; a plan that changed meanwhile is refused.

    The fronts have already passed `require_person` and `require_pin`; this records it, and
    checks once more that no job's process asks (the one check no front can skip)."""
    require_not_job("approval", store=store, job=_held(store, ref))
    with store.write():
        job = _held(store, ref)
        if digest != job.digest:
            raise UserError(f"the plan of job {job.short_id} changed since it was shown "
                            f"(digest {digest[:12]} is now {job.digest[:12] if job.digest else '-'})",
                            fix=f"review it again with `gpu approve {job.short_id}`")
        kind = job.plan.get("hold_kind", "rules")
        reason = f"approved by {actor} (plan {job.digest[:12]})"
        job = store.transition(job.id, State.ROUTING, reason, actor=actor,
                               data={"decision": "approve", "digest": job.digest, "hold": kind,
                                     "pin": pin_checked, "hours": job.plan.get("hours")},
                               approved_digest=job.digest)
    _wake()
    return job


def deny(store: Store, ref: str, *, actor: str, reason: str | None = None) -> Job:
    """Refuse a held job: final (`denied`) for every kind of hold. An overrun's no was once
    stored as `cancelled`, which an agent's resume ran again; a denied job has no way back
    (core/jobs/states.py), and every door refuses one (core/engine/doors.py).
    Never from a job's process: a job must not end the person's held jobs either."""
    require_not_job("denial", store=store, job=_held(store, ref), undone="nothing was denied")
    with store.write():
        job = _held(store, ref)
        overrun = job.plan.get("hold_kind") == "overrun"
        text = f"denied by {actor}" + (f": {reason}" if reason else "")
        job = store.transition(job.id, State.DENIED, text, actor=actor,
                               data={"decision": "deny", "digest": job.digest, "reason": reason,
                                     "hold": job.plan.get("hold_kind", "rules")})
    if overrun:
        from core.engine.jobreport import write_job_json

        write_job_json(store, job)
    return job


def _wake() -> None:
    from core.engine.daemon import ensure_running

    ensure_running()
