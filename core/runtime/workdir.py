"""What a job wrote in its working folder: declared outputs come home, the rest is named.

People's scripts write `outputs/model.pkl` next to themselves, not to `gpu.output_dir()`. The
launcher takes a snapshot of the working folder before the job runs; when it ends, files that
match the job's declared `outputs` (gpu.yaml `outputs:`, `--output`) are copied into the output
folder (so they come home to `runs/<id>/` by the same rules as everything there), and files the
job created or changed that were not declared are counted, so the job's last log line, `gpu
status` and the next submit can say which work stayed on the target instead of losing it quietly.

`gpu fetch ID PATH` brings such work home later: `pack` archives the named paths of the working
folder on the target (run there as `python workdir.py pack WORKDIR ARCHIVE MAX_BYTES MAX_FILES
PATH...`), and home unpacks the archive by the same rules as every output.

Standard library only: this runs beside the launcher on every target. No link is followed, and
only regular files are read.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
import sys
import tarfile

MAX_FILES = 200_000  # a working folder bigger than this is not watched (said in the log)
SKIP_DIRS = {"__pycache__", ".git", ".ipynb_checkpoints"}

Snapshot = dict[str, tuple[int, int]]


def snapshot(workdir: str) -> Snapshot | None:
    """{relative path: (size, mtime_ns)} of the regular files under `workdir`, or None when it
    holds more than MAX_FILES (watching it would cost more than it tells)."""
    out: Snapshot = {}
    for top, dirs, files in os.walk(workdir):  # os.walk does not descend into linked folders
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in files:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out[os.path.relpath(path, workdir)] = (st.st_size, st.st_mtime_ns)
                if len(out) > MAX_FILES:
                    return None
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


def _copy_file(src: str, dest: str) -> int:
    """Copy one regular file without following a link; bytes copied."""
    fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        copied = 0
        with open(dest, "wb") as out:
            while True:
                block = os.read(fd, 1 << 20)
                if not block:
                    break
                out.write(block)
                copied += len(block)
        return copied
    finally:
        os.close(fd)


def collect(workdir: str, out_dir: str, patterns: list[str], before: Snapshot | None) -> dict:
    """Copy the declared outputs into `out_dir` (same relative paths) and count what the job
    wrote that was not declared: {"declared": n, "stayed": n, "folders": {folder: n}, "sample"}."""
    after = snapshot(workdir)
    result: dict = {"declared": 0, "stayed": 0, "folders": {}, "sample": [], "watched": after is not None}
    if after is None:
        return result
    real_out = os.path.realpath(out_dir)
    for rel in sorted(after):
        full = os.path.join(workdir, rel)
        if os.path.realpath(full).startswith(real_out + os.sep):
            continue  # already in the output folder (gpu.output_dir() inside the working folder)
        if patterns and declared(rel, patterns):
            try:
                _copy_file(full, os.path.join(out_dir, rel))
                result["declared"] += 1
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
        text += f"; `gpu fetch {short_id} {first or (result.get('sample') or ['PATH'])[0]}` brings them home now"
    return text


def _through_link(workdir: str, rel: str) -> str | None:
    """The first part of `rel` (a folder on the way, or the path itself) that is not a plain
    folder or file of the working folder: a link, a device; None when the path is clean."""
    here = workdir
    for part in rel.split("/"):
        here = os.path.join(here, part)
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return None  # missing: said as missing by the caller
        if stat.S_ISLNK(st.st_mode):
            return os.path.relpath(here, workdir)
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return os.path.relpath(here, workdir)
    return None


def pack(workdir: str, rels: list[str], archive: str, max_bytes: int, max_files: int) -> dict:
    """Archive the regular files under each of `rels` (relative to `workdir`, already checked
    to stay inside it) without following a link; say what was missing, refused or capped."""
    doc: dict = {"files": 0, "bytes": 0, "missing": [], "refused": [], "capped": None}
    tmp = archive + ".part"
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel in rels:
            full = os.path.join(workdir, rel) if rel != "." else workdir
            if not os.path.lexists(full):
                doc["missing"].append(rel)
                continue
            bad = _through_link(workdir, rel) if rel != "." else None
            if bad:
                doc["refused"].append({"path": rel, "why": f"{bad} is a link or special file: not followed"})
                continue
            for path in _files_under(full):
                if doc["capped"]:
                    break
                _add(tar, workdir, path, doc, max_bytes, max_files)
    os.replace(tmp, archive)
    return doc


def _files_under(full: str):
    """`full` itself, or the files under it in a stable order (os.walk enters no linked folder)."""
    if not os.path.isdir(full):
        yield full
        return
    for top, dirs, files in os.walk(full):
        dirs.sort()
        for name in sorted(files):
            yield os.path.join(top, name)


def _add(tar: tarfile.TarFile, workdir: str, path: str, doc: dict, max_bytes: int,
         max_files: int) -> None:
    """One regular file into the archive, read through a descriptor that follows no link."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return  # a link, or gone meanwhile
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        if doc["files"] >= max_files or doc["bytes"] + st.st_size > max_bytes:
            doc["capped"] = os.path.relpath(path, workdir)
            return
        info = tarfile.TarInfo(os.path.relpath(path, workdir))
        info.size, info.mode, info.mtime = st.st_size, st.st_mode & 0o755, int(st.st_mtime)
        tar.addfile(info, f)
        doc["files"] += 1
        doc["bytes"] += st.st_size


def main(argv: list[str]) -> int:
    if len(argv) < 6 or argv[1] != "pack":
        sys.stderr.write("usage: workdir.py pack WORKDIR ARCHIVE MAX_BYTES MAX_FILES PATH...\n")
        return 2
    workdir = os.path.expanduser(argv[2])
    if not os.path.isdir(workdir):
        sys.stdout.write(json.dumps({"gone": True}) + "\n")
        return 0
    doc = pack(workdir, argv[6:], argv[3], int(argv[4]), int(argv[5]))
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
