"""What ships: the project's files, packed once per content hash.

The file list is git's own answer (tracked plus untracked-not-ignored) or, outside git, the
`.gitignore` rules applied through `pathspec`; a nested repository (a folder with its own
`.git`) ships by its own rules; `include` globs add to it. Every path, whichever of these it
came from, goes through one judge (`core.packaging.gate.Gate`): credential files never ship
(by name, by identity, by content), `.git/` and `runs/` never ship, symlinks that leave the
project are not followed, and only regular files are opened, with O_NOFOLLOW|O_NONBLOCK, so a
FIFO cannot hang a submit. The packer checks the bytes it actually packs again.

A project that is the user's home folder (or a folder above it), or a folder outside git with
more than LARGE_PROJECT_FILES files or LARGE_PROJECT_BYTES bytes, is refused with
`ProjectTooBroad` before anything is read: a person at a terminal is asked, an agent is told
what to do.

The bundle's hash is taken over the manifest (path, mode, content hash), so an unchanged tree
is neither packed nor stored twice, and with the stat cache it is not even read. File names are
kept exactly, bytes included: a name that is not UTF-8 travels as PAX binary path bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from core import paths
from core.config.gitroot import GIT_SAFE as _GIT_SAFE, find_root
from core.errors import UserError, disk_full_guard
from core.packaging.credentials import (
    CONTENT_HEAD, NEVER_DIRS, content_verdict, place_reason, withheld_reason,
)
from core.packaging.filecache import CHUNK, FileHashCache, hash_fd
from core.packaging.gate import Gate

BIG_FILE = 100 * 1024 * 1024
SUMMARY_WALK_CAP = 20_000  # entries walked to size up ignored folders, per submit
SUMMARY_GROUPS_CAP = 30
# A folder outside git bigger than this is named for what it is before anything ships.
LARGE_PROJECT_FILES = 5_000
LARGE_PROJECT_BYTES = 1_000_000_000
BROAD_FIX = ("run gpu from the project's own folder (or pass --project-dir DIR), or `git init` "
             "it so that .gitignore says what ships, or pass --allow-large-project to ship it "
             "anyway (credential files are still withheld)")
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)

# told (files read so far, files to read) while a bundle is hashed or packed, so a front can
# show a long first pack moving (the MCP server sends these as progress notifications)
Progress = Callable[[int, int], None]
PROGRESS_EVERY = 100  # files between two reports


class ProjectTooBroad(UserError):
    """The project is the home folder, or a big folder outside git: shipping it is probably a
    mistake, so a person is asked (`question`) and an agent is refused."""

    question = "Ship it anyway?"

    def __init__(self, what: str, *, where: str) -> None:
        super().__init__(what, where=where, fix=BROAD_FIX)


@dataclass
class Entry:
    rel: str  # path relative to the bundle root, '/'-separated
    kind: str  # "file" or "link"
    size: int = 0
    executable: bool = False
    sig: str = ""
    link: str | None = None
    sha256: str | None = None
    dev: int = 0  # identity when listed: the packer refuses a file swapped for another link
    ino: int = 0


@dataclass
class Listing:
    root: Path
    project_rel: str  # the project dir relative to root ("" when they are the same)
    git: bool
    entries: dict[str, Entry] = field(default_factory=dict)
    ignored: list[dict] = field(default_factory=list)
    withheld: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class Bundle:
    hash: str
    path: Path
    root: Path
    project_rel: str
    files: int
    bytes: int
    left_out: list[dict]
    warnings: list[str]
    manifest: list[list]
    packed: bool  # False when an identical bundle was already stored
    hint: str | None = None  # set where the job refers to a left-out path (core.packaging.report)

    def summary(self) -> dict:
        """The `bundle` object of `gpu submit --json`: files, bytes, left_out, hint, warnings."""
        doc: dict = {"files": self.files, "bytes": self.bytes}
        if self.left_out:
            doc["left_out"] = self.left_out
        if self.hint:
            doc["hint"] = self.hint
        if self.warnings:
            doc["warnings"] = self.warnings
        return doc


# -- finding the files ---------------------------------------------------------------------


class _GitFailed(Exception):
    """git could not list a repository (not one after all, not trusted, corrupt)."""


def _git_z(root: Path, *args: str) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(root), *_GIT_SAFE, *args],
                             capture_output=True, timeout=120)
    except FileNotFoundError as exc:
        raise _GitFailed("git is not installed") from exc
    if out.returncode != 0:
        raise _GitFailed(out.stderr.decode(errors="replace").strip())
    return [os.fsdecode(p) for p in out.stdout.split(b"\0") if p]


def _repo_files(root: Path, rel: str) -> tuple[list[str], list[str]]:
    """(files git would ship, ignored paths) of the repository at `rel`, root-relative.

    A nested repository appears in its parent's list as one folder entry; its own .gitignore
    (and .git/info/exclude) decide what ships from it."""
    top = root / rel if rel else root
    prefix = f"{rel}/" if rel else ""
    files = _git_z(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    ignored = _git_z(top, "ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                     "--directory")
    return [prefix + f for f in files], [prefix + f for f in ignored]


def _is_repo(path: Path) -> bool:
    """A folder with its own `.git` (a nested repository, a checked-out submodule)."""
    return os.path.lexists(path / ".git")


def list_project(project_dir: Path, include: list[str] = (), *, allow_large: bool = False,
                 cache: FileHashCache | None = None, ship: str = "repo") -> Listing:
    """What would ship from `project_dir`, and what was left out and why.

    `ship="project"` (gpu.yaml `ship: project`) bundles only the project's own folder even
    inside a larger git repository (an example in a repo, one package of a monorepo): git still
    says what ships from it, by the repository's rules."""
    project_dir = project_dir.resolve()
    root, is_git = find_root(project_dir)
    if ship == "project":
        root = project_dir
    _check_scope(project_dir, root, allow_large)
    project_rel = "" if root == project_dir else project_dir.relative_to(root).as_posix()
    listing = Listing(root=root, project_rel=project_rel, git=is_git)
    own_cache = cache is None
    cache = cache or FileHashCache()
    try:
        collector = _Collector(listing, Gate(root, cache), _never_prefixes(project_rel))
        if is_git:
            try:
                candidates, ignored = _repo_files(root, "")
            except _GitFailed as exc:
                raise UserError(f"git failed in {root}: {exc}",
                                fix="check that the repository is not corrupt (`git status`)") from None
        else:
            limit = None if allow_large else LARGE_PROJECT_FILES
            try:
                candidates, ignored = _walk_with_gitignore(root, "", limit=limit)
            except _TooManyFiles:
                raise ProjectTooBroad(
                    f"the project folder {project_dir} is not a git repository and holds more "
                    f"than {LARGE_PROJECT_FILES:,} files that would ship",
                    where=str(project_dir)) from None
        collector.ignored += ignored
        for rel in candidates:
            collector.consider(rel)
        for pattern in include:
            matched = 0
            for rel in _expand_include(root, project_rel, pattern, collector.ignored):
                matched += 1
                collector.consider(rel)
            if not matched:
                listing.warnings.append(f"include {pattern!r} matches no file")
        if not is_git and not allow_large and collector.pending_bytes() > LARGE_PROJECT_BYTES:
            raise ProjectTooBroad(
                f"the project folder {project_dir} is not a git repository and holds "
                f"{collector.pending_bytes() / 1e9:.1f} GB that would ship (more than "
                f"{LARGE_PROJECT_BYTES / 1e9:.0f} GB)", where=str(project_dir))
        collector.finish()
    finally:
        if own_cache:
            cache.close()
    never_prefixes = _never_prefixes(project_rel)
    listing.ignored = _summarise_ignored(root, collector.ignored, listing.entries, never_prefixes)
    for entry in listing.entries.values():
        if entry.kind == "file" and entry.size > BIG_FILE:
            listing.warnings.append(
                f"{entry.rel} is {entry.size / 1e6:.0f} MB: pass large files as data "
                f"(--data NAME=PATH) so they upload once and are cached by content")
    return listing


