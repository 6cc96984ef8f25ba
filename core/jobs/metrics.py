"""The store's metric points: appended in one transaction with the job's read offset, its
reported settings and final numbers; read whole, after a row id (for incremental charts), or
summarised by SQLite without the series.
"""

from __future__ import annotations

from typing import Any

from core.jobs.records import _merged
from core.jobs.schema import METRIC_POINT_SQL, METRICS_AFTER_SQL, METRICS_SUMMARY_SQL


class MetricRows:
    """Metric points in the Store (mixed into Store)."""

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
