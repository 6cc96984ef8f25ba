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

The Store is the connection, its transactions, jobs and events; its other rows are mixed in
from modules of their own: groups.py (sweeps), attempts.py (usage and strays), metrics.py; the
tables are schema.py and what a row is once read records.py.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from core import paths
from core.errors import DiskFull, IllegalTransition, NotFound, UserError, disk_full_guard
from core.runtime import diskspace
from core.jobs.attempts import AttemptRows
from core.jobs.groups import GroupRows
from core.jobs.metrics import MetricRows
from core.jobs.records import Event, Group, Job, Stray
from core.jobs.schema import EVENTS_SQL, JOBS_AFTER_SQL, MIGRATIONS, _JSON_COLUMNS
from core.jobs.states import ACTIVE, TERMINAL, State, can_move

__all__ = ["Event", "Group", "Job", "Store", "Stray"]  # the rows' types, named from here as before

_NEXT_REV = "(SELECT COALESCE(MAX(rev), 0) + 1 FROM jobs)"
RESERVE_NAME = "store.reserve"
RESERVE_BYTES = 1 << 20  # released on a full disk so the next transactions still fit


class Store(GroupRows, AttemptRows, MetricRows):
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

    def find_active(self, *, db: sqlite3.Connection, request_id: str | None = None,
                    fingerprint: str | None = None) -> Job | None:
        """The live job a submit would repeat: by its request_id, else a job of the same
        fingerprint that has none and is not ended. Asked inside the writer's transaction
        (`db`, from `write()`), so the look and the insert after it are one step."""
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
