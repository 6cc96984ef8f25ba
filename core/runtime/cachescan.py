"""List and free gpu-router's caches under one root folder: the same code at home and on hosts.

    python cachescan.py scan ROOT            -> JSON {now: host clock, entries: [...]}
    python cachescan.py evict ROOT < paths   -> JSON {removed: [...], kept: [...], freed: N}

Standard library only: for an ssh, slurm or pbs target it is sent on stdin to the host's
Python, so every machine judges its own files (sizes, last use, whether a job holds a venv).

Entries (relative to ROOT):
    jobs/<id>/code/         (+ jobs/<id>/.code-ready)            an ended job's working folder
    bundles/<hash>.json     (+ bundles/<hash>.ready on hosts)   a project bundle's manifest
    objects/<h[:2]>/<h[2:]>                                      a shipped file's content, by hash
    objects/packs/<id>.pack  (+ <id>.idx)                        many of them in one file (home only)
    data/<hash>/            (+ data/<hash>.ready)                an uploaded data set
    runtime/<hash>/         (+ runtime/<hash>.ready)             the launcher and `gpu` module
    venvs/<hash>/           (+ venvs/<hash>.lock)                a dependency environment
    wheelhouse/<hash>/      (+ wheelhouse/<hash>.ready)          wheels for a host without an index

    uv-cache/               (+ uv-cache.lock, uv-cache.ready)    uv's one cache on this host

A venv built by uv holds hard links to the files of uv's cache: a venv counts only the bytes
it alone holds, the cache counts each of its files once, so the bytes of a location add up to
what its disk holds, and removing a venv frees what it says. The cache is in use while a
launcher installs from it (it holds uv-cache.lock shared); removing it takes from no venv
(their links keep the files) and frees the files no venv links to, which is what it reports.

A bundle counts its manifest and the objects no other manifest names: what removing it frees.
Removing it removes the manifest first, then every object no manifest names any more that was
not used within `min_age_s` (a submit touches each object it reuses, so an object a new
manifest is about to name is never taken from under it). Objects no manifest names (a submit
that stopped before its manifest) are one entry, `objects`, freed the same way.

A venv whose lock file another process holds (the launcher keeps a shared lock on it while its
job runs) is in use and is never removed. Last use is the newest mtime of the entry's marker
(`.ready`, touched whenever a launch finds it) or of the entry itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import sys
import time

try:  # at home: the object store may hold packs (objstore.PACKS)
    from .objstore import PACKS, make_loose, object_path, read_index, sweep_lock
except ImportError:  # sent to a host as source, alone: hosts receive objects loose, never packs
    PACKS = make_loose = object_path = read_index = sweep_lock = None

KINDS = {"bundles": "bundle", "data": "data", "runtime": "runtime", "venvs": "venv", "wheelhouse": "wheelhouse"}
OBJECTS = "objects"
MIN_AGE_S = 600.0  # core.engine.storage's: nothing used this recently is freed


def _size(path: str) -> int:
    """Bytes on disk (allocated blocks, so a sparse file counts what it really takes)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not os.path.isdir(path) or os.path.islink(path):
        return st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size
    return _walk_bytes(path, own=False)


def _own_size(path: str) -> int:
    """Bytes on disk that only this folder holds: a file with other hard links (a venv's file
    linked from uv's cache) is counted where it is cached, not here."""
    return _walk_bytes(path, own=True)


def _walk_bytes(path: str, own: bool) -> int:
    """Bytes on disk under `path` (lstat: links are not followed); `own`: files that have
    other hard links left out."""
    total = 0
    for top, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                s = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if own and s.st_nlink > 1 and not stat.S_ISDIR(s.st_mode):
                continue
            total += s.st_blocks * 512 if hasattr(s, "st_blocks") else s.st_size
    return total


def _mtime(path: str) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


UV_CACHE = "uv-cache"  # core/runtime/uvenv.py's CACHE_DIR


def _uv_cache(root: str) -> list[dict]:
    path = os.path.join(root, UV_CACHE)
    if not os.path.isdir(path) or os.path.islink(path):
        return []
    return [{"kind": "uv-cache", "key": UV_CACHE, "path": path, "bytes": _size(path),
             "used_at": max(_mtime(path), _mtime(path + ".ready")),
             "busy": _venv_busy(path + ".lock")}]


