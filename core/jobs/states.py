"""The job states and the one table of legal transitions between them.

Nothing else in gpu-router decides whether a job may move; `store.transition` consults this
table and raises `IllegalTransition` for anything it does not list.

An ended job stays ended, with one exception: a cancelled or failed one may be resumed
(`gpu resume`, core/engine/resume.py), which routes it again as its next attempt. Done and
denied are final: a done job has nothing left to run, and a denied one was refused by a person.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    QUEUED = "queued"
    ROUTING = "routing"
    AWAITING_APPROVAL = "awaiting_approval"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    MIGRATING = "migrating"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DENIED = "denied"


S = State

TRANSITIONS: dict[State, frozenset[State]] = {
    S.QUEUED: frozenset({S.ROUTING, S.CANCELLED, S.FAILED}),
    # routing holds a placed job until its target has a free slot
    S.ROUTING: frozenset({S.AWAITING_APPROVAL, S.PROVISIONING, S.QUEUED, S.FAILED, S.CANCELLED}),
    S.AWAITING_APPROVAL: frozenset({S.PROVISIONING, S.ROUTING, S.DENIED, S.CANCELLED, S.FAILED}),
    S.PROVISIONING: frozenset({S.RUNNING, S.MIGRATING, S.DONE, S.FAILED, S.CANCELLED}),
    S.RUNNING: frozenset({S.CHECKPOINTING, S.MIGRATING, S.AWAITING_APPROVAL, S.DONE, S.FAILED, S.CANCELLED}),
    S.CHECKPOINTING: frozenset({S.RUNNING, S.MIGRATING, S.AWAITING_APPROVAL, S.DONE, S.FAILED, S.CANCELLED}),
    # a moved job is planned again: it starts on its new target, or waits for a person when
    # the new plan needs approval
    S.MIGRATING: frozenset({S.PROVISIONING, S.ROUTING, S.AWAITING_APPROVAL, S.FAILED, S.CANCELLED}),
    S.DONE: frozenset(),
    # a resume: planned again (new plan, new digest, the approval rules again), next attempt
    S.FAILED: frozenset({S.ROUTING}),
    S.CANCELLED: frozenset({S.ROUTING}),
    S.DENIED: frozenset(),
}

# Ended: nothing of the job runs or waits. Only a resume leaves one (RESUMABLE).
TERMINAL: frozenset[State] = frozenset({S.DONE, S.FAILED, S.CANCELLED, S.DENIED})
# Ended states a resume may take back to routing: stopped (a cancel, a kill rule, a budget)
# or failed, with a checkpoint to go on from.
RESUMABLE: frozenset[State] = frozenset(s for s in TERMINAL if TRANSITIONS[s])
# A job whose process may exist somewhere: the supervisor watches these.
LAUNCHED: frozenset[State] = frozenset({S.PROVISIONING, S.RUNNING, S.CHECKPOINTING})
# Not yet ended: an identical request returns such a job instead of starting another.
ACTIVE: frozenset[State] = frozenset(State) - TERMINAL
# Live jobs the supervisor must drive (a held job waits for a person, not for it).
SUPERVISED: frozenset[State] = ACTIVE - {S.AWAITING_APPROVAL}


def can_move(src: State | str, dst: State | str) -> bool:
    return State(dst) in TRANSITIONS[State(src)]
