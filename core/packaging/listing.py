"""What would ship from a project, and what is left out and why: the listing a bundle packs.

The candidate paths come from `core.packaging.candidates` (git's own list, or the `.gitignore`
walk outside git, nested repositories by their own rules, `include` globs). Every one of them,
whichever source it came from, goes through `_Collector.consider`, and through it the one judge
(`core.packaging.gate.Gate`): credential files never ship (by name, by identity, by content),
`.git/` and `runs/` never ship, and a symlink is kept only as a link, never followed, and only
when its target is inside the project and may ship itself.

A project that is the user's home folder (or a folder above it), or a folder outside git with
more than LARGE_PROJECT_FILES files or LARGE_PROJECT_BYTES bytes, is refused with
`ProjectTooBroad` before anything is read: a person at a terminal is asked, an agent is told
what to do.
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass, field
from pathlib import Path

from core.config.gitroot import find_root
from core.errors import UserError
from core.packaging.candidates import (
    GitFailed, GitRuns, TooManyFiles, expand_include, is_never, never_prefixes, repo_files,
    start_repo_files, tree_files,
    walk_with_gitignore,
)
from core.packaging.credentials import place_reason
from core.packaging import snapshot
from core.packaging.filecache import FileHashCache
from core.packaging.gate import Gate
from core.packaging.leftout import file_kind, left_out_item, summarise_ignored

BIG_FILE = 100 * 1024 * 1024
# A folder outside git bigger than this is named for what it is before anything ships.
LARGE_PROJECT_FILES = 5_000
LARGE_PROJECT_BYTES = 1_000_000_000
BROAD_FIX = ("run gpu from the project's own folder (or pass --project-dir DIR), or `git init` "
             "it so that .gitignore says what ships, or pass --allow-large-project to ship it "
             "anyway (credential files are still withheld)")


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
    clean_key: str | None = None  # the content key the gate judged clean (the packer's helpers skip a rescan)


@dataclass
class Listing:
    root: Path
    project_rel: str  # the project dir relative to root ("" when they are the same)
    git: bool
    entries: dict[str, Entry] = field(default_factory=dict)
    ignored: list[dict] = field(default_factory=list)
    withheld: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    snap: dict | None = None  # what core.packaging.snapshot keeps once the files are hashed
    reused: int = 0  # paths taken from a remembered listing (core.packaging.snapshot)


def begin(project_dir: Path, ship: str = "repo") -> GitRuns | None:
    """Start the git commands `list_project` will read for this project (None outside git),
    so that what a submit does before its listing runs while git reads the tree. Whoever
    begins closes (GitRuns.close) once the listing is made or given up."""
    root, is_git = _root_of(project_dir.resolve(), ship)
    if not is_git:
        return None
    try:
        return start_repo_files(root)
    except GitFailed:
        return None  # the listing runs git again and says why


def _root_of(project_dir: Path, ship: str) -> tuple[Path, bool]:
    root, is_git = find_root(project_dir)
    return (project_dir if ship == "project" else root), is_git


def list_project(project_dir: Path, include: list[str] = (), *, allow_large: bool = False,
                 cache: FileHashCache | None = None, ship: str = "repo",
                 begun: GitRuns | None = None) -> Listing:
    """What would ship from `project_dir`, and what was left out and why (`begun`: its git
    commands, from `begin`).

    `ship="project"` (gpu.yaml `ship: project`) bundles only the project's own folder even
    inside a larger git repository (an example in a repo, one package of a monorepo): git still
    says what ships from it, by the repository's rules."""
    project_dir = project_dir.resolve()
    root, is_git = _root_of(project_dir, ship)
    _check_scope(project_dir, root, allow_large)
    project_rel = "" if root == project_dir else project_dir.relative_to(root).as_posix()
    listing = Listing(root=root, project_rel=project_rel, git=is_git)
    own_cache = cache is None
    cache = cache or FileHashCache()
    try:
        # the name rules read each path from the file system's root: a rule that spans the
        # root's own folder (`.docker/config.json` in a repository at ~/.docker, `.m2/` as the
        # project of `ship: project`) holds as it does one folder up
        gate = Gate(root, cache, prefix=str(root).rstrip("/") + "/")
        collector = _Collector(listing, gate, never_prefixes(project_rel))
        if is_git:
            try:
                candidates, ignored = repo_files(root, "", begun)
            except GitFailed as exc:
                raise UserError(f"git failed in {root}: {exc}",
                                fix="check that the repository is not corrupt (`git status`)") from None
        else:
            limit = None if allow_large else LARGE_PROJECT_FILES
            try:
                candidates, ignored = walk_with_gitignore(root, "", limit=limit)
            except TooManyFiles:
                raise ProjectTooBroad(
                    f"the project folder {project_dir} is not a git repository and holds more "
                    f"than {LARGE_PROJECT_FILES:,} files that would ship",
                    where=str(project_dir)) from None
        collector.ignored += ignored
        plan = None
        if is_git and not include and not own_cache:  # unchanged files: from lstat alone
            plan = {"key": snapshot.key(root, project_rel, gate.own_homes)}
            collector.remembered = snapshot.reuse(cache, plan["key"], gate)
        for rel in candidates:
            collector.consider(rel)
        for pattern in include:
            matched = 0
            for rel in expand_include(root, project_rel, pattern, collector.ignored):
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
        if plan is not None:
            listing.snap = collector.snapshot_plan(plan)
    finally:
        if own_cache:
            cache.close()
    never = never_prefixes(project_rel)
    listing.ignored = summarise_ignored(root, collector.ignored, listing.entries, never)
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
    home = home_folder()
    if home is None:
        return
    for path, label in ((project_dir, "the project folder"), (root, "the git repository holding the project")):
        if path == home:
            raise ProjectTooBroad(f"{label} is your home folder ({home}): everything in it "
                                  "would ship", where=str(project_dir))
        if path in home.parents:
            raise ProjectTooBroad(f"{label} {path} holds your home folder ({home}): everything "
                                  "in it would ship", where=str(project_dir))


