"""The store's sweeps: a group's row and its points, found by id, short id or prefix, and the
live group a repeated submit of the same sweep returns (one place a reference is tried as a group).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Iterable

from core.errors import NotFound
from core.jobs.records import Group, Job
from core.jobs.states import ACTIVE


# the two looks of `find_active_group`, said once: a request_id's group, whatever its state; an
# identical sweep's newest group without a request_id that has a point still live
_ACTIVE_STATES = tuple(s.value for s in ACTIVE)
_GROUP_BY_REQUEST_ID = "SELECT * FROM groups WHERE request_id = ?"
_LIVE_GROUP_BY_FINGERPRINT = (
    "SELECT g.* FROM groups g WHERE g.fingerprint = ? AND g.request_id IS NULL AND EXISTS "
    f"(SELECT 1 FROM jobs j WHERE j.group_id = g.id AND j.state IN ({', '.join('?' * len(_ACTIVE_STATES))})) "
    "ORDER BY g.created_at DESC LIMIT 1")


class GroupRows:
    """Groups in the Store (mixed into Store: uses its lock, connection and `write`)."""

    def insert_group(self, row: dict[str, Any], db: sqlite3.Connection) -> None:
        """Record a group inside the caller's write transaction (its points follow in it)."""
        row = {k: v for k, v in row.items() if k != "spec"} | {"spec_json": json.dumps(row["spec"], sort_keys=True)}
        db.execute(f"INSERT INTO groups ({', '.join(row)}) VALUES ({', '.join(':' + c for c in row)})", row)

    def group(self, group_id: str) -> Group:
        with self._lock:
            row = self.conn.execute("SELECT * FROM groups WHERE id = ?", (group_id,)).fetchone()
        if row is None:
            raise NotFound(f"no group {group_id}")
        return Group.from_row(row)

    def set_group(self, group_id: str, **fields: Any) -> None:
        if "spec" in fields:
            fields["spec_json"] = json.dumps(fields.pop("spec"), sort_keys=True)
        with self.write() as db:
            db.execute(f"UPDATE groups SET {', '.join(f'{c} = :{c}' for c in fields)} WHERE id = :_id",
                       {**fields, "_id": group_id})

    def find_group(self, ref: str) -> Group | None:
        """The group `ref` names (full id, short id, or a unique prefix of either), or None:
        the one place a reference is tried as a group (before it is tried as a job)."""
        ref = ref.strip()
        if not ref or not all(c.isalnum() or c in "-_" for c in ref):
            return None
        with self._lock:
            rows = self.conn.execute(
                "SELECT * FROM groups WHERE id = ? OR short_id = ? OR id LIKE ? LIMIT 2",
                (ref, ref, ref + "%")).fetchall()
        exact = [r for r in rows if ref in (r["id"], r["short_id"])]
        if exact or len(rows) == 1:
            return Group.from_row((exact or rows)[0])
        return None

    def groups(self, ids: Iterable[str] | None = None) -> list[Group]:
        with self._lock:
            if ids is None:
                rows = self.conn.execute("SELECT * FROM groups ORDER BY created_at DESC").fetchall()
            else:
                ids = list(ids)
                rows = self.conn.execute(
                    f"SELECT * FROM groups WHERE id IN ({', '.join('?' * len(ids))})", ids).fetchall()
        return [Group.from_row(r) for r in rows]

    def group_jobs(self, group_id: str, db: sqlite3.Connection | None = None) -> list[Job]:
        """A group's points, in the order they were submitted."""
        with self._lock:
            rows = (db or self.conn).execute(
                "SELECT * FROM jobs WHERE group_id = ? ORDER BY rowid", (group_id,)).fetchall()
        return [Job.from_row(r) for r in rows]

    def find_active_group(self, *, db: sqlite3.Connection, request_id: str | None = None,
                          fingerprint: str | None = None) -> Group | None:
        """The group a request_id names (any state), or a group with this fingerprint and a
        point still live: what a submit of the same sweep returns instead of a second group.
        Asked inside the writer's transaction (`db`, from `write()`, as `Store.find_active`), so
        the look and the insert after it are one step."""
        if request_id is not None:
            row = db.execute(_GROUP_BY_REQUEST_ID, (request_id,)).fetchone()
        else:
            row = db.execute(_LIVE_GROUP_BY_FINGERPRINT, (fingerprint, *_ACTIVE_STATES)).fetchone()
        return Group.from_row(row) if row else None

    def resolve_any(self, ref: str, project: str | None = None) -> "Job | Group":
        """What `ref` names: a job group (a sweep) by its id, short id or unique prefix, else a
        job as `resolve` finds it. Every command that takes a job id reads it here."""
        group = self.find_group(ref)
        return group if group is not None else self.resolve(ref, project)