def _check_scope(project_dir: Path, root: Path, allow_large: bool) -> None:
    """Refuse a project inside a credential folder; name a home-folder project for what it is."""
    for path in dict.fromkeys((project_dir, root)):
        reason = place_reason(path.as_posix())
        if reason:
            raise UserError(f"the project folder {path} is inside a credential folder "
                            f"({reason.removeprefix('withheld: ')}): nothing there ships",
                            where=str(project_dir),
                            fix="run gpu from your project's own folder, outside credential folders")
    if allow_large:
        return
    home = _home()
    if home is None:
        return
    for path, label in ((project_dir, "the project folder"), (root, "the git repository holding the project")):
        if path == home:
            raise ProjectTooBroad(f"{label} is your home folder ({home}): everything in it "
                                  "would ship", where=str(project_dir))
        if path in home.parents:
            raise ProjectTooBroad(f"{label} {path} holds your home folder ({home}): everything "
                                  "in it would ship", where=str(project_dir))


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, OSError):
        return None


def _never_prefixes(project_rel: str) -> tuple[str, ...]:
    runs = {"runs/"}
    if project_rel:
        runs.add(f"{project_rel}/runs/")
    return tuple(runs)


def _is_never(rel: str, never_prefixes: tuple[str, ...]) -> bool:
    if any(part in NEVER_DIRS for part in rel.split("/")):
        return True
    return (rel + "/").startswith(never_prefixes)


