"""What a job wrote in its working folder: declared outputs come home, the rest is named.

People's scripts write `outputs/model.pkl` next to themselves, not to `gpu.output_dir()`. The
launcher takes a snapshot of the working folder before the job runs; when it ends, files that
match the job's declared `outputs` (gpu.yaml `outputs:`, `--output`) are copied into the output
folder (so they come home to `runs/<id>/` by the same rules as everything there), and files the
job created or changed that were not declared are counted, so the job's last log line, `gpu
status` and the next submit can say which work stayed on the target instead of losing it quietly.

`gpu fetch ID PATH` brings such work home later: `pack` archives the named paths (or globs, by
the rules of declared outputs: `predict*.pdf`, `models/*.pkl`, `**/*.ckpt`) of the working
folder on the target (run there as `python workdir.py pack JOB_DIR INNER ARCHIVE MAX_BYTES
MAX_FILES PATH...`, INNER being `code/<workdir>`), and home unpacks the archive by the same rules
as every output.

Standard library only: this runs beside the launcher on every target. Every read and write goes
through nofollow.py from the job's folder down: no link is followed (the working folder, `code/`
and out/ included), only regular files are read, and nothing is written through a link.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
import sys
import tarfile

if __package__:  # imported as core.runtime.workdir (the engine, tests)
    from . import nofollow
else:  # beside the launcher, or sent as source with nofollow.py registered before it
    import nofollow

MAX_FILES = 200_000  # a working folder bigger than this is not watched (said in the log)
SKIP_DIRS = frozenset({"__pycache__", ".git", ".ipynb_checkpoints"})

Snapshot = dict[str, tuple[int, int]]


def _split(workdir: str, job_dir: str | None) -> tuple[str, str]:
    """(trusted base, parts walked without following a link): the job's folder and the path
    of the working folder inside it (`code/<workdir>`), which the job may have replaced."""
    if job_dir:
        base = os.path.abspath(job_dir)
        full = os.path.abspath(workdir)
        if full.startswith(base + os.sep):
            return base, os.path.relpath(full, base).replace(os.sep, "/")
    return workdir, ""


def snapshot(workdir: str, job_dir: str | None = None,
             skip_ids: frozenset[tuple[int, int]] = frozenset()) -> Snapshot | None:
    """{relative path: (size, mtime_ns)} of the regular files under `workdir`, or None when it
    holds more than MAX_FILES (watching it would cost more than it tells). No link is followed,
    the working folder itself included when `job_dir` (the folder holding it) is given."""
    out: Snapshot = {}
    try:
        top = nofollow.open_root(*_split(workdir, job_dir))
    except (OSError, nofollow.Refused):
        return out
    try:
        for entry in nofollow.walk(top, skip_names=SKIP_DIRS, skip_ids=skip_ids):
            if entry.why is None:
                out[entry.rel] = (entry.st.st_size, entry.st.st_mtime_ns)
                if len(out) > MAX_FILES:
                    return None
    finally:
        os.close(top)
    return out


def declared(rel: str, patterns: list[str]) -> bool:
    """Does `rel` match a declared output: a folder (`outputs/` or `outputs`) takes what is
    under it; anything else is a glob on the path (`models/*.pkl`, `**/*.ckpt`, `result.json`)."""
    for pattern in patterns:
        pat = pattern.strip().removeprefix("./")
        folder = pat.rstrip("/")
        if folder and (rel == folder or rel.startswith(folder + "/")):
            return True
        if fnmatch.fnmatchcase(rel, pat) or (pat.startswith("**/") and fnmatch.fnmatchcase(rel, pat[3:])):
            return True
    return False


def _copy_into(src_top: int, rel: str, out_top: int, own: int) -> int:
    """Copy `rel` from the working folder into the output folder, both walked through folder
    descriptors (no link followed on either side; whatever had the name in out/ is replaced
    by a fresh file, never written through). Bytes copied; Refused or OSError on the way."""
    src_dir, name = nofollow.parent_of(src_top, rel)
    try:
        fd, st = nofollow.open_file(src_dir, name, rel, own)
    finally:
        os.close(src_dir)
    try:
        parent, _, base = rel.rpartition("/")
        dest_dir = nofollow.makedirs_at(out_top, parent) if parent else os.dup(out_top)
        try:
            out = nofollow.create_file(dest_dir, base, 0o755 if st.st_mode & 0o111 else 0o644)
        finally:
            os.close(dest_dir)
        copied = 0
        try:
            reader = nofollow.ExactReader(fd, st.st_size)
            while True:
                block = reader.read(1 << 20)
                if not block:
                    break
                os.write(out, block)
                copied += len(block)
        finally:
            os.close(out)
        return copied
    finally:
        os.close(fd)


def link_checkpoint(workdir: str, job_dir: str, rel: str, ckpt_dir: str) -> str | None:
    """Make `<workdir>/<rel>` (the request's `checkpoint` folder) a link to the job's ckpt/,
    so what the script saves there is what the mirror, the generations and the restore already
    handle (and gpu.checkpoint_dir() names the same folder). Done by the launcher before the job
    starts, through nofollow from the job's folder down: a link or a file on the way refuses
    (RuntimeError saying what to change), nothing is written through a link.

    A real folder already there (shipped with the code) gives its entries to ckpt/ where ckpt/
    lacks them (a restored checkpoint wins); what is left is kept aside as `<rel>.shipped`.
    Returns a line for the job's log, or None when there is nothing to say."""
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts or rel.startswith(("/", "~")):
        raise RuntimeError(f"checkpoint {rel!r} is not a folder inside the working folder: "
                           "give a relative path such as checkpoints")
    parent_rel, name = "/".join(parts[:-1]), parts[-1]
    target = os.path.abspath(ckpt_dir)
    os.makedirs(target, exist_ok=True)
    try:
        top = nofollow.open_root(*_split(workdir, job_dir))
        try:
            parent = nofollow.makedirs_at(top, parent_rel) if parent_rel else os.dup(top)
        finally:
            os.close(top)
    except nofollow.Refused as exc:
        raise RuntimeError(f"checkpoint {rel}: {exc.rel} is {exc.why} (no link is followed): "
                           "make it a plain folder in the project, or name another checkpoint "
                           "folder") from None
    note = None
    try:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            if os.readlink(name, dir_fd=parent) == target:
                return None  # this attempt's launcher already linked it
            raise RuntimeError(f"checkpoint {rel} is a link in the project: it would be followed "
                               "out of the job's folder; remove the link (gpu-router makes it)")
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise RuntimeError(f"checkpoint {rel} is {nofollow.kind(st.st_mode)} in the project, "
                               "not a folder: rename it or name another checkpoint folder")
        if st is not None:
            note = _hand_over(parent, name, rel, target)
        os.symlink(target, name, dir_fd=parent)
    finally:
        os.close(parent)
    return note


def _hand_over(parent: int, name: str, rel: str, target: str) -> str | None:
    """Move the entries of the shipped folder `name` into the checkpoint folder where it lacks
    them (renames, no copy, no link followed), then take the folder out of the way."""
    src = nofollow.open_dir_at(parent, name, rel)
    dst = os.open(target, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    moved = kept = 0
    try:
        have = set(os.listdir(dst))
        for entry in nofollow._names(src):
            if entry in have:
                kept += 1
                continue
            os.rename(entry, entry, src_dir_fd=src, dst_dir_fd=dst)
            moved += 1
    finally:
        os.close(src)
        os.close(dst)
    if kept:
        os.rename(name, f"{name}.shipped", src_dir_fd=parent, dst_dir_fd=parent)
        return (f"checkpoint {rel}: the restored checkpoint is used; the {kept} shipped "
                f"entr{'ies' if kept != 1 else 'y'} it also has stay in {rel}.shipped")
    os.rmdir(name, dir_fd=parent)
    return f"checkpoint {rel}: the {moved} shipped entr{'ies' if moved != 1 else 'y'} moved into the checkpoint folder" if moved else None


DECLARED_BY_JOB = ".gpu-router-outputs"  # in out/: folders the job's runtime named (gpu/lightning_hook.py)
DECLARED_MAX_BYTES = 64 * 1024
DECLARED_MAX = 20


def declared_by_job(workdir: str, out_dir: str) -> list[str]:
    """Folders the job's runtime named as outputs while it ran (Lightning's `lightning_logs/`),
    as folder patterns relative to the working folder, and the list removed from out/ so it
    does not come home itself. Read through nofollow like every file of the job's; a path
    outside the working folder is ignored (only the working folder's files are ever copied,
    as for any declared output), and so is anything past the first 20 folders or 64 KiB."""
    job_dir = os.path.dirname(os.path.abspath(out_dir))
    try:
        out_top = nofollow.open_root(job_dir, os.path.basename(os.path.abspath(out_dir)))
    except (OSError, nofollow.Refused):
        return []
    try:
        try:
            fd, _ = nofollow.open_file(out_top, DECLARED_BY_JOB, DECLARED_BY_JOB, nofollow.owner(out_top))
        except (OSError, nofollow.Refused):
            return []
        try:
            data = os.read(fd, DECLARED_MAX_BYTES)
        finally:
            os.close(fd)
        try:
            os.unlink(DECLARED_BY_JOB, dir_fd=out_top)
        except OSError:
            pass
    finally:
        os.close(out_top)
    base = os.path.abspath(workdir)
    found: list[str] = []
    for line in data.decode("utf-8", "replace").splitlines():
        path = line.strip()
        if not os.path.isabs(path) or "\0" in path:
            continue
        rel = os.path.relpath(os.path.normpath(path), base).replace(os.sep, "/")
        if rel in (".", "") or rel == ".." or rel.startswith("../"):
            continue
        pattern = rel + "/"
        if pattern not in found:
            found.append(pattern)
        if len(found) >= DECLARED_MAX:
            break
    return found


def collect(workdir: str, out_dir: str, patterns: list[str], before: Snapshot | None) -> dict:
    """Copy the declared outputs into `out_dir` (same relative paths) and count what the job
    wrote that was not declared: {"declared": n, "stayed": n, "folders": {folder: n}, "sample",
    "refused": [[path, why]...]}. Both folders are read and written through nofollow from the
    job's folder (the parent of `out_dir`), so a job that replaced its working folder, out/ or
    any folder in them with a link has nothing read or written through it."""
    job_dir = os.path.dirname(os.path.abspath(out_dir))
    result: dict = {"declared": 0, "stayed": 0, "folders": {}, "sample": [], "watched": False,
                    "refused": []}
    try:
        out_top = nofollow.open_root(job_dir, os.path.basename(os.path.abspath(out_dir)))
    except FileNotFoundError:
        os.makedirs(out_dir, exist_ok=True)
        out_top = nofollow.open_root(job_dir, os.path.basename(os.path.abspath(out_dir)))
    except nofollow.Refused as exc:
        result["refused"].append([exc.rel + "/", exc.why])
        out_top = -1
    try:
        base, inner = _split(workdir, job_dir)
        try:
            src_top = nofollow.open_root(base, inner)
        except nofollow.Refused as exc:
            result["refused"].append([exc.rel + "/", exc.why + ": the working folder was not read"])
            return result
        except FileNotFoundError:
            return result
        try:
            skip = frozenset() if out_top < 0 else frozenset({(os.fstat(out_top).st_dev, os.fstat(out_top).st_ino)})
            after = snapshot(workdir, job_dir, skip_ids=skip)  # gpu.output_dir() inside it: not again
            result["watched"] = after is not None
            if after is None:
                return result
            own = nofollow.owner(src_top)
            for rel in sorted(after):
                if patterns and declared(rel, patterns):
                    if out_top < 0:
                        continue
                    try:
                        _copy_into(src_top, rel, out_top, own)
                        result["declared"] += 1
                    except nofollow.Refused as exc:
                        if len(result["refused"]) < 20:
                            result["refused"].append([exc.rel, exc.why])
                    except OSError:
                        pass
                    continue
                if before is None or before.get(rel) == after[rel]:
                    continue  # shipped with the bundle and untouched (or the job never started)
                folder = rel.split("/", 1)[0] + "/" if "/" in rel else "./"
                result["stayed"] += 1
                result["folders"][folder] = result["folders"].get(folder, 0) + 1
                if len(result["sample"]) < 10:
                    result["sample"].append(rel)
        finally:
            os.close(src_top)
    finally:
        if out_top >= 0:
            os.close(out_top)
    return result


def stayed_text(result: dict, short_id: str | None = None) -> str | None:
    """The sentence a person reads about work that did not come home, or None; with the job's
    short id it also says how to bring that work home now."""
    n = result.get("stayed") or 0
    if not n:
        return None
    folders = sorted(result.get("folders", {}).items(), key=lambda kv: -kv[1])
    where = ", ".join(f"{count} under {folder}" if folder != "./" else f"{count} beside the script"
                      for folder, count in folders[:4])
    first = folders[0][0] if folders and folders[0][0] != "./" else None
    declare = f"`outputs: [{first}]` in gpu.yaml (or --output {first})" if first else \
        "`outputs:` in gpu.yaml (or --output PATH)"
    text = (f"{n} file{'s' * (n != 1)} the job wrote stayed on the target ({where}): declare them "
            f"with {declare}, or write to gpu.output_dir()")
    if short_id:
        args, more = fetch_args(folders, result.get("sample") or [], n)
        text += f"; `gpu fetch {short_id} {args}` brings {'them' if n != 1 else 'it'} home now"
        if more:
            text += f" ({more} more not named here: name them, or a glob such as 'name*.ext')"
    return text


def fetch_args(folders: list[tuple[str, int]], sample: list[str], total: int) -> tuple[str, int]:
    """The PATH arguments of `gpu fetch` for what stayed (each folder, up to 4, and each file
    beside the script by name, up to 3), and how many files they leave unnamed."""
    listed = [(folder, count) for folder, count in folders[:4] if folder != "./"]
    beside = [rel for rel in sample if "/" not in rel][:3] if dict(folders).get("./") else []
    args = [folder for folder, _ in listed] + beside
    more = total - sum(count for _, count in listed) - len(beside)
    return " ".join(args) or "PATH", max(0, more)


def pack(job_dir: str, inner: str, rels: list[str], archive: str, max_bytes: int,
         max_files: int) -> dict:
    """Archive the regular files under each of `rels` (relative to the working folder
    `job_dir/inner`, already checked to stay inside it), every part opened through nofollow
    from the job's folder; say what was missing, refused or capped. {"gone": true} when the
    working folder is not there; {"replaced": why} when it (or `code/`) is a link."""
    try:
        top = nofollow.open_root(job_dir, inner)
    except FileNotFoundError:
        # taken over by a later job of the project: it held only the code it was given
        return {"gone": True, **({"reused": True} if os.path.exists(os.path.join(job_dir, "code.reused")) else {})}
    except nofollow.Refused as exc:
        return {"files": 0, "bytes": 0, "missing": [], "refused": [], "capped": None,
                "replaced": f"{exc.rel} is {exc.why}"}
    doc: dict = {"files": 0, "bytes": 0, "missing": [], "refused": [], "capped": None}
    tmp = archive + ".part"
    try:
        own = nofollow.owner(top)
        with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tar:
            for rel in rels:
                if doc["capped"]:
                    break
                if is_glob(rel):
                    _pack_glob(tar, top, own, rel, doc, max_bytes, max_files)
                else:
                    _pack_one(tar, top, own, rel, doc, max_bytes, max_files)
    finally:
        os.close(top)
    os.replace(tmp, archive)
    return doc


def is_glob(rel: str) -> bool:
    return any(c in rel for c in "*?[")


def _pack_glob(tar: tarfile.TarFile, top: int, own: int, pattern: str, doc: dict, max_bytes: int,
               max_files: int) -> None:
    """Every file of the working folder the glob matches, by the rules of declared outputs
    (`declared`); none matched is a missing path. A file already packed is not packed again."""
    def refuse(path: str, why: str) -> None:
        if len(doc["refused"]) < 50:
            doc["refused"].append({"path": path, "why": why})

    packed = set(tar.getnames())
    matched = False
    for entry in nofollow.walk(top, skip_names=SKIP_DIRS):
        if doc["capped"]:
            break
        if not declared(entry.rel, [pattern]):
            continue
        matched = True
        if entry.why is not None:
            refuse(entry.rel, f"{entry.rel} is {entry.why}: not followed or opened")
        elif entry.rel not in packed:
            _add(tar, entry.dir_fd, entry.name, entry.rel, own, doc, max_bytes, max_files, refuse)
            packed.add(entry.rel)
    if not matched:
        doc["missing"].append(pattern)


def _pack_one(tar: tarfile.TarFile, top: int, own: int, rel: str, doc: dict, max_bytes: int,
              max_files: int) -> None:
    """One named path: a file, or every file under a folder; refused as a whole when a part
    of its own name is a link or special file, file by file for what lies under it."""
    def refuse(path: str, why: str) -> None:
        if len(doc["refused"]) < 50:
            doc["refused"].append({"path": path, "why": why})

    if rel in ("", "."):
        folder, name = os.dup(top), None
    else:
        try:
            folder, name = nofollow.parent_of(top, rel)
        except FileNotFoundError:
            doc["missing"].append(rel)
            return
        except nofollow.Refused as exc:
            refuse(rel, f"{exc.rel} is {exc.why}: not followed")
            return
    try:
        if name is not None:
            try:
                st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                doc["missing"].append(rel)
                return
            if stat.S_ISREG(st.st_mode):
                _add(tar, folder, name, rel, own, doc, max_bytes, max_files, refuse)
                return
            if not stat.S_ISDIR(st.st_mode):
                refuse(rel, f"{rel} is {nofollow.kind(st.st_mode)}: not followed or opened")
                return
            try:
                sub = nofollow.open_dir_at(folder, name, rel)
            except FileNotFoundError:
                doc["missing"].append(rel)
                return
            except nofollow.Refused as exc:
                refuse(rel, f"{exc.rel} is {exc.why}: not followed")
                return
            os.close(folder)
            folder = sub
        prefix = "" if name is None else rel
        for entry in nofollow.walk(folder, prefix):
            if doc["capped"]:
                break
            if entry.why is not None:
                refuse(entry.rel, f"{entry.rel} is {entry.why}: not followed or opened")
                continue
            _add(tar, entry.dir_fd, entry.name, entry.rel, own, doc, max_bytes, max_files, refuse)
    finally:
        os.close(folder)


def _add(tar: tarfile.TarFile, dir_fd: int, name: str, rel: str, own: int, doc: dict,
         max_bytes: int, max_files: int, refuse) -> None:
    """One regular file into the archive, read through a descriptor that follows no link; a
    sparse file counts its full length against the byte cap (nofollow.cost)."""
    try:
        fd, st = nofollow.open_file(dir_fd, name, rel, own)
    except nofollow.Refused as exc:
        refuse(rel, f"{rel} is {exc.why}: not read")
        return
    except OSError:
        return  # gone meanwhile
    try:
        if doc["files"] >= max_files or doc["bytes"] + nofollow.cost(st) > max_bytes:
            doc["capped"] = rel
            return
        info = tarfile.TarInfo(rel)
        info.size, info.mode, info.mtime = st.st_size, st.st_mode & 0o755, int(st.st_mtime)
        tar.addfile(info, nofollow.ExactReader(fd, st.st_size))
        doc["files"] += 1
        doc["bytes"] += nofollow.cost(st)
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) < 7 or argv[1] != "pack":
        sys.stderr.write("usage: workdir.py pack JOB_DIR INNER ARCHIVE MAX_BYTES MAX_FILES PATH...\n")
        return 2
    job_dir = os.path.expanduser(argv[2])
    if not os.path.isdir(job_dir):
        sys.stdout.write(json.dumps({"gone": True}) + "\n")
        return 0
    doc = pack(job_dir, argv[3], argv[7:], argv[4], int(argv[5]), int(argv[6]))
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
