"""The parts of the code-folder take-over and the object checks that mutmut found no test asking
about (issue 40 item 2; bench/README.md, "Mutation"): each test here fails on a survivor of the
mutation run over core/runtime/codetree.py (now codetree.py and objstore.py), and says what the rule is.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from core.runtime import codetree, objstore
from tests.codeobjects import store_obj
from tests.stubs import cwd_gone


def packed_store(objects: Path, members: list[tuple[str, bytes]]) -> None:
    """A pack holding `members` (digest, bytes) one after another, as a first big pack makes."""
    (objects / objstore.PACKS).mkdir(parents=True, exist_ok=True)
    tmp = objects / objstore.PACKS / ".new.pack"
    rows, offset = [], 0
    with open(tmp, "wb") as f:
        for digest, data in members:
            f.write(data)
            rows.append((digest, offset, len(data)))
            offset += len(data)
    objstore.publish_pack(str(objects), str(tmp), rows)


def test_an_empty_object_in_a_pack_is_built_from_the_pack(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    empty = hashlib.sha256(b"").hexdigest()
    full = hashlib.sha256(b"x = 1\n").hexdigest()
    packed_store(objects, [(empty, b""), (full, b"x = 1\n")])
    rows = [["__init__.py", "f", empty, 0], ["m.py", "f", full, 6]]
    for verify in (False, True):
        dest = tmp_path / f"code-{verify}"
        codetree.build(rows, str(objects), str(dest), verify=verify)
        assert (dest / "__init__.py").read_bytes() == b"" and (dest / "m.py").read_bytes() == b"x = 1\n"


def test_an_empty_packed_entry_under_another_objects_name_is_a_lie(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    claimed = hashlib.sha256(b"print('the real file')\n").hexdigest()
    packed_store(objects, [(claimed, b"")])
    with pytest.raises(codetree.BadObjects) as err:
        codetree.build([["a.py", "f", claimed, 23]], str(objects), str(tmp_path / "code"), verify=True)
    assert err.value.digests == [claimed]


def test_an_empty_loose_object_passes_the_verified_build(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    empty = store_obj(objects, b"")
    written = codetree.build([["__init__.py", "f", empty, 0]], str(objects), str(tmp_path / "code"), verify=True)
    assert written == 0 and (tmp_path / "code" / "__init__.py").read_bytes() == b""


def test_two_objects_of_one_prefix_folder_are_both_received(tmp_path: Path) -> None:
    first = b"object 0"
    prefix = hashlib.sha256(first).hexdigest()[:2]
    i = 1
    while hashlib.sha256(f"object {i}".encode()).hexdigest()[:2] != prefix:
        i += 1
    second = f"object {i}".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for data in (first, second):
            info = tarfile.TarInfo(hashlib.sha256(data).hexdigest())
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    got = objstore.receive(str(tmp_path), buf)
    assert got == [hashlib.sha256(first).hexdigest(), hashlib.sha256(second).hexdigest()]


class Pipe:
    """A stream that can only be read, as a host's stdin is."""

    def __init__(self, data: bytes) -> None:
        self._buf = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._buf.read(n)


