"""A complete checkpoint captured where it was written, the moment it is complete.

Why: the mirror home (core/packaging/checkpoints/) used to list the live checkpoint folder,
then pack the changed files in a second round trip; a job saving every half second changed a
file in between, the hashes disagreed and the copy was dropped, again and again. So
`gpu.checkpoint_saved()` now freezes the files it marks into a generation folder beside the
checkpoint folder (`GPU_ROUTER_CHECKPOINT_GENERATIONS`, set by gpu-router where it mirrors):

    <job>/ckpt/                    what the job writes (gpu.checkpoint_dir()); never holds these
    <job>/ckpt-gens/0000000042/    generation 42: the files as they were at that save, and
                                   a `.complete` marker naming each one's size and mtime
    <job>/ckpt-gens/.live.json     each live file's inode, size and mtime at the last capture

A generation folder is assembled under a dot name and renamed into place whole, and never
changes after that, so the mirror can take its time bringing it home while the job saves on.
Names are zero-padded so that the last one in name order is the newest (the host's poll finds
it with a shell glob, no extra process). Only the newest KEEP are kept.

How each file gets there, cheapest first, never sharing an inode the job will write into:
- unchanged since the last capture (same inode, size, mtime): a hard link to the previous
  generation's copy (inside ckpt-gens/, so possible even where ckpt/ is another mount);
- replaced by rename since the last capture (a new inode): a hard link to the job's file (the
  job's next save replaces it by rename again and leaves this inode alone);
- new, or rewritten in place (the same inode with a new mtime): copied; a hard link would
  change with the job's next in-place write. Where a link is impossible (ckpt/ and ckpt-gens/
  are two mounts inside the local sandbox: EXDEV) it is copied too. A copy keeps a sparse
  file's holes (sparsefile.py, beside this file): a preallocated 64 MiB buffer with a few
  blocks written stays a few blocks in each generation.
Each captured file is checked against the size and mtime the save recorded; a file that changed
meanwhile (a writer racing the save) abandons the generation rather than freezing a mixed set.

Standard library only: it runs inside the job, with the target's Python.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import sys
from typing import Callable

GENERATIONS_ENV = "GPU_ROUTER_CHECKPOINT_GENERATIONS"
MARKER = ".complete"
LIVE = ".live.json"
KEEP = 3  # generation folders kept on the target: the newest few
WIDTH = 10  # digits of a generation folder's name


def gen_name(generation: int) -> str:
    return f"{int(generation):0{WIDTH}d}"


def generations(gens_dir: str) -> list[int]:
    """The generation numbers present (whole folders only), oldest first."""
    try:
        names = os.listdir(gens_dir)
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit() and len(n) == WIDTH)


def _read_live(gens_dir: str) -> dict:
    try:
        with open(os.path.join(gens_dir, LIVE)) as f:
            doc = json.load(f)
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def capture(folder: str, gens_dir: str, generation: int, files: dict[str, list[int]], doc: dict,
            between: Callable[[str], None] | None = None) -> bool:
    """Freeze `files` ({rel: [size, mtime_ns]} as the save recorded them) of `folder` into
    `gens_dir/<generation>`; True when the generation now exists whole. `doc` is the save's
    marker (written into the generation with each file's own size and mtime). `between` is
    called after each file (a test's hook for a writer racing the capture). Never raises for a
    file the job changed or removed meanwhile: that save is simply not captured."""
    os.makedirs(gens_dir, exist_ok=True)
    prev_gens = generations(gens_dir)
    prev = os.path.join(gens_dir, gen_name(prev_gens[-1])) if prev_gens else None
    live_before = _read_live(gens_dir)
    tmp = os.path.join(gens_dir, f".new-{gen_name(generation)}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    live: dict[str, list[int]] = {}
    captured: dict[str, list[int]] = {}
    ok = True
    try:
        for rel, (size, mtime) in sorted(files.items()):
            src = os.path.join(folder, rel)
            dst = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            try:
                st = os.lstat(src)
            except OSError:
                ok = False
                break
            if not stat.S_ISREG(st.st_mode) or st.st_size != size or st.st_mtime_ns != mtime:
                ok = False  # changed since the save recorded it
                break
            was = live_before.get(rel)
            same_inode = isinstance(was, list) and len(was) >= 2 and [was[0], was[1]] == [st.st_dev, st.st_ino]
            unchanged = same_inode and was[2:4] == [st.st_size, st.st_mtime_ns]
            done = False
            if unchanged and prev is not None:
                done = _link(os.path.join(prev, rel), dst, size, mtime)
            if not done and isinstance(was, list) and not same_inode:
                done = _link(src, dst, size, mtime)  # replaced by rename: this inode stays as it is
            if not done:
                done = _copy(src, dst, size, mtime)
            if not done:
                ok = False
                break
            live[rel] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
            got = os.lstat(dst)
            captured[rel] = [got.st_size, got.st_mtime_ns]
            if between is not None:
                between(rel)
        if ok:  # the whole set, checked once more after the last file: nothing moved under it
            for rel, (size, mtime) in files.items():
                got = os.lstat(os.path.join(tmp, rel))
                if [got.st_size, got.st_mtime_ns] != [size, mtime] or captured[rel] != [size, mtime]:
                    ok = False
                    break
        if not ok:
            return False
        with open(os.path.join(tmp, MARKER), "w") as f:
            json.dump({**doc, "files": captured}, f, separators=(",", ":"))
        final = os.path.join(gens_dir, gen_name(generation))
        if os.path.lexists(final):  # the same number again (a job that lost its marker)
            old = os.path.join(gens_dir, f".old-{gen_name(generation)}-{os.getpid()}")
            os.replace(final, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, final)
        _write_live(gens_dir, {**{k: v for k, v in live_before.items() if k in files}, **live})
        prune(gens_dir)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _link(src: str, dst: str, size: int, mtime: int) -> bool:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        return False  # EXDEV (another mount), EPERM, gone: the caller copies
    st = os.lstat(dst)
    if st.st_size != size or st.st_mtime_ns != mtime:
        os.unlink(dst)  # it changed under us: copy instead (and the check may then refuse it)
        return False
    return True


def _sparsefile():
    """sparsefile.py beside this file: imported as a sibling at home (core.runtime), loaded
    from its file inside a job (the gpu module loads this one so, under its own name)."""
    if __package__:
        from . import sparsefile
        return sparsefile
    name = "_gpu_router_sparsefile"
    if name not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sparsefile.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def _copy(src: str, dst: str, size: int, mtime: int) -> bool:
    """A copy with the recorded mtime, taken only if the source did not change while read; a
    sparse file's holes stay holes."""
    try:
        _sparsefile().copy_file(src, dst)  # a link swapped in is not followed (ELOOP)
        after = os.lstat(src)
    except OSError:
        return False
    if after.st_size != size or after.st_mtime_ns != mtime or os.path.getsize(dst) != size:
        return False
    os.utime(dst, ns=(mtime, mtime), follow_symlinks=False)
    return True


def _write_live(gens_dir: str, live: dict) -> None:
    tmp = os.path.join(gens_dir, f"{LIVE}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(live, f)
    os.replace(tmp, os.path.join(gens_dir, LIVE))


def prune(gens_dir: str, keep: int = KEEP) -> None:
    """Only the newest `keep` generations stay (a mirror bringing an older one home has its
    own links to its files: core/runtime/ckptscan.py pins it first)."""
    for generation in generations(gens_dir)[:-keep]:
        shutil.rmtree(os.path.join(gens_dir, gen_name(generation)), ignore_errors=True)