def _venv_busy(lock_path: str) -> bool:
    """True when another process holds the venv's lock (a job runs in it, or it is installed)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _manifest_objects(path: str) -> set[str]:
    try:
        with open(path, encoding="ascii") as f:
            return {r[2] for r in json.load(f)["entries"] if r[1] != "l"}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return set()


def _references(root: str) -> dict[str, set[str]]:
    """Each stored manifest's key -> the objects it names."""
    base = os.path.join(root, "bundles")
    try:
        names = [n for n in os.listdir(base) if n.endswith(".json") and not n.startswith(".")]
    except OSError:
        return {}
    return {n[: -len(".json")]: _manifest_objects(os.path.join(base, n)) for n in names}


def _objects(root: str, packs: dict[str, dict[str, tuple[int, int]]]) -> dict[str, tuple[str, int, float]]:
    """Every loose object (and stale temporary file) under objects/, every packed one (`packs`:
    `_packs(root)`), and every pack file no index names: name -> (path, bytes, mtime); a
    packed object's path is its pack's, its mtime the pack's."""
    out = {}
    top_dir = os.path.join(root, OBJECTS)
    for top, dirs, files in os.walk(top_dir):
        if top == top_dir and PACKS in dirs:
            dirs.remove(PACKS)
        for name in files:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            digest = os.path.basename(top) + name if len(name) == 62 else name
            out[digest] = (path, st.st_blocks * 512, st.st_mtime)
    for pack, rows in packs.items():
        mtime = _mtime(pack)
        for digest, (_offset, size) in rows.items():
            out.setdefault(digest, (pack, size, mtime))
    for path in _half_packs(root):
        out[os.path.basename(path)] = (path, _size(path), _mtime(path))
    return out


def _packs(root: str) -> dict[str, dict[str, tuple[int, int]]]:
    """Each pack under objects/packs -> {digest: (offset, size)} of the objects its index names."""
    if PACKS is None:
        return {}
    folder = os.path.join(root, OBJECTS, PACKS)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".idx") and not n.startswith("."))
    except OSError:
        return {}
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for name in names:
        for digest, (pack, offset, size) in read_index(os.path.join(folder, name)).items():
            out.setdefault(pack, {})[digest] = (offset, size)
    return out


def _pack_fates(root: str, count: dict[str, int],
                packs: dict[str, dict[str, tuple[int, int]]]) -> dict[str, dict[str, tuple[int, int]]]:
    """The packs gc removes -> the live objects each first makes loose. A pack goes when none
    of its objects is needed, or when those needed are under half its bytes. An object needed
    counts as live in one place only: its loose file if it has one, else the first pack (by
    name) holding it, so a second copy never keeps a pack alive, and two copies are never both
    taken for being the other's duplicate."""
    home: dict[str, str] = {}
    for pack in sorted(packs):
        for digest in packs[pack]:
            if digest in count and digest not in home and not os.path.isfile(object_path(os.path.join(root, OBJECTS), digest)):
                home[digest] = pack
    fates = {}
    for pack, rows in packs.items():
        live = {d: where for d, where in rows.items() if home.get(d) == pack}
        if live and sum(size for _, size in live.values()) * 2 >= sum(size for _, size in rows.values()):
            continue
        fates[pack] = live
    return fates


def _unreferenced(root: str) -> tuple[dict[str, tuple[str, int, float]], dict[str, int]]:
    """What gc can free outside the manifests, and each manifest's bytes that only it names."""
    freeable, own, _ = _survey(root)
    return freeable, own


def _survey(root: str) -> tuple[dict[str, tuple[str, int, float]], dict[str, int],
                                dict[str, dict[str, tuple[int, int]]]]:
    """(what gc can free outside the manifests: each loose object no manifest names, what a
    half-done pack left, each pack that goes with its bytes less the live ones it hands to
    loose files; each manifest's bytes that only it names; the packs that go, with the live
    objects each first makes loose). The manifests and the pack indexes are read once."""
    refs = _references(root)
    count = _counts(refs)
    packs = _packs(root)
    objs = _objects(root, packs)
    own = {key: sum(objs[d][1] for d in names if count[d] == 1 and d in objs) for key, names in refs.items()}
    out = {d: v for d, v in objs.items()
           if d not in count and (not _in_packs(root, v[0]) or d == os.path.basename(v[0]))}
    fates = _pack_fates(root, count, packs)
    for pack, live in fates.items():
        out[pack] = (pack, max(0, _size(pack) - sum(size for _, size in live.values())), _mtime(pack))
    return out, own, fates


