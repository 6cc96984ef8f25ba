"""A job's checkpoint folder as gpu-router's home sees it: listed with hashes, packed in part.

Run where the job runs (on a remote host as `python3 -c <this file> ...` through the target's
shell; on this machine imported), stdlib only. The supervisor mirrors the folder home
incrementally: `scan` lists every regular file with its size, mtime, sha256 and cost (hashes
are cached by size and mtime beside the folder, so a large unchanged checkpoint is read once),
plus the completion marker `gpu.checkpoint_saved()` wrote and what it skipped; `pack` puts only
the named files (the ones home lacks) into one tar.gz. Everything is read through nofollow.py:
links are never followed, FIFOs, sockets and devices never opened (listed as skipped, so home
can say so once), and a sparse file's cost is its full length.

    ckptscan.py scan DIR
    ckptscan.py scan-many [--max-bytes N] DIR...   (one listing per folder, in order: a host's
                                                    jobs at once; N: the target's output cap)
    ckptscan.py pack [--generation NAME] DIR ARCHIVE REL...   (ARCHIVE `-`: the tar.gz to stdout,
                                                    the report to stderr: streamed home, no
                                                    archive file on the host)

Where the job calls `gpu.checkpoint_saved()` its saves are frozen into generation folders
beside the checkpoint folder (DIR-gens/, core/runtime/ckptgen.py): `scan` then lists the newest
whole generation instead of the live folder (its name in "generation_dir"), and `pack
--generation` packs from it, every file opened before packing, so a save or a prune racing
the copy home never mixes two checkpoints.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tarfile

if __package__:  # imported as core.runtime.ckptscan (the engine, tests)
    from . import nofollow
else:  # sent as source with nofollow.py registered before it (providers/runtimeship.py runtime_source)
    import nofollow

MARKER = ".complete"  # written by gpu.checkpoint_saved()
CACHE = ".ckpt-hashes.json"  # beside the folder, in the job's folder
GENS_SUFFIX = "-gens"  # ckpt/ -> ckpt-gens/: the generations gpu.checkpoint_saved() froze
GEN_WIDTH = 10  # digits of a generation folder's name (ckptgen.WIDTH)
GEN_TRIES = 3  # generations looked at, newest first, before the live folder is listed
MAX_FILES = 100_000
MAX_SKIPPED = 20  # named in a listing; the rest counted


def _inside(rel: object) -> bool:
    """Whether `rel` names something inside the folder (no absolute name, no `..` part)."""
    return isinstance(rel, str) and bool(rel) and not rel.startswith(("/", "\\")) \
        and "\0" not in rel and ".." not in rel.replace("\\", "/").split("/")


def _hash_fd(fd: int) -> str:
    h = hashlib.sha256()
    for block in iter(lambda: os.read(fd, 1 << 20), b""):
        h.update(block)
    return h.hexdigest()


def _read_small(dir_fd: int, name: str, own: int | None) -> bytes | None:
    """A small regular file read through nofollow (the hash cache, the marker), or None."""
    try:
        fd, st = nofollow.open_file(dir_fd, name, name, own)
    except (OSError, nofollow.Refused):
        return None
    try:
        return os.read(fd, min(st.st_size, 64 << 20))
    finally:
        os.close(fd)


def _split(folder: str) -> tuple[str, str]:
    """The job's folder (trusted: gpu-router made it) and the checkpoint folder's name in it."""
    full = os.path.abspath(folder)
    return os.path.dirname(full), os.path.basename(full)


def scan(folder: str, max_bytes: int | None = None) -> dict:
    """{"exists", "files": {rel: [size, mtime_ns, sha256, cost]}, "marker": the marker or None,
    "skipped": [[rel, what]...] (links, FIFOs, sockets, devices: never opened), "skipped_more"}.
    `cost` is what the file counts against the caps (nofollow.cost: its full length, so a
    sparse file counts what a copy of it writes). Everything is read through nofollow.py from
    the job's folder: a ckpt/ replaced by a link lists as not there, with the reason. Once the
    costs pass `max_bytes` (the target's output cap) no further file is hashed (its sha256 is
    ""): such a listing is refused at home anyway, and a 1 TB sparse file is not read."""
    base, name = _split(folder)
    empty: dict = {"exists": False, "files": {}, "marker": None, "skipped": [], "skipped_more": 0}
    try:
        base_fd = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return empty
    try:
        frozen = _scan_generation(base_fd, name + GENS_SUFFIX, max_bytes)
        if frozen is not None:
            return frozen
        try:
            top = nofollow.open_dir_at(base_fd, name, name)
        except FileNotFoundError:
            return empty
        except nofollow.Refused as exc:
            return {**empty, "skipped": [[name + "/", exc.why]]}
        try:
            return _scan_open(base_fd, top, max_bytes)
        finally:
            os.close(top)
    finally:
        os.close(base_fd)


def _gen_names(gens_fd: int) -> list[str]:
    """The generation folders' names, newest first (zero-padded: name order is number order)."""
    try:
        names = os.listdir(gens_fd)
    except OSError:
        return []
    return sorted((n for n in names if n.isdigit() and len(n) == GEN_WIDTH), reverse=True)


