"""Checkpoint generations, one test per part of the rule (issue 40; core/runtime/ckptgen.py and
the generation choice of core/runtime/ckptscan.py):

- a generation exists only whole: it is assembled under a dot name and renamed into place, a
  save whose files changed after it was recorded leaves no generation (and nothing half-made);
- what is listed is the newest generation whose files match its marker (the same names, each
  with the size and mtime the marker names), among the newest three; a half-written one (a dot
  folder, a folder without its marker, one whose files changed or differ from the marker's
  list) is never listed; with none whole, the live folder is;
- pruning keeps the newest KEEP (3) generations, and only folders named by ten digits count;
- a file copied into a generation never shares the inode the job writes into in place.

Quick: real folders, no job.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.runtime import ckptgen, ckptscan


def record(folder: Path) -> dict[str, list[int]]:
    """What gpu.checkpoint_saved() records: each file's size and mtime."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            s = p.stat()
            out[str(p.relative_to(folder))] = [s.st_size, s.st_mtime_ns]
    return out


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ckptgen.MARKER}


def job_dir(base: Path) -> tuple[Path, Path]:
    ckpt, gens = base / "ckpt", base / "ckpt-gens"
    ckpt.mkdir(parents=True)
    return ckpt, gens


def save(ckpt: Path, gens: Path, n: int, files: dict[str, bytes]) -> bool:
    """The job writes `files` and saves generation `n`."""
    for rel, data in files.items():
        (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
        (ckpt / rel).write_bytes(data)
    return ckptgen.capture(str(ckpt), str(gens), n, record(ckpt), {"step": n})


def leftovers(gens: Path) -> list[str]:
    return sorted(p.name for p in gens.iterdir() if p.name.startswith("."))


# -- names and the listing of numbers -------------------------------------------------------

def test_a_generations_name_is_its_number_in_ten_digits() -> None:
    assert [ckptgen.gen_name(n) for n in (0, 7, 42, 9_999_999_999)] == \
        ["0000000000", "0000000007", "0000000042", "9999999999"]


def test_only_ten_digit_folders_are_generations_oldest_first(tmp_path: Path) -> None:
    for name in ("0000000010", "0000000002", "0000000100", "000000003", "00000000004",
                 ".new-0000000005-77", "0000000006.tmp", ".live.json", "abcdefghij"):
        (tmp_path / name).mkdir()
    assert ckptgen.generations(str(tmp_path)) == [2, 10, 100]
    assert ckptgen.generations(str(tmp_path / "missing")) == []


# -- capture: whole or nothing --------------------------------------------------------------

def test_a_save_is_frozen_whole_with_its_marker(tmp_path: Path) -> None:
    ckpt, gens = job_dir(tmp_path)
    assert save(ckpt, gens, 1, {"model.pt": b"w" * 10, "opt/state.pt": b"o" * 3}) is True
    gen = gens / "0000000001"
    assert contents(gen) == {"model.pt": b"w" * 10, "opt/state.pt": b"o" * 3}
    marker = json.loads((gen / ".complete").read_text())
    assert marker == {"step": 1, "files": record(ckpt)}
    assert leftovers(gens) == [".live.json"]


def test_a_file_changed_after_the_save_recorded_it_leaves_no_generation(tmp_path: Path) -> None:
    ckpt, gens = job_dir(tmp_path)
    assert save(ckpt, gens, 1, {"model.pt": b"a" * 4})
    (ckpt / "model.pt").write_bytes(b"b" * 5)
    files = record(ckpt)
    (ckpt / "model.pt").write_bytes(b"c" * 6)  # written again after the save recorded it
    assert ckptgen.capture(str(ckpt), str(gens), 2, files, {"step": 2}) is False
    assert ckptgen.generations(str(gens)) == [1]
    assert contents(gens / "0000000001") == {"model.pt": b"a" * 4}
    assert leftovers(gens) == [".live.json"]


def test_a_file_removed_after_the_save_leaves_no_generation(tmp_path: Path) -> None:
    ckpt, gens = job_dir(tmp_path)
    (ckpt / "a.pt").write_bytes(b"1")
    (ckpt / "b.pt").write_bytes(b"2")
    files = record(ckpt)
    (ckpt / "b.pt").unlink()
    assert ckptgen.capture(str(ckpt), str(gens), 1, files, {}) is False
    assert ckptgen.generations(str(gens)) == []
    assert leftovers(gens) == []


def test_a_file_replaced_by_a_link_or_folder_leaves_no_generation(tmp_path: Path) -> None:
    ckpt, gens = job_dir(tmp_path)
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 3)
    (ckpt / "a.pt").write_bytes(b"a" * 3)
    files = record(ckpt)
    (ckpt / "a.pt").unlink()
    (ckpt / "a.pt").symlink_to(secret)
    assert ckptgen.capture(str(ckpt), str(gens), 1, files, {}) is False
    assert ckptgen.generations(str(gens)) == []


