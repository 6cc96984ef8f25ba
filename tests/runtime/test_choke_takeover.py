"""The code-folder take-over, one test per part of the rule (issue 40; core/runtime/codetree.py
`build(reuse=, pin=, verify=)`, `receive`, and core/providers/remote.py `take_over_args`,
`_keep_code_record`, `_code_record`; docs/targets/ssh-slurm-pbs.md):

- the engine asks for a take-over only where the job runs sandboxed, only of another job's
  folder, and only with the record's hash kept at home; without that hash there is none;
- a record whose bytes do not hash to that pin is never trusted: the folder it describes is
  left where it is, whole, and the new job's folder is a fresh build;
- an untouched folder with the right pin is taken over (the same inodes), its job's ready
  mark goes, and the folder says where it went;
- objects that lie about their hash are rejected: `receive` places only bytes that hash to
  their name; a `--verify` build removes every object (loose or packed) whose bytes are not
  its name, names them all and builds nothing (exit 4 on the command line).

Quick: real folders and objects, no host.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.codeobjects import store_obj
from tests.props import examples

from core import paths
from core.providers import remote
from core.runtime import codetree, objstore

PIN = "a" * 64


# -- the engine's choice ------------------------------------------------------------------------

@pytest.mark.parametrize("sandboxed", [True, False])
@pytest.mark.parametrize("donor", [None, "", "self", "other"])
@pytest.mark.parametrize("kept", [None, "", PIN])
def test_a_take_over_is_asked_only_sandboxed_of_another_job_with_its_kept_hash(
        sandboxed: bool, donor: str | None, kept: str | None) -> None:
    asked: list[str] = []

    def lookup(job_id: str) -> str | None:
        asked.append(job_id)
        return kept

    got = remote.take_over_args("/r", "self", donor, sandboxed, lookup)
    if sandboxed and donor == "other" and kept:
        assert got == ["/r/jobs/other/code", PIN]
    else:
        assert got == []
    assert asked == (["other"] if sandboxed and donor == "other" else [])


@pytest.fixture
def provider(home: Path) -> remote.RemoteProvider:
    """The methods that keep and read the record's hash need no host."""
    bare = type("Bare", (remote.RemoteProvider,),
                {name: (lambda *a, **k: None) for name in remote.RemoteProvider.__abstractmethods__})
    return bare.__new__(bare)


class _Job:
    def __init__(self, job_id: str) -> None:
        self.id = job_id


def test_the_hash_a_build_printed_is_kept_at_home_and_read_back(provider) -> None:
    out = f"preparing\ncode-build {json.dumps({'bytes': 10, 'record': PIN})}\ndone\n"
    provider._keep_code_record(_Job("j1"), out)
    assert (paths.jobs_dir() / "j1" / "code.record").read_text() == PIN + "\n"
    assert provider._code_record("j1") == PIN


@pytest.mark.parametrize("line", [
    'code-build {"bytes": 10, "record": null}',  # no record: the build wrote none
    'code-build {"bytes": 10, "record": 7}',
    "code-build not json",
    'code-build ["a list"]',
])
def test_a_build_line_without_a_hash_keeps_none(provider, line: str) -> None:
    provider._keep_code_record(_Job("j2"), line + "\n")
    assert (paths.jobs_dir() / "j2" / "code.record").read_text() == ""
    assert provider._code_record("j2") is None


@pytest.mark.parametrize("text", ["", "a" * 63, "a" * 65, "A" * 64, "g" * 64, "X" * 64, " " + "a" * 63])
def test_a_kept_hash_that_is_not_64_lowercase_hex_is_no_hash(provider, text: str) -> None:
    f = paths.jobs_dir() / "j3" / "code.record"
    f.parent.mkdir(parents=True)
    f.write_text(text)
    assert provider._code_record("j3") is None


def test_no_kept_hash_file_is_no_hash(provider) -> None:
    assert provider._code_record("never-built") is None


def test_a_kept_hash_with_its_newline_is_read(provider) -> None:
    f = paths.jobs_dir() / "j4" / "code.record"
    f.parent.mkdir(parents=True)
    f.write_text("0123456789abcdef" * 4 + "\n")
    assert provider._code_record("j4") == "0123456789abcdef" * 4