class _Collector:
    """Feeds every candidate path, from whichever source, through the gate into the listing."""

    def __init__(self, listing: Listing, gate: Gate, never_prefixes: tuple[str, ...]) -> None:
        self.listing = listing
        self.gate = gate
        self.never = never_prefixes
        self.ignored: list[str] = []
        self.seen: set[str] = set()
        self.pending: list[tuple[str, os.stat_result]] = []

    def consider(self, rel: str) -> None:
        """Queue `rel` if it may ship, else record why not; a folder ships what it holds."""
        rel = rel.rstrip("/")
        if not rel or rel in self.seen:
            return  # a withheld path is listed once
        self.seen.add(rel)
        if _is_never(rel, self.never):
            return
        reason = self.gate.path_reason(rel)
        if reason:
            self.withhold(rel, reason)
            return
        full = self.gate.full(rel)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            return  # tracked but deleted in the work tree
        except OSError as exc:
            self.withhold(rel, f"cannot be read: {exc.strerror}")
            return
        if stat.S_ISLNK(st.st_mode):
            self._consider_link(rel, full)
        elif stat.S_ISREG(st.st_mode):
            self.pending.append((rel, st))
        elif stat.S_ISDIR(st.st_mode):  # a nested repository or submodule: by its own rules
            for sub in _tree_files(self.listing.root, rel, self.ignored):
                self.consider(sub)
        else:
            self.withhold(rel, f"not a regular file ({_kind(st.st_mode)})")

    def withhold(self, rel: str, reason: str) -> None:
        self.listing.withheld.append(_left_out_item(self.gate.full(rel), rel, reason))

    def _consider_link(self, rel: str, full: str) -> None:
        root = self.listing.root
        target = os.path.realpath(full)
        if os.path.commonpath([str(root), target]) != str(root):
            self.withhold(rel, "symlink to a path outside the project: not followed")
            return
        target_rel = Path(target).relative_to(root).as_posix()
        reason = self.gate.path_reason(target_rel) if target_rel != "." else None
        if not reason:
            try:
                tst = os.lstat(target)
            except OSError:
                tst = None
            if tst is not None and stat.S_ISREG(tst.st_mode):
                reason = self.gate.judge(target_rel, tst)
        if reason:
            self.withhold(rel, f"{reason} (symlink to {target_rel})")
            return
        link = posixpath.relpath(target_rel, posixpath.dirname(rel) or ".")
        self.listing.entries[rel] = Entry(rel=rel, kind="link", link=link)

    def pending_bytes(self) -> int:
        return sum(st.st_size for _, st in self.pending)

    def finish(self) -> None:
        """Judge the queued files at once (identity and content) and add those that may ship."""
        verdicts = self.gate.judge_many(self.pending)
        for rel, st in self.pending:
            reason = verdicts.get(rel)
            if reason:
                self.withhold(rel, reason)
            else:
                self.listing.entries[rel] = Entry(
                    rel=rel, kind="file", size=st.st_size, executable=bool(st.st_mode & 0o111),
                    sig=FileHashCache.signature(st), dev=st.st_dev, ino=st.st_ino)
        self.pending = []
        self.listing.warnings += self.gate.warnings


