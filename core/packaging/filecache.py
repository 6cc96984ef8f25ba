"""A stat cache of content hashes, so an unchanged tree is hashed from `lstat` alone.

Kept in its own SQLite file under the cache dir so that hashing never contends with the
store's writer. A file is re-read when its size, mtime, ctime or inode change. The same file holds the verdicts
of the credential content check (`core.packaging.gate`), keyed by the same signature plus the
content rules' id, so an unchanged tree is not read again to be judged either; and the verdicts
by content (a hash of the bytes judged), so a copy, a fresh checkout or a touched file is read
but not scanned again.

SQLite text is UTF-8; a path that is not (a non-UTF-8 file name, kept by Python as surrogate
escapes) is keyed by its bytes in hex, which no absolute path can collide with.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path

from core import paths

CHUNK = 1 << 20
CONTENT_ROWS = 500_000  # content verdicts kept (about 100 bytes each)
RACY_NS = 2_000_000_000


class FileHashCache:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.cache_dir() / "filehashes.sqlite3"
        # before any read this cache records: a file is trusted by its stat only if it was
        # written at least RACY_NS before this (see `settled`)
        self.opened_ns = time.time_ns()
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
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS verdicts (path TEXT PRIMARY KEY, sig TEXT NOT NULL, "
            "reason TEXT NOT NULL)")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS content_verdicts (key TEXT PRIMARY KEY, reason TEXT NOT NULL)")
        self.conn.execute(  # core.packaging.snapshot: whole listings, by their inputs
            "CREATE TABLE IF NOT EXISTS listings (key TEXT PRIMARY KEY, doc TEXT NOT NULL)")
        self._pending: list[tuple[str, str, str]] = []
        self._pending_verdicts: list[tuple[str, str, str]] = []
        self._pending_content: list[tuple[str, str]] = []

    @staticmethod
    def signature(st: os.stat_result) -> str:
        return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}"

    def lookup_many(self, items: list[tuple[str, str]]) -> dict[str, str]:
        """{path: sha256} for the (path, signature) pairs whose cached signature still holds."""
        return self._lookup("files", "sha256", items)

    def lookup_verdicts(self, items: list[tuple[str, str]]) -> dict[str, str]:
        """{path: reason ('' when clean)} for pairs whose cached verdict still holds."""
        return self._lookup("verdicts", "reason", items)

    def lookup_content(self, keys: list[str]) -> dict[str, str]:
        """{key: reason ('' when clean)} for the content keys (`credentials.content_key`) judged
        before, under any path: a copy, a checkout or a touched file is not scanned again."""
        found: dict[str, str] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                found.update(self.conn.execute(
                    f"SELECT key, reason FROM content_verdicts WHERE key IN ({','.join('?' * len(chunk))})",
                    chunk).fetchall())
        return found

    def get_listing(self, key: str) -> dict | None:
        """A listing kept by `put_listing` (core.packaging.snapshot), or None."""
        with self._lock:
            row = self.conn.execute("SELECT doc FROM listings WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            doc = json.loads(row[0])
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    def put_listing(self, key: str, doc: dict, keep: int) -> None:
        """Keep `doc` under `key` (replacing it), and only the newest `keep` listings."""
        text = json.dumps(doc, separators=(",", ":"))  # ASCII: a non-UTF-8 name as its escapes
        with self._lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                self.conn.execute("DELETE FROM listings WHERE key = ?", (key,))
                self.conn.execute("INSERT INTO listings (key, doc) VALUES (?, ?)", (key, text))
                self.conn.execute("DELETE FROM listings WHERE rowid <= (SELECT max(rowid) FROM listings) - ?",
                                  (keep,))
                self.conn.execute("COMMIT")
            except sqlite3.OperationalError:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")  # a cache: the next listing is made in full

    def remember_content(self, key: str, reason: str) -> None:
        self._pending_content.append((key, reason))

    def _lookup(self, table: str, column: str, items: list[tuple[str, str]]) -> dict[str, str]:
        found: dict[str, str] = {}
        with self._lock:
            for start in range(0, len(items), 500):
                chunk = [(_key(p), sig, p) for p, sig in items[start:start + 500]]
                wanted = {key: (sig, p) for key, sig, p in chunk}
                rows = self.conn.execute(
                    f"SELECT path, sig, {column} FROM {table} "
                    f"WHERE path IN ({','.join('?' * len(chunk))})",
                    [key for key, _, _ in chunk]).fetchall()
                for key, sig, value in rows:
                    want = wanted.get(key)
                    if want is not None and want[0] == sig:
                        found[want[1]] = value
        return found

    def remember(self, path: str, sig: str, digest: str) -> None:
        if not settled(sig, self.opened_ns):
            return  # written moments ago: it may change again within one mtime tick ("racy git")
        self._pending.append((_key(path), sig, digest))

    def remember_verdict(self, path: str, sig: str, reason: str) -> None:
        if settled(sig, self.opened_ns):
            self._pending_verdicts.append((_key(path), sig, reason))

    def flush(self) -> None:
        if not self._pending and not self._pending_verdicts and not self._pending_content:
            return
        with self._lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                self.conn.executemany(
                    "INSERT OR REPLACE INTO files (path, sig, sha256) VALUES (?, ?, ?)",
                    self._pending)
                self.conn.executemany(
                    "INSERT OR REPLACE INTO verdicts (path, sig, reason) VALUES (?, ?, ?)",
                    self._pending_verdicts)
                if self._pending_content:
                    self.conn.executemany(
                        "INSERT OR REPLACE INTO content_verdicts (key, reason) VALUES (?, ?)",
                        self._pending_content)
                    self.conn.execute(  # a cache: the oldest verdicts go past CONTENT_ROWS
                        "DELETE FROM content_verdicts WHERE rowid <= "
                        "(SELECT max(rowid) FROM content_verdicts) - ?", (CONTENT_ROWS,))
                self.conn.execute("COMMIT")
            except sqlite3.OperationalError:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                return  # a cache: losing an update costs only a re-read next time
            self._pending.clear()
            self._pending_verdicts.clear()
            self._pending_content.clear()

    def close(self) -> None:
        self.flush()
        self.conn.close()


def settled(sig: str, read_from_ns: int) -> bool:
    """Written at least RACY_NS before `read_from_ns`, a time before the file's bytes were read
    (a cache's `opened_ns`): any change after that read has a later mtime, so a new signature.
    Judged from the time the bytes were read, not the time they are remembered: a file
    rewritten within its mtime tick right after a read of a long pack would look settled by
    then and keep the old bytes' hash ("racy git")."""
    mtime_ns = int(sig.split(":")[1])
    return read_from_ns - mtime_ns >= RACY_NS


def _key(path: str) -> str:
    """The cache key of a path: itself, or its bytes in hex when it is not valid UTF-8."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "bytes:" + os.fsencode(path).hex()
    return path


def hash_fd(fd: int) -> str:
    h = hashlib.sha256()
    while True:
        block = os.read(fd, CHUNK)
        if not block:
            return h.hexdigest()
        h.update(block)