def one_object_tar(data: bytes) -> bytes:
    """A tar stream of one object named by its hash, as `codetree.py receive` reads it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(hashlib.sha256(data).hexdigest())
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_receive_reads_a_stream_it_cannot_seek(tmp_path: Path) -> None:
    data = b"from stdin"
    assert objstore.receive(str(tmp_path), Pipe(one_object_tar(data))) == [hashlib.sha256(data).hexdigest()]


def donor(tmp_path: Path, rows_data: dict[str, bytes], links: dict[str, str]) -> tuple[Path, list, Path, str]:
    objects = tmp_path / "objects"
    rows = [[rel, "f", store_obj(objects, data), len(data)] for rel, data in rows_data.items()]
    rows += [[rel, "l", target, 0] for rel, target in links.items()]
    first = tmp_path / "jobs" / "one" / "code"
    codetree.build(rows, str(objects), str(first))
    return objects, rows, first, codetree.record_digest(str(first))


def inodes(top: Path) -> dict[str, int]:
    return {str(p.relative_to(top)): p.lstat().st_ino for p in sorted(top.rglob("*"))}


def test_a_folder_whose_names_are_not_utf8_is_taken_over(tmp_path: Path) -> None:
    name = os.fsdecode(b"caf\xe9.py")  # a Latin-1 name, as a project may hold
    objects, rows, first, pin = donor(tmp_path, {name: b"x = 1\n", "a.py": b"y = 2\n"}, {})
    before = inodes(first)
    second = tmp_path / "jobs" / "two" / "code"
    codetree.build(rows, str(objects), str(second), reuse=str(first), pin=pin)
    assert inodes(second) == before and not first.exists()


def test_a_link_to_a_folder_in_the_code_is_a_link_not_a_folder_to_enter(tmp_path: Path) -> None:
    objects, rows, first, pin = donor(tmp_path, {"pkg/m.py": b"m\n"}, {"alias": "pkg"})
    before = inodes(first)
    second = tmp_path / "jobs" / "two" / "code"
    codetree.build(rows, str(objects), str(second), reuse=str(first), pin=pin)
    assert inodes(second) == before and (second / "alias").is_symlink()


def test_a_take_over_makes_nothing_relative_to_the_working_folder(tmp_path: Path) -> None:
    """The claimed folder is renamed beside the new one, never to a name relative to the cwd
    (with the cwd gone, such a claim failed and nothing was taken over)."""
    objects, rows, first, pin = donor(tmp_path, {"a.py": b"a\n"}, {})
    before = inodes(first)
    second = tmp_path / "jobs" / "two" / "code"
    with cwd_gone(tmp_path):
        codetree.build(rows, str(objects), str(second), reuse=str(first), pin=pin)
    assert inodes(second) == before


REAL_IOCTL = fcntl.ioctl


class Reflinks:
    """`fcntl.ioctl` as a build sees it, counting the clones (FICLONE) it is asked for. `kind`:
    "kernel" asks this machine's file system itself (btrfs or XFS clone; only collected
    where the temporary folders' file system has reflinks); "copy" answers a clone as such a file system does,
    the destination made the source's bytes (copy_file_range, the kernel's own copy, with
    neither file's offset moved), so what the build then checks is real bytes on disk;
    "refuse" answers as ext4 does (EOPNOTSUPP). Any other request goes to the real ioctl, and
    a descriptor or request that is not one fails there as it would."""

    def __init__(self, kind: str) -> None:
        self.kind, self.calls = kind, 0

    def __call__(self, fd: int, request: int, arg: int = 0, *rest: object) -> object:
        if request != objstore.FICLONE:
            return REAL_IOCTL(fd, request, arg, *rest)
        self.calls += 1
        if self.kind == "kernel":
            return REAL_IOCTL(fd, request, arg, *rest)
        if self.kind == "refuse":
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        size, done = os.fstat(arg).st_size, 0
        while done < size:
            done += os.copy_file_range(arg, fd, size - done, done, done)
        return 0


def reflinks_here(folder: Path) -> bool:
    """Does the file system under `folder` clone (btrfs, XFS with reflink=1)?"""
    (folder / ".probe-src").write_bytes(b"probe")
    try:
        with open(folder / ".probe-src", "rb") as src, open(folder / ".probe-dst", "wb") as dst:
            REAL_IOCTL(dst.fileno(), objstore.FICLONE, src.fileno())
        return True
    except OSError:
        return False
    finally:
        for name in (".probe-src", ".probe-dst"):
            (folder / name).unlink(missing_ok=True)


# the kernel's own clone is asked where the temporary folders' file system has it (btrfs, XFS
# with reflink=1: `--basetemp` on one); on ext4 the case is not collected rather than skipped
_CLONES_HERE = ["kernel"] if reflinks_here(Path(tempfile.gettempdir())) else []


@pytest.fixture(params=["copy", *_CLONES_HERE])
def cloning(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Reflinks:
    """A file system that clones: this one where it does, and always the copying double."""
    clones = Reflinks(request.param)
    monkeypatch.setattr(objstore.fcntl, "ioctl", clones)
    return clones


def test_a_verified_build_on_reflinks_clones_each_object_and_checks_the_clone(
        tmp_path: Path, cloning: Reflinks) -> None:
    """Where the file system shares blocks, each copy is one clone and writes no bytes (what a
    build returns is the bytes it wrote), and the clone is what is hashed."""
    objects = tmp_path / "objects"
    files = {"a.py": b"print('a')\n", "pkg/b.py": b"b = 2\n" * 1000}
    rows = [[rel, "f", store_obj(objects, data), len(data)] for rel, data in files.items()]
    written = codetree.build(rows, str(objects), str(tmp_path / "code"), verify=True)
    assert written == 0 and cloning.calls == 2
    assert {rel: (tmp_path / "code" / rel).read_bytes() for rel in files} == files


def test_a_clone_of_an_object_rewritten_in_the_store_is_refused(tmp_path: Path, cloning: Reflinks) -> None:
    """A clone shares the rewritten bytes: the check on the clone refuses it, the copy goes, and
    the build names the object (removed from the store, to be sent again)."""
    objects = tmp_path / "objects"
    good = store_obj(objects, b"print('ORIGINAL')\n")
    obj = Path(objstore.object_path(str(objects), good))
    obj.write_bytes(b"print('TAMPERED')\n")
    dst = tmp_path / "copy.py"
    assert objstore.copy_verified(str(obj), str(dst), good, [True]) == -1
    assert cloning.calls == 1 and not dst.exists()
    with pytest.raises(codetree.BadObjects) as caught:
        codetree.build([["a.py", "f", good, 18]], str(objects), str(tmp_path / "code"), verify=True)
    assert caught.value.digests == [good] and not (tmp_path / "code").exists() and not obj.exists()


@pytest.mark.parametrize("verify", [False, True])
def test_a_file_system_without_reflinks_is_asked_once_per_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verify: bool) -> None:
    """The first refusal of a clone (ext4) makes the rest of the build copy bytes without asking
    again: a 20,000-file tree would otherwise pay 20,000 refused ioctls."""
    refusing = Reflinks("refuse")
    monkeypatch.setattr(objstore.fcntl, "ioctl", refusing)
    objects = tmp_path / "objects"
    files = {f"m{i}.py": f"m = {i}\n".encode() for i in range(3)}
    rows = [[rel, "f", store_obj(objects, data), len(data)] for rel, data in files.items()]
    written = codetree.build(rows, str(objects), str(tmp_path / "code"), verify=verify)
    assert refusing.calls == 1 and written == sum(map(len, files.values()))
    assert {rel: (tmp_path / "code" / rel).read_bytes() for rel in files} == files
    clone = [True]
    src = objstore.object_path(str(objects), rows[0][2])
    assert objstore.copy_verified(src, str(tmp_path / "one.py"), rows[0][2], clone) == len(files["m0.py"])
    assert clone == [False] and refusing.calls == 2


def test_a_take_over_into_a_folder_whose_name_is_not_utf8_is_noted(tmp_path: Path) -> None:
    """The note left beside a taken-over folder (`gpu fetch` reads that it was reused) names the
    new build's folder by its bytes: a path that is not UTF-8 (a Latin-1 home) made the note
    raise after the folder was claimed, so the build failed and the donor was left under its
    claimed name, where the next build's clean-up removes it."""
    base = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    objects, rows, first, pin = donor(base, {"a.py": b"a\n"}, {})
    before = inodes(first)
    second = base / "jobs" / "two" / "code"
    codetree.build(rows, str(objects), str(second), reuse=str(first), pin=pin)
    assert inodes(second) == before and not first.exists()
    assert Path(f"{first}.reused").read_bytes() == bytes(second.parent) + b"\n"


