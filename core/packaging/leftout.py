"""How much each left-out row holds: a withheld path and the ignored folders, counted alike.

A row of the report that says a folder was left out says how many files and bytes it holds
(without following links, within SUMMARY_WALK_CAP entries, else marked `partial`), so a
person sees at once whether it is a cache or the data set the job needs; ignored paths are
grouped by folder, at most SUMMARY_GROUPS_CAP rows.
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path
from typing import Container

from core.packaging.candidates import is_never
from core.packaging.credentials import NEVER_DIRS

SUMMARY_WALK_CAP = 20_000  # entries walked to size up ignored folders, per submit
SUMMARY_GROUPS_CAP = 30


def left_out_item(full: str | Path, rel: str, reason: str) -> dict:
    """A left-out path with the files and bytes it holds, counted as the ignored folders are
    (a withheld folder by its regular files, without following links), so every row of the
    report counts what it names."""
    item: dict = {"path": rel, "files": 0, "bytes": 0, "reason": reason}
    try:
        st = os.lstat(full)
    except OSError:
        return item
    if not stat.S_ISDIR(st.st_mode):
        item["files"], item["bytes"] = 1, st.st_size if stat.S_ISREG(st.st_mode) else 0
        return item
    item["path"] = rel.rstrip("/") + "/"
    budget = SUMMARY_WALK_CAP
    for top, dirs, names in os.walk(full):  # os.walk does not descend into linked folders
        budget -= len(names) + len(dirs)
        for name in names:
            try:
                fst = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            item["files"] += 1
            item["bytes"] += fst.st_size if stat.S_ISREG(fst.st_mode) else 0
        if budget <= 0:
            item["partial"] = True
            break
    return item


def find_left_out(rel: str, left_out: list[dict]) -> dict | None:
    """The report's row that holds the project path `rel` (`/`-separated, from the repository's
    root): the row naming it, else the deepest left-out folder holding it (`./` holds the
    root's own files); None when no row does. The submit's hint and a failed job's reason
    (core/engine/failure.py) both ask here whether a path was left out, and why."""
    best: dict | None = None
    for item in left_out:
        path = str(item.get("path", ""))
        if path == rel or path == rel + "/":
            return item
        if path.endswith("/") and (rel.startswith(path) or (path == "./" and "/" not in rel)):
            if best is None or len(path) > len(str(best.get("path", ""))):
                best = item
    return best


def file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def summarise_ignored(root: Path, ignored: list[str], shipped: Container[str],
                       never: tuple[str, ...]) -> list[dict]:
    """Ignored paths that did not ship, grouped by folder with file counts and sizes."""
    groups: dict[str, dict] = {}
    budget = SUMMARY_WALK_CAP
    for rel in ignored:
        is_dir = rel.endswith("/")
        rel = rel.rstrip("/")
        if is_never(rel, never):
            continue
        if is_dir:
            key = rel + "/"
            g = groups.setdefault(key, {"path": key, "files": 0, "bytes": 0, "reason": "ignored by git"})
            stack = [root / rel]
            while stack and budget > 0:
                try:
                    with os.scandir(stack.pop()) as it:
                        for d in it:
                            budget -= 1
                            if d.is_dir(follow_symlinks=False):
                                if d.name not in NEVER_DIRS:
                                    stack.append(Path(d.path))
                                continue
                            sub_rel = os.path.relpath(d.path, root).replace(os.sep, "/")
                            if sub_rel in shipped:
                                continue
                            g["files"] += 1
                            try:
                                g["bytes"] += d.stat(follow_symlinks=False).st_size
                            except OSError:
                                pass
                except OSError:
                    continue
            if stack or budget <= 0:
                g["partial"] = True
            if g["files"] == 0 and not g.get("partial"):
                del groups[key]
        else:
            if rel in shipped:
                continue
            parent = posixpath.dirname(rel)
            key = parent + "/" if parent else "./"
            g = groups.setdefault(key, {"path": key, "files": 0, "bytes": 0, "reason": "ignored by git"})
            g["files"] += 1
            try:
                g["bytes"] += (root / rel).lstat().st_size
            except OSError:
                pass
    out = sorted(groups.values(), key=lambda g: (-g["bytes"], g["path"]))
    if len(out) > SUMMARY_GROUPS_CAP:
        rest = out[SUMMARY_GROUPS_CAP:]
        out = out[:SUMMARY_GROUPS_CAP] + [{
            "path": f"({len(rest)} more folders)", "files": sum(g["files"] for g in rest),
            "bytes": sum(g["bytes"] for g in rest), "reason": "ignored by git"}]
    return out