def _left_out_item(full: str | Path, rel: str, reason: str) -> dict:
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


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def _tree_files(root: Path, rel_dir: str, ignored: list[str], *, repos: bool = True) -> Iterator[str]:
    """Every non-folder under `rel_dir` (root-relative), links listed but not followed; inside a
    nested repository only what that repository would ship (its ignored paths go to `ignored`)
    unless `repos` is False (a data set ships whole)."""
    top = root / rel_dir if rel_dir else root
    if repos and rel_dir and _is_repo(top):
        try:
            files, nested_ignored = _repo_files(root, rel_dir)
        except _GitFailed:
            files, nested_ignored = _walk_with_gitignore(root, rel_dir)
        ignored += nested_ignored
        for rel in files:
            rel = rel.rstrip("/")
            if os.path.isdir(root / rel) and not os.path.islink(root / rel):
                yield from _tree_files(root, rel, ignored)
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
                yield from _tree_files(root, rel, ignored, repos=repos)
        else:
            yield rel


class _TooManyFiles(Exception):
    """The walk outside git passed its file limit."""


def _walk_with_gitignore(root: Path, base: str, limit: int | None = None) -> tuple[list[str], list[str]]:
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
                    raise _TooManyFiles()
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


def _expand_include(root: Path, project_rel: str, pattern: str, ignored: list[str]) -> Iterator[str]:
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
            yield from _tree_files(root, base, ignored)
        else:
            yield base
        return
    spec = pathspec.PathSpec.from_lines("gitwildmatch", ["/" + joined])
    if not base_path.is_dir() or base_path.is_symlink():
        return
    for rel in _tree_files(root, base, ignored):
        if spec.match_file(rel):
            yield rel


def _summarise_ignored(root: Path, ignored: list[str], shipped: dict[str, Entry],
                       never_prefixes: tuple[str, ...]) -> list[dict]:
    """Ignored paths that did not ship, grouped by folder with file counts and sizes."""
    groups: dict[str, dict] = {}
    budget = SUMMARY_WALK_CAP
    for rel in ignored:
        is_dir = rel.endswith("/")
        rel = rel.rstrip("/")
        if _is_never(rel, never_prefixes):
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


# -- hashing and packing -------------------------------------------------------------------


def build(listing: Listing, cache: FileHashCache | None = None, *, dry_run: bool = False,
          progress: Progress | None = None) -> Bundle:
    """Hash the listing (stat cache first) and pack it unless that bundle is already stored.
    A full disk under gpu-router's home is a DiskFull error (`gpu bundle`, `plan`, `submit`).

    `dry_run` (`gpu bundle`, `gpu plan`) hashes what would ship and writes nothing: no archive,
    no cache entry, so looking at a bundle never grows gpu-router's home. `progress` is told
    how many of the files that must be read have been, every PROGRESS_EVERY files and at the
    end (a warm cache reads none: it is told (0, 0) once)."""
    with disk_full_guard(paths.home()):
        return _build(listing, cache, dry_run, progress)


