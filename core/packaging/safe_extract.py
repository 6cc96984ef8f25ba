"""Unpack an archive that came from somewhere else (a job's outputs) without trusting it.

A remote job, or whoever controls the remote host, decides what the outputs archive holds.
`tarfile.extractall` would follow a symlink member out of the folder, write through `..`,
create devices, and fill the disk with a gzip bomb. Here:

- only regular files and folders are created; links (symbolic and hard), devices, FIFOs and
  anything else are left out, each with a note;
- absolute names, `..` parts and names that leave the folder are rejected;
- everything is written into a fresh, private staging folder that only this code has
  populated (so no link can exist in it), with O_EXCL|O_NOFOLLOW, then moved into place;
- a byte cap (counted on the bytes actually written, not on the headers' word) and a file-count
  cap stop a bomb; the file being written when a cap is hit is removed.

The result is a list of notes for the job's record; nothing is raised for a hostile member.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

MAX_BYTES = 20 * 1024**3  # 20 GiB of outputs
MAX_FILES = 100_000
MAX_NOTES = 50
_CHUNK = 1 << 20
_BROKEN = (tarfile.TarError, EOFError, zlib.error, OSError)  # a damaged or cut-off archive
_OPEN = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def _clean_name(name: str) -> str | None:
    """The member's relative path, or None when it is absolute or leaves the folder."""
    if not name or "\0" in name or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return None
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    return "/".join(parts)


def safe_extract(archive: Path, dest: Path, *, max_bytes: int = MAX_BYTES,
                 max_files: int = MAX_FILES) -> list[str]:
    """Extract `archive` into `dest` (created if needed); return notes on what was left out."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.extract-", dir=dest.parent))
    notes: list[str] = []
    dropped = 0

    def note(text: str) -> None:
        nonlocal dropped
        if len(notes) < MAX_NOTES:
            notes.append(text)
        else:
            dropped += 1

    try:
        written = files = entries = 0
        try:
            tar = tarfile.open(archive, "r:*")
        except _BROKEN as exc:
            return [f"outputs archive could not be read: {exc}"]
        with tar:
            while True:
                try:
                    member = tar.next()
                except _BROKEN as exc:
                    note(f"outputs archive is damaged after {files} files: {exc}")
                    break
                if member is None:
                    break
                entries += 1
                if entries > max_files * 2 + 1000:
                    note(f"stopped: the archive has more than {max_files * 2 + 1000} entries")
                    break
                rel = _clean_name(member.name)
                if rel is None:
                    note(f"{member.name!r}: an absolute path or one that leaves the folder, not brought home")
                    continue
                if not rel:
                    continue
                if member.isdir():
                    try:
                        _mkdirs(staging, rel)
                    except OSError as exc:
                        note(f"{rel}/: could not be created ({exc.strerror})")
                    continue
                if not member.isreg():
                    what = ("a link" if member.issym() or member.islnk() else
                            "a device" if member.ischr() or member.isblk() else
                            "a FIFO" if member.isfifo() else "not a regular file")
                    note(f"{rel}: {what}, not brought home")
                    continue
                if files >= max_files:
                    note(f"stopped: more than {max_files} files; the rest stayed behind")
                    break
                if member.size > max_bytes - written:
                    note(f"stopped at {rel}: the outputs would pass the {max_bytes} byte cap; "
                         "the rest stayed behind")
                    break
                parent, _, base = rel.rpartition("/")
                try:
                    folder = _mkdirs(staging, parent) if parent else staging
                    fd = os.open(folder / base, _OPEN, 0o755 if member.mode & 0o111 else 0o644)
                except FileExistsError:
                    note(f"{rel}: appears twice in the archive; the first copy was kept")
                    continue
                except OSError as exc:
                    note(f"{rel}: could not be written ({exc.strerror})")
                    continue
                over = damaged = False
                with os.fdopen(fd, "wb") as out:
                    try:
                        src = tar.extractfile(member)
                        while src is not None:
                            block = src.read(_CHUNK)
                            if not block:
                                break
                            if written + len(block) > max_bytes:
                                over = True
                                break
                            out.write(block)
                            written += len(block)
                    except _BROKEN as exc:
                        damaged = True
                        note(f"outputs archive is damaged at {rel}: {exc}")
                if damaged:
                    (folder / base).unlink(missing_ok=True)
                    break
                if over:
                    (folder / base).unlink(missing_ok=True)
                    note(f"stopped at {rel}: the outputs pass the {max_bytes} byte cap; "
                         "the rest stayed behind")
                    break
                files += 1
        if dropped:
            notes.append(f"... and {dropped} more entries left out")
        _merge(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return notes


def _mkdirs(root: Path, rel: str) -> Path:
    """Create root/rel folder by folder, refusing to pass through anything but a folder."""
    here = root
    for part in rel.split("/"):
        here = here / part
        try:
            os.mkdir(here, 0o755)
        except FileExistsError:
            if not here.is_dir() or here.is_symlink():
                raise NotADirectoryError(20, "a file is in the way", str(here)) from None
    return here


def _merge(src: Path, dest: Path) -> None:
    """Move the staged tree into dest; staged entries replace files of the same name."""
    if not dest.exists():
        os.rename(src, dest)
        src.mkdir()  # the caller removes it
        return
    for entry in os.scandir(src):
        target = dest / entry.name
        if entry.is_dir(follow_symlinks=False):
            if target.is_dir() and not target.is_symlink():
                _merge(Path(entry.path), target)
                continue
            if target.exists() or target.is_symlink():
                _remove(target)
            os.rename(entry.path, target)
        else:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(entry.path, target)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
