"""A listing remembered: in a git tree, a file whose every input to the gate is as it was is
listed from `lstat` alone.

Why: most of a warm re-submit's time went into judging every file again (names, places,
cached content verdicts, then each file's cached hash), ~25 µs a file, when at most a few had
changed. The gate's answer for a file is a function of its inputs; where every input is
provably what it was, the answer is too. A remembered row is taken only when all of these
hold, else that path goes through the gate as if nothing were remembered:

- the same root, project folder, gpu-router home, version, name and content rules (the key;
  the rules' source files' sizes and times are in it, so an edited rule misses);
- git lists the path now, and the request names no `include` glob;
- every folder on the way to it is a plain folder (a folder swapped for a symlink changes what
  a path reaches), as it was when the row was made, and the root is its own real path;
- a file it ships or withholds by content is a regular file with one name (a hard link's other
  names are judged in full) whose signature (size, mtime, ctime, inode, device: a write, a
  `touch`, a new link, a rename over it all change it) is the one judged. A path withheld by
  its name or place stays withheld, whatever it holds.

Rows are kept only for files settled when read (written at least the hash cache's racy window
before its cache was opened, which is before any of its reads: a file written within it may
change again without a new signature) and not under a symlinked
folder; the others are judged again next time. Kept in the hash cache's SQLite file, the
newest KEEP listings.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from core import __version__
from core.packaging import credentials as cred
from core.packaging.filecache import FileHashCache, settled

VERSION = 2
KEEP = 32  # listings kept (a 20,000-file tree's is ~2 MB)
# the code a row's answer came from (core/packaging/ and the token rules of core/secrets/)
_RULE_FILES = ("packaging/credentials.py", "packaging/gate.py", "packaging/listing.py",
               "packaging/candidates.py", "packaging/snapshot.py", "packaging/leftout.py",
               "packaging/filework.py", "packaging/filecache.py", "packaging/bundle.py",
               "secrets/tokens.py")


def _code_id() -> str:
    """The judging code's files as they were when this process imported them (this module is
    imported with the listing's: core.packaging.listing). Taken at import, not at the first
    listing: a long-lived process (`gpu mcp`, the warm server's children) runs the code it
    imported, and an edit on disk since then must not lend its rows the new code's key."""
    core = Path(__file__).resolve().parent.parent
    parts = []
    for rel in _RULE_FILES:
        try:
            st = os.stat(core / rel)
            parts.append(f"{rel}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{rel}:?")
    return ";".join(parts)


_CODE_ID = _code_id()


def key(root: Path, project_rel: str, own_homes: set[str]) -> str:
    doc = [VERSION, __version__, cred.CONTENT_RULES_ID, _CODE_ID, str(root), project_rel,
           sorted(own_homes)]
    return hashlib.sha256(json.dumps(doc).encode("utf-8", "surrogateescape")).hexdigest()


class Remembered:
    """The rows `reuse` found, taken path by path: `by_name` {rel: reason} withheld by name or
    place, `files` {rel: (lstat, signature, sha256 or None, reason or None)} judged by content.
    The folders on the way are the gate's to resolve (`Gate.resolves_plainly`, one lstat each,
    shared with the paths judged in full)."""

    def __init__(self, rows: dict[str, list], gate) -> None:
        self.rows = rows
        self.gate = gate
        self.by_name: dict[str, str] = {}
        self.files: dict[str, tuple[os.stat_result, str, str | None, str | None]] = {}

    def take(self, rel: str) -> bool:
        """Whether `rel`'s row holds now (then it is in `by_name` or `files`)."""
        row = self.rows.get(rel)
        if row is None or not self.gate.resolves_plainly(rel):
            return False
        if row[0] == "w":
            self.by_name[rel] = row[1]
            return True
        try:
            st = os.lstat(self.gate.full(rel))
        except OSError:
            return False
        sig = FileHashCache.signature(st)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or sig != row[1]:
            return False
        self.files[rel] = (st, sig, row[3], row[2])
        return True


def reuse(cache: FileHashCache, snap_key: str, gate) -> Remembered | None:
    """The rows remembered under this key for the gate's root, to be taken path by path; None
    when there are none or the root is not its own real path."""
    if not gate.root_is_real:
        return None
    doc = cache.get_listing(snap_key)
    rows = doc.get("rows") if doc is not None else None
    if not isinstance(rows, dict) or not rows:
        return None
    return Remembered(rows, gate)


def remember(cache: FileHashCache, plan: dict, entries: dict) -> None:
    """Keep this listing's rows for the next one, once its files' hashes are known.

    `plan` (Listing.snap): the key, the candidate paths, those whose remembered row held, the
    rows it was made from, {rel: reason} withheld by name or place, {rel: (signature, reason)}
    withheld by content, {rel: nlink} of the judged files and the paths under a folder that
    resolved elsewhere; `entries` the listing's, hashed. Nothing is written when no row is
    new."""
    was, taken, bent = plan["was"] or {}, plan["taken"], plan["bent"]
    by_name, by_content, nlinks = plan["by_name"], plan["by_content"], plan["nlink"]
    rows: dict[str, list] = {}
    for rel in plan["rels"]:
        if rel in taken:
            rows[rel] = was[rel]
            continue
        if rel in bent:
            continue
        entry = entries.get(rel)
        if rel in by_name:
            rows[rel] = ["w", by_name[rel]]
        elif entry is not None and entry.kind == "file":
            if nlinks.get(rel) == 1 and entry.sha256 is not None and settled(entry.sig, cache.opened_ns):
                rows[rel] = ["f", entry.sig, None, entry.sha256]
        elif rel in by_content:
            sig, reason = by_content[rel]
            if nlinks.get(rel) == 1 and settled(sig, cache.opened_ns):
                rows[rel] = ["f", sig, reason, None]
    if len(rows) == len(taken):
        # no new row: what was kept still serves (a row that no longer holds, of a file just
        # edited or gone, is never taken: its file's signature is not the one it names); not
        # rewriting it spares an edit loop a 20,000-row write each submit
        return
    cache.put_listing(plan["key"], {"rows": rows}, keep=KEEP)