def _ticker(progress: Progress | None, total: int) -> Callable[[], None]:
    """A counter that tells `progress` every PROGRESS_EVERY files (and the last one)."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None and (done % PROGRESS_EVERY == 0 or done == total):
            progress(done, total)
    return tick


def _hash_only(listing: Listing, entries: list[Entry], tick: Callable[[], None] = lambda: None) -> None:
    """The sha256 of each file as the packer would read it (no link followed), packing nothing."""
    for e in entries:
        try:
            fd = os.open(listing.root / e.rel, _OPEN_FLAGS)
        except OSError as exc:
            raise UserError(f"cannot read {e.rel}: {exc.strerror}",
                            fix="fix its permissions or ignore it in .gitignore") from exc
        try:
            e.sha256 = hash_fd(fd)
        finally:
            os.close(fd)
        tick()


def _build(listing: Listing, cache: FileHashCache | None, dry_run: bool = False,
           progress: Progress | None = None) -> Bundle:
    own_cache = cache is None
    cache = cache or FileHashCache()
    try:
        files = [e for e in listing.entries.values() if e.kind == "file"]
        known = cache.lookup_many([(str(listing.root / e.rel), e.sig) for e in files])
        missing = []
        for e in files:
            e.sha256 = known.get(str(listing.root / e.rel))
            if e.sha256 is None:
                missing.append(e)
        store = paths.bundles_dir()
        packed = False
        tell = progress or (lambda done, total: None)
        if dry_run:
            tell(0, len(missing))
            _hash_only(listing, missing, _ticker(progress, len(missing)))
            digest = manifest_hash(listing)
            target = store / f"{digest}.tar.gz"
        elif missing:
            # Cold cache: read each file once, hashing while packing into a temp archive.
            tell(0, len(files))
            tmp = _pack(listing, store, cache=cache, tick=_ticker(progress, len(files)))
            digest = manifest_hash(listing)
            target = store / f"{digest}.tar.gz"
            if target.exists():
                tmp.unlink()
            else:
                os.replace(tmp, target)
                packed = True
        else:
            digest = manifest_hash(listing)
            target = store / f"{digest}.tar.gz"
            tell(0, 0 if target.exists() else len(files))
            if not target.exists():
                tmp = _pack(listing, store, cache=None, tick=_ticker(progress, len(files)))
                os.replace(tmp, target)
                packed = True
        left_out = listing.ignored + listing.withheld
        shipped = [e for e in listing.entries.values()]
        return Bundle(hash=digest, path=target, root=listing.root, project_rel=listing.project_rel,
                      files=len(shipped), bytes=sum(e.size for e in shipped), left_out=left_out,
                      warnings=listing.warnings, manifest=manifest(listing), packed=packed)
    finally:
        if not dry_run:
            cache.flush()
        if own_cache:
            cache.close()


def manifest(listing: Listing) -> list[list]:
    rows = []
    for rel in sorted(listing.entries):
        e = listing.entries[rel]
        if e.kind == "file":
            rows.append([rel, "x" if e.executable else "f", e.sha256])
        else:
            rows.append([rel, "l", e.link])
    return rows


def manifest_hash(listing: Listing) -> str:
    text = json.dumps(manifest(listing), separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


class _HashingReader:
    """Feeds tarfile from an fd while hashing, so a cold file is read from disk once; keeps the
    first bytes so the packer can judge what it actually packed."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.h = hashlib.sha256()
        self.head = bytearray()

    def read(self, n: int = -1) -> bytes:
        block = os.read(self.fd, n if n and n > 0 else CHUNK)
        self.h.update(block)
        if len(self.head) < CONTENT_HEAD:
            self.head += block[:CONTENT_HEAD - len(self.head)]
        return block


def _pack(listing: Listing, store: Path, cache: FileHashCache | None,
          tick: Callable[[], None] = lambda: None) -> Path:
    fd, tmp_name = tempfile.mkstemp(prefix=".pack-", suffix=".tar.gz", dir=store)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
            for rel in sorted(listing.entries):
                e = listing.entries[rel]
                info = tarfile.TarInfo(rel)
                info.mtime = 0
                if e.kind == "link":
                    info.type = tarfile.SYMTYPE
                    info.linkname = e.link or ""
                    tar.addfile(info)
                    continue
                full = listing.root / rel
                try:
                    fd = os.open(full, _OPEN_FLAGS)
                except OSError as exc:
                    raise UserError(f"cannot read {rel}: {exc.strerror}",
                                    fix="fix its permissions or ignore it in .gitignore") from exc
                try:
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode):
                        raise UserError(f"{rel} changed into a non-regular file while packing",
                                        fix="submit again")
                    _check_same_file(e, st)
                    info.size = st.st_size
                    info.mode = 0o755 if e.executable else 0o644
                    reader = _HashingReader(fd)
                    tar.addfile(info, reader)
                    _check_packed_content(e, bytes(reader.head), st.st_size)
                    # what was packed is what the manifest names, even if the file changed
                    e.sha256, e.size = reader.h.hexdigest(), st.st_size
                    if cache is not None:
                        cache.remember(str(full), FileHashCache.signature(st), e.sha256)
                finally:
                    os.close(fd)
                tick()
        return tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _check_same_file(e: Entry, st: os.stat_result) -> None:
    """A file swapped for another hard link after it was judged is not packed unjudged."""
    if (st.st_dev, st.st_ino) != (e.dev, e.ino) and st.st_nlink > 1:
        raise UserError(f"{e.rel} was replaced by a hard link while packing: nothing was shipped",
                        fix="submit again")


