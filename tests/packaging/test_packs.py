"""A big pack at home: objects in pack files, the work spread over helper processes
(core/packaging/spread.py, core/packaging/filework.py, objstore's packs, cachescan's gc)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from core import paths
from core.errors import UserError
from core.packaging import bundle as bundle_mod, filework, objects, spread
from core.packaging.bundle import make_bundle
from core.runtime import cachescan, objstore
from tests.conftest import make_git_project

AWS_COPY = ("[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")


def _tree(n: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    files = {f"src/pkg{i // 50}/m{i}.py": f"X = {i}\n" + "# padding line\n" * (i % 7) for i in range(n)}
    files["train.py"] = "print('train')\n"
    files["run.sh"] = "#!/bin/sh\necho hi\n"
    return {**files, **(extra or {})}


@pytest.fixture
def spread_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Helpers for a few hundred files (the real thresholds want thousands), on any machine."""
    monkeypatch.setattr(spread, "MIN_JOBS", 40)
    monkeypatch.setattr(spread, "CHUNK_JOBS", 8)
    monkeypatch.setattr(spread.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)


def _settle(project: Path) -> None:
    """Files written an hour ago: the stat cache keeps only hashes of files that have settled."""
    old = time.time() - 3600
    for f in project.rglob("*"):
        if ".git" not in f.parts:
            os.utime(f, (old, old), follow_symlinks=False)


def _loose(store: Path) -> list[Path]:
    return [p for p in store.rglob("*") if p.is_file() and objstore.PACKS not in p.relative_to(store).parts]


def _children() -> set[int]:
    """This process's helper processes still alive (or not yet reaped)."""
    me = str(os.getpid())
    kids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if ((d / "stat").read_text().rsplit(")", 1)[1].split()[1] == me
                        and b"spread import serve" in (d / "cmdline").read_bytes()):
                    kids.add(int(d.name))
            except (OSError, IndexError):
                pass
    return kids


def test_a_big_pack_goes_into_pack_files_and_every_reader_finds_it(home: Path, tmp_path: Path,
                                                                  spread_small: None) -> None:
    files = _tree(300)
    project = make_git_project(tmp_path / "p", files)
    os.chmod(project / "run.sh", 0o755)
    _settle(project)
    b = make_bundle(project)
    store = paths.objects_dir()
    assert b.packed and b.files == len(files)
    assert list((store / objstore.PACKS).glob("*.idx")) and not _loose(store)
    # the job's code folder, built from the packs
    code = tmp_path / "job" / "code"
    objects.materialize(b.hash, code)
    for rel, text in files.items():
        assert (code / rel).read_text() == text, rel
    assert os.access(code / "run.sh", os.X_OK) and not os.access(code / "train.py", os.X_OK)
    # what a host is sent: each object named by its hash, with its own bytes
    digests = objects.digests(b.hash)
    buf = io.BytesIO()
    objects.object_stream(digests, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar}
    assert set(got) == set(digests)
    assert all(hashlib.sha256(data).hexdigest() == name for name, data in got.items())
    # a person's tar of the bundle
    with tarfile.open(objects.archive(b.hash)) as tar:
        assert tar.extractfile("train.py").read() == b"print('train')\n"
    # the next submit finds them all (nothing read again), and one change stores one loose file
    assert objects.reuse_objects(digests) == set()
    (project / "train.py").write_text("print('changed')\n")
    again = make_bundle(project)
    assert again.packed and [p.read_bytes() for p in _loose(store)] == [b"print('changed')\n"]


def test_packed_objects_come_out_loose_for_a_reader_of_files(home: Path, tmp_path: Path) -> None:
    """Modal's mount takes files: `loosen` copies a packed object out, bytes and all."""
    project = make_git_project(tmp_path / "p", _tree(100))
    b = make_bundle(project)
    digests = objects.digests(b.hash)
    assert not objects.object_file(digests[0]).exists()
    objects.loosen(digests)
    for d in digests:
        data = objects.object_file(d).read_bytes()
        assert hashlib.sha256(data).hexdigest() == d and data == objects.read_object(d)