def test_a_build_line_is_found_among_others_and_keeps_the_last(provider) -> None:
    out = "code-build " + json.dumps({"record": "b" * 64}) + "\ncode-build " + json.dumps({"record": PIN})
    provider._keep_code_record(_Job("j5"), out)
    assert provider._code_record("j5") == PIN


def test_no_build_line_keeps_nothing(provider) -> None:
    provider._keep_code_record(_Job("j6"), "the folder was ready\n")
    assert not (paths.jobs_dir() / "j6" / "code.record").exists()


# -- the build's side: the pin -----------------------------------------------------------------

def project(objects: Path) -> list[list]:
    rows = []
    for rel, data in {"a.py": b"print(1)\n", "pkg/b.py": b"x = 2\n", "pkg/c.txt": b"c" * 40}.items():
        rows.append([rel, "f", store_obj(objects, data), len(data)])
    rows.append(["ln", "l", "a.py", 0])
    return rows


def snapshot(top: Path) -> dict:
    out = {}
    for p in sorted(top.rglob("*")):
        st_ = p.lstat()
        rel = str(p.relative_to(top))
        out[rel] = (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir",
                    st_.st_ino, st_.st_ctime_ns)
    return out


@pytest.fixture
def donor(tmp_path: Path):
    """An ended job's folder, built, with its ready mark, and the hash of its record."""
    objects = tmp_path / "objects"
    rows = project(objects)
    first = tmp_path / "jobs" / "one" / "code"
    codetree.build(rows, str(objects), str(first))
    (first.parent / codetree.READY).touch()
    return objects, rows, first, codetree.record_digest(str(first))


def test_the_kept_hash_is_the_records_bytes_hashed(donor) -> None:
    objects, rows, first, pin = donor
    assert pin == hashlib.sha256(Path(f"{first}.tree").read_bytes()).hexdigest()
    doc = json.loads(Path(f"{first}.tree").read_text())
    assert doc["version"] == 1 and [r[:3] for r in doc["rows"]] == [r[:3] for r in rows]


def test_an_untouched_folder_with_its_pin_is_taken_over(donor, tmp_path: Path) -> None:
    objects, rows, first, pin = donor
    before = snapshot(first)
    second = tmp_path / "jobs" / "two" / "code"
    codetree.build(rows, str(objects), str(second), reuse=str(first), pin=pin)
    assert snapshot(second) == before  # the same inodes: taken over, nothing rewritten
    assert not first.exists() and not Path(f"{first}.tree").exists()
    assert not (first.parent / codetree.READY).exists()  # its job, if resumed, builds again
    assert Path(f"{first}.reused").read_text() == str(second.parent) + "\n"


@pytest.mark.parametrize("pin", ["b" * 64, "", "0" * 64])
def test_a_pin_that_is_not_the_records_hash_is_never_trusted(donor, tmp_path: Path, pin: str) -> None:
    objects, rows, first, right = donor
    before = snapshot(first)
    record = Path(f"{first}.tree").read_bytes()
    second = tmp_path / "jobs" / "two" / "code"
    codetree.build(rows, str(objects), str(second), reuse=str(first), pin=pin)
    assert snapshot(first) == before and Path(f"{first}.tree").read_bytes() == record
    assert (first.parent / codetree.READY).exists()
    assert not Path(f"{first}.reused").exists()
    fresh = snapshot(second)
    assert {k: v[0] for k, v in fresh.items()} == {k: v[0] for k, v in before.items()}
    assert all(fresh[k][1] != before[k][1] for k in fresh)  # a fresh build: new inodes


_EDITS = ["space", "reorder", "version", "row-dropped", "not-json", "empty"]