def _check_packed_content(e: Entry, head: bytes, size: int) -> None:
    """The bytes that went into the archive are judged again, so a file rewritten between
    listing and packing cannot carry a credential out; the archive is then discarded."""
    reason = content_verdict(posixpath.basename(e.rel), head, size)
    if reason:
        raise UserError(f"{e.rel} changed while packing and is now withheld "
                        f"({reason.removeprefix('withheld: ')}): nothing was shipped",
                        fix="submit again; the file will be left out")


def make_bundle(project_dir: Path, include: list[str] = (), *, allow_large: bool = False) -> Bundle:
    return build(list_project(project_dir, include, allow_large=allow_large))


# -- data sets -----------------------------------------------------------------------------


@dataclass
class DataListing:
    """The files of one `--data` set that may be uploaded, and those withheld."""

    source: Path
    files: list[str]  # relative to `source` ("" when it is a single file)
    withheld: list[dict]

    def warnings(self, name: str) -> list[str]:
        if not self.withheld:
            return []
        shown = ", ".join(w["path"] for w in self.withheld[:5])
        more = f" and {len(self.withheld) - 5} more" if len(self.withheld) > 5 else ""
        return [f"data {name}: {len(self.withheld)} credential or special file(s) withheld "
                f"and not uploaded: {shown}{more}"]


def list_data(source: Path, name: str = "", cache: FileHashCache | None = None) -> DataListing:
    """What of a local data set may be uploaded: the same judge as the bundle's files.

    A data path that is itself a credential (or lies in a credential folder, or is the home
    folder) is refused: data is for data sets, secrets go through `gpu secrets`."""
    label = f"data {name!r}" if name else "data"
    fix = "data is for data sets: put tokens in the keychain (gpu secrets set NAME) and pass --secret NAME"
    source = Path(os.path.realpath(source))
    reason = withheld_reason(source.as_posix()) if source.is_file() else place_reason(source.as_posix())
    if reason:
        raise UserError(f"{label}: {source} is a credential ({reason.removeprefix('withheld: ')})",
                        where=str(source), fix=fix)
    home = _home()
    if home is not None and (source == home or source in home.parents):
        raise UserError(f"{label}: {source} is your home folder or holds it", where=str(source),
                        fix="pass the data set's own folder")
    own_cache = cache is None
    cache = cache or FileHashCache()
    try:
        try:
            st = source.lstat()
        except OSError as exc:
            raise UserError(f"{label}: {source} cannot be read: {exc.strerror}",
                            where=str(source), fix="check the path") from None
        if stat.S_ISREG(st.st_mode):
            gate = Gate(source.parent, cache)
            reason = gate.judge(source.name, st)
            if reason:
                raise UserError(f"{label}: {source} is {reason.removeprefix('withheld: ')}",
                                where=str(source), fix=fix)
            return DataListing(source=source, files=[""], withheld=[])
        gate = Gate(source, cache, prefix=f"{source.name}/")
        items: list[tuple[str, os.stat_result]] = []
        withheld: list[dict] = []
        for rel in sorted(_tree_files(source, "", [], repos=False)):
            try:
                fst = (source / rel).lstat()
            except OSError:
                continue
            if stat.S_ISREG(fst.st_mode):
                items.append((rel, fst))
            elif not stat.S_ISLNK(fst.st_mode):
                withheld.append(_left_out_item(source / rel, rel, f"not a regular file ({_kind(fst.st_mode)})"))
        verdicts = gate.judge_many(items)
        withheld += [_left_out_item(source / rel, rel, verdicts[rel]) for rel, _ in items if rel in verdicts]
        return DataListing(source=source, files=[rel for rel, _ in items if rel not in verdicts],
                           withheld=withheld)
    finally:
        if own_cache:
            cache.close()


def extract(bundle_path: Path, dest: Path) -> None:
    """Unpack one of our own bundles (made by `_pack`) into a fresh directory."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundle_path, "r:gz") as tar:
        tar.extractall(dest, filter="data")