def test_a_write_racing_the_capture_after_its_file_was_copied_stays_out_of_it(tmp_path: Path) -> None:
    """The job rewrites a file in place right after the capture copied it: the generation holds
    the bytes of the save (a copy, not the job's inode)."""
    ckpt, gens = job_dir(tmp_path)
    assert save(ckpt, gens, 1, {"a.pt": b"1", "b.pt": b"2"})
    (ckpt / "a.pt").write_bytes(b"11")
    (ckpt / "b.pt").write_bytes(b"22")
    files = record(ckpt)

    def race(rel: str) -> None:
        if rel == "a.pt":
            with open(ckpt / "a.pt", "r+b") as f:
                f.write(b"xx")

    assert ckptgen.capture(str(ckpt), str(gens), 2, files, {}, between=race) is True
    assert contents(gens / "0000000002") == {"a.pt": b"11", "b.pt": b"22"}
    assert contents(gens / "0000000001") == {"a.pt": b"1", "b.pt": b"2"}


def test_a_write_racing_the_capture_before_its_file_is_reached_abandons_it(tmp_path: Path) -> None:
    ckpt, gens = job_dir(tmp_path)
    assert save(ckpt, gens, 1, {"a.pt": b"1", "b.pt": b"2"})
    (ckpt / "a.pt").write_bytes(b"11")
    (ckpt / "b.pt").write_bytes(b"22")
    files = record(ckpt)

    def race(rel: str) -> None:
        if rel == "a.pt":
            (ckpt / "b.pt").write_bytes(b"333")

    assert ckptgen.capture(str(ckpt), str(gens), 2, files, {}, between=race) is False
    assert ckptgen.generations(str(gens)) == [1]
    assert leftovers(gens) == [".live.json"]


def test_the_same_number_saved_again_replaces_its_generation_whole(tmp_path: Path) -> None:
    ckpt, gens = job_dir(tmp_path)
    assert save(ckpt, gens, 5, {"a.pt": b"first", "gone.pt": b"g"})
    (ckpt / "gone.pt").unlink()
    assert save(ckpt, gens, 5, {"a.pt": b"second!"})
    assert ckptgen.generations(str(gens)) == [5]
    assert contents(gens / "0000000005") == {"a.pt": b"second!"}
    assert leftovers(gens) == [".live.json"]


def test_a_half_made_folder_from_a_killed_capture_is_not_a_generation(tmp_path: Path) -> None:
    ckpt, gens = job_dir(tmp_path)
    assert save(ckpt, gens, 1, {"a.pt": b"1"})
    half = gens / ".new-0000000002-99999"
    half.mkdir()
    (half / "a.pt").write_bytes(b"half")
    assert ckptgen.generations(str(gens)) == [1]
    doc = ckptscan.scan(str(ckpt))
    assert doc["generation_dir"] == "0000000001" and sorted(doc["files"]) == ["a.pt"]


# -- pruning ----------------------------------------------------------------------------------

@settings(max_examples=examples(60), deadline=None)
@given(numbers=st.sets(st.integers(0, 10 ** 6), max_size=8), keep=st.integers(1, 5))
def test_pruning_keeps_exactly_the_newest(numbers: set[int], keep: int) -> None:
    gens = Path(tempfile.mkdtemp(prefix="ckptgen-prune-"))
    try:
        for n in numbers:
            (gens / ckptgen.gen_name(n)).mkdir()
        for other in (".live.json", ".new-0000000001-5", "123"):
            (gens / other).mkdir()
        ckptgen.prune(str(gens), keep)
        assert ckptgen.generations(str(gens)) == sorted(numbers)[-keep:]
        assert sorted(p.name for p in gens.iterdir() if not p.name[0].isdigit() or len(p.name) != 10) \
            == [".live.json", ".new-0000000001-5", "123"]
    finally:
        shutil.rmtree(gens)


