"""The parts of checkpoint generations that mutmut found no test asking about (issue 40 item 2;
bench/README.md, "Mutation"): each test here fails on a survivor of the mutation run over
core/runtime/ckptgen.py, and says what the rule is.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from core.runtime import ckptgen
from tests.stubs import cwd_gone


def record(folder: Path) -> dict[str, list[int]]:
    return {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(folder.iterdir()) if p.is_file()}


def folders(tmp_path: Path) -> tuple[Path, Path]:
    ckpt, gens = tmp_path / "ckpt", tmp_path / "ckpt-gens"
    ckpt.mkdir()
    return ckpt, gens


def test_inside_a_job_sparsefile_is_loaded_from_beside_ckptgen(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a job ckptgen.py is loaded from its file, not as core.runtime.ckptgen: the sparse copy
    comes from sparsefile.py beside it, under its own name, loaded once."""
    monkeypatch.setattr(ckptgen, "__package__", "")
    monkeypatch.delitem(sys.modules, "_gpu_router_sparsefile", raising=False)
    module = ckptgen._sparsefile()
    assert module.__name__ == "_gpu_router_sparsefile"
    assert Path(module.__file__) == Path(ckptgen.__file__).resolve().parent / "sparsefile.py"
    assert sys.modules["_gpu_router_sparsefile"] is module
    assert ckptgen._sparsefile() is module
    assert callable(module.copy_file)


def test_a_link_is_made_to_the_entry_itself_never_to_what_a_symlink_names(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("the person's")
    link = tmp_path / "link"
    link.symlink_to(secret)
    st = link.lstat()
    assert ckptgen._link(str(link), str(tmp_path / "dst"), st.st_size, st.st_mtime_ns) is True
    assert (tmp_path / "dst").is_symlink()


def test_a_link_whose_size_or_mtime_is_not_the_saves_is_undone(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"abcd")
    st = src.stat()
    for size, mtime in ((5, st.st_mtime_ns), (4, st.st_mtime_ns + 1)):
        assert ckptgen._link(str(src), str(tmp_path / "dst"), size, mtime) is False
        assert not (tmp_path / "dst").exists()
    assert ckptgen._link(str(tmp_path / "missing"), str(tmp_path / "dst"), 0, 0) is False


def test_a_copy_whose_source_is_not_the_saves_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"abcd")
    st = src.stat()
    assert ckptgen._copy(str(src), str(tmp_path / "a"), 4, st.st_mtime_ns + 1) is False  # another mtime
    assert ckptgen._copy(str(src), str(tmp_path / "b"), 5, st.st_mtime_ns) is False  # another size
    assert ckptgen._copy(str(tmp_path / "missing"), str(tmp_path / "c"), 0, 0) is False
    assert ckptgen._copy(str(src), str(tmp_path / "d"), 4, st.st_mtime_ns) is True
    assert (tmp_path / "d").stat().st_mtime_ns == st.st_mtime_ns


def test_a_live_record_that_is_not_a_mapping_is_ignored(tmp_path: Path) -> None:
    ckpt, gens = folders(tmp_path)
    gens.mkdir()
    (gens / ".live.json").write_text("[1, 2]")
    (ckpt / "a.pt").write_bytes(b"a")
    assert ckptgen.capture(str(ckpt), str(gens), 1, record(ckpt), {}) is True
    assert (gens / "0000000001" / "a.pt").read_bytes() == b"a"


def test_capture_writes_nothing_relative_to_the_working_folder(tmp_path: Path) -> None:
    """A job's working folder is its cwd: every path of a capture is under ckpt-gens/ (a
    relative one would land in the job's folder; with that folder gone it fails)."""
    ckpt, gens = folders(tmp_path)
    (ckpt / "a.pt").write_bytes(b"a")
    assert ckptgen.capture(str(ckpt), str(gens), 1, record(ckpt), {}) is True
    (ckpt / "a.pt").write_bytes(b"bb")
    with cwd_gone(tmp_path):
        assert ckptgen.capture(str(ckpt), str(gens), 1, record(ckpt), {}) is True  # the same number again
    assert (gens / "0000000001" / "a.pt").read_bytes() == b"bb"
    assert sorted(p.name for p in gens.iterdir()) == [".live.json", "0000000001"]