@pytest.mark.parametrize("edit", _EDITS)
def test_a_record_rewritten_in_any_way_is_refused_under_its_pin(donor, tmp_path: Path, edit: str) -> None:
    """Even a rewrite that describes the folder as it is (the same rows, re-spaced) has other
    bytes: the pin refuses it and the folder is left whole."""
    objects, rows, first, pin = donor
    tree = Path(f"{first}.tree")
    doc = json.loads(tree.read_text())
    text = {"space": json.dumps(doc, indent=1),
            "reorder": json.dumps({"rows": doc["rows"], "version": 1}, separators=(",", ":")),
            "version": json.dumps({**doc, "version": 2}),
            "row-dropped": json.dumps({**doc, "rows": doc["rows"][1:]}),
            "not-json": "{",
            "empty": ""}[edit]
    tree.write_text(text)
    before = snapshot(first)
    second = tmp_path / "jobs" / "two" / "code"
    codetree.build(rows, str(objects), str(second), reuse=str(first), pin=pin)
    assert snapshot(first) == before
    assert tree.read_text() == text
    assert all(snapshot(second)[k][1] != before[k][1] for k in before)


@pytest.mark.parametrize("edit", ["version", "not-json", "empty", "rows-not-list"])
def test_without_a_pin_a_malformed_record_is_not_trusted_either(donor, tmp_path: Path, edit: str) -> None:
    objects, rows, first, _ = donor
    tree = Path(f"{first}.tree")
    doc = json.loads(tree.read_text())
    tree.write_text({"version": json.dumps({**doc, "version": 2}), "not-json": "{", "empty": "",
                     "rows-not-list": json.dumps({"version": 1, "rows": 5})}[edit])
    before = snapshot(first)
    second = tmp_path / "jobs" / "two" / "code"
    codetree.build(rows, str(objects), str(second), reuse=str(first))
    assert snapshot(first) == before


def test_a_folder_without_a_record_is_not_taken_over(donor, tmp_path: Path) -> None:
    objects, rows, first, pin = donor
    Path(f"{first}.tree").unlink()
    before = snapshot(first)
    codetree.build(rows, str(objects), str(tmp_path / "jobs" / "two" / "code"), reuse=str(first), pin=pin)
    assert snapshot(first) == before


def test_a_changed_folder_with_the_right_pin_is_left_whole(donor, tmp_path: Path) -> None:
    objects, rows, first, pin = donor
    (first / "pkg" / "b.py").write_bytes(b"x = 'the job wrote this'\n")
    before = snapshot(first)
    second = tmp_path / "jobs" / "two" / "code"
    codetree.build(rows, str(objects), str(second), reuse=str(first), pin=pin)
    assert snapshot(first) == before
    assert not Path(f"{first}.tree").exists()  # checked once, it is never trusted again
    assert (second / "pkg" / "b.py").read_bytes() == b"x = 2\n"
    assert (first.parent / codetree.READY).exists()


def test_a_job_cannot_take_over_its_own_folder_through_a_build(donor) -> None:
    """A folder that exists is never built over: the command line leaves it as it is."""
    objects, rows, first, pin = donor
    manifest = first.parent / "m.json"
    manifest.write_text(json.dumps({"version": 1, "entries": rows}))
    before = snapshot(first)
    assert codetree.main(["codetree.py", "build", str(manifest), str(objects), str(first), str(first), pin]) == 0
    assert snapshot(first) == before


# -- objects that lie ------------------------------------------------------------------------------

def tar_of(members: list[tuple[str, bytes]]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=64), lies=st.booleans(), prefix=st.sampled_from(["", "objects/", "../"]))
def test_receive_places_an_object_only_when_its_bytes_are_its_name(data: bytes, lies: bool, prefix: str) -> None:
    objects = Path(tempfile.mkdtemp(prefix="takeover-recv-"))
    try:
        truth = hashlib.sha256(data).hexdigest()
        name = hashlib.sha256(data + b"!").hexdigest() if lies else truth
        stream = tar_of([(prefix + name, data)])
        if lies:
            with pytest.raises(ValueError) as err:
                objstore.receive(str(objects), stream)
            assert str(err.value) == f"object {name[:12]} arrived with other content: refused"
            assert [p for p in objects.rglob("*") if p.is_file()] == []
        else:
            assert objstore.receive(str(objects), stream) == [truth]
            placed = Path(objstore.object_path(str(objects), truth))
            assert placed.read_bytes() == data and placed.stat().st_mode & 0o777 == 0o444
            assert [p for p in objects.rglob("*") if p.is_file()] == [placed]
    finally:
        shutil.rmtree(objects)


