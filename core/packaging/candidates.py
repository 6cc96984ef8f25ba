"""Where the paths that might ship come from, before any of them is judged.

Inside git, git's own answer (tracked plus untracked-not-ignored, and the ignored paths for
the report); outside git, the `.gitignore` rules applied through `pathspec`; a nested
repository (a folder with its own `.git`) by its own rules; `include` globs, given relative
to the project, whose project part is literal whatever characters it holds. Folders are
walked without following links. Nothing here decides what ships: every path found goes to
`core.packaging.listing`, through the gate.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import subprocess
from pathlib import Path
from typing import Iterator

from core.config.gitroot import GIT_SAFE as _GIT_SAFE
from core.errors import UserError
from core.packaging.credentials import NEVER_DIRS

class GitFailed(Exception):
    """git could not list a repository (not one after all, not trusted, corrupt)."""


class GitRuns:
    """git commands running at once in one folder (two cores: a listing waits for the slower
    one, not for both in turn), started ahead of their reader: a submit starts its listing's
    before its checks and the opening of its store, which then run while git reads the tree."""

    def __init__(self, top: Path, *commands: tuple[str, ...]) -> None:
        self.top = top
        self.procs: list[subprocess.Popen] = []
        try:
            for args in commands:
                self.procs.append(subprocess.Popen(["git", "-C", str(top), *_GIT_SAFE, *args],
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        except FileNotFoundError as exc:
            self.close()
            raise GitFailed("git is not installed") from exc
        except BaseException:
            self.close()
            raise

    def outputs(self) -> list[list[str]]:
        """Each command's NUL-separated output; GitFailed if one failed."""
        try:
            outs = [p.communicate(timeout=120) for p in self.procs]
        finally:  # a timeout (raised on, as subprocess.run does) or an error: none left running
            self.close()
        lists = []
        for p, (stdout, stderr) in zip(self.procs, outs):
            if p.returncode != 0:
                raise GitFailed(stderr.decode(errors="replace").strip())
            lists.append([os.fsdecode(x) for x in stdout.split(b"\0") if x])
        return lists

    def close(self) -> None:
        """Stop what still runs (a submit that failed its checks never reads its listing)."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            for stream in (p.stdout, p.stderr):
                if stream is not None:
                    stream.close()


REPO_COMMANDS = (("ls-files", "-z", "--cached", "--others", "--exclude-standard"),
                 ("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"))


def start_repo_files(top: Path) -> GitRuns:
    """`repo_files`' git commands for the repository at `top`, started now."""
    return GitRuns(top, *REPO_COMMANDS)


def repo_files(root: Path, rel: str, started: GitRuns | None = None) -> tuple[list[str], list[str]]:
    """(files git would ship, ignored paths) of the repository at `rel`, root-relative;
    `started`: its git commands, begun by `start_repo_files` for that very folder.

    A nested repository appears in its parent's list as one folder entry; its own .gitignore
    (and .git/info/exclude) decide what ships from it."""
    top = root / rel if rel else root
    prefix = f"{rel}/" if rel else ""
    runs = started if started is not None and started.top == top else start_repo_files(top)
    files, ignored = runs.outputs()
    return [prefix + f for f in files], [prefix + f for f in ignored]


def _is_repo(path: Path) -> bool:
    """A folder with its own `.git` (a nested repository, a checked-out submodule)."""
    return os.path.lexists(path / ".git")


def never_prefixes(project_rel: str) -> tuple[str, ...]:
    runs = {"runs/"}
    if project_rel:
        runs.add(f"{project_rel}/runs/")
    return tuple(runs)


def is_never(rel: str, never: tuple[str, ...]) -> bool:
    if not NEVER_DIRS.isdisjoint(rel.split("/")):
        return True
    return (rel + "/").startswith(never)


def tree_files(root: Path, rel_dir: str, ignored: list[str], *, repos: bool = True) -> Iterator[str]:
    """Every non-folder under `rel_dir` (root-relative), links listed but not followed; inside a
    nested repository only what that repository would ship (its ignored paths go to `ignored`)
    unless `repos` is False (a data set ships whole)."""
    top = root / rel_dir if rel_dir else root
    if repos and rel_dir and _is_repo(top):
        try:
            files, nested_ignored = repo_files(root, rel_dir)
        except GitFailed:
            files, nested_ignored = walk_with_gitignore(root, rel_dir)
        ignored += nested_ignored
        for rel in files:
            rel = rel.rstrip("/")
            if os.path.isdir(root / rel) and not os.path.islink(root / rel):
                yield from tree_files(root, rel, ignored)
            else:
                yield rel
        return
    try:
        with os.scandir(top) as it:
            items = list(it)
    except (PermissionError, FileNotFoundError, NotADirectoryError):
        return
    for d in items:
        rel = f"{rel_dir}/{d.name}" if rel_dir else d.name
        if d.is_dir(follow_symlinks=False):
            if d.name not in NEVER_DIRS:
                yield from tree_files(root, rel, ignored, repos=repos)
        else:
            yield rel