def test_a_half_made_folder_of_the_same_name_is_cleared_first(tmp_path: Path) -> None:
    ckpt, gens = folders(tmp_path)
    stale = gens / f".new-0000000001-{os.getpid()}"
    stale.mkdir(parents=True)
    (stale / "stray.pt").write_bytes(b"from a capture killed half-way")
    (ckpt / "a.pt").write_bytes(b"a")
    assert ckptgen.capture(str(ckpt), str(gens), 1, record(ckpt), {}) is True
    assert sorted(p.name for p in (gens / "0000000001").iterdir()) == [".complete", "a.pt"]


def test_when_a_file_can_be_neither_linked_nor_copied_there_is_no_generation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt, gens = folders(tmp_path)
    (ckpt / "a.pt").write_bytes(b"a")
    (ckpt / "b.pt").write_bytes(b"b")
    monkeypatch.setattr(ckptgen, "_copy", lambda *a: False)
    assert ckptgen.capture(str(ckpt), str(gens), 1, record(ckpt), {}) is False
    assert sorted(p.name for p in gens.iterdir()) == []


def test_a_linked_file_written_in_place_during_the_capture_abandons_it(tmp_path: Path) -> None:
    """a.pt replaced by rename is linked into the generation; the job then writes it in place
    before the capture ends: the frozen copy changed, so the generation is not made."""
    ckpt, gens = folders(tmp_path)
    (ckpt / "a.pt").write_bytes(b"1")
    (ckpt / "b.pt").write_bytes(b"1")
    assert ckptgen.capture(str(ckpt), str(gens), 1, record(ckpt), {}) is True
    (ckpt / "a.tmp").write_bytes(b"22")
    os.replace(ckpt / "a.tmp", ckpt / "a.pt")
    files = record(ckpt)

    def write_in_place(rel: str) -> None:
        if rel == "a.pt":
            with open(ckpt / "a.pt", "r+b") as f:
                f.write(b"99")
            os.utime(ckpt / "a.pt", ns=(1, 1))

    assert ckptgen.capture(str(ckpt), str(gens), 2, files, {}, between=write_in_place) is False
    assert ckptgen.generations(str(gens)) == [1]


def test_the_marker_is_compact_json_of_the_save_and_each_files_size_and_mtime(tmp_path: Path) -> None:
    ckpt, gens = folders(tmp_path)
    (ckpt / "a.pt").write_bytes(b"abc")
    files = record(ckpt)
    assert ckptgen.capture(str(ckpt), str(gens), 1, files, {"step": 7}) is True
    assert (gens / "0000000001" / ".complete").read_text() == \
        json.dumps({"step": 7, "files": files}, separators=(",", ":"))


def test_the_live_record_names_only_the_files_of_the_last_save(tmp_path: Path) -> None:
    ckpt, gens = folders(tmp_path)
    (ckpt / "a.pt").write_bytes(b"a")
    (ckpt / "b.pt").write_bytes(b"b")
    assert ckptgen.capture(str(ckpt), str(gens), 1, record(ckpt), {}) is True
    (ckpt / "b.pt").unlink()
    assert ckptgen.capture(str(ckpt), str(gens), 2, record(ckpt), {}) is True
    live = json.loads((gens / ".live.json").read_text())
    st = (ckpt / "a.pt").stat()
    assert live == {"a.pt": [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]}


def test_a_link_swapped_in_that_looks_like_the_saved_file_is_not_frozen(tmp_path: Path) -> None:
    """The file replaced by a symlink with the saved size and mtime: still not a regular file."""
    ckpt, gens = folders(tmp_path)
    target = "/etc/passwd"
    (ckpt / "a.pt").write_bytes(b"x" * len(target))
    assert ckptgen.capture(str(ckpt), str(gens), 1, record(ckpt), {}) is True
    files = record(ckpt)
    size, mtime = files["a.pt"]
    (ckpt / "a.pt").unlink()
    (ckpt / "a.pt").symlink_to(target)
    os.utime(ckpt / "a.pt", ns=(mtime, mtime), follow_symlinks=False)
    assert (ckpt / "a.pt").lstat().st_size == size
    assert ckptgen.capture(str(ckpt), str(gens), 2, files, {}) is False
    assert ckptgen.generations(str(gens)) == [1]


