"""The one decision whether a file may ship: its name and place, its identity, its content.

Every path that can put a file into a bundle or a data upload (git's list, the walk outside
git, `include`, nested repositories, `--data` folders, the target of a symlink) asks `Gate.judge`.
A name is not enough: a hard link `notes.txt` to `~/.ssh/id_rsa` has an innocent name, and a
copy of a key under any name is still a key. So a file is withheld when

- its path, or the path it resolves to through symlinked folders, is a credential by name or
  place (`credentials.withheld_reason`);
- it is a hard link (st_nlink > 1) to a known credential file: one of the user's own
  (`credentials.HOME_CREDENTIALS` and what the rules withhold in the home folder, same st_dev
  and st_ino: `home_credential_ids`) or another name of it in the project
  that is withheld;
- its first bytes are a credential (`credentials.content_verdict`), for files up to 1 MiB.

Reading is kept cheap: content verdicts are cached by the file's signature (size, mtime, ctime,
inode) in the hash cache, and by content (a hash of the bytes judged: a copy or a touched file
is read but not scanned, and the packer's second look costs a hash), and the home folder and the project are searched for other names of a
file only when a file with more than one name is about to ship.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from core import paths
from core.packaging import credentials as cred, filework, spread
from core.packaging.filecache import FileHashCache
from core.packaging.filework import read_head
ALIAS_WALK_CAP = 500_000  # entries searched for a hard link's other names in the project
HEADS_PER_CHUNK = 256  # heads held at once while their content verdicts are looked up (16 MiB at most)

FileId = filework.FileId


def file_id(st: os.stat_result) -> FileId:
    return (st.st_dev, st.st_ino)


def home_credential_ids(home: Path | None = None) -> dict[FileId, str]:
    """(st_dev, st_ino) of every file in the user's credential places, to its `~/...` name.

    The places are the known ones (`credentials.HOME_CREDENTIALS`) and whatever the name and
    place rules withhold in the home folder, its XDG and macOS app folders and the folders a
    place's path passes through (`credentials.home_walk`): one rule list for both checks.
    Credential places are walked before the folders searched for them, each nearest first (a
    browser profile's depths come last), HOME_WALK_CAP entries in all."""
    home = home or Path.home()
    found: dict[FileId, str] = {}
    budget = cred.HOME_WALK_CAP
    walked: dict[FileId, bool] = {}  # folder -> walked whole
    places: deque[str] = deque(cred.HOME_CREDENTIALS)  # credentials: every file in them counts
    looks: deque[str] = deque(cred.HOME_ROOTS)  # folders a credential may be in
    while (places or looks) and budget > 0:
        whole = bool(places)
        rel = places.popleft() if whole else looks.popleft()
        budget -= 1
        path = os.path.join(home, rel) if rel else str(home)
        try:
            st = os.stat(path)  # followed: dotfile managers link ~/.ssh and ~/.aws elsewhere
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            if whole:
                found.setdefault(file_id(st), f"~/{rel}")
            continue
        if not stat.S_ISDIR(st.st_mode) or walked.get(file_id(st)) in (True, whole):
            continue  # a link loop, or a folder reached again
        walked[file_id(st)] = whole
        try:
            with os.scandir(path) as it:
                for d in it:
                    budget -= 1
                    child = f"{rel}/{d.name}" if rel else d.name
                    try:
                        is_dir = d.is_dir()
                    except OSError:
                        continue
                    if is_dir and (d.name in cred.HOME_SKIP_DIRS or child in cred.HOME_SKIP_PATHS):
                        continue
                    how = "all" if whole else cred.home_walk(child, is_dir)
                    if how == "all":
                        places.append(child)
                    elif how == "look":
                        looks.append(child)
        except OSError:
            continue
    return found


OWN_STATE = "withheld: gpu-router's own state (its home: store, bundles, venvs, caches)"
HF_DEPTH = 4  # OWNER/NAME/SHA/SELECTION under paths.hf_data_dir()


def _downloaded_data(root: Path) -> bool:
    """`root` is (inside) one downloaded hf:// data set: never the cache around it."""
    base = os.path.realpath(paths.hf_data_dir())
    real = os.path.realpath(root)
    if not real.startswith(base + "/"):
        return False
    return len(real[len(base) + 1:].split("/")) >= HF_DEPTH


@dataclass
class Gate:
    """Judges the files under `root`; `prefix` is prepended to each path for the name rules
    (a data folder's own name, or a project's whole path, so `.config` + `gcloud/x` still reads
    as `.config/gcloud/x`)."""

    root: Path
    cache: FileHashCache | None = None
    prefix: str = ""
    warnings: list[str] = field(default_factory=list)
    _real_dirs: dict[str, str | None] = field(default_factory=dict)
    _home_ids: dict[FileId, str] | None = None
    _aliases: dict[FileId, list[str]] | None = None
    _verdicts: dict[str, str] = field(default_factory=dict)
    clean_keys: dict[str, str] = field(default_factory=dict)  # full path -> content key judged clean
    _named: dict[str, str | None] = field(default_factory=dict)
    _heads: dict[str, tuple[bytes | None, str | None]] = field(default_factory=dict)
    _by_content: dict[str, str] = field(default_factory=dict)
    _sigs: dict[str, tuple[os.stat_result, str]] = field(default_factory=dict)  # rel -> (lstat, its signature)

    def __post_init__(self) -> None:
        self._root_prefix = str(self.root).rstrip("/") + "/"
        home = paths.home()
        self._own_homes = {str(home).rstrip("/"), os.path.realpath(home).rstrip("/")}
        if _downloaded_data(self.root):  # an hf:// data set's copy: data, not state
            self._own_homes = set()
        self._own_prefixes = tuple(h + "/" for h in self._own_homes)
        self._root_is_real = os.path.realpath(self.root) == str(self.root)

    @property
    def own_homes(self) -> set[str]:
        """gpu-router's home as given and as it resolves: what it holds never ships."""
        return self._own_homes

    @property
    def root_is_real(self) -> bool:
        return self._root_is_real

    def resolves_plainly(self, rel: str) -> bool:
        """Every folder on the way to `rel` resolved to itself (none was a symlink), under a
        root that is its own real path: what core.packaging.snapshot asks of a row it keeps."""
        parent = rel.rpartition("/")[0]
        return self._root_is_real and (not parent or self._real_dir(parent) == parent)

    def full(self, rel: str) -> str:
        """The absolute path of `rel` (a string: pathlib costs more than the check itself)."""
        return self._root_prefix + rel if rel else str(self.root)

    # -- name and place -------------------------------------------------------------------

    def path_reason(self, rel: str) -> str | None:
        """Why `rel` may not ship by its name or place, as given and as its folders resolve."""
        if rel not in self._named:
            self._named[rel] = self._path_reason(rel)
        return self._named[rel]

    def _path_reason(self, rel: str) -> str | None:
        reason = cred.withheld_reason(self.prefix + rel)
        if reason:
            return reason
        if self._own_state(self.full(rel)):
            return OWN_STATE
        parent, _, name = rel.rpartition("/")
        if not parent:
            return None
        real_parent = self._real_dir(parent)
        if real_parent is None:
            return "withheld: reached through a symlinked folder that leaves the project"
        if real_parent != parent:
            resolved = f"{real_parent}/{name}" if real_parent else name
            reason = cred.withheld_reason(self.prefix + resolved)
            if reason:
                return f"{reason} (through a symlinked folder: {resolved})"
            if self._own_state(self.full(resolved)):
                return OWN_STATE
        return None

    def _own_state(self, full: str) -> bool:
        """Inside gpu-router's own home (store, bundles, venvs, caches), wherever it is: packing
        it would ship every other job's bundles, and grow it with each submit."""
        return full in self._own_homes or full.startswith(self._own_prefixes)

    def _real_dir(self, parent: str) -> str | None:
        """`parent` as it resolves inside the root ('' for the root), or None if it leaves it.

        A plain folder (not a link) under a folder already resolved resolves to that one's
        place and its own name: one lstat, where realpath takes one per part of the path
        (a 1,000-file tree's folders cost 600 of them a submit). Anything else (a link, a part
        that is missing or odd) is resolved whole."""
        if parent not in self._real_dirs:
            up, _, name = parent.rpartition("/")
            base = self._real_dir(up) if up else ""
            if self._root_is_real and base is not None and name not in ("", ".", ".."):
                try:
                    plain = stat.S_ISDIR(os.lstat(self.full(parent)).st_mode)
                except OSError:
                    plain = False
                if plain:
                    self._real_dirs[parent] = f"{base}/{name}" if base else name
                    return self._real_dirs[parent]
            real = os.path.realpath(self.full(parent))
            root = str(self.root)
            if real == root:
                self._real_dirs[parent] = ""
            elif real.startswith(root.rstrip("/") + "/"):
                self._real_dirs[parent] = real[len(root.rstrip("/")) + 1:]
            else:
                self._real_dirs[parent] = None
        return self._real_dirs[parent]

    # -- the decision ---------------------------------------------------------------------

    def judge(self, rel: str, st: os.stat_result) -> str | None:
        """Why the regular file `rel` (with lstat `st`) may not ship, or None: name, place,
        identity and content, in that order."""
        reason = self.path_reason(rel)
        if reason:
            return reason
        if st.st_nlink > 1:
            reason = self._identity_reason(rel, st)
            if reason:
                return reason
        return self._content_reason(rel, st)

    def judge_many(self, items: list[tuple[str, os.stat_result]]) -> dict[str, str]:
        """{rel: reason} for the files that may not ship (cached verdicts looked up at once:
        by signature for the whole list, by content a chunk of read heads at a time). Each
        file's signature is made once (`signature`: the listing's entries ask again)."""
        make = FileHashCache.signature
        self._sigs.update((rel, (st, make(st))) for rel, st in items)
        self._prefetch(items)
        self._judge_spread(items)
        out = {}
        for start in range(0, len(items), HEADS_PER_CHUNK):
            chunk = items[start:start + HEADS_PER_CHUNK]
            self._read_heads(chunk)
            for rel, st in chunk:
                reason = self.judge(rel, st)
                if reason:
                    out[rel] = reason
            self._heads.clear()
            self._by_content.clear()
        if self.cache is not None:
            self.cache.flush()
        return out

    # -- identity -------------------------------------------------------------------------

    def _identity_reason(self, rel: str, st: os.stat_result) -> str | None:
        if self._home_ids is None:
            self._home_ids = home_credential_ids()
        key = file_id(st)
        home_name = self._home_ids.get(key)
        if home_name:
            return f"withheld: hard link to {home_name} (a credential file)"
        for other in self._project_aliases().get(key, ()):
            if other == rel:
                continue
            reason = self.path_reason(other)
            if not reason and cred.is_env_template(other.rpartition("/")[2]):
                reason = self._content_reason(other, st)  # the other name makes it a template
            if reason:
                return f"withheld: hard link to {other} ({reason.removeprefix('withheld: ')})"
        return None

    def _project_aliases(self) -> dict[FileId, list[str]]:
        """Every name of every multiply-linked file under the root (.git/ aside), found once."""
        if self._aliases is not None:
            return self._aliases
        aliases: dict[FileId, list[str]] = {}
        budget = ALIAS_WALK_CAP
        stack = [""]
        while stack and budget > 0:
            rel_dir = stack.pop()
            try:
                with os.scandir(self.root / rel_dir if rel_dir else self.root) as it:
                    for d in it:
                        budget -= 1
                        rel = f"{rel_dir}/{d.name}" if rel_dir else d.name
                        if d.is_dir(follow_symlinks=False):
                            if d.name not in cred.NEVER_DIRS:
                                stack.append(rel)
                            continue
                        try:
                            dst = d.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if dst.st_nlink > 1 and stat.S_ISREG(dst.st_mode):
                            aliases.setdefault(file_id(dst), []).append(rel)
            except OSError:
                continue
        if stack:
            self.warnings.append(f"hard links: only the first {ALIAS_WALK_CAP:,} entries of the "
                                 "project were searched for their other names")
        self._aliases = aliases
        return aliases

    # -- content --------------------------------------------------------------------------

    def signature(self, rel: str, st: os.stat_result) -> str:
        """FileHashCache.signature(st), made once for the lstat `judge_many` was given."""
        known = self._sigs.get(rel)
        return known[1] if known is not None and known[0] is st else FileHashCache.signature(st)

    def _signature(self, rel: str, st: os.stat_result) -> str:
        """The verdict cache's key for a file: its signature under these content rules."""
        return f"{self.signature(rel, st)}|{cred.CONTENT_RULES_ID}"

    def _prefetch(self, items: list[tuple[str, os.stat_result]]) -> None:
        if self.cache is None:
            return
        wanted = [(self.full(rel), self._signature(rel, st)) for rel, st in items
                  if cred.needs_content_check(rel.rpartition("/")[2], st.st_size)]
        self._verdicts.update(self.cache.lookup_verdicts(wanted))

    def _read_heads(self, chunk: list[tuple[str, os.stat_result]]) -> None:
        """Read the heads this chunk's content check needs and look their verdicts up by
        content at once (a file judged under another path or signature is not scanned)."""
        keys = []
        for rel, st in chunk:
            full = self.full(rel)
            if (full in self._verdicts or self.path_reason(rel)
                    or not cred.needs_content_check(rel.rpartition("/")[2], st.st_size)):
                continue
            head = read_head(full, expect=file_id(st))
            key = None
            if head is not None and st.st_size <= cred.CONTENT_MAX_FILE:
                key = cred.content_key(head, st.st_size)
                keys.append(key)
            self._heads[full] = (head, key)
        if self.cache is not None and keys:
            self._by_content.update(self.cache.lookup_content(keys))

    def _content_reason(self, rel: str, st: os.stat_result) -> str | None:
        name = rel.rpartition("/")[2]
        if not cred.needs_content_check(name, st.st_size):
            return None
        full = self.full(rel)
        cached = self._verdicts.get(full)
        if cached is not None:
            return cached or None
        head, key = self._heads.pop(full) if full in self._heads else (read_head(full, expect=file_id(st)), None)
        if head is None:
            return None  # unreadable now: packing it fails with its own clear error
        learned = self.cache.remember_content if self.cache is not None else None
        if key is None and st.st_size <= cred.CONTENT_MAX_FILE:
            key = cred.content_key(head, st.st_size)
        reason = cred.content_verdict(name, head, st.st_size, self._by_content, learned, key)
        if self.cache is not None:
            self.cache.remember_verdict(full, self._signature(rel, st), reason or "")
        if not reason and key is not None:
            self.clean_keys[full] = key
        return reason

    def _judge_spread(self, items: list[tuple[str, os.stat_result]]) -> None:
        """A first look at many files (a cold cache): their heads are read and judged on every
        core at once (core.packaging.spread, filework.judge), the verdicts kept as if cached.
        Env templates stay with `_content_reason` (their rule is by name); a file that cannot
        be read now is left to it too."""
        if not spread.helpers_wanted(len(items) - len(self._verdicts), sum(st.st_size for _, st in items)):
            return  # most verdicts were cached: too few files left to be worth a helper
        todo = [(rel, st) for rel, st in items
                if st.st_size <= cred.CONTENT_MAX_FILE and self.full(rel) not in self._verdicts
                and not cred.is_env_template(rel.rpartition("/")[2]) and not self.path_reason(rel)]
        if not spread.helpers_wanted(len(todo), sum(st.st_size for _, st in todo)):
            return
        jobs = [[self.full(rel), st.st_dev, st.st_ino, st.st_size] for rel, st in todo]
        for (rel, st), got in zip(todo, spread.run(filework.judge, {}, jobs, sizes=[j[3] for j in jobs])):
            if got is None:
                continue
            key, reason = got
            full = self.full(rel)
            self._verdicts[full] = reason
            cred.remember_verdict(key, reason)
            if self.cache is not None:
                self.cache.remember_content(key, reason)
                self.cache.remember_verdict(full, self._signature(rel, st), reason)
            if not reason:
                self.clean_keys[full] = key
