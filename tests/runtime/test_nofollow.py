"""A job's folder is read without following a link (core/runtime/nofollow.py), by every reader:
`gpu fetch`'s packer (workdir.pack), the declared outputs (workdir.collect), the local out/ copy
(safe_copy_tree) and the checkpoint listing and packing (ckptscan).

Real trees on disk: links to outside (absolute and relative), links in the middle, a working
folder or `code/` replaced by a link, FIFOs, files hard-linked from another owner, and a thread
that swaps a folder for a link while the readers run. The property: whatever the tree, what
comes home is only regular files physically inside the folder, never a byte from outside.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.packaging.safe_extract import safe_copy_tree, safe_extract
from core.runtime import ckptscan, nofollow, workdir

SECRET = b"OUTSIDE-SECRET-never-home"
FOREIGN_UID = 4242  # the owner of the outside files where we may chown (root): hard links to them are refused
ROOT = os.geteuid() == 0

NAMES = st.sampled_from(["a", "b", "c"])
PATHS = st.lists(NAMES, min_size=1, max_size=3).map("/".join)
OPS = st.lists(st.tuples(st.sampled_from(["dir", "file", "abs_out", "rel_out", "abs_out_dir", "inside",
                                          "fifo", "hardlink"]), PATHS, PATHS), max_size=14)


def _outside(root: Path) -> Path:
    out = root / "outside"
    (out / "sub").mkdir(parents=True)
    for p in (out / "secret.txt", out / "sub" / "secret.txt", out / "a", out / "b"):
        p.write_bytes(SECRET)
        if ROOT:
            os.chown(p, FOREIGN_UID, FOREIGN_UID)
    return out


def _build(folder: Path, ops: list[tuple[str, str, str]], outside: Path) -> None:
    """Lay out the tree the job left: what fails to apply (a file in the way) is skipped."""
    for what, rel, other in ops:
        path = folder / rel
        parts = Path(rel).parts
        if any(os.path.islink(folder.joinpath(*parts[:i])) or os.path.isfile(folder.joinpath(*parts[:i]))
               for i in range(1, len(parts))):
            continue  # the builder itself never goes through a link
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if what == "dir":
                path.mkdir(exist_ok=True)
            elif what == "file" and not os.path.lexists(path):  # never write into a FIFO or a link
                path.write_bytes(f"inside:{rel}".encode())
            elif what == "abs_out":
                os.symlink(outside / "secret.txt", path)
            elif what == "abs_out_dir":
                os.symlink(outside, path)
            elif what == "rel_out":
                depth = len(path.relative_to(outside.parent).parts) - 1
                os.symlink("../" * depth + "outside/" + other, path)
            elif what == "inside":
                os.symlink(other, path)
            elif what == "fifo":
                os.mkfifo(path)
            elif what == "hardlink" and ROOT:
                os.link(outside / "secret.txt", path)
        except OSError:
            continue


def _expected(folder: Path) -> dict[str, bytes]:
    """The oracle: regular files reached from `folder` through real folders only (lstat),
    minus files hard-linked from another owner."""
    if folder.is_symlink() or not folder.is_dir():
        return {}
    own = folder.stat().st_uid
    out: dict[str, bytes] = {}
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        for name in files:
            p = Path(top) / name
            s = p.lstat()
            if stat.S_ISREG(s.st_mode) and not (s.st_nlink > 1 and s.st_uid != own):
                out[p.relative_to(folder).as_posix()] = p.read_bytes()
    return out


def _got(dest: Path) -> dict[str, bytes]:
    out = {}
    for p in dest.rglob("*"):
        mode = p.lstat().st_mode
        assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), f"{p} is neither a file nor a folder"
        if stat.S_ISREG(mode):
            out[p.relative_to(dest).as_posix()] = p.read_bytes()
    return out


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(ops=OPS, replace=st.sampled_from([None, "workdir", "code", "workdir_rel"]),
       asked=st.lists(st.one_of(st.just("."), PATHS), min_size=1, max_size=3))
def test_any_tree_brings_home_only_files_inside_and_nothing_from_outside(
        ops: list, replace: str | None, asked: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        outside = _outside(root)
        job = root / "job"
        wd = job / "code" / "wd"
        wd.mkdir(parents=True)
        _build(wd, ops, outside)
        if replace == "workdir":
            shutil.rmtree(wd)
            os.symlink(outside, wd)
        elif replace == "workdir_rel":
            shutil.rmtree(wd)
            os.symlink("../../outside", wd)
        elif replace == "code":
            os.rename(job / "code", root / "code.moved")
            os.symlink(outside, job / "code")
        expected = _expected(wd) if replace is None else {}

        # gpu fetch: pack on the target, unpack at home
        archive = root / "fetch.tar.gz"
        doc = workdir.pack(str(job), "code/wd", asked, str(archive), 1 << 30, 10_000)
        got: dict[str, bytes] = {}
        if replace is not None:
            assert doc.get("replaced") and not archive.exists()
        else:
            dest = root / "runs"
            safe_extract(archive, dest)
            got = _got(dest)
            assert SECRET not in b"".join(got.values())
            for rel, data in got.items():
                assert expected.get(rel) == data, rel
            if "." in asked:
                assert got == expected

        # the local out/ copy: the same tree as a job's out/
        out = job / "out"
        if not replace:
            out.mkdir()
            _build(out, ops, outside)
            dest2 = root / "runs2"
            safe_copy_tree(out, dest2)
            got2 = _got(dest2)
            assert SECRET not in b"".join(got2.values())
            assert got2 == _expected(out)
            shutil.rmtree(out)

        # declared outputs: everything declared comes into out/, nothing from outside
        result = workdir.collect(str(wd), str(job / "out"), ["**"], {})
        landed = _got(job / "out") if (job / "out").is_dir() else {}
        assert SECRET not in b"".join(landed.values())
        assert landed == expected and result["declared"] == len(expected)
        if replace is not None:
            assert result["declared"] == 0 and result["refused"]
        assert not (outside / "wd").exists() and sorted(p.name for p in outside.iterdir()) == ["a", "b", "secret.txt", "sub"]


def test_a_folder_swapped_for_a_link_mid_read_never_leaks(tmp_path: Path) -> None:
    """A thread swaps outputs/ for a link to outside (and back) while every reader runs: the
    gap between a check and an open is not there to win."""
    outside = _outside(tmp_path)
    job = tmp_path / "job"
    wd = job / "code"
    real = wd / "outputs"
    real.mkdir(parents=True)
    for i in range(30):
        (real / f"f{i}.txt").write_bytes(b"inside")
    (job / "ckpt").mkdir()
    for i in range(30):
        (job / "ckpt" / f"c{i}.bin").write_bytes(b"ck")
    parked, parked_ck = wd / ".parked", job / ".parked-ckpt"
    stop = threading.Event()

    def swapper() -> None:
        while not stop.is_set():
            for live, park in ((real, parked), (job / "ckpt", parked_ck)):
                try:
                    os.rename(live, park)
                    os.symlink(outside if live == real else outside / "sub", live)
                    os.unlink(live)
                    os.rename(park, live)
                except OSError:
                    pass

    secret_hash = hashlib.sha256(SECRET).hexdigest()
    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    try:
        for i in range(150):
            archive = tmp_path / f"a{i}.tar.gz"
            workdir.pack(str(job), "code", ["outputs", "outputs/secret.txt", "."], str(archive), 1 << 30, 10_000)
            dest = tmp_path / f"r{i}"
            if archive.exists():
                safe_extract(archive, dest)
                assert SECRET not in b"".join(_got(dest).values())
            scan = ckptscan.scan(str(job / "ckpt"))
            assert secret_hash not in {v[2] for v in scan["files"].values()}
            ck = tmp_path / f"c{i}.tar.gz"
            ckptscan.pack(str(job / "ckpt"), str(ck), ["secret.txt", "c1.bin"])
            safe_extract(ck, tmp_path / f"ck{i}")
            assert SECRET not in b"".join(_got(tmp_path / f"ck{i}").values())
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(tmp_path / f"ck{i}", ignore_errors=True)
    finally:
        stop.set()
        thread.join()


def test_a_link_planted_in_out_is_never_written_through(tmp_path: Path) -> None:
    """The declared outputs are copied into out/: a job that planted out/outputs -> ~/.ssh (or
    out/ -> ~) gets nothing written there, and the launcher's record says why."""
    victim = tmp_path / "victim-home"
    victim.mkdir()
    job = tmp_path / "job"
    (job / "code" / "outputs").mkdir(parents=True)
    (job / "code" / "outputs" / "authorized_keys").write_text("ssh-ed25519 AAAA attacker")
    (job / "out").mkdir()
    os.symlink(victim, job / "out" / "outputs")
    result = workdir.collect(str(job / "code"), str(job / "out"), ["outputs/"], {})
    assert not (victim / "authorized_keys").exists()
    assert result["declared"] == 0 and result["refused"][0][0] == "outputs"
    # out/ itself a link to the victim: nothing written either
    (job / "out" / "outputs").unlink()
    os.rename(job / "out", tmp_path / "out.moved")
    os.symlink(victim, job / "out")
    result = workdir.collect(str(job / "code"), str(job / "out"), ["outputs/"], {})
    assert list(victim.iterdir()) == [] and result["refused"][0][0] == "out/"