def test_receive_skips_members_that_are_not_objects(tmp_path: Path) -> None:
    data = b"payload"
    good = hashlib.sha256(data).hexdigest()
    stream = tar_of([("README", b"x"), (good.upper(), data), (good[:63], data), (good + "0", data),
                     (good, data)])
    assert objstore.receive(str(tmp_path), stream) == [good]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == \
        [f"{good[:2]}/{good[2:]}"]


def test_receive_of_an_object_already_there_keeps_it(tmp_path: Path) -> None:
    data = b"payload"
    good = store_obj(tmp_path, data)
    assert objstore.receive(str(tmp_path), tar_of([(good, data)])) == []
    assert Path(objstore.object_path(str(tmp_path), good)).read_bytes() == data


def test_a_verified_build_names_every_lying_object_removes_them_and_builds_nothing(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    rows = project(objects)
    lying = [rows[0][2], rows[2][2]]
    for digest in lying:
        p = Path(objstore.object_path(str(objects), digest))
        p.write_bytes(b"rewritten by a job\n")
    dest = tmp_path / "code"
    with pytest.raises(codetree.BadObjects) as err:
        codetree.build(rows, str(objects), str(dest), verify=True)
    assert err.value.digests == sorted(lying)
    assert str(err.value) == (f"2 object(s) in the store do not match their hash "
                              f"({', '.join(d[:12] for d in sorted(lying))}): removed, to be sent again")
    assert not dest.exists()
    assert [os.path.exists(objstore.object_path(str(objects), r[2])) for r in rows[:3]] == [False, True, False]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".code-")] == []


def test_a_verified_build_of_honest_objects_is_the_unverified_build(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    rows = project(objects)
    a, b = tmp_path / "a" / "code", tmp_path / "b" / "code"
    assert codetree.build(rows, str(objects), str(a), verify=True) >= 0
    codetree.build(rows, str(objects), str(b))
    assert {k: v[0] for k, v in snapshot(a).items()} == {k: v[0] for k, v in snapshot(b).items()}


def test_a_verified_build_checks_objects_in_packs_too(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    good, lie = b"honest\n", b"a lie\n"
    digests = [hashlib.sha256(good).hexdigest(), hashlib.sha256(b"what it claims\n").hexdigest()]
    (objects / objstore.PACKS).mkdir(parents=True)
    tmp_pack = objects / objstore.PACKS / ".new.pack"
    tmp_pack.write_bytes(good + lie)
    objstore.publish_pack(str(objects), str(tmp_pack), [(digests[0], 0, len(good)), (digests[1], len(good), len(lie))])
    rows = [["g.txt", "f", digests[0], len(good)], ["l.txt", "f", digests[1], len(lie)]]
    with pytest.raises(codetree.BadObjects) as err:
        codetree.build(rows, str(objects), str(tmp_path / "code"), verify=True)
    assert err.value.digests == [digests[1]]
    assert not (tmp_path / "code").exists()


def test_copy_verified_says_minus_one_and_leaves_no_copy_for_a_lie(tmp_path: Path) -> None:
    src = tmp_path / "obj"
    src.write_bytes(b"bytes")
    right = hashlib.sha256(b"bytes").hexdigest()
    assert objstore.copy_verified(str(src), str(tmp_path / "ok"), right, [False]) == 5
    assert (tmp_path / "ok").read_bytes() == b"bytes"
    assert objstore.copy_verified(str(src), str(tmp_path / "bad"), "0" * 64, [False]) == -1
    assert not (tmp_path / "bad").exists()
    assert objstore.copy_verified(str(src), str(tmp_path / "bad2"), "0" * 64, [True]) == -1
    assert not (tmp_path / "bad2").exists()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert objstore.copy_verified(str(fifo), str(tmp_path / "f"), right, [False]) == -1
    assert not (tmp_path / "f").exists()


def test_the_command_line_says_the_lying_objects_and_exits_4(tmp_path: Path, capsys) -> None:
    objects = tmp_path / "objects"
    rows = project(objects)
    Path(objstore.object_path(str(objects), rows[1][2])).write_bytes(b"lie")
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"version": 1, "entries": rows}))
    dest = tmp_path / "code"
    assert codetree.main(["codetree.py", "build", "--verify", str(manifest), str(objects), str(dest)]) == 4
    out, err = capsys.readouterr()
    assert json.loads(out) == {"bad": [rows[1][2]]}
    assert err == f"codetree: 1 object(s) in the store do not match their hash ({rows[1][2][:12]}): removed, to be sent again\n"
    store_obj(objects, b"x = 2\n")
    assert codetree.main(["codetree.py", "build", "--verify", str(manifest), str(objects), str(dest)]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out) == {"bytes": json.loads(out)["bytes"], "record": codetree.record_digest(str(dest))}
    assert len(json.loads(out)["record"]) == 64