class TooManyFiles(Exception):
    """The walk outside git passed its file limit."""


def walk_with_gitignore(root: Path, base: str, limit: int | None = None) -> tuple[list[str], list[str]]:
    """Outside git: (files to consider, ignored paths with dirs ending in '/') under `base`.

    A nested repository is one candidate `dir/`, listed later by its own rules."""
    import pathspec

    files: list[str] = []
    ignored: list[str] = []
    # each stack item: (dir relative to root, [(base dir, spec), ...])
    stack: list[tuple[str, list[tuple[str, "pathspec.PathSpec"]]]] = [(base, [])]
    while stack:
        rel_dir, specs = stack.pop()
        here = root / rel_dir if rel_dir else root
        gi = here / ".gitignore"
        if gi.is_file() and not gi.is_symlink():
            try:
                lines = gi.read_text(errors="replace").splitlines()
                specs = specs + [(rel_dir, pathspec.GitIgnoreSpec.from_lines(lines))]
            except OSError:
                pass
        try:
            items = list(os.scandir(here))
        except (PermissionError, FileNotFoundError):
            continue
        for d in items:
            rel = f"{rel_dir}/{d.name}" if rel_dir else d.name
            is_dir = d.is_dir(follow_symlinks=False)
            if d.name in NEVER_DIRS:
                continue
            if _ignored_by(specs, rel, is_dir):
                ignored.append(rel + "/" if is_dir else rel)
            elif is_dir and _is_repo(Path(d.path)):
                files.append(rel + "/")
            elif is_dir:
                stack.append((rel, specs))
            else:
                files.append(rel)
                if limit is not None and len(files) > limit:
                    raise TooManyFiles()
    return files, ignored


def _ignored_by(specs, rel: str, is_dir: bool) -> bool:
    result = False
    for base, spec in specs:
        sub = rel[len(base) + 1:] if base else rel
        if is_dir:
            sub += "/"
        res = spec.check_file(sub)
        if res.include is not None:
            result = res.include
    return result


_MAGIC = re.compile(r"(?<!\\)[*?\[]")


def _glob_escape(part: str) -> str:
    """A literal path part as a gitwildmatch pattern part (`proj [` stays itself)."""
    return re.sub(r"([\\*?\[\]!# ])", r"\\\1", part)


def _glob_unescape(part: str) -> str:
    return re.sub(r"\\(.)", r"\1", part)


def expand_include(root: Path, project_rel: str, pattern: str, ignored: list[str]) -> Iterator[str]:
    """Root-relative paths matched by an include glob given relative to the project.

    The project's own path is literal, whatever characters it holds (`proj [/x]`)."""
    import pathspec

    raw = pattern.strip()
    if not raw:
        raise UserError(f"include {pattern!r} is empty",
                        fix="give a glob relative to the project directory, e.g. data/*.png")
    if raw.startswith(("/", "~")) or os.path.isabs(raw):
        raise UserError(f"include {pattern!r} is an absolute path",
                        fix="give include globs relative to the project directory")
    literal = "/".join(_glob_escape(p) for p in project_rel.split("/")) if project_rel else "."
    joined = posixpath.normpath(posixpath.join(literal, raw))
    if joined == ".." or joined.startswith("../"):
        raise UserError(f"include {pattern!r} leaves the project",
                        fix="only paths inside the project can ship; pass outside files as data")
    if joined == ".":
        joined = ""
    parts = joined.split("/") if joined else []
    static: list[str] = []
    for part in parts:
        if _MAGIC.search(part):
            break
        static.append(_glob_unescape(part))
    base = "/".join(static)
    base_path = root / base if base else root
    if os.path.commonpath([str(root), os.path.realpath(base_path)]) != str(root) and not base_path.is_symlink():
        raise UserError(f"include {pattern!r} leaves the project",
                        fix="only paths inside the project can ship; pass outside files as data")
    if len(static) == len(parts):  # no wildcard: a file or a whole directory
        try:
            st = base_path.lstat()
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            yield from tree_files(root, base, ignored)
        else:
            yield base
        return
    spec = pathspec.PathSpec.from_lines("gitwildmatch", ["/" + joined])
    if not base_path.is_dir() or base_path.is_symlink():
        return
    for rel in tree_files(root, base, ignored):
        if spec.match_file(rel):
            yield rel
