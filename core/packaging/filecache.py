"""A stat cache of content hashes, so an unchanged tree is hashed from `lstat` alone.

Kept in its own SQLite file under the cache dir so that hashing never contends with the
store's writer. A file is re-read when its size, mtime, ctime or inode change.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from pathlib import Path

from core import paths

CHUNK = 1 << 20
RACY_NS = 2_000_000_000


class FileHashCache:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.cache_dir() / "filehashes.sqlite3"
        self._lock = threading.Lock()
        self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=60,
                                    check_same_thread=False)
        self.conn.execute("PRAGMA busy_timeout = 60000")
        if self.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = OFF")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, sig TEXT NOT NULL, "
            "sha256 TEXT NOT NULL)")
        self._pending: list[tuple[str, str, str]] = []

    @staticmethod
    def signature(st: os.stat_result) -> str:
        return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}"

    def lookup_many(self, items: list[tuple[str, str]]) -> dict[str, str]:
        """{path: sha256} for the (path, signature) pairs whose cached signature still holds."""
        found: dict[str, str] = {}
        with self._lock:
            for start in range(0, len(items), 500):
                chunk = items[start:start + 500]
                sigs = dict(chunk)
                rows = self.conn.execute(
                    f"SELECT path, sig, sha256 FROM files WHERE path IN ({','.join('?' * len(chunk))})",
                    [p for p, _ in chunk]).fetchall()
                for path, sig, digest in rows:
                    if sigs.get(path) == sig:
                        found[path] = digest
        return found

    def remember(self, path: str, sig: str, digest: str) -> None:
        mtime_ns = int(sig.split(":")[1])
        if time.time_ns() - mtime_ns < RACY_NS:
            return  # written moments ago: it may change again within one mtime tick ("racy git")
        self._pending.append((path, sig, digest))

    def flush(self) -> None:
        if not self._pending:
            return
        with self._lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                self.conn.executemany(
                    "INSERT OR REPLACE INTO files (path, sig, sha256) VALUES (?, ?, ?)",
                    self._pending)
                self.conn.execute("COMMIT")
            except sqlite3.OperationalError:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                return  # a cache: losing an update costs only a re-read next time
            self._pending.clear()

    def close(self) -> None:
        self.flush()
        self.conn.close()


def hash_fd(fd: int) -> str:
    h = hashlib.sha256()
    while True:
        block = os.read(fd, CHUNK)
        if not block:
            return h.hexdigest()
        h.update(block)
