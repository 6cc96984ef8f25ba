"""What ships: the project's files, packed once per content hash.

The file list is git's own answer (tracked plus untracked-not-ignored) or, outside git, the
`.gitignore` rules applied through `pathspec`; `include` globs add to it. Credential files
(`core.packaging.credentials`), `.git/` and `runs/` never ship; symlinks that leave the project are not
followed; only regular files are opened, with O_NOFOLLOW|O_NONBLOCK, so a FIFO cannot hang a
submit. The bundle's hash is taken over the manifest (path, mode, content hash), so an
unchanged tree is neither packed nor stored twice, and with the stat cache it is not even read.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from core import paths
from core.packaging.credentials import NEVER_DIRS, withheld_reason
from core.errors import UserError, disk_full_guard
from core.packaging.filecache import CHUNK, FileHashCache

HINT = "add code with include, datasets with data"
BIG_FILE = 100 * 1024 * 1024
SUMMARY_WALK_CAP = 20_000  # entries walked to size up ignored folders, per submit
SUMMARY_GROUPS_CAP = 30
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


@dataclass
class Entry:
    rel: str  # path relative to the bundle root, '/'-separated
    kind: str  # "file" or "link"
    size: int = 0
    executable: bool = False
    sig: str = ""
    link: str | None = None
    sha256: str | None = None


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

    def summary(self) -> dict:
        """The `bundle` object of `gpu submit --json`: files, bytes, left_out, hint, warnings."""
        doc: dict = {"files": self.files, "bytes": self.bytes}
        if self.left_out:
            doc["left_out"] = self.left_out
            doc["hint"] = HINT
        if self.warnings:
            doc["warnings"] = self.warnings
        return doc


# -- finding the files ---------------------------------------------------------------------


def find_root(project_dir: Path) -> tuple[Path, bool]:
    """The bundle root: the git work tree holding the project, else the project itself."""
    try:
        out = subprocess.run(["git", "-C", str(project_dir), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return project_dir, False
    if out.returncode == 0 and out.stdout.strip():
        return Path(out.stdout.strip()).resolve(), True
    return project_dir, False


def _git_z(root: Path, *args: str) -> list[str]:
    out = subprocess.run(["git", "-C", str(root), "-c", "core.quotepath=off", *args],
                         capture_output=True, timeout=120)
    if out.returncode != 0:
        raise UserError(f"git failed in {root}: {out.stderr.decode(errors='replace').strip()}",
                        fix="check that the repository is not corrupt (`git status`)")
    return [p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def list_project(project_dir: Path, include: list[str] = ()) -> Listing:
    project_dir = project_dir.resolve()
    root, is_git = find_root(project_dir)
    project_rel = "" if root == project_dir else project_dir.relative_to(root).as_posix()
    listing = Listing(root=root, project_rel=project_rel, git=is_git)
    never_prefixes = _never_prefixes(project_rel)

    if is_git:
        candidates = _git_z(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        ignored = _git_z(root, "ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                         "--directory")
    else:
        candidates, ignored = _walk_with_gitignore(root)

    seen: set[str] = set()
    for rel in candidates:
        rel = rel.rstrip("/")
        if rel in seen:
            continue
        seen.add(rel)
        _consider(listing, rel, never_prefixes, expand_dirs=True)

    for pattern in include:
        matched = 0
        for rel in _expand_include(root, project_rel, pattern):
            matched += 1
            if rel not in seen and rel not in listing.entries:  # a withheld path is listed once
                seen.add(rel)
                _consider(listing, rel, never_prefixes, expand_dirs=False)
        if not matched:
            listing.warnings.append(f"include {pattern!r} matches no file")

    listing.ignored = _summarise_ignored(root, ignored, listing.entries, never_prefixes)
    for entry in listing.entries.values():
        if entry.kind == "file" and entry.size > BIG_FILE:
            listing.warnings.append(
                f"{entry.rel} is {entry.size / 1e6:.0f} MB: pass large files as data "
                f"(--data NAME=PATH) so they upload once and are cached by content")
    return listing


def _never_prefixes(project_rel: str) -> tuple[str, ...]:
    runs = {"runs/"}
    if project_rel:
        runs.add(f"{project_rel}/runs/")
    return tuple(runs)


def _is_never(rel: str, never_prefixes: tuple[str, ...]) -> bool:
    if any(part in NEVER_DIRS for part in rel.split("/")):
        return True
    return (rel + "/").startswith(never_prefixes)


def _consider(listing: Listing, rel: str, never_prefixes: tuple[str, ...], *,
              expand_dirs: bool) -> None:
    """Add `rel` to the listing if it may ship, else record why it did not."""
    if _is_never(rel, never_prefixes):
        return
    reason = withheld_reason(rel)
    if reason:
        listing.withheld.append({"path": rel, "reason": reason})
        return
    full = listing.root / rel
    try:
        st = full.lstat()
    except FileNotFoundError:
        return  # tracked but deleted in the work tree
    if stat.S_ISLNK(st.st_mode):
        _consider_link(listing, rel, full)
    elif stat.S_ISREG(st.st_mode):
        listing.entries[rel] = Entry(rel=rel, kind="file", size=st.st_size,
                                     executable=bool(st.st_mode & 0o111),
                                     sig=FileHashCache.signature(st))
    elif stat.S_ISDIR(st.st_mode):
        if expand_dirs:  # a nested repository or submodule: ship what it holds
            for sub in _walk_all(full):
                _consider(listing, f"{rel}/{sub}", never_prefixes, expand_dirs=False)
    else:
        listing.withheld.append({"path": rel, "reason": f"not a regular file ({_kind(st.st_mode)})"})


def _consider_link(listing: Listing, rel: str, full: Path) -> None:
    target = os.path.realpath(full)
    root = str(listing.root)
    if os.path.commonpath([root, target]) != root:
        listing.withheld.append({"path": rel, "reason": "symlink to a path outside the project: not followed"})
        return
    target_rel = Path(target).relative_to(listing.root).as_posix()
    reason = withheld_reason(target_rel)
    if reason:
        listing.withheld.append({"path": rel, "reason": f"symlink to {target_rel}: {reason}"})
        return
    link = posixpath.relpath(target_rel, posixpath.dirname(rel) or ".")
    listing.entries[rel] = Entry(rel=rel, kind="link", link=link)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def _walk_all(top: Path):
    """Every non-directory under `top`, relative to it; symlinks are listed, not followed."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(top / rel_dir if rel_dir else top) as it:
                for d in it:
                    rel = f"{rel_dir}/{d.name}" if rel_dir else d.name
                    if d.is_dir(follow_symlinks=False):
                        if d.name not in NEVER_DIRS:
                            stack.append(rel)
                    else:
                        yield rel
        except (PermissionError, FileNotFoundError, NotADirectoryError):
            continue


