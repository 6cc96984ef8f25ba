"""What a job wrote in its working folder: declared outputs come home, the rest is named.

People's scripts write `outputs/model.pkl` next to themselves, not to `gpu.output_dir()`. The
launcher takes a snapshot of the working folder before the job runs; when it ends, files that
match the job's declared `outputs` (gpu.yaml `outputs:`, `--output`) are copied into the output
folder (so they come home to `runs/<id>/` by the same rules as everything there), and files the
job created or changed that were not declared are counted, so the job's last log line, `gpu
status` and the next submit can say which work stayed on the target instead of losing it quietly.

Standard library only: this runs beside the launcher on every target. No link is followed, and
only regular files are read.
"""

from __future__ import annotations

import fnmatch
import os
import stat

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


def stayed_text(result: dict) -> str | None:
    """The sentence a person reads about work that did not come home, or None."""
    n = result.get("stayed") or 0
    if not n:
        return None
    folders = sorted(result.get("folders", {}).items(), key=lambda kv: -kv[1])
    where = ", ".join(f"{count} under {folder}" if folder != "./" else f"{count} beside the script"
                      for folder, count in folders[:4])
    first = folders[0][0] if folders and folders[0][0] != "./" else None
    declare = f"`outputs: [{first}]` in gpu.yaml (or --output {first})" if first else \
        "`outputs:` in gpu.yaml (or --output PATH)"
    return (f"{n} file{'s' * (n != 1)} the job wrote stayed on the target ({where}): declare them "
            f"with {declare}, or write to gpu.output_dir()")
