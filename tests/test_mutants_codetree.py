"""The parts of the code-folder take-over and the object checks that mutmut found no test asking
about (issue 40 item 2; bench/README.md, "Mutation"): each test here fails on a survivor of the
mutation run over core/runtime/codetree.py, and says what the rule is.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from core.runtime import codetree
from tests.codeobjects import store_obj


def packed_store(objects: Path, members: list[tuple[str, bytes]]) -> None:
    """A pack holding `members` (digest, bytes) one after another, as a first big pack makes."""
    (objects / codetree.PACKS).mkdir(parents=True, exist_ok=True)
    tmp = objects / codetree.PACKS / ".new.pack"
    rows, offset = [], 0
    with open(tmp, "wb") as f:
        for digest, data in members:
            f.write(data)
            rows.append((digest, offset, len(data)))
            offset += len(data)
    codetree.publish_pack(str(objects), str(tmp), rows)


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
    got = codetree.receive(str(tmp_path), buf)
    assert got == [hashlib.sha256(first).hexdigest(), hashlib.sha256(second).hexdigest()]


class Pipe:
    """A stream that can only be read, as a host's stdin is."""

    def __init__(self, data: bytes) -> None:
        self._buf = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._buf.read(n)


def test_receive_reads_a_stream_it_cannot_seek(tmp_path: Path) -> None:
    data = b"from stdin"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(hashlib.sha256(data).hexdigest())
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert codetree.receive(str(tmp_path), Pipe(buf.getvalue())) == [hashlib.sha256(data).hexdigest()]


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
    here = os.getcwd()
    gone = tmp_path / "cwd"
    gone.mkdir()
    os.chdir(gone)
    try:
        gone.rmdir()
        second = tmp_path / "jobs" / "two" / "code"
        codetree.build(rows, str(objects), str(second), reuse=str(first), pin=pin)
    finally:
        os.chdir(here)
    assert inodes(second) == before