def test_spread_pack_is_the_same_bundle_as_one_process(home: Path, tmp_path: Path, spread_small: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    files = _tree(400, {"conf/settings.yaml": AWS_COPY})
    spread_home = paths.home()
    project = make_git_project(tmp_path / "p", files)
    b = make_bundle(project)
    packs = list((paths.objects_dir() / objstore.PACKS).glob("*.pack"))
    assert len(packs) >= 1
    assert "conf/settings.yaml" in {i["path"] for i in b.left_out}  # judged on whichever core
    monkeypatch.setenv(spread.OFF_VAR, "0")
    monkeypatch.setenv("GPU_ROUTER_HOME", str(tmp_path / "home-one"))
    one = make_bundle(project)
    assert one.hash == b.hash and one.left_out == b.left_out
    assert len(list((paths.objects_dir() / objstore.PACKS).glob("*.pack"))) == 1
    assert paths.home() != spread_home


# -- spread.run: the queue, helpers that fail, errors ----------------------------------------

def echo_pid(context: dict, job: list) -> list:
    """A job for the tests below: which process did it (slow enough that a helper gets some)."""
    time.sleep(context.get("sleep", 0.0))
    if context.get("crash_in_helper") and os.getpid() != context["parent"]:
        raise RuntimeError("a fault in the helper only")
    if context.get("die_in_helper") and os.getpid() != context["parent"]:
        os._exit(3)
    if context.get("print_in_helper") and os.getpid() != context["parent"]:
        print("a stray line on the helper's stdout", flush=True)
    if context.get("answer_bytes"):
        return [job[0], os.getpid(), "r" * context["answer_bytes"]]
    if job[0] == context.get("refuse"):
        raise UserError(f"job {job[0]} refused", fix="do something else")
    return [job[0], os.getpid()]


def test_helpers_take_their_share_and_results_keep_job_order(spread_small: None) -> None:
    jobs = [[i] for i in range(200)]
    out = spread.run(echo_pid, {"sleep": 0.01, "parent": os.getpid()}, jobs)
    assert [r[0] for r in out] == list(range(200))
    pids = {r[1] for r in out}
    assert os.getpid() in pids and len(pids) >= 2  # this process and a helper both worked
    assert not _children()  # helpers are gone when it returns


@pytest.mark.parametrize("fault", ["crash_in_helper", "die_in_helper", "print_in_helper"])
def test_a_helper_that_fails_costs_only_time(spread_small: None, fault: str) -> None:
    jobs = [[i] for i in range(120)]
    out = spread.run(echo_pid, {"sleep": 0.005, "parent": os.getpid(), fault: True}, jobs)
    assert [r[0] for r in out] == list(range(120))
    assert {r[1] for r in out} == {os.getpid()}  # every job was done here in the end
    assert not _children()


def test_long_jobs_and_long_answers_never_deadlock() -> None:
    """Chunks and answers far bigger than a pipe holds: neither side blocks writing while the
    other does (run in a child with a deadline, so a regression fails instead of hanging)."""
    code = ("import os, sys; sys.path.insert(0, %r)\n"
            "from core.packaging import spread\n"
            "from tests.packaging.test_packs import echo_pid\n"
            "spread.MIN_JOBS = 40\n"
            "os.sched_getaffinity = lambda pid: {0, 1}\n"
            "jobs = [[i, 'a' * 20000] for i in range(600)]\n"
            "out = spread.run(echo_pid, {'parent': os.getpid(), 'answer_bytes': 20000}, jobs)\n"
            "assert [r[0] for r in out] == list(range(600)) and all(len(r[2]) == 20000 for r in out)\n"
            "print(len({r[1] for r in out}))\n") % str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 1


def test_a_user_error_in_any_process_stops_the_run(spread_small: None) -> None:
    jobs = [[i] for i in range(200)]
    for refuse in (3, 150):  # the front of the queue goes to a helper, the back stays here
        with pytest.raises(UserError) as err:
            spread.run(echo_pid, {"sleep": 0.01, "parent": os.getpid(), "refuse": refuse}, jobs)
        assert err.value.what == f"job {refuse} refused" and err.value.fix == "do something else"
        assert not _children()


def test_the_helper_never_imports_the_projects_own_code(home: Path, tmp_path: Path, spread_small: None,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A project with its own `core` package: the helper starts in / with -P, so it imports
    gpu-router's, never the one in the folder being packed."""
    marker = tmp_path / "imported"
    trap = f"open({str(marker)!r}, 'w').close()\n"
    files = _tree(200, {"core/__init__.py": trap, "core/packaging/__init__.py": trap,
                        "core/packaging/spread.py": trap + "def serve():\n    pass\n"})
    project = make_git_project(tmp_path / "p", files)
    monkeypatch.chdir(project)
    monkeypatch.setenv("PYTHONPATH", str(project))
    b = make_bundle(project)
    assert b.packed and not marker.exists()


def test_an_interrupt_mid_pack_leaves_no_pack_and_no_helper(home: Path, tmp_path: Path, spread_small: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    project = make_git_project(tmp_path / "p", _tree(300))
    real = filework._check_packed_content
    calls = [0]

    def interrupted(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 30:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(filework, "_check_packed_content", interrupted)
    with pytest.raises(KeyboardInterrupt):
        make_bundle(project)
    store = paths.objects_dir()
    assert [p for p in store.rglob("*") if p.is_file()] == []
    assert list(paths.bundles_dir().iterdir()) == []
    assert not _children()


def test_a_credential_written_while_packing_stops_the_pack(home: Path, tmp_path: Path,
                                                           spread_small: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The packer judges the bytes it stores (in a helper as here): a file that became a
    credential after the listing judged it stops the pack, and nothing of it is kept."""
    project = make_git_project(tmp_path / "p", _tree(300))
    real_store = bundle_mod._store_objects

    def rewrite_then_store(listing, todo, cache, tick):
        (project / todo[1].rel).write_text(AWS_COPY)  # near the front: a helper's share
        (project / todo[-1].rel).write_text(AWS_COPY)  # the back: this process's
        return real_store(listing, todo, cache, tick)

    monkeypatch.setattr(bundle_mod, "_store_objects", rewrite_then_store)
    with pytest.raises(UserError, match="changed while packing and is now withheld"):
        make_bundle(project)
    assert [p for p in paths.objects_dir().rglob("*") if p.is_file()] == []
    assert list(paths.bundles_dir().iterdir()) == []


# -- gc -------------------------------------------------------------------------------------

def _age_everything(store: Path) -> None:
    old = time.time() - 2 * cachescan.MIN_AGE_S
    for p in store.rglob("*"):
        os.utime(p, (old, old))


def test_gc_removes_a_pack_no_manifest_needs(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", _tree(100))
    b = make_bundle(project)
    store = paths.objects_dir()
    _age_everything(store)
    row = next(r for r in cachescan.scan(str(home)) if r["kind"] == "bundle" and r["key"] == b.hash)
    assert row["bytes"] >= sum(size for *_, size in objects.entries(b.hash))  # its objects count
    cachescan.evict(str(home), [row["path"]], cachescan.MIN_AGE_S)
    assert list((store / objstore.PACKS).iterdir()) == []


def test_gc_dissolves_a_mostly_dead_pack_and_keeps_a_mostly_live_one(home: Path, tmp_path: Path) -> None:
    big = {f"data/d{i}.txt": f"{i}\n" * 2000 for i in range(70)}
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n", **big})
    first = make_bundle(project)
    store = paths.objects_dir()
    [pack] = (store / objstore.PACKS).glob("*.pack")
    # the second bundle keeps 10 of the 70 data files: the first pack is mostly dead after it
    for i in range(10, 70):
        (project / f"data/d{i}.txt").unlink()
    second = make_bundle(project)
    _age_everything(store)
    row = next(r for r in cachescan.scan(str(home)) if r["kind"] == "bundle" and r["key"] == first.hash)
    cachescan.evict(str(home), [row["path"]], cachescan.MIN_AGE_S)
    assert not pack.exists() and not list((store / objstore.PACKS).iterdir())
    code = tmp_path / "code"
    objects.materialize(second.hash, code)  # its objects were made loose first
    assert (code / "data" / "d3.txt").read_text() == "3\n" * 2000
    # a pack most of whose bytes are live stays
    project2 = make_git_project(tmp_path / "p2", _tree(100))
    _settle(project2)
    kept = make_bundle(project2)
    (project2 / "train.py").write_text("print(2)\n")
    make_bundle(project2)
    _age_everything(store)
    row = next(r for r in cachescan.scan(str(home)) if r["kind"] == "bundle" and r["key"] == kept.hash)
    cachescan.evict(str(home), [row["path"]], cachescan.MIN_AGE_S)
    assert len(list((store / objstore.PACKS).glob("*.pack"))) == 1


def test_gc_leaves_a_pack_used_lately(home: Path, tmp_path: Path) -> None:
    """A submit that reuses packed objects touches their pack before its manifest exists."""
    project = make_git_project(tmp_path / "p", _tree(100))
    b = make_bundle(project)
    store = paths.objects_dir()
    digests = objects.digests(b.hash)
    paths.bundles_dir().joinpath(f"{b.hash}.json").unlink()  # no manifest names them now
    _age_everything(store)
    assert objects.reuse_objects(digests) == set()  # what a submit does: the pack is touched
    entry = [r for r in cachescan.scan(str(home)) if r["kind"] == "objects"]
    cachescan.evict(str(home), [entry[0]["path"]], cachescan.MIN_AGE_S)
    assert len(list((store / objstore.PACKS).glob("*.pack"))) == 1
    _age_everything(store)
    cachescan.evict(str(home), [entry[0]["path"]], cachescan.MIN_AGE_S)
    assert list((store / objstore.PACKS).iterdir()) == []


def test_gc_never_takes_a_pack_a_pack_in_progress_counts_on(home: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """gc's sweep runs between a submit finding its objects stored and its manifest naming
    them (forced here): it waits for the manifest, so the pack stays and the bundle is whole."""
    import threading

    project = make_git_project(tmp_path / "p", _tree(100))
    _settle(project)
    first = make_bundle(project)
    store = paths.objects_dir()
    paths.bundles_dir().joinpath(f"{first.hash}.json").unlink()  # no manifest names them now
    _age_everything(store)
    real_store = bundle_mod._store_objects
    sweeps: list[threading.Thread] = []

    def gc_in_the_window(listing, todo, cache, tick):
        _age_everything(store)  # as gc would see it had it looked just before this submit's touch
        entry = next(r for r in cachescan.scan(str(home)) if r["kind"] == "objects")
        t = threading.Thread(target=cachescan.evict, args=(str(home), [entry["path"]], cachescan.MIN_AGE_S))
        t.start()
        t.join(timeout=1.0)  # given every chance to run now
        sweeps.append(t)
        return real_store(listing, todo, cache, tick)

    (project / "train.py").write_text("print('again')\n")  # a new manifest over the packed objects
    monkeypatch.setattr(bundle_mod, "_store_objects", gc_in_the_window)
    again = make_bundle(project)
    sweeps[0].join(timeout=60)
    assert not sweeps[0].is_alive()
    assert objects.reuse_objects(objects.digests(again.hash)) == set()
    objects.materialize(again.hash, tmp_path / "code")
    assert (tmp_path / "code" / "src" / "pkg1" / "m60.py").read_text().startswith("X = 60\n")


def test_a_second_copy_never_keeps_a_pack_and_gc_counts_only_what_it_frees(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", _tree(100))
    b = make_bundle(project)
    store = paths.objects_dir()
    digests = objects.digests(b.hash)
    objects.loosen(digests)  # every object now also a file of its own (as for Modal's mount)
    _age_everything(store)
    entry = [r for r in cachescan.scan(str(home)) if r["kind"] == "objects"]
    assert entry and entry[0]["bytes"] >= sum(size for *_, size in objects.entries(b.hash)) // 2
    cachescan.evict(str(home), [entry[0]["path"]], cachescan.MIN_AGE_S)
    assert list((store / objstore.PACKS).glob("*.pack")) == []  # the loose copies are the live ones
    objects.materialize(b.hash, tmp_path / "code")
    assert (tmp_path / "code" / "train.py").read_text() == "print('train')\n"
    # a mostly live pack with a few dead objects: gc neither counts nor takes them
    project2 = make_git_project(tmp_path / "p2", {f"lib/q{i}.py": f"Y = {i}\n" for i in range(100)}
                                | {"train.py": "print(1)\n"})
    _settle(project2)
    kept = make_bundle(project2)
    (project2 / "train.py").write_text("print(2)\n")
    make_bundle(project2)
    paths.bundles_dir().joinpath(f"{kept.hash}.json").unlink()
    _age_everything(store)
    assert [r for r in cachescan.scan(str(home)) if r["kind"] == "objects"] == []