def test_an_object_arrives_where_the_temporary_folder_is_another_file_system(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each object is written beside its place in the store and renamed there: a host whose
    temporary folder is a tmpfs (or any other file system) receives it all the same, where a
    temporary made there could not be renamed into the store."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second file system for the temporary folder")
    other = Path(tempfile.mkdtemp(dir=shm))
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(other))
        data = b"print('received')\n"
        assert objstore.receive(str(tmp_path / "objects"), io.BytesIO(one_object_tar(data))) == [hashlib.sha256(data).hexdigest()]
        assert Path(objstore.object_path(str(tmp_path / "objects"), hashlib.sha256(data).hexdigest())).read_bytes() == data
        assert list(other.iterdir()) == []
    finally:
        shutil.rmtree(other, ignore_errors=True)


FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10


@contextlib.contextmanager
def undeletable(folder: Path) -> Iterator[None]:
    """Nothing in `folder` can be removed while inside: the folder made immutable (chattr +i)
    where the tests run as root (whom permissions do not stop), else made read-only."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = array.array("l", [0])
        try:
            fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags, True)
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, array.array("l", [flags[0] | FS_IMMUTABLE_FL]), True)
        except OSError as err:
            pytest.skip(f"this file system cannot make a folder immutable: {err}")
        try:
            yield
        finally:
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, flags, True)
    finally:
        os.close(fd)


def test_a_bytecode_cache_that_cannot_be_removed_leaves_the_folder_whole(tmp_path: Path) -> None:
    """A folder is taken over only once the `__pycache__` folders Python added are gone (a .pyc
    left behind would be loaded in place of a source): when one cannot be removed the folder
    goes back whole, for `gpu fetch`, and the new build makes its own."""
    objects, rows, first, pin = donor(tmp_path, {"pkg/m.py": b"m = 1\n"}, {})
    cache = first / "pkg" / "__pycache__"
    cache.mkdir()
    (cache / "m.cpython-311.pyc").write_bytes(b"bytecode")
    before = inodes(first)
    second = tmp_path / "jobs" / "two" / "code"
    with undeletable(cache):
        codetree.build(rows, str(objects), str(second), reuse=str(first), pin=pin)
    assert inodes(first) == before  # back where it was, with its cache
    assert (second / "pkg" / "m.py").read_bytes() == b"m = 1\n" and not (second / "pkg" / "__pycache__").exists()
    assert (second / "pkg" / "m.py").stat().st_ino != before["pkg/m.py"]


def test_a_verified_copy_is_made_only_as_a_new_file(tmp_path: Path) -> None:
    """A copy never writes through a name that exists: not a link to a file elsewhere (a job's
    write would land there), not a file already there (a hard link to the object in the store,
    whose bytes every later build copies)."""
    objects = tmp_path / "objects"
    digest = store_obj(objects, b"print('object')\n")
    src = objstore.object_path(str(objects), digest)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not the job's\n")
    (tmp_path / "link.py").symlink_to(outside)
    os.link(src, tmp_path / "hard.py")
    for name in ("link.py", "hard.py"):
        with pytest.raises(FileExistsError):
            objstore.copy_verified(src, str(tmp_path / name), digest, [False])
    assert outside.read_bytes() == b"not the job's\n"
    assert Path(src).read_bytes() == b"print('object')\n" and (tmp_path / "link.py").is_symlink()
