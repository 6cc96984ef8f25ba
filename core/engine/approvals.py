"""A person's yes or no to a held job, bound to the plan digest they were shown.

`gpu approve`, the interactive submit and the dashboard all call these, so the binding
(a changed plan needs a new approval) and the record (who, when, which digest) are one rule.
"""

from __future__ import annotations

import getpass

from core.engine.states import State
from core.engine.store import Job, Store
from core.errors import UserError


def who(channel: str) -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user} ({channel})"


def _held(store: Store, ref: str) -> Job:
    job = store.resolve(ref)
    if job.state != State.AWAITING_APPROVAL:
        raise UserError(f"job {job.short_id} is {job.state.value}, not awaiting approval",
                        fix="see `gpu jobs --state awaiting_approval` for the jobs that wait")
    return job


def approve(store: Store, ref: str, *, digest: str, actor: str) -> Job:
    """Approve exactly the plan with `digest`; a plan that changed meanwhile is refused."""
    with store.write():
        job = _held(store, ref)
        if digest != job.digest:
            raise UserError(f"the plan of job {job.short_id} changed since it was shown "
                            f"(digest {digest[:12]} is now {job.digest[:12] if job.digest else '-'})",
                            fix=f"review it again with `gpu approve {job.short_id}`")
        kind = job.plan.get("hold_kind", "rules")
        reason = f"approved by {actor} (plan {job.digest[:12]})"
        job = store.transition(job.id, State.ROUTING, reason, actor=actor,
                               data={"decision": "approve", "digest": job.digest, "hold": kind},
                               approved_digest=job.digest)
    _wake()
    return job


def deny(store: Store, ref: str, *, actor: str, reason: str | None = None) -> Job:
    """Refuse a held job: final (`denied`), or `cancelled` for a job stopped past its hours."""
    with store.write():
        job = _held(store, ref)
        overrun = job.plan.get("hold_kind") == "overrun"
        dst = State.CANCELLED if overrun else State.DENIED
        text = f"denied by {actor}" + (f": {reason}" if reason else "")
        job = store.transition(job.id, dst, text, actor=actor,
                               data={"decision": "deny", "digest": job.digest, "reason": reason})
    if overrun:
        from core.engine.service import write_job_json

        write_job_json(store, job)
    return job


def _wake() -> None:
    from core.engine.daemon import ensure_running

    ensure_running()
