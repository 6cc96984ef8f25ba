"""A listing remembered: an unchanged git tree is listed from `lstat` alone.

Why: most of a warm re-submit's time went into judging every file again (names, places,
cached content verdicts, then each file's cached hash), ~25 µs a file, when nothing had
changed. The gate's answer is a function of its inputs; when every input is provably what it
was, the answer is too. A snapshot is reused only when all of these hold, else the listing is
made in full (core.packaging.listing), exactly as without one:

- the same root, project folder, gpu-router home, version, name and content rules (the key;
  the rules' source files' sizes and times are in it, so an edited rule misses);
- git's answer (candidates and ignored paths) is byte for byte the one it was made from, and
  the request names no `include` glob;
- every folder on the way to a file is a plain folder (a folder swapped for a symlink changes
  what a path reaches) and the root is its own real path;
- every file it ships or withholds by content is a regular file with one name (a hard link's
  other names are judged in full) whose signature (size, mtime, ctime, inode, device: a write,
  a `touch`, a new link, a rename over it all change it) is the one judged; paths withheld by
  name or place stay withheld, whatever they hold.

Only listings whose every file was settled when judged (not written within the hash cache's
racy window) are kept, in the hash cache's SQLite file, the newest KEEP of them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from pathlib import Path

from core import __version__
from core.packaging import credentials as cred
from core.packaging.filecache import FileHashCache, settled

VERSION = 1
KEEP = 32  # listings kept (a 20,000-file tree's is ~2 MB)
_RULE_MODULES = ("credentials", "gate", "listing", "candidates", "snapshot", "leftout")


@functools.cache
def _rules_id() -> str:
    """The judging code as it is on disk: an edit (an editable install) makes a new key."""
    here = Path(__file__).parent
    parts = []
    for name in _RULE_MODULES:
        try:
            st = os.stat(here / f"{name}.py")
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{name}:?")
    return ";".join(parts)


def key(root: Path, project_rel: str, own_homes: set[str]) -> str:
    doc = [VERSION, __version__, cred.CONTENT_RULES_ID, _rules_id(), str(root), project_rel,
           sorted(own_homes)]
    return hashlib.sha256(json.dumps(doc).encode("utf-8", "surrogateescape")).hexdigest()


def git_digest(candidates: list[str], ignored: list[str]) -> str:
    h = hashlib.sha256()
    for rel in candidates:
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
    h.update(b"\1")
    for rel in ignored:
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()


class Remembered:
    """What `reuse` found: the files that ship, {rel: (lstat, signature, sha256)}, and the
    withheld ones, {rel: reason}, by name or place and by content."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[os.stat_result, str, str | None]] = {}
        self.by_name: dict[str, str] = {}
        self.by_content: dict[str, str] = {}


def reuse(cache: FileHashCache, snap_key: str, digest: str, rels: list[str], root: Path,
          root_is_real: bool) -> Remembered | None:
    """The remembered listing of these candidate paths (deduplicated, in git's order), or None
    when anything it was made from may have changed."""
    if not root_is_real:
        return None
    doc = cache.get_listing(snap_key)
    if doc is None or doc.get("git") != digest:
        return None
    rows: dict[str, list] = doc.get("rows") or {}
    if len(rows) != len(rels):
        return None
    prefix = str(root).rstrip("/") + "/"
    checked_dirs: set[str] = set()
    found = Remembered()
    signature = FileHashCache.signature
    for rel in rels:
        row = rows.get(rel)
        if row is None:
            return None
        if not _plain_dirs(prefix, rel, checked_dirs):
            return None
        if row[0] == "w":  # withheld by its name or place: so it stays
            found.by_name[rel] = row[1]
            continue
        try:
            st = os.lstat(prefix + rel)
        except OSError:
            return None
        sig = signature(st)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or sig != row[1]:
            return None
        reason, sha = row[2], row[3]
        if reason:
            found.by_content[rel] = reason
        else:
            found.files[rel] = (st, sig, sha)
    return found


def _plain_dirs(prefix: str, rel: str, checked: set[str]) -> bool:
    """Every folder on the way from the root to `rel` is a folder, not a link to one."""
    parent = rel.rpartition("/")[0]
    while parent and parent not in checked:
        try:
            if not stat.S_ISDIR(os.lstat(prefix + parent).st_mode):
                return False
        except OSError:
            return False
        checked.add(parent)
        parent = parent.rpartition("/")[0]
    return True


def remember(cache: FileHashCache, plan: dict, entries: dict) -> None:
    """Keep a listing made in full for the next time, once its files' hashes are known.

    `plan` (Listing.snap): its key and git digest, the candidate paths, {rel: reason} withheld
    by name or place, {rel: (signature, reason)} withheld by content and {rel: nlink} of the
    files; `entries` the listing's, hashed. A listing with a file that is not settled, has
    more than one name, has no hash, or is neither (a link, a folder, a fifo) is not kept."""
    rows: dict[str, list] = {}
    by_name, by_content, nlinks = plan["by_name"], plan["by_content"], plan["nlink"]
    for rel in plan["rels"]:
        entry = entries.get(rel)
        if rel in by_name:
            rows[rel] = ["w", by_name[rel]]
        elif entry is not None and entry.kind == "file":
            if nlinks.get(rel) != 1 or not settled(entry.sig) or entry.sha256 is None:
                return
            rows[rel] = ["f", entry.sig, None, entry.sha256]
        elif rel in by_content:
            sig, reason = by_content[rel]
            if nlinks.get(rel) != 1 or not settled(sig):
                return
            rows[rel] = ["f", sig, reason, None]
        else:
            return
    cache.put_listing(plan["key"], {"git": plan["git"], "rows": rows}, keep=KEEP)
