"""Where a project's files begin: the git work tree that holds it, else the project folder.

Read when a request is built (a script outside the project but inside its git work tree may be
run) and when a bundle is made (the work tree is what ships), so it lives with the config, a
floor below the packaging that also reads it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

# quote no path, and never start a filesystem monitor the repository's config may name
GIT_SAFE = ("-c", "core.quotepath=off", "-c", "core.fsmonitor=false")


REUSE_S = 10.0  # how long one process reuses an answer (see find_root)
_ANSWERS: dict[tuple, tuple[float, tuple[Path, bool]]] = {}


def find_root(project_dir: Path) -> tuple[Path, bool]:
    """The bundle root: the git work tree holding the project, else the project itself.

    One process asks git once per folder: a submit needs the answer at the command line and
    again for the listing (each `git` run is a few ms of CPU). A remembered answer is used for
    at most REUSE_S seconds, with the same GIT_* variables, and only while no `.git` appeared
    or vanished on the way up from the folder (a long-lived process, `gpu mcp`, sees a new
    `git init` at once)."""
    key = (str(project_dir), tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("GIT_"))))
    now = time.monotonic()
    hit = _ANSWERS.get(key)
    if hit is not None and now - hit[0] < REUSE_S and _unchanged(project_dir, *hit[1]):
        return hit[1]
    answer = _ask_git(project_dir)
    _ANSWERS[key] = (now, answer)
    return answer


def _ask_git(project_dir: Path) -> tuple[Path, bool]:
    try:
        out = subprocess.run(["git", "-C", str(project_dir), *GIT_SAFE, "rev-parse", "--show-toplevel"],
                             capture_output=True, timeout=30)
    except FileNotFoundError:
        return project_dir, False
    top = os.fsdecode(out.stdout.rstrip(b"\n"))
    if out.returncode == 0 and top:
        return Path(top).resolve(), True
    return project_dir, False


def _unchanged(project_dir: Path, root: Path, in_git: bool) -> bool:
    """No `.git` on the way up from `project_dir` other than the root's own (in git), or none
    at all (outside git): what git's answer was read from still holds."""
    try:
        here = project_dir.resolve()
    except OSError:
        return False
    if in_git and not os.path.lexists(root / ".git"):
        return False
    for folder in (here, *here.parents):
        if in_git and folder == root:
            return True
        if os.path.lexists(folder / ".git"):
            return False
    return not in_git  # in git, yet the root is not above the folder: ask again


def find_project(start: Path, project_file: str = "gpu.yaml") -> Path:
    """The project a command run in `start` means, found the way git finds its repository:
    the nearest folder from `start` up to the git work tree's root that holds `project_file`;
    `start` itself when none does, or when `start` is not in a git work tree (a walk outside
    git could reach a stray gpu.yaml in the home folder).

    Why: a person in `repo/src/` who types `gpu submit` means the project whose gpu.yaml is
    at the repository's root, as `git status` there means the repository.
    """
    root, in_git = find_root(start)
    if not in_git:
        return start
    here = start.resolve()
    if os.path.commonpath([str(root), str(here)]) != str(root):
        return start  # a symlink that leads out of the work tree: no walk
    for folder in (here, *here.parents):
        if (folder / project_file).is_file():
            return folder
        if folder == root:
            break
    return start