def _counts(refs: dict[str, set[str]]) -> dict[str, int]:
    count: dict[str, int] = {}
    for names in refs.values():
        for d in names:
            count[d] = count.get(d, 0) + 1
    return count


def _sweep_objects(root: str, min_age_s: float) -> int:
    """Remove the objects no manifest names that were not used in the last `min_age_s`.

    A pack goes when none of its objects is named any more; one whose named objects are less
    than half its bytes is dissolved (those objects made loose, then the pack removed), so a
    pack does not hold a project's dead files forever for a few live ones. At home this holds
    the store's sweep lock, so no pack is half-way between finding objects and naming them."""
    if sweep_lock is None:
        return _sweep_objects_locked(root, min_age_s)
    with sweep_lock(os.path.join(root, OBJECTS), exclusive=True):
        return _sweep_objects_locked(root, min_age_s)


def _sweep_objects_locked(root: str, min_age_s: float) -> int:
    loose, _, fates = _survey(root)
    freed = 0
    now = time.time()
    for path, size, mtime in loose.values():
        if now - mtime < min_age_s or _in_packs(root, path):
            continue
        try:
            os.unlink(path)
            freed += size
        except OSError:
            pass
    for pack, live in fates.items():
        if now - _mtime(pack) < min_age_s:
            continue
        try:
            for digest, (offset, size) in live.items():
                make_loose(os.path.join(root, OBJECTS), digest, pack, offset, size)
            size = _size(pack)
            os.unlink(pack[:-len(".pack")] + ".idx")  # the index first: nothing is found in it now
            os.unlink(pack)
            freed += size
        except OSError:
            continue
    return freed + _sweep_half_packs(root, now, min_age_s)


def _half_packs(root: str) -> list[str]:
    """What a pack that stopped half-way left under objects/packs: a pack with no index, an
    index being written (nothing reads either)."""
    if PACKS is None:
        return []
    folder = os.path.join(root, OBJECTS, PACKS)
    try:
        names = set(os.listdir(folder))
    except OSError:
        return []
    return [os.path.join(folder, n) for n in sorted(names)
            if (n.endswith(".pack") and n[:-len(".pack")] + ".idx" not in names) or n.startswith(".idx-")]


def _sweep_half_packs(root: str, now: float, min_age_s: float) -> int:
    freed = 0
    for path in _half_packs(root):
        if now - _mtime(path) < min_age_s:
            continue
        size = _size(path)
        with contextlib.suppress(OSError):
            os.unlink(path)
            freed += size
    return freed


def _in_packs(root: str, path: str) -> bool:
    return PACKS is not None and os.path.dirname(path) == os.path.join(root, OBJECTS, PACKS)


def scan(root: str) -> list[dict]:
    out = []
    loose, own = _unreferenced(root)
    for folder, kind in KINDS.items():
        base = os.path.join(root, folder)
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            if name.endswith((".ready", ".lock", ".to")) or ".part-" in name or ".tmp" in name:
                continue
            if name.startswith(".manifest-"):
                continue  # a manifest being written
            key = _key(name)
            path = os.path.join(base, name)
            marker = os.path.join(base, key + ".ready")
            busy = kind == "venv" and _venv_busy(os.path.join(base, key + ".lock"))
            size = _own_size(path) if kind == "venv" and os.path.isdir(path) else _size(path)
            size += own.get(key, 0) if name.endswith(".json") else 0
            out.append({"kind": kind, "key": key, "path": path, "bytes": size,
                        "used_at": max(_mtime(path), _mtime(marker),
                                       _mtime(os.path.join(path, ".ready"))),
                        "busy": busy})
    if loose:
        out.append({"kind": "objects", "key": OBJECTS, "path": os.path.join(root, OBJECTS),
                    "bytes": sum(v[1] for v in loose.values()),
                    "used_at": max(v[2] for v in loose.values()), "busy": False})
    out += _workdirs(root)
    out += _uv_cache(root)
    return out