def _scan_generation(base_fd: int, gens: str, max_bytes: int | None) -> dict | None:
    """The newest whole generation that `gpu.checkpoint_saved()` froze (core/runtime/ckptgen.py)
    whose files still match its marker, listed like the live folder plus `"generation_dir"`
    (its name, for `pack --generation`); None when there is none (the live folder is listed)."""
    try:
        gens_fd = nofollow.open_dir_at(base_fd, gens, gens)
    except (OSError, nofollow.Refused):
        return None
    try:
        for gname in _gen_names(gens_fd)[:GEN_TRIES]:
            try:
                top = nofollow.open_dir_at(gens_fd, gname, f"{gens}/{gname}")
            except (OSError, nofollow.Refused):
                continue  # pruned meanwhile
            try:
                doc = _scan_open(base_fd, top, max_bytes)
            finally:
                os.close(top)
            named = (doc.get("marker") or {}).get("files") if isinstance(doc.get("marker"), dict) else None
            files = doc["files"]
            if isinstance(named, dict) and named and set(named) == set(files) and all(
                    isinstance(v, list) and files[rel][:2] == v[:2] for rel, v in named.items()):
                return {**doc, "generation_dir": gname}
        return None
    finally:
        os.close(gens_fd)


def _scan_open(base_fd: int, top: int, max_bytes: int | None) -> dict:
    own = nofollow.owner(base_fd)
    try:
        cache = json.loads(_read_small(base_fd, CACHE, own) or b"{}")
    except (ValueError, RecursionError):  # nested past the parser's depth: not one
        cache = {}
    if not isinstance(cache, dict):
        cache = {}
    files: dict[str, list] = {}
    skipped: list[list[str]] = []
    more = 0
    marker = None
    spent = 0
    for entry in nofollow.walk(top):
        if entry.why is not None:
            if len(skipped) < MAX_SKIPPED:
                skipped.append([entry.rel, entry.why])
            else:
                more += 1
            continue
        rel, st = entry.rel, entry.st
        if rel.startswith(MARKER + "."):
            continue  # the marker's temporary file
        if rel == MARKER:
            try:
                marker = json.loads(_read_small(entry.dir_fd, entry.name, own) or b"null")
            except (ValueError, RecursionError):  # nested past the parser's depth: not one
                marker = None
            continue
        if len(files) >= MAX_FILES:
            break
        spent += nofollow.cost(st)
        known = cache.get(rel)
        if max_bytes is not None and spent > max_bytes:
            digest = ""  # over the cap: listed, not read
        elif isinstance(known, list) and len(known) >= 3 and known[0] == st.st_size and known[1] == st.st_mtime_ns:
            digest = known[2]
        else:
            try:
                fd, _ = nofollow.open_file(entry.dir_fd, entry.name, rel, own)
            except nofollow.Refused as exc:
                if len(skipped) < MAX_SKIPPED:
                    skipped.append([rel, exc.why])
                continue
            except OSError:
                continue
            try:
                digest = _hash_fd(fd)
            except OSError:
                continue
            finally:
                os.close(fd)
        files[rel] = [st.st_size, st.st_mtime_ns, digest, nofollow.cost(st)]
    _write_cache(base_fd, files)
    return {"exists": True, "files": files, "marker": marker, "skipped": skipped, "skipped_more": more}


