"""The store's tables: numbered migrations (recorded in `PRAGMA user_version`), the columns that
hold JSON, and the reads the Store and its async read-only companion (core/jobs/reader.py)
share, so the two never disagree on a query.
"""

from __future__ import annotations

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
