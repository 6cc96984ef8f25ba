"""The store's record of attempts: what each ran for, where and at what price (usage, read by
`gpu cost`), and the attempts a job moved away from that may still run (strays, stopped later),
with the ended job whose code folder a new launch may take over.
"""

from __future__ import annotations

import json
import sqlite3
import time

from core.jobs.records import Job, Stray


class AttemptRows:
    """Usage and strays in the Store (mixed into Store)."""

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
