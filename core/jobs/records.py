"""What a row of the store is once read: a job, a group (a sweep), an event, an attempt left
behind; each with the documented `--json` form where it has one.

Apart from the Store so that code that only reads a job (most of the engine and every front)
needs no connection to name its type.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from core.jobs.schema import _JSON_COLUMNS
from core.jobs.states import ACTIVE, State

MAX_CONFIG_KEYS = 1000  # settings (and final numbers) kept per job; later new names are dropped
CANCEL_AFTER_CHECKPOINT = 2  # jobs.cancel_requested: 1 stop now, 2 checkpoint first, then stop


@dataclass
class Job:
    id: str
    short_id: str
    name: str
    state: State
    provider: str | None
    created_at: float
    updated_at: float
    started_at: float | None
    ended_at: float | None
    project_dir: str
    outputs_dir: str
    request_id: str | None
    fingerprint: str
    request: dict
    plan: dict
    digest: str | None
    approved_digest: str | None
    bundle_hash: str | None
    bundle: dict
    attempt: int
    handle: dict
    exit_code: int | None
    cancel_requested: bool
    reason: str
    metrics_offset: int
    last_metric: dict = field(default_factory=dict)
    rev: int = 0
    # `gpu cancel --checkpoint`: the column holds CANCEL_AFTER_CHECKPOINT (not 1) until the
    # supervisor has the checkpoint home and asks for the stop itself (cancel_requested)
    cancel_checkpoint: bool = False
    config: dict = field(default_factory=dict)  # the settings the job's tracking reported
    final: dict = field(default_factory=dict)  # its final numbers (summary)
    group_id: str | None = None  # the sweep it is a point of (core/engine/sweeps.py)

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "Job":
        d = dict(row)
        for col in _JSON_COLUMNS:
            d[col.removesuffix("_json")] = json.loads(d.pop(col) or "{}")
        d["state"] = State(d["state"])
        d["cancel_checkpoint"] = d["cancel_requested"] == CANCEL_AFTER_CHECKPOINT
        d["cancel_requested"] = d["cancel_requested"] == 1
        return cls(**d)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to_json(self, verbose: bool = False) -> dict[str, Any]:
        """The documented job object of `--json` output (stable field names)."""
        doc: dict[str, Any] = {
            "id": self.id,
            "short_id": self.short_id,
            "name": self.name,
            "state": self.state.value,
            "provider": self.provider,
            "reason": self.reason,
            "created_at": _iso(self.created_at),
            "started_at": _iso(self.started_at),
            "ended_at": _iso(self.ended_at),
            "outputs_dir": self.outputs_dir,
            "exit_code": self.exit_code,
            "attempt": self.attempt,
            "hours": self.request.get("hours"),
            "digest": self.digest,
            "last_metric": self.last_metric,
        }
        if self.group_id:
            doc["group_id"] = self.group_id
            doc["point"] = self.plan.get("point") or {}
        if verbose:
            doc.update(request=self.request, plan=self.plan, bundle=self.bundle,
                       project_dir=self.project_dir, request_id=self.request_id,
                       approved_digest=self.approved_digest, handle=self.handle)
        else:
            doc = {k: v for k, v in doc.items() if v not in (None, "", {})}
        return doc


@dataclass
class Group:
    """A job group (a sweep): its points are ordinary jobs whose `group_id` names it."""
    id: str
    short_id: str
    name: str
    created_at: float
    project_dir: str
    request_id: str | None
    fingerprint: str
    digest: str
    spec: dict  # the points, the group's plan (targets, totals, holds), the tell_user text
    max_parallel: int | None
    approval: str  # none (nothing held it) | held | approved | denied

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "Group":
        d = dict(row)
        d["spec"] = json.loads(d.pop("spec_json") or "{}")
        return cls(**d)

    def to_json(self) -> dict[str, Any]:
        """The documented group object of `--json` output."""
        return {"id": self.id, "short_id": self.short_id, "name": self.name,
                "created_at": _iso(self.created_at), "points": len(self.spec.get("points", [])),
                "digest": self.digest, "max_parallel": self.max_parallel,
                "approval": self.approval, "hours": self.spec.get("hours"),
                "estimated_price": self.spec.get("estimated_price"),
                "targets": self.spec.get("targets", {})}


@dataclass
class Event:
    id: int
    job_id: str
    ts: float
    src: str | None
    dst: str | None
    reason: str
    actor: str
    data: dict

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> "Event":
        return cls(id=r["id"], job_id=r["job_id"], ts=r["ts"], src=r["src"], dst=r["dst"],
                   reason=r["reason"], actor=r["actor"], data=json.loads(r["data_json"]))

    def to_json(self) -> dict[str, Any]:
        return {"ts": _iso(self.ts), "from": self.src, "to": self.dst, "reason": self.reason,
                "actor": self.actor, **({"data": self.data} if self.data else {})}


@dataclass
class Stray:
    """An attempt left running (perhaps) on a target the job moved away from."""
    job_id: str
    attempt: int
    target: str
    handle: dict
    since: float
    tries: int
    next_try: float
    stop_sent: float | None


def _merged(old: dict, new: dict) -> dict:
    """`new` over `old`; names beyond MAX_CONFIG_KEYS are not added (a job cannot grow its
    record without bound)."""
    out = dict(old)
    for key, value in new.items():
        if key in out or len(out) < MAX_CONFIG_KEYS:
            out[key] = value
    return out


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"