def test_the_command_line_passes_the_folder_and_pin_to_the_take_over(donor, tmp_path: Path, capsys) -> None:
    objects, rows, first, pin = donor
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"version": 1, "entries": rows}))
    before = snapshot(first)
    dest = tmp_path / "jobs" / "two" / "code"
    assert codetree.main(["codetree.py", "build", "--verify", str(manifest), str(objects), str(dest),
                          str(first), "b" * 64]) == 0
    assert snapshot(first) == before  # the wrong pin: not taken over
    capsys.readouterr()
    dest3 = tmp_path / "jobs" / "three" / "code"
    assert codetree.main(["codetree.py", "build", "--verify", str(manifest), str(objects), str(dest3),
                          str(first), pin]) == 0
    assert snapshot(dest3) == before and not first.exists()


def test_receive_skips_a_folder_or_link_named_like_an_object(tmp_path: Path) -> None:
    data = b"payload"
    good = hashlib.sha256(data).hexdigest()
    other = hashlib.sha256(b"other").hexdigest()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        d = tarfile.TarInfo(other)
        d.type = tarfile.DIRTYPE
        tar.addfile(d)
        ln = tarfile.TarInfo(hashlib.sha256(b"x").hexdigest())
        ln.type = tarfile.SYMTYPE
        ln.linkname = "/etc/passwd"
        tar.addfile(ln)
        info = tarfile.TarInfo(good)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    assert objstore.receive(str(tmp_path), buf) == [good]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if not p.is_dir()) == \
        [f"{good[:2]}/{good[2:]}"]


def test_a_verified_build_of_many_files_names_every_lie_and_keeps_modes(tmp_path: Path) -> None:
    """Past 64 files the copies run on threads: every lie is still found and named once."""
    objects = tmp_path / "objects"
    rows = []
    for i in range(70):
        data = f"file {i}\n".encode()
        rows.append([f"d{i % 3}/f{i}.py", "x" if i % 2 else "f", store_obj(objects, data), len(data)])
    for i in (5, 40, 69):
        Path(objstore.object_path(str(objects), rows[i][2])).write_bytes(b"a lie\n")
    with pytest.raises(codetree.BadObjects) as err:
        codetree.build(rows, str(objects), str(tmp_path / "code"), verify=True, workers=4)
    assert err.value.digests == sorted(rows[i][2] for i in (5, 40, 69))
    assert [os.path.exists(objstore.object_path(str(objects), rows[i][2])) for i in (4, 5, 40, 69)] == \
        [True, False, False, False]
    for i in (5, 40, 69):
        store_obj(objects, f"file {i}\n".encode())
    written = codetree.build(rows, str(objects), str(tmp_path / "code"), verify=True, workers=4)
    modes = {r[0]: (tmp_path / "code" / r[0]).stat().st_mode & 0o777 for r in rows}
    assert modes == {r[0]: 0o755 if r[1] == "x" else 0o644 for r in rows}
    assert all((tmp_path / "code" / r[0]).read_text() == f"file {i}\n" for i, r in enumerate(rows))
    assert written in (0, sum(r[3] for r in rows))  # bytes copied, or none where blocks are shared