def _write_cache(base_fd: int, files: dict) -> None:
    """The hash cache, written into a fresh file (never through a link the job left there)."""
    tmp = f"{CACHE}.tmp{os.getpid()}"
    try:
        fd = nofollow.create_file(base_fd, tmp, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({rel: v for rel, v in files.items() if v[2]}, f)
        os.replace(tmp, CACHE, src_dir_fd=base_fd, dst_dir_fd=base_fd)
    except (OSError, nofollow.Refused):
        pass  # an unwritable cache only costs hashing again


def scan_copy(folder: str) -> dict:
    """`scan` of a copy of a checkpoint folder made after its session ended (a Kaggle session's
    output, a Modal call's result or its volume): the copy's files get back the times the job's marker
    recorded (sizes are checked first), so a checkpoint marked complete there is complete
    here, and the listing is final: it cannot change any more."""
    marker = os.path.join(folder, MARKER)
    try:
        with open(marker) as f:
            named = json.load(f).get("files") or {}
    except (OSError, ValueError, RecursionError, AttributeError):
        named = {}
    for rel, meta in named.items() if isinstance(named, dict) else ():
        if not _inside(rel):
            continue  # the marker is the job's word: a name out of the folder touches nothing
        path = os.path.join(folder, rel)
        try:
            if (isinstance(meta, (list, tuple)) and len(meta) >= 2 and os.path.isfile(path)
                    and not os.path.islink(path) and os.path.getsize(path) == meta[0]):
                os.utime(path, ns=(int(meta[1]), int(meta[1])), follow_symlinks=False)
        except (OSError, ValueError, TypeError):
            continue
    doc = scan(folder)
    doc["final"] = True
    return doc


class _Counted:
    """A write-only stream that counts what passes (the packed size, where it cannot be stat'ed)."""

    def __init__(self, out) -> None:
        self.out, self.n = out, 0

    def write(self, data) -> int:
        self.out.write(data)
        self.n += len(data)
        return len(data)

    def flush(self) -> None:
        self.out.flush()


def _tar_out(archive: str):
    """The tar.gz to write: the file `archive`, or stdout for `-` (written in order, never
    sought: gzip over a counting writer). Returns (tar, a function giving the packed size)."""
    if archive == "-":
        out = _Counted(sys.stdout.buffer)
        tar = tarfile.open(mode="w:gz", fileobj=out, compresslevel=1, format=tarfile.PAX_FORMAT)
        return tar, lambda: out.n
    tar = tarfile.open(archive, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT)
    return tar, lambda: os.path.getsize(archive)


def pack(folder: str, archive: str, rels: list[str], generation: str | None = None) -> dict:
    """The named regular files of `folder` (and the marker, if any) as a tar.gz, each opened
    through nofollow from the job's folder (a name through a link, a FIFO, a device is left
    out, never opened). With `generation`, they come from that frozen generation folder
    instead (`scan`'s "generation_dir"), every file opened before the first byte is packed:
    an open file stays readable when the job prunes the generation meanwhile, so what comes
    home is that generation whole, or {"gone": true} when it was pruned before it was opened."""
    base, name = _split(folder)
    if generation is not None:
        if not (generation.isdigit() and len(generation) == GEN_WIDTH):
            return {"files": 0, "bytes": 0, "packed": 0, "gone": True}
        return _pack_pinned(base, f"{name}{GENS_SUFFIX}/{generation}", archive, rels)
    count = size = 0
    tar, packed = _tar_out(archive)
    with tar:
        try:
            top = nofollow.open_root(base, name)
        except (OSError, nofollow.Refused):
            top = -1
        try:
            own = nofollow.owner(top) if top >= 0 else None
            for rel in [*rels, MARKER] if top >= 0 else []:
                if not _inside(rel):
                    continue
                try:
                    parent, last = nofollow.parent_of(top, rel)
                except (OSError, nofollow.Refused):
                    continue
                try:
                    fd, st = nofollow.open_file(parent, last, rel, own)
                except (OSError, nofollow.Refused):
                    continue
                finally:
                    os.close(parent)
                try:
                    info = tarfile.TarInfo(rel)
                    info.size, info.mode, info.mtime = st.st_size, st.st_mode & 0o755, int(st.st_mtime)
                    tar.addfile(info, nofollow.ExactReader(fd, st.st_size))
                finally:
                    os.close(fd)
                count += 1
                size += st.st_size
        finally:
            if top >= 0:
                os.close(top)
    return {"files": count, "bytes": size, "packed": packed()}


def _pack_pinned(base: str, inner: str, archive: str, rels: list[str]) -> dict:
    """`pack` of a generation folder: open all, then pack (see `pack`)."""
    try:
        import resource  # Unix: as many open files as the hard limit allows
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 1 << 16
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):
        pass
    opened: list[tuple[str, int, os.stat_result]] = []
    gone = {"files": 0, "bytes": 0, "packed": 0, "gone": True}
    try:
        try:
            top = nofollow.open_root(base, inner)
        except (OSError, nofollow.Refused):
            return gone
        try:
            own = nofollow.owner(top)
            for rel in [*rels, MARKER]:
                if not _inside(rel):
                    continue
                try:
                    parent, last = nofollow.parent_of(top, rel)
                    try:
                        fd, st = nofollow.open_file(parent, last, rel, own)
                    finally:
                        os.close(parent)
                except (OSError, nofollow.Refused):
                    return gone  # pruned before it was pinned (or not a plain file)
                opened.append((rel, fd, st))
        finally:
            os.close(top)
        size = 0
        tar, packed = _tar_out(archive)
        with tar:
            for rel, fd, st in opened:
                info = tarfile.TarInfo(rel)
                info.size, info.mode, info.mtime = st.st_size, st.st_mode & 0o755, int(st.st_mtime)
                tar.addfile(info, nofollow.ExactReader(fd, st.st_size))
                size += st.st_size
        return {"files": len(opened), "bytes": size, "packed": packed()}
    finally:
        for _, fd, _ in opened:
            os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "scan":
        print(json.dumps(scan(argv[1])))
        return 0
    if argv and argv[0] == "scan-many":  # every job's folder on a host, in one process
        cap = None
        if len(argv) >= 3 and argv[1] == "--max-bytes":
            cap, argv = int(argv[2]), argv[2:]
        print(json.dumps({"scans": [scan(folder, cap) for folder in argv[1:]]}))
        return 0
    if len(argv) >= 3 and argv[0] == "pack":
        generation = None
        if len(argv) >= 5 and argv[1] == "--generation":
            generation, argv = argv[2], argv[2:]
        doc = pack(argv[1], argv[2], argv[3:], generation)
        sys.stdout.flush()
        print(json.dumps(doc), file=sys.stderr if argv[2] == "-" else sys.stdout)
        return 0
    print("usage: ckptscan.py scan DIR | scan-many DIR... | pack DIR ARCHIVE REL...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
