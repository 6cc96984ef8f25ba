"""Bringing a local job's outputs home: no link followed, nothing unbounded, the remote caps.

The job owns its out/ folder: it can put links to ~/.ssh or /etc there, replace out/ itself
with a link, or leave a 100 GB sparse file. The copy home follows no link (out/ included),
refuses what passes the byte cap, stops at the file-count cap (the same `OutputCaps` that
remote targets use), and writes only regular files and folders inside runs/<id>/.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.packaging.safe_extract import MAX_BYTES, OutputCaps, safe_copy_tree
from tests.conftest import gpu_json, make_git_project, wait_state, write_user_config

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- not for runs/"


def _outside(tmp_path: Path) -> Path:
    secret_dir = tmp_path / "dot-ssh"
    secret_dir.mkdir()
    (secret_dir / "id_ed25519").write_text(SECRET)
    return secret_dir


def _all_text(root: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


def _only_regular(root: Path) -> None:
    for p in root.rglob("*"):
        mode = p.lstat().st_mode
        assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), f"{p} is neither a file nor a folder"


def test_links_inside_out_are_not_followed(tmp_path: Path) -> None:
    secret_dir = _outside(tmp_path)
    out = tmp_path / "out"
    (out / "plots").mkdir(parents=True)
    (out / "result.json").write_text('{"ok": 1}')
    (out / "plots" / "a.png").write_bytes(b"png")
    os.symlink(secret_dir / "id_ed25519", out / "key")
    os.symlink(secret_dir, out / "ssh")
    os.symlink("/etc", out / "plots" / "etc")
    os.mkfifo(out / "fifo")
    dest = tmp_path / "runs" / "j1"
    notes = safe_copy_tree(out, dest)
    assert (dest / "result.json").read_text() == '{"ok": 1}'
    assert (dest / "plots" / "a.png").read_bytes() == b"png"
    assert SECRET not in _all_text(dest)
    assert not (dest / "key").exists() and not (dest / "ssh").exists() and not (dest / "plots" / "etc").exists()
    _only_regular(dest)
    text = "\n".join(notes)
    assert "key: a link" in text and "ssh: a link" in text and "a FIFO" in text


def test_an_out_folder_replaced_by_a_link_is_not_copied(tmp_path: Path) -> None:
    secret_dir = _outside(tmp_path)
    job = tmp_path / "job"
    job.mkdir()
    os.symlink(secret_dir, job / "out")
    dest = tmp_path / "runs" / "j2"
    notes = safe_copy_tree(job / "out", dest)
    assert list(dest.iterdir()) == []
    assert any("out/: a link" in n for n in notes), notes


def test_a_100_gb_sparse_file_is_refused_and_costs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("small")
    with open(out / "b-sparse.bin", "wb") as f:
        f.truncate(100 * 1024**3)  # 100 GB that take no space
    dest = tmp_path / "runs" / "j3"
    notes = safe_copy_tree(out, dest)
    assert (dest / "a.txt").read_text() == "small"
    assert not (dest / "b-sparse.bin").exists()
    assert any("b-sparse.bin" in n and f"{MAX_BYTES} byte cap" in n for n in notes), notes
    assert sum(p.stat().st_blocks for p in dest.rglob("*")) * 512 < 1 << 20


def test_a_sparse_file_under_the_cap_stays_sparse(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with open(out / "holes.bin", "wb") as f:
        f.write(b"head")
        f.seek(64 << 20)
        f.write(b"tail")
    dest = tmp_path / "runs" / "j4"
    assert safe_copy_tree(out, dest) == []
    copied = dest / "holes.bin"
    assert copied.stat().st_size == (64 << 20) + 4
    with open(copied, "rb") as f:
        assert f.read(4) == b"head"
        f.seek(64 << 20)
        assert f.read() == b"tail"
    assert copied.stat().st_blocks * 512 < 8 << 20  # not 64 MB of written zeros


def test_the_file_count_cap_is_the_remote_one(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for i in range(50):
        (out / f"f{i:02d}.txt").write_text("1")
    dest = tmp_path / "runs" / "j5"
    caps = OutputCaps.from_options({"max_output_files": 10, "max_output_bytes": 1 << 20})
    notes = safe_copy_tree(out, dest, caps=caps)
    assert len(list(dest.iterdir())) == 10
    assert any("more than 10 files" in n for n in notes)


# -- any tree, any caps ----------------------------------------------------------------------

_names = st.text("abcxyz._-", min_size=1, max_size=6).filter(lambda n: n not in (".", ".."))
_node = st.deferred(lambda: st.one_of(
    st.tuples(st.just("file"), st.binary(max_size=300)),
    st.tuples(st.just("zeros"), st.integers(min_value=0, max_value=5000)),
    st.tuples(st.just("link_out"), st.sampled_from(["secret", "secret_dir", "/etc", "../.."])),
    st.tuples(st.just("dir"), st.dictionaries(_names, _node, max_size=4))))


def _make(root: Path, tree: dict, outside: Path) -> None:
    root.mkdir(exist_ok=True)
    for name, (kind, value) in tree.items():
        path = root / name
        if kind == "file":
            path.write_bytes(value)
        elif kind == "zeros":
            with open(path, "wb") as f:
                f.truncate(value)
        elif kind == "link_out":
            target = outside / value if value.startswith("secret") else Path(value)
            os.symlink(target, path)
        else:
            _make(path, value, outside)


def _regular_files(root: Path, rel: str = "") -> dict[str, bytes]:
    """What a copy that follows no link may bring: regular files reached through folders."""
    found = {}
    for entry in os.scandir(root):
        r = f"{rel}/{entry.name}" if rel else entry.name
        if entry.is_symlink():
            continue
        if entry.is_dir():
            found.update(_regular_files(Path(entry.path), r))
        elif entry.is_file():
            found[r] = Path(entry.path).read_bytes()
    return found


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=st.dictionaries(_names, _node, max_size=6), out_is_link=st.booleans(),
       max_bytes=st.integers(min_value=1, max_value=4000), max_files=st.integers(min_value=1, max_value=12))
def test_any_tree_comes_home_within_the_caps_and_never_through_a_link(tree: dict, out_is_link: bool,
                                                                      max_bytes: int, max_files: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="gpu-router-copy-"))
    try:
        outside = base / "outside"
        outside.mkdir()
        (outside / "secret").write_bytes(SECRET.encode())
        (outside / "secret_dir").mkdir()
        (outside / "secret_dir" / "key").write_bytes(SECRET.encode())
        before = sorted(str(p) for p in outside.rglob("*"))
        real_out = base / ("elsewhere" if out_is_link else "out")
        _make(real_out, tree, outside)
        if out_is_link:
            os.symlink(real_out, base / "out")
        dest = base / "runs" / "job"
        notes = safe_copy_tree(base / "out", dest, caps=OutputCaps(max_bytes, max_files))
        copied = _regular_files(dest)
        allowed = {} if out_is_link else _regular_files(base / "out")
        _only_regular(dest)
        for rel, data in copied.items():  # each is a file of out/ itself, byte for byte
            assert allowed.get(rel) == data, rel
        assert SECRET.encode() not in b"".join(copied.values())
        assert sum(len(d) for d in copied.values()) <= max_bytes
        assert len(copied) <= max_files
        if len(copied) < len(allowed):
            assert notes, "what stayed behind is said"
        assert sorted(str(p) for p in outside.rglob("*")) == before
        assert sorted(p.name for p in (base / "runs").iterdir()) == ["job"]  # no staging left
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- through the local target ---------------------------------------------------------------


@pytest.mark.slow
def test_a_local_job_cannot_bring_home_what_its_links_point_to(home: Path, tmp_path: Path) -> None:
    secret_dir = _outside(tmp_path)
    write_user_config("targets:\n  local: {kind: local, max_output_files: 3}\n")
    project = make_git_project(tmp_path / "p", {
        "links.py": (
            "import os, gpu\n"
            "out = gpu.output_dir()\n"
            "(out / 'result.json').write_text('{\"ok\": 1}')\n"
            f"os.symlink({str(secret_dir / 'id_ed25519')!r}, out / 'key')\n"
            "with open(out / 'sparse.bin', 'wb') as f:\n"
            "    f.truncate(100 * 1024**3)\n"
            "for i in range(5):\n"
            "    (out / f'z{i}.txt').write_text('z')\n"),
        "swap.py": (  # in the sandbox out/ is a mount it cannot replace; what it can, it does
            "import os, shutil, gpu\n"
            "out = gpu.output_dir()\n"
            "shutil.rmtree(out, ignore_errors=True)\n"
            "try:\n"
            f"    os.symlink({str(secret_dir)!r}, out)\n"
            "except OSError:\n"
            f"    os.symlink({str(secret_dir)!r}, out / 'inner')\n"),
    })
    first = gpu_json("submit", "links.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    doc = wait_state(first["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert doc["state"] == "done"
    runs = project / "runs" / first["job"]["short_id"]
    assert json.loads((runs / "result.json").read_text()) == {"ok": 1}
    assert not (runs / "key").exists() and not (runs / "sparse.bin").exists()
    assert len([p for p in runs.iterdir() if p.name not in ("job.json", "job.log", "metrics.jsonl")]) <= 3
    notes = json.dumps(json.loads((runs / "job.json").read_text())["events"])
    assert "key: a link" in notes and "byte cap" in notes

    second = gpu_json("submit", "swap.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    doc = wait_state(second["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert doc["state"] == "done"
    runs = project / "runs" / second["job"]["short_id"]
    assert SECRET not in _all_text(runs)
    assert not (runs / "id_ed25519").exists()
    notes = json.dumps(json.loads((runs / "job.json").read_text())["events"])
    assert "inner: a link" in notes  # out/ itself is the sandbox's mount: the job could not swap it
