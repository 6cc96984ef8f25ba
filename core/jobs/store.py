"""The SQLite store: the single source of truth shared by every gpu-router process.

WAL mode so readers (the dashboard, `gpu status`) never block the writer; every write
transaction starts with BEGIN IMMEDIATE because a read-then-write under DEFERRED fails with
"database is locked" whatever the busy timeout. Schema changes are numbered migrations
recorded in `PRAGMA user_version`. State changes go through `transition`, which consults
`core.jobs.states` and writes an event row, so a job's history is never lost.

A full disk is a `DiskFull` error ("disk full at PATH (N MB free)"), never a half-written job:
a transaction that fails is rolled back whole (also when SQLite already rolled it back itself,
and when COMMIT is what failed), so the connection is usable again. A small reserve file beside
the database is released at the first failure, so the next write (the supervisor recording why
a job failed) still fits; it is made again once the disk has room.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from core import paths
from core.errors import DiskFull, IllegalTransition, NotFound, UserError, disk_full_guard
from core.runtime import diskspace
from core.jobs.states import ACTIVE, TERMINAL, State, can_move

MIGRATIONS: list[str] = [
    # 1: jobs, their events and metrics
    """
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        short_id TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        state TEXT NOT NULL,
        provider TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        project_dir TEXT NOT NULL,
        outputs_dir TEXT NOT NULL,
        request_id TEXT,
        fingerprint TEXT NOT NULL,
        request_json TEXT NOT NULL,
        plan_json TEXT NOT NULL DEFAULT '{}',
        digest TEXT,
        approved_digest TEXT,
        bundle_hash TEXT,
        bundle_json TEXT NOT NULL DEFAULT '{}',
        attempt INTEGER NOT NULL DEFAULT 0,
        handle_json TEXT NOT NULL DEFAULT '{}',
        exit_code INTEGER,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        reason TEXT NOT NULL DEFAULT '',
        metrics_offset INTEGER NOT NULL DEFAULT 0,
        last_metric_json TEXT NOT NULL DEFAULT '{}'
    );
    CREATE UNIQUE INDEX jobs_request_id ON jobs(request_id) WHERE request_id IS NOT NULL;
    CREATE INDEX jobs_state ON jobs(state);
    CREATE INDEX jobs_fingerprint ON jobs(fingerprint);
    CREATE INDEX jobs_updated ON jobs(updated_at);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL REFERENCES jobs(id),
        ts REAL NOT NULL,
        src TEXT,
        dst TEXT,
        reason TEXT NOT NULL,
        actor TEXT NOT NULL,
        data_json TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX events_job ON events(job_id, id);
    CREATE TABLE metrics (
        job_id TEXT NOT NULL REFERENCES jobs(id),
        step INTEGER,
        key TEXT NOT NULL,
        value REAL NOT NULL,
        ts REAL NOT NULL
    );
    CREATE INDEX metrics_job_key ON metrics(job_id, key, step);
    """,
    # 2: runtime and cost of each attempt, per target: quota left and spend are real figures
    """
    CREATE TABLE usage (
        job_id TEXT NOT NULL REFERENCES jobs(id),
        attempt INTEGER NOT NULL,
        target TEXT NOT NULL,
        price_per_hour REAL NOT NULL DEFAULT 0,
        started_at REAL NOT NULL,
        ended_at REAL,
        PRIMARY KEY (job_id, attempt)
    );
    CREATE INDEX usage_target ON usage(target, started_at);
    """,
    # 3: a revision number per write, so readers find what changed without trusting clocks
    """
    ALTER TABLE jobs ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
    UPDATE jobs SET rev = rowid;
    CREATE INDEX jobs_rev ON jobs(rev);
    """,
    # 4: what a job's tracking reported: its settings (config) and final numbers (summary)
    """
    ALTER TABLE jobs ADD COLUMN config_json TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE jobs ADD COLUMN final_json TEXT NOT NULL DEFAULT '{}';
    """,
    # 5: attempts left behind on a target that was lost (the job moved on): stopped when the
    # target answers again, however long that takes and whichever supervisor is running then
    """
    CREATE TABLE strays (
        job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        attempt INTEGER NOT NULL,
        target TEXT NOT NULL,
        handle_json TEXT NOT NULL,
        since REAL NOT NULL,
        tries INTEGER NOT NULL DEFAULT 0,
        next_try REAL NOT NULL,
        stop_sent REAL,
        PRIMARY KEY (job_id, attempt)
    );
    """,
    # 6: wrong approval-PIN tries and lockouts (core/engine/pin.py), one row per PIN (keyed by
    # its salt): kept here, not in a process, so starting a new process resets nothing
    """
    CREATE TABLE pin_tries (
        pin TEXT PRIMARY KEY,
        wrong INTEGER NOT NULL DEFAULT 0,
        locked_until REAL,
        lockouts INTEGER NOT NULL DEFAULT 0,
        last_wrong REAL
    );
    """,
    # 7: job groups (a sweep: core/engine/sweeps.py): every point is an ordinary job that names
    # its group; the group holds what is decided once for all of them (the digest over every
    # point's plan, the approval, max_parallel) and the request_id/fingerprint it answers to
    """
    CREATE TABLE groups (
        id TEXT PRIMARY KEY,
        short_id TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        created_at REAL NOT NULL,
        project_dir TEXT NOT NULL,
        request_id TEXT,
        fingerprint TEXT NOT NULL,
        digest TEXT NOT NULL,
        spec_json TEXT NOT NULL DEFAULT '{}',
        max_parallel INTEGER,
        approval TEXT NOT NULL DEFAULT 'none'
    );
    CREATE UNIQUE INDEX groups_request_id ON groups(request_id) WHERE request_id IS NOT NULL;
    CREATE INDEX groups_fingerprint ON groups(fingerprint);
    ALTER TABLE jobs ADD COLUMN group_id TEXT REFERENCES groups(id);
    CREATE INDEX jobs_group ON jobs(group_id);
    """,
]

_NEXT_REV = "(SELECT COALESCE(MAX(rev), 0) + 1 FROM jobs)"
RESERVE_NAME = "store.reserve"
RESERVE_BYTES = 1 << 20  # released on a full disk so the next transactions still fit
MAX_CONFIG_KEYS = 1000  # settings (and final numbers) kept per job; later new names are dropped

# Columns that hold JSON documents, decoded on read and encoded on write.
_JSON_COLUMNS = ("request_json", "plan_json", "bundle_json", "handle_json", "last_metric_json",
                 "config_json", "final_json")


# Reads shared by Store and its async read-only companion (core/jobs/reader.py)
JOBS_ALL_SQL = "SELECT * FROM jobs ORDER BY created_at DESC, rowid DESC"
JOBS_AFTER_SQL = "SELECT * FROM jobs WHERE rev > ? ORDER BY rev"
EVENTS_SQL = "SELECT * FROM events WHERE job_id = ? ORDER BY id"
METRICS_AFTER_SQL = ("SELECT rowid, key, step, value FROM metrics WHERE job_id = ? AND rowid > ? "
                     "ORDER BY rowid LIMIT ?")
METRICS_SUMMARY_SQL = ("SELECT key, COUNT(*), MIN(value), MAX(value), MAX(rowid) FROM metrics "
                       "WHERE job_id = ? GROUP BY key ORDER BY key")
METRIC_POINT_SQL = "SELECT step, value FROM metrics WHERE rowid = ?"
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


class Store:
    """One connection per process, guarded by a lock so worker threads may share it."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.db_file()
        self._lock = threading.RLock()
        self._reserve = Path(self.path).parent / RESERVE_NAME
        self._reserve_used = False
        try:
            self._open()
        except DiskFull:  # even reading needs room for SQLite's shared-memory file
            if not diskspace.release(self._reserve):
                raise
            self._open()
        self._keep_reserve()

    def _open(self) -> None:
        with disk_full_guard(Path(self.path).parent):
            self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=60,
                                        check_same_thread=False)
            try:
                self.conn.row_factory = sqlite3.Row
                self.conn.execute("PRAGMA busy_timeout = 60000")
                self.conn.execute("PRAGMA foreign_keys = ON")
                self._wal()
                self.conn.execute("PRAGMA synchronous = NORMAL")
                self._migrate()
            except BaseException:
                self.conn.close()
                raise

    def _wal(self) -> None:
        """Put the store in WAL mode, outside any transaction (SQLite refuses the switch inside
        one once the file has tables: "cannot change into wal mode from within a transaction",
        which two processes opening a new store at once met). The switch needs the file to
        itself; while another process holds it, it is asked again until it takes."""
        deadline = time.monotonic() + 60
        mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
        while str(mode).lower() != "wal":
            try:
                mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError:
                if time.monotonic() > deadline:
                    raise
                mode = None
            if str(mode).lower() != "wal":
                if time.monotonic() > deadline:
                    raise sqlite3.OperationalError(f"the store {self.path} stays in {mode} mode, not WAL")
                time.sleep(0.05)

    def short_of_space(self) -> bool:
        """The disk holding the store is down to its emergency reserve (or has none and no
        room for one): reading and recording go on, new work is refused."""
        if self._reserve.exists():
            return False
        free = diskspace.free_bytes(self._reserve.parent)
        return free is not None and free <= RESERVE_BYTES * 4

    def _keep_reserve(self) -> None:
        """Make the reserve again if it was used and the disk has room (cheap: one stat)."""
        self._reserve_used = False
        if not self._reserve.exists():
            free = diskspace.free_bytes(self._reserve.parent)
            if free is not None and free > RESERVE_BYTES * 4:
                diskspace.reserve(self._reserve, RESERVE_BYTES)
            else:
                self._reserve_used = True  # try again after a later write

    def close(self) -> None:
        self.conn.close()

    # -- transactions -------------------------------------------------------------------

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock up front (BEGIN IMMEDIATE); all of it
        or none of it is kept, and a full disk is said as DiskFull."""
        with self._lock:
            if self.conn.in_transaction:  # nested: join the outer transaction
                yield self.conn
                return
            try:
                with disk_full_guard(Path(self.path).parent):
                    self.conn.execute("BEGIN IMMEDIATE")
                    try:
                        yield self.conn
                        self.conn.execute("COMMIT")
                    except BaseException:
                        self._rollback()
                        raise
            except DiskFull:
                diskspace.release(self._reserve)  # room for the next write: why it failed
                self._reserve_used = True
                raise
            if self._reserve_used:
                self._keep_reserve()

    def _rollback(self) -> None:
        """Undo the open transaction, if SQLite has not already (it does after a full disk)."""
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _migrate(self) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version >= len(MIGRATIONS):
            return
        with self.write() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]  # re-read under the lock
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in filter(str.strip, script.split(";")):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")

    def data_version(self) -> int:
        """Changes whenever another connection commits: a cheap "did anything change?"."""
        with self._lock:
            return self.conn.execute("PRAGMA data_version").fetchone()[0]

    # -- jobs ---------------------------------------------------------------------------

    def insert_job(self, row: dict[str, Any], *, reason: str, actor: str) -> Job:
        now = time.time()
        row = {**row, "created_at": now, "updated_at": now, "state": State.QUEUED.value}
        for col in _JSON_COLUMNS:
            key = col.removesuffix("_json")
            if key in row:
                row[col] = json.dumps(row.pop(key), sort_keys=True)
        cols = ", ".join(row)
        marks = ", ".join(f":{c}" for c in row)
        with self.write() as db:
            db.execute(f"INSERT INTO jobs ({cols}, rev) VALUES ({marks}, {_NEXT_REV})", row)
            self._event(db, row["id"], None, State.QUEUED, reason, actor, {}, now)
        return self.get(row["id"])

    def transition(self, job_id: str, dst: State, reason: str, *, actor: str = "supervisor",
                   data: dict | None = None, expect: Iterable[State] | None = None,
                   **fields: Any) -> Job:
        """Move a job to `dst`, recording why; `expect` guards against a racing writer."""
        now = time.time()
        with self.write() as db:
            job = self._get(db, job_id)
            if expect is not None and job.state not in set(expect):
                raise IllegalTransition(
                    f"job {job.short_id} is {job.state}, expected one of {sorted(expect)}")
            if not can_move(job.state, dst):
                raise IllegalTransition(f"job {job.short_id}: {job.state} -> {dst} is not legal")
            sets = {"state": State(dst).value, "updated_at": now, "reason": reason, **fields}
            if dst == State.RUNNING and job.started_at is None:
                sets.setdefault("started_at", now)
            elif job.started_at is not None and "started_at" in sets:
                sets["started_at"] = job.started_at  # a start once recorded stays (a stale caller's guess)
            if State(dst) in TERMINAL:
                sets.setdefault("ended_at", now)
            elif job.state in TERMINAL:  # a resume: it is live again
                sets.setdefault("ended_at", None)
            self._update(db, job_id, sets)
            self._event(db, job_id, job.state, State(dst), reason, actor, data or {}, now)
            return self._get(db, job_id)

    def update(self, job_id: str, **fields: Any) -> Job:
        """Change a job's fields other than its state (the state goes through `transition`)."""
        if "state" in fields:
            raise IllegalTransition("use transition() to change a job's state")
        with self.write() as db:
            self._update(db, job_id, {"updated_at": time.time(), **fields})
            return self._get(db, job_id)

    def add_event(self, job_id: str, reason: str, *, actor: str = "supervisor",
                  data: dict | None = None) -> None:
        """A note in a job's history that does not change its state."""
        with self.write() as db:
            self._note(db, job_id, reason, actor, data or {})

    def note_in(self, db: sqlite3.Connection, job_id: str, reason: str, *, actor: str,
                data: dict | None = None) -> None:
        """`add_event` inside a write transaction the caller holds (`with store.write() as db`),
        so the note commits or rolls back with the rest of it."""
        self._note(db, job_id, reason, actor, data or {})

    def _note(self, db: sqlite3.Connection, job_id: str, reason: str, actor: str, data: dict) -> None:
        self._event(db, job_id, None, None, reason, actor, data, time.time())
        db.execute(f"UPDATE jobs SET updated_at = ?, rev = {_NEXT_REV} WHERE id = ?",
                   (time.time(), job_id))

    def _update(self, db: sqlite3.Connection, job_id: str, sets: dict[str, Any]) -> None:
        for col in _JSON_COLUMNS:
            key = col.removesuffix("_json")
            if key in sets:
                sets[col] = json.dumps(sets.pop(key), sort_keys=True)
        assignments = ", ".join(f"{c} = :{c}" for c in sets)
        db.execute(f"UPDATE jobs SET {assignments}, rev = {_NEXT_REV} WHERE id = :_id",
                   {**sets, "_id": job_id})

    @staticmethod
    def _event(db: sqlite3.Connection, job_id: str, src: State | None, dst: State | None,
               reason: str, actor: str, data: dict, ts: float) -> None:
        db.execute(
            "INSERT INTO events (job_id, ts, src, dst, reason, actor, data_json) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (job_id, ts, src and State(src).value, dst and State(dst).value, reason, actor,
             json.dumps(data, sort_keys=True)))

    def _get(self, db: sqlite3.Connection, job_id: str) -> Job:
        row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}")
        return Job.from_row(row)

    def get(self, job_id: str) -> Job:
        with self._lock:
            return self._get(self.conn, job_id)

    def resolve(self, ref: str, project: str | None = None) -> Job:
        """A job by full id, short id, unique prefix, or `last`: the newest job of `project`
        (a folder: jobs submitted from it, from inside it, or from a folder that holds it), or
        the newest job of all when no project is given."""
        ref = ref.strip()
        with self._lock:
            if ref in ("last", "latest", "-"):
                if project is None:
                    row = self.conn.execute(
                        "SELECT * FROM jobs ORDER BY created_at DESC, rowid DESC LIMIT 1").fetchone()
                else:
                    base = project.rstrip("/")
                    row = self.conn.execute(
                        "SELECT * FROM jobs WHERE project_dir = ? OR substr(project_dir, 1, ?) = ? "
                        "OR substr(?, 1, length(project_dir) + 1) = project_dir || '/' "
                        "ORDER BY created_at DESC, rowid DESC LIMIT 1",
                        (base, len(base) + 1, base + "/", base)).fetchone()
                if row is None:
                    if project is not None:
                        raise NotFound(f"no job was submitted from this project ({project}) yet",
                                       fix="`gpu jobs` lists every job; give its id instead of last")
                    raise NotFound("there are no jobs yet", fix="submit one with `gpu submit SCRIPT`")
                return Job.from_row(row)
            if not ref or not all(c.isalnum() or c in "-_" for c in ref):
                raise NotFound(f"{ref!r} is not a job id", fix="list jobs with `gpu jobs`")
            rows = self.conn.execute(
                "SELECT * FROM jobs WHERE id = ? OR short_id = ? OR id LIKE ? LIMIT 3",
                (ref, ref, ref + "%")).fetchall()
        exact = [r for r in rows if ref in (r["id"], r["short_id"])]
        if exact:
            return Job.from_row(exact[0])
        if not rows:
            raise NotFound(f"no job matches {ref!r}", fix="list jobs with `gpu jobs`")
        if len(rows) > 1:
            raise UserError(f"{ref!r} matches several jobs", fix="give more characters of the id")
        return Job.from_row(rows[0])

    # -- groups -------------------------------------------------------------------------

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

    def find_active_group(self, *, request_id: str | None = None, fingerprint: str | None = None,
                          db: sqlite3.Connection | None = None) -> Group | None:
        """The group a request_id names (any state), or a group with this fingerprint and a
        point still live: what a submit of the same sweep returns instead of a second group."""
        db = db or self.conn
        if request_id is not None:
            row = db.execute("SELECT * FROM groups WHERE request_id = ?", (request_id,)).fetchone()
            return Group.from_row(row) if row else None
        active = [s.value for s in ACTIVE]
        row = db.execute(
            f"SELECT g.* FROM groups g WHERE g.fingerprint = ? AND g.request_id IS NULL AND EXISTS "
            f"(SELECT 1 FROM jobs j WHERE j.group_id = g.id AND j.state IN ({', '.join('?' * len(active))})) "
            "ORDER BY g.created_at DESC LIMIT 1", (fingerprint, *active)).fetchone()
        return Group.from_row(row) if row else None

    def resolve_any(self, ref: str, project: str | None = None) -> "Job | Group":
        """What `ref` names: a job group (a sweep) by its id, short id or unique prefix, else a
        job as `resolve` finds it. Every command that takes a job id reads it here."""
        group = self.find_group(ref)
        return group if group is not None else self.resolve(ref, project)

    def last_rev(self) -> int:
        """The newest revision: read before a full read, `jobs_after` it then misses nothing."""
        with self._lock:
            return int(self.conn.execute("SELECT COALESCE(MAX(rev), 0) FROM jobs").fetchone()[0])

    def jobs_after(self, rev: int) -> list[Job]:
        """Jobs written after revision `rev` (each write takes the next revision number)."""
        with self._lock:
            return [Job.from_row(r) for r in self.conn.execute(JOBS_AFTER_SQL, (rev,)).fetchall()]

    def jobs(self, states: Iterable[State] | None = None, limit: int | None = None,
             since: float | None = None) -> list[Job]:
        sql, args = "SELECT * FROM jobs", []
        where = []
        if states is not None:
            states = [State(s).value for s in states]
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args += states
        if since is not None:
            where.append("updated_at > ?")
            args.append(since)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, rowid DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            return [Job.from_row(r) for r in self.conn.execute(sql, args).fetchall()]

    def count_by_provider(self, states: Iterable[State]) -> dict[str, int]:
        """How many jobs in `states` each target holds ("" for none), counted by SQLite: a
        submit asks this of every queued job, which it need not read (a sweep queues hundreds)."""
        states = [State(s).value for s in states]
        with self._lock:
            rows = self.conn.execute(f"SELECT COALESCE(provider, ''), COUNT(*) FROM jobs WHERE state IN "
                                     f"({', '.join('?' * len(states))}) GROUP BY 1", states).fetchall()
        return {provider: n for provider, n in rows}

    def bundle_last_use(self) -> dict[str, float]:
        """When each bundle was last asked for: the newest job (any state) that uses it."""
        with self._lock:
            rows = self.conn.execute("SELECT bundle_hash, MAX(updated_at) FROM jobs GROUP BY bundle_hash")
            return {h: float(t) for h, t in rows.fetchall() if h}

    def find_active(self, *, request_id: str | None = None, fingerprint: str | None = None,
                    db: sqlite3.Connection | None = None) -> Job | None:
        db = db or self.conn
        if request_id is not None:
            row = db.execute("SELECT * FROM jobs WHERE request_id = ?", (request_id,)).fetchone()
            return Job.from_row(row) if row else None
        active = [s.value for s in ACTIVE]
        row = db.execute(
            f"SELECT * FROM jobs WHERE fingerprint = ? AND request_id IS NULL AND state IN "
            f"({', '.join('?' * len(active))}) ORDER BY created_at DESC LIMIT 1",
            (fingerprint, *active)).fetchone()
        return Job.from_row(row) if row else None

    def events(self, job_id: str) -> list[Event]:
        with self._lock:
            rows = self.conn.execute(EVENTS_SQL, (job_id,)).fetchall()
        return [Event.from_row(r) for r in rows]

    def event_data_since(self, since: float, key: str) -> list[dict]:
        """The data of events after `since` whose data may hold `key` (a cheap text match that
        the caller confirms on the parsed document: core.planning.usage.agent_day)."""
        pattern = '%"' + key.replace("%", "").replace("_", "\\_") + '"%'
        with self._lock:
            rows = self.conn.execute("SELECT data_json FROM events WHERE ts > ? AND data_json LIKE ? "
                                     "ESCAPE '\\'", (since, pattern)).fetchall()
        out = []
        for row in rows:
            try:
                out.append(json.loads(row[0]))
            except ValueError:
                continue
        return out

    def last_event_id(self) -> int:
        with self._lock:
            return int(self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0])

    def moves_between(self, after_id: int, upto_id: int, into: Iterable[State]
                      ) -> list[tuple[Event, Job]]:
        """State moves into `into` recorded after event `after_id` up to `upto_id`, oldest
        first, each with its job as it is now (core/engine/notify.py: what a person is told
        about). A range read by event id: cheap enough to ask every tick."""
        dsts = [State(s).value for s in into]
        with self._lock:
            rows = self.conn.execute(
                f"SELECT * FROM events WHERE id > ? AND id <= ? AND dst IN ({', '.join('?' * len(dsts))}) "
                "ORDER BY id", (after_id, upto_id, *dsts)).fetchall()
            out = []
            for r in rows:
                event = Event(id=r["id"], job_id=r["job_id"], ts=r["ts"], src=r["src"], dst=r["dst"],
                              reason=r["reason"], actor=r["actor"], data=json.loads(r["data_json"]))
                out.append((event, self._get(self.conn, r["job_id"])))
        return out

    # -- usage --------------------------------------------------------------------------

    def usage_start(self, job_id: str, attempt: int, target: str, price_per_hour: float,
                    at: float | None = None) -> None:
        with self.write() as db:
            db.execute("INSERT OR IGNORE INTO usage (job_id, attempt, target, price_per_hour, "
                       "started_at) VALUES (?, ?, ?, ?, ?)",
                       (job_id, attempt, target, price_per_hour, at or time.time()))

    def usage_end(self, job_id: str, attempt: int, at: float | None = None) -> None:
        with self.write() as db:
            db.execute("UPDATE usage SET ended_at = ? WHERE job_id = ? AND attempt = ? "
                       "AND ended_at IS NULL", (at or time.time(), job_id, attempt))

    def usage_rows(self, *, target: str | None = None, job_id: str | None = None,
                   since: float | None = None) -> list[sqlite3.Row]:
        """Attempts that ran (or run) after `since`; a running one has ended_at NULL."""
        sql, args = "SELECT * FROM usage WHERE 1", []
        if target is not None:
            sql += " AND target = ?"
            args.append(target)
        if job_id is not None:
            sql += " AND job_id = ?"
            args.append(job_id)
        if since is not None:
            sql += " AND (ended_at IS NULL OR ended_at > ?)"
            args.append(since)
        with self._lock:
            return self.conn.execute(sql, args).fetchall()

    # -- attempts left behind ------------------------------------------------------------

    def add_stray(self, job_id: str, attempt: int, target: str, handle: dict) -> None:
        """Remember an attempt the job moved away from; recording it twice (a supervisor that
        died mid-move and tried again) keeps the first record."""
        now = time.time()
        with self.write() as db:
            db.execute("INSERT OR IGNORE INTO strays (job_id, attempt, target, handle_json, since, "
                       "next_try) VALUES (?, ?, ?, ?, ?, ?)",
                       (job_id, attempt, target, json.dumps(handle, sort_keys=True), now, now))

    def strays(self, due_by: float | None = None) -> list[Stray]:
        sql, args = "SELECT * FROM strays", []
        if due_by is not None:
            sql += " WHERE next_try <= ?"
            args.append(due_by)
        with self._lock:
            rows = self.conn.execute(sql + " ORDER BY since", args).fetchall()
        return [Stray(job_id=r["job_id"], attempt=r["attempt"], target=r["target"],
                      handle=json.loads(r["handle_json"]), since=r["since"], tries=r["tries"],
                      next_try=r["next_try"], stop_sent=r["stop_sent"]) for r in rows]

    def code_donor(self, job: Job) -> str | None:
        """An ended job of the same project on the same target whose code folder a launch of
        `job` may take over (core/runtime/codetree.py, reuse: the build checks that it is
        untouched first): the newest one, with no attempt of it left running anywhere."""
        if not job.provider:
            return None
        with self._lock:
            row = self.conn.execute(
                "SELECT id FROM jobs WHERE provider = ? AND project_dir = ? AND id != ? "
                "AND state IN ('done', 'failed', 'cancelled') "
                "AND id NOT IN (SELECT job_id FROM strays) ORDER BY ended_at DESC LIMIT 1",
                (job.provider, job.project_dir, job.id)).fetchone()
        return row["id"] if row else None

    def stray_tried(self, job_id: str, attempt: int, next_try: float,
                    stop_sent: float | None = None) -> None:
        with self.write() as db:
            db.execute("UPDATE strays SET tries = tries + 1, next_try = ?, "
                       "stop_sent = COALESCE(?, stop_sent) WHERE job_id = ? AND attempt = ?",
                       (next_try, stop_sent, job_id, attempt))

    def drop_stray(self, job_id: str, attempt: int, note: str | None = None) -> None:
        """Forget a stray attempt (it is stopped, or given up on), saying so in the job's events."""
        with self.write() as db:
            db.execute("DELETE FROM strays WHERE job_id = ? AND attempt = ?", (job_id, attempt))
            if note:
                self._note(db, job_id, note, "supervisor", {"attempt": attempt})

    # -- metrics ------------------------------------------------------------------------

    def add_metrics(self, job_id: str, rows: list[tuple[int | None, str, float, float]],
                    offset: int, last: dict[str, Any], *, config: dict[str, Any] | None = None,
                    final: dict[str, float] | None = None) -> None:
        """Append parsed metric points, merge reported settings and final numbers, and
        advance the read offset, in one transaction."""
        with self.write() as db:
            db.executemany(
                "INSERT INTO metrics (job_id, step, key, value, ts) VALUES (?, ?, ?, ?, ?)",
                [(job_id, *r) for r in rows])
            sets: dict[str, Any] = {"metrics_offset": offset}
            if last:
                sets["last_metric"] = last
            if config or final:
                job = self._get(db, job_id)
                if config:
                    sets["config"] = _merged(job.config, config)
                if final:
                    sets["final"] = _merged(job.final, final)
            self._update(db, job_id, sets)

    def metrics_after(self, job_id: str, after_rowid: int = 0, limit: int = 200_000
                      ) -> list[tuple[int, str, int | None, float]]:
        """(rowid, key, step, value) of points newer than `after_rowid`: for incremental charts."""
        with self._lock:
            return self.conn.execute(METRICS_AFTER_SQL, (job_id, after_rowid, limit)).fetchall()

    def metrics_summary(self, job_id: str) -> dict[str, dict[str, Any]]:
        """Per key: points, min, max, last value and last step, computed by SQLite (no series)."""
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for key, n, lo, hi, last_id in self.conn.execute(METRICS_SUMMARY_SQL, (job_id,)):
                step, value = self.conn.execute(METRIC_POINT_SQL, (last_id,)).fetchone()
                out[key] = {"points": n, "min": lo, "max": hi, "last": value, "last_step": step}
        return out

    def metrics(self, job_id: str, key: str | None = None) -> dict[str, list[tuple[int | None, float, float]]]:
        sql = "SELECT key, step, value, ts FROM metrics WHERE job_id = ?"
        args: list[Any] = [job_id]
        if key:
            sql += " AND key = ?"
            args.append(key)
        sql += " ORDER BY key, rowid"
        out: dict[str, list[tuple[int | None, float, float]]] = {}
        with self._lock:
            for k, step, value, ts in self.conn.execute(sql, args):
                out.setdefault(k, []).append((step, value, ts))
        return out