def test_prune_keeps_three_by_default(tmp_path: Path) -> None:
    for n in range(1, 7):
        (tmp_path / ckptgen.gen_name(n)).mkdir()
    ckptgen.prune(str(tmp_path))
    assert ckptgen.generations(str(tmp_path)) == [4, 5, 6]
    assert ckptgen.KEEP == 3


@settings(max_examples=examples(40), deadline=None)
@given(outcomes=st.lists(st.booleans(), min_size=1, max_size=9))
def test_after_any_run_of_saves_the_newest_whole_ones_are_kept_and_listed(outcomes: list[bool]) -> None:
    """Saves numbered 1, 2, ...: each either whole (True) or spoiled by a write after it was
    recorded (False). Kept: the newest three whole ones, each exactly its save; listed: the
    newest whole one; nothing half-made left."""
    base = Path(tempfile.mkdtemp(prefix="ckptgen-run-"))
    try:
        ckpt, gens = job_dir(base)
        whole: dict[int, dict[str, bytes]] = {}
        for n, ok in enumerate(outcomes, start=1):
            data = {"model.pt": b"m" * n, "step.json": str(n).encode()}
            for rel, b in data.items():
                (ckpt / rel).write_bytes(b)
            files = record(ckpt)
            if not ok:
                (ckpt / "model.pt").write_bytes(b"x" * (n + 100))
            got = ckptgen.capture(str(ckpt), str(gens), n, files, {"step": n})
            assert got is ok, n
            if ok:
                whole[n] = data
        kept = sorted(whole)[-3:]
        assert ckptgen.generations(str(gens)) == kept
        for n in kept:
            assert contents(gens / ckptgen.gen_name(n)) == whole[n]
        assert [p for p in leftovers(gens) if p != ".live.json"] == []
        doc = ckptscan.scan(str(ckpt))
        if kept:
            assert doc["generation_dir"] == ckptgen.gen_name(kept[-1])
            assert {rel: v[0] for rel, v in doc["files"].items()} == \
                {rel: len(b) for rel, b in whole[kept[-1]].items()}
        else:
            assert "generation_dir" not in doc
    finally:
        shutil.rmtree(base)


# -- the listing's choice -----------------------------------------------------------------------

def three_saves(tmp_path: Path) -> tuple[Path, Path]:
    ckpt, gens = job_dir(tmp_path)
    for n in (1, 2, 3):
        assert save(ckpt, gens, n, {"model.pt": bytes([n]) * n})
    return ckpt, gens


def test_the_newest_whole_generation_is_listed(tmp_path: Path) -> None:
    ckpt, gens = three_saves(tmp_path)
    doc = ckptscan.scan(str(ckpt))
    assert doc["generation_dir"] == "0000000003"
    assert doc["files"]["model.pt"][:2] == list(record(gens / "0000000003")["model.pt"])
    assert doc["marker"]["step"] == 3


def test_a_generation_whose_file_changed_is_passed_over_for_the_one_before(tmp_path: Path) -> None:
    ckpt, gens = three_saves(tmp_path)
    (gens / "0000000003" / "model.pt").write_bytes(b"changed")
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000002"


def test_a_generation_with_the_same_size_and_another_mtime_is_passed_over(tmp_path: Path) -> None:
    ckpt, gens = three_saves(tmp_path)
    f = gens / "0000000003" / "model.pt"
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 1_000_000))
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000002"


def test_a_generation_without_its_marker_is_passed_over(tmp_path: Path) -> None:
    ckpt, gens = three_saves(tmp_path)
    (gens / "0000000003" / ".complete").unlink()
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000002"


def test_a_generation_missing_a_file_its_marker_names_is_passed_over(tmp_path: Path) -> None:
    ckpt, gens = job_dir(tmp_path)
    assert save(ckpt, gens, 1, {"a.pt": b"1", "b.pt": b"2"})
    assert save(ckpt, gens, 2, {"a.pt": b"11", "b.pt": b"22"})
    (gens / "0000000002" / "b.pt").unlink()
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000001"


def test_a_generation_with_a_file_its_marker_does_not_name_is_passed_over(tmp_path: Path) -> None:
    ckpt, gens = three_saves(tmp_path)
    (gens / "0000000003" / "extra.pt").write_bytes(b"e")
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000002"


def test_a_marker_naming_no_files_or_not_a_mapping_is_passed_over(tmp_path: Path) -> None:
    ckpt, gens = three_saves(tmp_path)
    (gens / "0000000003" / ".complete").write_text(json.dumps({"files": {}}))
    (gens / "0000000002" / ".complete").write_text(json.dumps({"files": ["model.pt"]}))
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000001"