def test_a_live_entry_of_only_an_inode_still_never_shares_the_jobs_inode(tmp_path: Path) -> None:
    """A live record that names a file's device and inode only (no size, mtime): the same inode
    is still the job's file, so it is copied, never linked."""
    ckpt, gens = folders(tmp_path)
    gens.mkdir()
    (ckpt / "a.pt").write_bytes(b"abc")
    st = (ckpt / "a.pt").stat()
    (gens / ".live.json").write_text(json.dumps({"a.pt": [st.st_dev, st.st_ino]}))
    assert ckptgen.capture(str(ckpt), str(gens), 1, record(ckpt), {}) is True
    assert (gens / "0000000001" / "a.pt").stat().st_ino != st.st_ino


def test_a_file_replaced_with_the_same_size_and_mtime_is_the_new_bytes(tmp_path: Path) -> None:
    """Replaced by rename, its mtime set back: a new inode, so not the previous generation's copy."""
    ckpt, gens = folders(tmp_path)
    (ckpt / "a.pt").write_bytes(b"AAAA")
    assert ckptgen.capture(str(ckpt), str(gens), 1, record(ckpt), {}) is True
    old = (ckpt / "a.pt").stat()
    (ckpt / "a.tmp").write_bytes(b"BBBB")
    os.utime(ckpt / "a.tmp", ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(ckpt / "a.tmp", ckpt / "a.pt")
    assert ckptgen.capture(str(ckpt), str(gens), 2, record(ckpt), {}) is True
    assert (gens / "0000000002" / "a.pt").read_bytes() == b"BBBB"
    assert (gens / "0000000001" / "a.pt").read_bytes() == b"AAAA"


# -- the listing's choice (core/runtime/ckptscan.py) -----------------------------------------------

def three_saves(tmp_path: Path) -> tuple[Path, Path]:
    ckpt, gens = folders(tmp_path)
    for n in (1, 2, 3):
        (ckpt / "model.pt").write_bytes(bytes([n]) * n)
        (ckpt / "opt.pt").write_bytes(b"o" * (n + 10))
        assert ckptgen.capture(str(ckpt), str(gens), n, record(ckpt), {"step": n}) is True
    return ckpt, gens


def test_a_whole_folder_not_named_by_ten_digits_is_never_listed(tmp_path: Path) -> None:
    import shutil

    from core.runtime import ckptscan

    ckpt, gens = three_saves(tmp_path)
    for name in ("9", "99999999999", "zzzzzzzzzz"):  # after "0000000003" in name order
        shutil.copytree(gens / "0000000002", gens / name, copy_function=os.link)
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000003"


def test_a_marker_that_is_not_a_mapping_is_passed_over(tmp_path: Path) -> None:
    from core.runtime import ckptscan

    ckpt, gens = three_saves(tmp_path)
    (gens / "0000000003" / ".complete").write_text('["model.pt", "opt.pt"]')
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000002"


def test_a_generation_over_the_cap_is_listed_without_hashes_past_it(tmp_path: Path) -> None:
    from core.runtime import ckptscan

    ckpt, gens = three_saves(tmp_path)
    doc = ckptscan.scan(str(ckpt), max_bytes=1)
    assert doc["generation_dir"] == "0000000003"
    assert {rel: v[2] for rel, v in doc["files"].items()} == {"model.pt": "", "opt.pt": ""}
    whole = ckptscan.scan(str(ckpt))
    assert all(len(v[2]) == 64 for v in whole["files"].values())


def test_a_marker_entry_is_matched_on_size_and_mtime_whatever_follows(tmp_path: Path) -> None:
    from core.runtime import ckptscan

    ckpt, gens = three_saves(tmp_path)
    marker = gens / "0000000003" / ".complete"
    doc = json.loads(marker.read_text())
    doc["files"] = {rel: [*v, "sha256-would-go-here"] for rel, v in doc["files"].items()}
    marker.write_text(json.dumps(doc))
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000003"