def _walk_with_gitignore(root: Path) -> tuple[list[str], list[str]]:
    """Outside git: (files to consider, ignored paths with dirs ending in '/')."""
    import pathspec

    files: list[str] = []
    ignored: list[str] = []
    # each stack item: (dir relative to root, [(base dir, spec), ...])
    stack: list[tuple[str, list[tuple[str, "pathspec.PathSpec"]]]] = [("", [])]
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
            elif is_dir:
                stack.append((rel, specs))
            else:
                files.append(rel)
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


def _expand_include(root: Path, project_rel: str, pattern: str):
    """Root-relative paths matched by an include glob given relative to the project."""
    import pathspec

    raw = pattern.strip()
    if not raw:
        raise UserError(f"include {pattern!r} is empty",
                        fix="give a glob relative to the project directory, e.g. data/*.png")
    if raw.startswith(("/", "~")) or os.path.isabs(raw):
        raise UserError(f"include {pattern!r} is an absolute path",
                        fix="give include globs relative to the project directory")
    joined = posixpath.normpath(posixpath.join(project_rel or ".", raw))
    if joined == ".." or joined.startswith("../"):
        raise UserError(f"include {pattern!r} leaves the project",
                        fix="only paths inside the project can ship; pass outside files as data")
    if joined == ".":
        joined = ""
    parts = joined.split("/") if joined else []
    static: list[str] = []
    for part in parts:
        if any(c in part for c in "*?["):
            break
        static.append(part)
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
            for sub in _walk_all(base_path):
                yield f"{base}/{sub}" if base else sub
        else:
            yield base
        return
    spec = pathspec.PathSpec.from_lines("gitwildmatch", ["/" + joined])
    if not base_path.is_dir() or base_path.is_symlink():
        return
    for sub in _walk_all(base_path):
        rel = f"{base}/{sub}" if base else sub
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


def build(listing: Listing, cache: FileHashCache | None = None) -> Bundle:
    """Hash the listing (stat cache first) and pack it unless that bundle is already stored.
    A full disk under gpu-router's home is a DiskFull error (`gpu bundle`, `plan`, `submit`)."""
    with disk_full_guard(paths.home()):
        return _build(listing, cache)


def _build(listing: Listing, cache: FileHashCache | None) -> Bundle:
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
        if missing:
            # Cold cache: read each file once, hashing while packing into a temp archive.
            tmp = _pack(listing, store, cache=cache)
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
            if not target.exists():
                tmp = _pack(listing, store, cache=None)
                os.replace(tmp, target)
                packed = True
        left_out = listing.ignored + listing.withheld
        shipped = [e for e in listing.entries.values()]
        return Bundle(hash=digest, path=target, root=listing.root, project_rel=listing.project_rel,
                      files=len(shipped), bytes=sum(e.size for e in shipped), left_out=left_out,
                      warnings=listing.warnings, manifest=manifest(listing), packed=packed)
    finally:
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
    """Feeds tarfile from an fd while hashing, so a cold file is read from disk once."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.h = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        block = os.read(self.fd, n if n and n > 0 else CHUNK)
        self.h.update(block)
        return block


def _pack(listing: Listing, store: Path, cache: FileHashCache | None) -> Path:
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
                    info.size = st.st_size
                    info.mode = 0o755 if e.executable else 0o644
                    reader = _HashingReader(fd)
                    tar.addfile(info, reader)
                    # what was packed is what the manifest names, even if the file changed
                    e.sha256, e.size = reader.h.hexdigest(), st.st_size
                    if cache is not None:
                        cache.remember(str(full), FileHashCache.signature(st), e.sha256)
                finally:
                    os.close(fd)
        return tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def make_bundle(project_dir: Path, include: list[str] = ()) -> Bundle:
    return build(list_project(project_dir, include))


def extract(bundle_path: Path, dest: Path) -> None:
    """Unpack one of our own bundles (made by `_pack`) into a fresh directory."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundle_path, "r:gz") as tar:
        tar.extractall(dest, filter="data")
