"""The one writer of everything gpu-router puts under a project's `runs/`.

gpu-router writes into the project on behalf of a job it ran: its outputs, `job.json`,
`job.log`, `metrics.jsonl`, what `gpu fetch` brings, the settled checkpoint. The project is
where an agent works, and an agent that may write only there can plant links in it: `runs/<id>`
as a link to the person's config folder made the job's `out/config.yaml` replace the person's
config (its approval PIN gone) and put `job.log`, `metrics.jsonl` and `job.json` beside it; a
link to `~/.ssh` had `authorized_keys` replaced; `runs/<id>/job.json.tmp` as a link had the job
document written into the file it named. gpu-router runs with every right the person has, so a
write that follows such a link lands where the agent itself could never write.

The rule, for every write under `runs/`:

- the project folder is opened as given (it is the person's: the path they work in), and from
  its descriptor `runs/` and then `runs/<id>/` are opened with O_NOFOLLOW|O_DIRECTORY, made
  first where missing (mkdir relative to the parent's descriptor). Either one that is a link,
  not a folder, or not owned by this user is refused (`Refused`) before anything is written;
- everything below is reached through those descriptors only: folders by
  core/runtime/nofollow.py (each part O_NOFOLLOW, a link in the way refused), files created
  with O_CREAT|O_EXCL|O_NOFOLLOW under a fresh random name and renamed into place within the
  folder's descriptor (renameat). A rename replaces a planted link or hard link itself; it
  never writes into what one names. No file is ever opened for writing that this writer did
  not just create;
- a link swapped in after the check changes nothing: the descriptors name the folders that
  were checked, wherever they are moved (and a folder can be moved only within the mount
  the agent could already write to).

A refusal is not a lost output: the engine (core/engine/jobfiles.py, `keep_at_home`) records an
event with the reason and writes the same things into the job's own folder in gpu-router's
home (`jobs/<id>/outputs-kept/`), which `gpu status` names.

The same opening rule serves any destination: its last two parts (`runs/`, `<id>/` for a job)
are the checked ones. Standard library and core/runtime/nofollow.py only.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Iterable

from core.runtime import nofollow, sparsefile

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW | CLOEXEC
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC
_CHUNK = 1 << 20


class Refused(Exception):
    """A folder on the way to a write under runs/ is not one gpu-router may write into: `where`
    names it, `why` says what it is instead (a link, a file, another user's folder).

    Not an OSError on purpose: a provider's `except OSError` (a damaged archive, a full disk)
    must not swallow it, since the engine answers it by keeping the outputs at home."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where
        self.why = why


def _check_dir(fd: int, where: str) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(where, "not a folder")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise Refused(where, f"a folder owned by another user (uid {st.st_uid}), not by you")


def _open_part(parent_fd: int, name: str, where: str, make: bool) -> int:
    """`name` inside `parent_fd` as a checked folder: made where missing (with `make`), never
    through a link, a plain folder owned by this user, else Refused."""
    if make:
        try:
            os.mkdir(name, 0o755, dir_fd=parent_fd)
        except FileExistsError:
            pass
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if make:
            raise Refused(where, "vanished while it was opened") from None
        raise
    except OSError as exc:
        try:
            what = nofollow.kind(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
        except OSError:
            what = exc.strerror or "could not be opened"
        raise Refused(where, what) from None
    try:
        _check_dir(fd, where)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Folder:
    """An open, checked destination (`path`, e.g. `<project>/runs/<id>`): `parent_fd` is its
    `runs/`, `fd` the folder itself. Use as a context manager; every write goes through the
    descriptors, never through `path`."""

    def __init__(self, path: Path, parent_fd: int, fd: int) -> None:
        self.path = path
        self.parent_fd = parent_fd
        self.fd = fd

    def __enter__(self) -> "Folder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in (self.fd, self.parent_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.parent_fd = -1

    # -- files ----------------------------------------------------------------------------

    def write(self, name: str, data: bytes | Iterable[bytes], mode: int = 0o644) -> None:
        """`name` (a plain name or a relative path) holds `data`, replaced whole: written into
        a fresh file made exclusively, then renamed over whatever had the name (a link there
        is replaced, never followed; a folder there is removed first, through descriptors,
        as the merge of outputs does). Refused when a link stands on the way to `name`'s
        folder, or a folder keeps coming back in its place."""
        dfd, base = self._parent(name, make=True)
        try:
            tmp, fd = new_temp(dfd, base, mode)
            try:
                with os.fdopen(fd, "wb") as f:
                    for block in ([data] if isinstance(data, (bytes, bytearray)) else data):
                        f.write(block)
                there = _lstat(dfd, base)
                if there is not None and stat.S_ISDIR(there.st_mode):
                    shutil.rmtree(base, dir_fd=dfd)
                _rename_into(dfd, tmp, dfd, base, f"{self.path}/{name}")
            except BaseException:
                _unlink_quietly(dfd, tmp)
                raise
        finally:
            if dfd != self.fd:
                os.close(dfd)

    def write_from(self, name: str, src: Path) -> None:
        """`name` holds a copy of gpu-router's own file `src` (a log, a metrics file it fetched
        into its home), by `write`'s rule."""
        sfd = os.open(src, os.O_RDONLY | NOFOLLOW | CLOEXEC)
        try:
            self.write(name, iter(lambda: os.read(sfd, _CHUNK), b""))
        finally:
            os.close(sfd)

    def exists(self, name: str) -> bool:
        """Whether anything (a link included) has the plain name `name` in the folder."""
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            return True
        except FileNotFoundError:
            return False

    def check_dir(self, name: str) -> None:
        """Refused unless `name` here is a plain folder of this user (not a link);
        FileNotFoundError when it is not there."""
        os.close(_open_part(self.fd, name, f"{self.path}/{name}", make=False))

    def _parent(self, rel: str, make: bool) -> tuple[int, str]:
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            raise Refused(rel, "not a path inside the folder")
        if len(parts) == 1:
            return self.fd, parts[0]
        try:
            sub = (nofollow.makedirs_at(self.fd, "/".join(parts[:-1])) if make
                   else nofollow.parent_of(self.fd, rel)[0])
        except nofollow.Refused as exc:
            raise Refused(f"{self.path.name}/{exc.rel}", exc.why) from None
        return sub, parts[-1]

    # -- staging and moving ----------------------------------------------------------------

    def staging(self) -> tuple[str, int]:
        """A fresh private folder beside this one (in `runs/`), made by mkdir with a random name
        (so nothing the agent planted can be it): (its name, its descriptor)."""
        for _ in range(100):
            name = f".{self.path.name}.extract-{secrets.token_hex(6)}"
            try:
                os.mkdir(name, 0o700, dir_fd=self.parent_fd)
            except FileExistsError:
                continue
            return name, os.open(name, DIR_FLAGS, dir_fd=self.parent_fd)
        raise FileExistsError(errno.EEXIST, "no free staging name", str(self.path.parent))

    def remove_staging(self, name: str) -> None:
        """The staging folder and anything left in it, removed through the descriptor (links
        in it are removed, never followed)."""
        try:
            shutil.rmtree(name, dir_fd=self.parent_fd)
        except FileNotFoundError:
            pass

    def merge(self, src_fd: int) -> None:
        """Move everything in the staged folder `src_fd` into this folder: staged entries
        replace files and links of the same name, a staged folder merges into a folder."""
        merge_at(src_fd, self.fd)

    def move_in(self, src: Path, name: str) -> None:
        """gpu-router's own folder `src` (in its home) becomes `name` here: renamed where both
        share a disk, else copied (without following a link) and then removed at home.
        FileExistsError when something already has that name."""
        if self.exists(name):
            raise FileExistsError(errno.EEXIST, "already there", name)
        sparent = os.open(src.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | CLOEXEC)
        try:
            move_between(sparent, src.name, self.fd, name)
        finally:
            os.close(sparent)

    def move_out(self, name: str, dest: Path) -> None:
        """This folder's `name` (a folder, never a link) becomes gpu-router's own `dest` (in its
        home, which must not exist yet): renamed, or copied without following a link and then
        removed here. Refused when `name` is a link or not a folder."""
        try:
            fd = nofollow.open_dir_at(self.fd, name, name)
        except nofollow.Refused as exc:
            raise Refused(f"{self.path.name}/{name}", exc.why) from None
        os.close(fd)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dparent = os.open(dest.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | CLOEXEC)
        try:
            move_between(self.fd, name, dparent, dest.name)
        finally:
            os.close(dparent)


def open_folder(dest: Path, make: bool = True) -> Folder:
    """`dest` opened by the rule above: its parent's parent as given (made where missing), then
    its parent and itself each without following a link, made where missing (with `make`),
    each a plain folder owned by this user. Refused otherwise; FileNotFoundError without
    `make` when a part is missing."""
    dest = Path(os.path.abspath(dest))
    anchor, runs = dest.parent.parent, dest.parent
    if make:
        anchor.mkdir(parents=True, exist_ok=True)
    afd = os.open(anchor, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | CLOEXEC)
    try:
        pfd = _open_part(afd, runs.name, str(runs), make)
    finally:
        os.close(afd)
    try:
        fd = _open_part(pfd, dest.name, str(dest), make)
    except BaseException:
        os.close(pfd)
        raise
    return Folder(dest, pfd, fd)


def write_file(dest: Path, name: str, data: bytes) -> None:
    """`dest/name` holds `data`, by the rule (for a provider's one-file writes: job.log)."""
    with open_folder(dest) as folder:
        folder.write(name, data)


def copy_file(dest: Path, name: str, src: Path) -> None:
    """`dest/name` holds a copy of gpu-router's own file `src`, by the rule (a metrics file a
    provider fetched into gpu-router's home first)."""
    with open_folder(dest) as folder:
        folder.write_from(name, src)


def check(dest: Path) -> None:
    """Refused when `dest` (runs/<id>) could not be written by the rule: opened, made where
    missing, and closed again."""
    open_folder(dest).close()


def ensure_ignored(runs: Path, text: str) -> None:
    """`runs/.gitignore` holds `text` unless something by that name is there already: made
    exclusively, without following a link, in a `runs/` checked like any destination's."""
    runs = Path(os.path.abspath(runs))
    runs.parent.mkdir(parents=True, exist_ok=True)
    afd = os.open(runs.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | CLOEXEC)
    try:
        rfd = _open_part(afd, runs.name, str(runs), True)
    finally:
        os.close(afd)
    try:
        try:
            fd = os.open(".gitignore", NEW_FILE, 0o644, dir_fd=rfd)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as f:
            f.write(text)
    finally:
        os.close(rfd)


def new_temp(dir_fd: int, base: str, mode: int = 0o644) -> tuple[str, int]:
    """A new file beside `base` in `dir_fd`, made with O_EXCL|O_NOFOLLOW under a random name
    (nothing planted can be it: an existing name, a link included, is skipped)."""
    for _ in range(100):
        name = f".{base[:200]}.tmp-{secrets.token_hex(6)}"
        try:
            return name, os.open(name, NEW_FILE, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", base)


def _rename_into(src_fd: int, src: str, dst_fd: int, dst: str, where: str) -> None:
    try:
        os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
    except OSError as exc:
        if isinstance(exc, (IsADirectoryError, NotADirectoryError)) or exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise Refused(where, "a folder is in the way") from None
        raise


def _unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def merge_at(src_fd: int, dst_fd: int) -> None:
    """Move every entry of the folder `src_fd` into `dst_fd`, both descriptors: a folder into a
    folder merges, anything else replaces what had the name (a link is replaced, never
    followed; a folder where a file goes is removed first)."""
    for name in sorted(os.listdir(src_fd)):
        st = _lstat(src_fd, name)
        if st is None:
            continue
        there = _lstat(dst_fd, name)
        if stat.S_ISDIR(st.st_mode) and there is not None and stat.S_ISDIR(there.st_mode):
            try:
                sfd = nofollow.open_dir_at(src_fd, name, name)
                try:
                    dfd = nofollow.open_dir_at(dst_fd, name, name)
                except BaseException:
                    os.close(sfd)  # else a descriptor stays open for each folder swapped
                    raise
            except nofollow.Refused:
                there = _lstat(dst_fd, name)  # swapped meanwhile: replaced below
            else:
                try:
                    merge_at(sfd, dfd)
                finally:
                    os.close(sfd)
                    os.close(dfd)
                continue
        if there is not None:
            if stat.S_ISDIR(there.st_mode):
                shutil.rmtree(name, dir_fd=dst_fd)
            elif stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=dst_fd)
        os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def move_between(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """The folder `src` in `src_fd` becomes `dst` in `dst_fd` (which must not hold it): one
    rename on one disk; across disks a copy into a fresh folder (files read through nofollow,
    written exclusively, times kept), renamed into place, then the source removed."""
    try:
        os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    tmp = f".{dst}.tmp-{secrets.token_hex(6)}"
    os.mkdir(tmp, 0o755, dir_fd=dst_fd)
    try:
        tfd = os.open(tmp, DIR_FLAGS, dir_fd=dst_fd)
        try:
            top = nofollow.open_dir_at(src_fd, src, src)
            try:
                _copy_tree(top, tfd)
            finally:
                os.close(top)
        finally:
            os.close(tfd)
        os.rename(tmp, dst, src_dir_fd=dst_fd, dst_dir_fd=dst_fd)
    except BaseException:
        shutil.rmtree(tmp, dir_fd=dst_fd, ignore_errors=True)
        raise
    shutil.rmtree(src, dir_fd=src_fd)


def _copy_tree(top: int, dst_fd: int) -> None:
    own = nofollow.owner(top)
    for entry in nofollow.walk(top):
        if entry.why is not None:
            continue  # what is not a plain file or folder is not copied
        parent, _, base = entry.rel.rpartition("/")
        dfd = nofollow.makedirs_at(dst_fd, parent) if parent else dst_fd
        try:
            rfd, st = nofollow.open_file(entry.dir_fd, entry.name, entry.rel, own)
            try:
                wfd = os.open(base, NEW_FILE, stat.S_IMODE(st.st_mode) or 0o644, dir_fd=dfd)
                try:
                    sparsefile.copy_fd(rfd, wfd)  # a sparse checkpoint keeps its holes
                    os.utime(wfd, ns=(st.st_atime_ns, st.st_mtime_ns))
                finally:
                    os.close(wfd)
            finally:
                os.close(rfd)
        finally:
            if dfd != dst_fd:
                os.close(dfd)