@pytest.mark.skipif(not ROOT, reason="making a file of another owner needs root (chown)")
def test_a_hard_link_to_another_owners_file_is_refused_one_of_ones_own_is_kept(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    job = tmp_path / "job"
    (job / "code").mkdir(parents=True)
    os.link(outside / "secret.txt", job / "code" / "stolen.txt")
    (job / "code" / "step-100.pt").write_bytes(b"weights")
    os.link(job / "code" / "step-100.pt", job / "code" / "latest.pt")  # the job's own: fine
    archive = tmp_path / "a.tar.gz"
    doc = workdir.pack(str(job), "code", ["."], str(archive), 1 << 30, 100)
    assert [r["path"] for r in doc["refused"]] == ["stolen.txt"] and "another owner" in doc["refused"][0]["why"]
    safe_extract(archive, tmp_path / "runs")
    assert _got(tmp_path / "runs") == {"latest.pt": b"weights", "step-100.pt": b"weights"}


def test_a_fifo_is_never_opened_and_a_sparse_file_counts_its_length(tmp_path: Path) -> None:
    """Opening a FIFO blocks until a writer comes: the readers never open one (this test would
    hang if they did). A sparse file counts its full length against the byte cap."""
    job = tmp_path / "job"
    (job / "code").mkdir(parents=True)
    os.mkfifo(job / "code" / "pipe")
    with open(job / "code" / "sparse.bin", "wb") as f:
        f.truncate(1 << 30)  # 1 GiB long, no block written
    (job / "code" / "small.txt").write_text("x")
    archive = tmp_path / "a.tar.gz"
    doc = workdir.pack(str(job), "code", ["pipe", "small.txt", "sparse.bin"], str(archive), 1 << 20, 100)
    assert doc["files"] == 1 and doc["capped"] == "sparse.bin"
    assert doc["refused"][0]["path"] == "pipe" and "FIFO" in doc["refused"][0]["why"]
    st_sparse = os.stat(job / "code" / "sparse.bin")
    assert nofollow.cost(st_sparse) == 1 << 30 and st_sparse.st_blocks * 512 < 1 << 20