def test_a_marker_entry_that_is_not_a_list_is_passed_over(tmp_path: Path) -> None:
    ckpt, gens = three_saves(tmp_path)
    named = json.loads((gens / "0000000003" / ".complete").read_text())
    named["files"]["model.pt"] = "3"
    (gens / "0000000003" / ".complete").write_text(json.dumps(named))
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000002"


def test_a_generation_that_is_a_link_is_passed_over(tmp_path: Path) -> None:
    ckpt, gens = three_saves(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(gens / "0000000003", elsewhere)
    (gens / "0000000004").symlink_to(elsewhere)
    assert ckptscan.scan(str(ckpt))["generation_dir"] == "0000000003"


def test_only_the_newest_three_are_looked_at_then_the_live_folder(tmp_path: Path) -> None:
    """Whole generation 1 under three broken newer ones: the live folder is listed."""
    ckpt, gens = job_dir(tmp_path)
    assert save(ckpt, gens, 1, {"model.pt": b"1"})
    for n in (2, 3, 4):
        (gens / ckptgen.gen_name(n)).mkdir()  # no marker: never whole
    (ckpt / "model.pt").write_bytes(b"live!")
    doc = ckptscan.scan(str(ckpt))
    assert "generation_dir" not in doc
    assert doc["exists"] is True and doc["files"]["model.pt"][0] == 5


def test_the_gens_folder_as_a_link_is_not_followed(tmp_path: Path) -> None:
    ckpt, _ = job_dir(tmp_path)
    other = tmp_path / "other"
    elsewhere_ckpt, elsewhere_gens = job_dir(other)
    assert save(elsewhere_ckpt, elsewhere_gens, 1, {"stolen.pt": b"s"})
    (tmp_path / "ckpt-gens").symlink_to(elsewhere_gens)
    (ckpt / "model.pt").write_bytes(b"live")
    doc = ckptscan.scan(str(ckpt))
    assert "generation_dir" not in doc and sorted(doc["files"]) == ["model.pt"]


def test_packing_a_name_that_is_not_a_generation_packs_nothing(tmp_path: Path) -> None:
    ckpt, gens = three_saves(tmp_path)
    (tmp_path / "ckpt-gens" / "3").mkdir()
    for bad in ("3", "../ckpt", "000000003x", "00000000003"):
        out = tmp_path / "out.tar.gz"
        got = ckptscan.pack(str(ckpt), str(out), ["model.pt"], bad)
        assert got == {"files": 0, "bytes": 0, "packed": 0, "gone": True}, bad
        assert not out.exists()


# -- a copy never shares the job's inode ------------------------------------------------------

def test_a_file_written_in_place_is_copied_and_one_replaced_by_rename_is_linked(tmp_path: Path) -> None:
    ckpt, gens = job_dir(tmp_path)
    assert save(ckpt, gens, 1, {"inplace.pt": b"1", "renamed.pt": b"1"})
    with open(ckpt / "inplace.pt", "r+b") as f:
        f.write(b"22")
    tmp = ckpt / "renamed.pt.tmp"
    tmp.write_bytes(b"22")
    os.replace(tmp, ckpt / "renamed.pt")
    assert ckptgen.capture(str(ckpt), str(gens), 2, record(ckpt), {}) is True
    g2 = gens / "0000000002"
    assert (g2 / "inplace.pt").stat().st_ino != (ckpt / "inplace.pt").stat().st_ino
    assert (g2 / "renamed.pt").stat().st_ino == (ckpt / "renamed.pt").stat().st_ino
    with open(ckpt / "inplace.pt", "r+b") as f:  # the job writes on: generation 2 stays
        f.write(b"99")
    assert contents(g2) == {"inplace.pt": b"22", "renamed.pt": b"22"}


def test_an_unchanged_file_is_linked_to_the_generation_before(tmp_path: Path) -> None:
    ckpt, gens = job_dir(tmp_path)
    assert save(ckpt, gens, 1, {"same.pt": b"s" * 8, "new.pt": b"1"})
    assert save(ckpt, gens, 2, {"new.pt": b"22"})
    g1, g2 = gens / "0000000001", gens / "0000000002"
    assert (g2 / "same.pt").stat().st_ino == (g1 / "same.pt").stat().st_ino
    assert (g2 / "same.pt").stat().st_ino != (ckpt / "same.pt").stat().st_ino
    assert contents(g2) == {"same.pt": b"s" * 8, "new.pt": b"22"}