def _key(name: str) -> str:
    for suffix in (".tar.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _workdirs(root: str) -> list[dict]:
    """Each job's working folder (its unpacked code and whatever it wrote beside it): kept
    for `gpu fetch` until the cap needs the room; the store says which jobs are live."""
    base = os.path.join(root, "jobs")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for name in names:
        code = os.path.join(base, name, "code")
        if os.path.isdir(code) and not os.path.islink(code):
            out.append({"kind": "workdir", "key": name, "path": code, "bytes": _size(code),
                        "used_at": max(_mtime(code), _mtime(os.path.join(base, name, ".code-ready"))),
                        "busy": False})
    return out


def _is_workdir(real: str, real_root: str) -> bool:
    job = os.path.dirname(real)
    return (os.path.basename(real) == "code" and os.path.dirname(job) == os.path.join(real_root, "jobs"))


def evict(root: str, paths: list[str], min_age_s: float = 0.0) -> dict:
    """Remove the given entries (marker first, so a half-removed entry is never taken as ready).

    A venv is judged again under its exclusive lock: a launcher touches its marker while it
    holds that lock, so one used since the scan is kept."""
    real_root = os.path.realpath(root)
    removed, kept, freed = [], [], 0
    cache = os.path.join(real_root, UV_CACHE)
    # the cache last: the venvs removed before it let go of their links to its files
    for path in sorted(paths, key=lambda p: os.path.realpath(p) == cache):
        real = os.path.realpath(path)
        parent = os.path.dirname(real)
        if real == cache:
            done = _evict_uv_cache(real, min_age_s)
            if isinstance(done, str):
                kept.append({"path": path, "why": done})
            else:
                removed.append(path)
                freed += done
            continue
        if real == os.path.join(real_root, OBJECTS):
            removed.append(path)
            freed += _sweep_objects(real_root, min_age_s)
            continue
        if _is_workdir(real, real_root):
            try:  # the marker first: a launch that finds no marker unpacks the code again
                os.unlink(os.path.join(parent, ".code-ready"))
            except OSError:
                pass
            size = _size(real)
            shutil.rmtree(real, ignore_errors=True)
            removed.append(path)
            freed += size
            continue
        if os.path.dirname(parent) != real_root or os.path.basename(parent) not in KINDS:
            kept.append({"path": path, "why": "not a cache entry under the root"})
            continue
        name = os.path.basename(real)
        key = _key(name)
        lock_fd = None
        if os.path.basename(parent) == "venvs":
            lock_fd = os.open(os.path.join(parent, key + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(lock_fd)
                kept.append({"path": path, "why": "a job is using it"})
                continue
            if time.time() - _mtime(os.path.join(real, ".ready")) < min_age_s:
                os.close(lock_fd)
                kept.append({"path": path, "why": "used since it was judged"})
                continue
        try:
            size = _size(real)
            for marker in (os.path.join(parent, key + ".ready"), os.path.join(real, ".ready")):
                try:
                    os.unlink(marker)
                except OSError:
                    pass
            if os.path.isdir(real) and not os.path.islink(real):
                shutil.rmtree(real, ignore_errors=True)
            if lock_fd is not None:
                _drop_pointers(parent, key)
            else:
                try:
                    os.unlink(real)
                except FileNotFoundError:
                    pass
            removed.append(path)
            freed += size
            if name.endswith(".json"):  # then the objects only it named
                freed += _sweep_objects(real_root, min_age_s)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
    return {"removed": removed, "kept": kept, "freed": freed}


def _drop_pointers(venvs: str, key: str) -> None:
    """The `HASH.to` files that name a removed venv (a project's requirements -> the venv of
    the packages they resolved to): the launcher would find nothing there anyway."""
    try:
        names = [n for n in os.listdir(venvs) if n.endswith(".to")]
    except OSError:
        return
    for name in names:
        try:
            with open(os.path.join(venvs, name)) as f:
                if f.read().strip() == key:
                    os.unlink(os.path.join(venvs, name))
        except OSError:
            pass


def _evict_uv_cache(path: str, min_age_s: float) -> int | str:
    """Remove uv's cache under its lock (no launcher installs meanwhile): the bytes freed, or
    why it was kept."""
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return "an install is using it"
        if time.time() - _mtime(path + ".ready") < min_age_s:
            return "used since it was judged"
        freed = _own_size(path)  # what goes: the files no venv links to
        try:
            os.unlink(path + ".ready")
        except OSError:
            pass
        shutil.rmtree(path, ignore_errors=True)
        return freed
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("scan", "evict"):
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    root = os.path.expanduser(argv[2])
    if argv[1] == "scan":
        doc: object = {"now": time.time(), "entries": scan(root)}
    else:
        doc = evict(root, [line for line in sys.stdin.read().splitlines() if line], MIN_AGE_S)
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