def home_folder() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, OSError):
        return None


class _Collector:
    """Feeds every candidate path, from whichever source, through the gate into the listing."""

    def __init__(self, listing: Listing, gate: Gate, never: tuple[str, ...]) -> None:
        self.listing = listing
        self.gate = gate
        self.never = never
        self.ignored: list[str] = []
        self.seen: set[str] = set()
        self.pending: list[tuple[str, os.stat_result]] = []
        # for core.packaging.snapshot: what was withheld by name or place, by content, and
        # how many names each judged file has
        self.by_name: dict[str, str] = {}
        self.by_content: dict[str, tuple[str, str]] = {}
        self.nlink: dict[str, int] = {}
        self.remembered: snapshot.Remembered | None = None
        self.taken: set[str] = set()  # the paths whose remembered row held
        self.order: list[str] = []  # the paths considered, in order (never-paths aside)
        self.prejudged: dict[str, tuple[str, str | None, str | None]] = {}  # rel -> (sig, sha256, reason)

    def consider(self, rel: str) -> None:
        """Queue `rel` if it may ship, else record why not; a folder ships what it holds."""
        rel = rel.rstrip("/")
        if not rel or rel in self.seen:
            return  # a withheld path is listed once
        self.seen.add(rel)
        if is_never(rel, self.never):
            return
        self.order.append(rel)
        if self.remembered is not None and self.remembered.take(rel):
            self._take(rel)
            return
        reason = self.gate.path_reason(rel)
        if reason:
            self.by_name[rel] = reason
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
            for sub in tree_files(self.listing.root, rel, self.ignored):
                self.consider(sub)
        else:
            self.withhold(rel, f"not a regular file ({file_kind(st.st_mode)})")

    def _take(self, rel: str) -> None:
        """A remembered row that still holds, where the gate's answer would stand: withheld by
        name now, or queued with its verdict and hash for `finish`, in git's order."""
        found = self.remembered
        self.listing.reused += 1
        self.taken.add(rel)
        if rel in found.by_name:
            self.by_name[rel] = found.by_name[rel]
            self.withhold(rel, found.by_name[rel])
            return
        st, sig, sha, reason = found.files[rel]
        self.pending.append((rel, st))
        self.prejudged[rel] = (sig, sha, reason)

    def snapshot_plan(self, plan: dict) -> dict:
        """What core.packaging.snapshot keeps of this listing once its files are hashed."""
        gate, rels = self.gate, self.order
        bent = {r for r in rels if r not in self.taken and not gate.resolves_plainly(r)}
        was = self.remembered.rows if self.remembered is not None else None
        return {**plan, "rels": rels, "taken": self.taken, "was": was, "by_name": self.by_name,
                "by_content": self.by_content, "nlink": self.nlink, "bent": bent}

    def withhold(self, rel: str, reason: str) -> None:
        self.listing.withheld.append(left_out_item(self.gate.full(rel), rel, reason))

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
        prejudged = self.prejudged
        verdicts = self.gate.judge_many([item for item in self.pending if item[0] not in prejudged]
                                        if prejudged else self.pending)
        gate, clean_keys, entries = self.gate, self.gate.clean_keys, self.listing.entries
        for rel, st in self.pending:
            known = prejudged.get(rel)
            if known is not None:
                sig, sha, reason = known
            else:
                sig, sha, reason = gate.signature(rel, st), None, verdicts.get(rel)
            self.nlink[rel] = st.st_nlink
            if reason:
                self.by_content[rel] = (sig, reason)
                self.withhold(rel, reason)
            else:
                entries[rel] = Entry(
                    rel=rel, kind="file", size=st.st_size, executable=bool(st.st_mode & 0o111),
                    sig=sig, dev=st.st_dev, ino=st.st_ino, sha256=sha,
                    clean_key=clean_keys.get(gate.full(rel)) if clean_keys else None)
        self.pending = []
        self.listing.warnings += self.gate.warnings
