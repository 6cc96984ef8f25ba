"""The log and metrics mirrored from a target's relayed standard output (kaggle, modal): rows
the supervisor already read by byte offset are never rewritten, and none is lost."""

from __future__ import annotations

from pathlib import Path

from core.providers import logmirror
from core.runtime.relay import METRIC_MARK


def _rows(n: list[int]) -> str:
    return "".join(f'{METRIC_MARK}{{"step": {i}, "loss": {i}.5}}\n' for i in n)


def test_a_line_still_being_written_waits_for_the_next_read() -> None:
    bodies = logmirror.split("hello\n" + _rows([0]) + METRIC_MARK + '{"step": 1, "lo')
    assert bodies == {"log": b"hello\n", "metrics": b'{"step": 0, "loss": 0.5}\n'}


def test_a_fuller_text_that_is_no_extension_only_appends_the_missing_rows(tmp_path: Path) -> None:
    logmirror.store(tmp_path, 1, logmirror.split(_rows([0, 1, 3])))  # the stream dropped step 2
    read = (tmp_path / "metrics.jsonl").read_bytes()  # what the supervisor has read so far
    logmirror.store(tmp_path, 1, logmirror.split(_rows([0, 1, 2, 3, 4])))  # the call's result
    now = (tmp_path / "metrics.jsonl").read_bytes()
    assert now.startswith(read)  # nothing under the read offset changed
    assert sorted(now.decode().splitlines()) == sorted(logmirror.split(_rows(range(5)))["metrics"].decode().splitlines())


def test_attempts_are_joined_in_order_and_only_grow(tmp_path: Path) -> None:
    logmirror.store(tmp_path, 1, logmirror.split("one\n" + _rows([0, 1])))
    logmirror.store(tmp_path, 2, logmirror.split("two\n" + _rows([2])))
    logmirror.store(tmp_path, 2, logmirror.split("two\n"))  # an older, shorter read of attempt 2
    assert (tmp_path / "job.log").read_text() == "one\ntwo\n"
    assert [line.split(",")[0] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == \
        ['{"step": 0', '{"step": 1', '{"step": 2']


def test_a_fuller_read_is_appended_so_a_tail_f_goes_on_following(tmp_path: Path) -> None:
    """Each read of a Kaggle or Modal attempt is its whole text: what it adds is appended to the
    kept files, never the whole rewritten (a day's log was, every tick, and `tail -f job.log`
    lost the file each time)."""
    logmirror.store(tmp_path, 1, logmirror.split("one\n" + _rows([0])))
    files = [tmp_path / "job.log", tmp_path / "metrics.jsonl", tmp_path / "mirror" / "1.log"]
    inodes = [f.stat().st_ino for f in files]
    logmirror.store(tmp_path, 1, logmirror.split("one\n" + _rows([0]) + "two\n" + _rows([1])))
    assert [f.stat().st_ino for f in files] == inodes
    assert (tmp_path / "job.log").read_text() == "one\ntwo\n"
    assert (tmp_path / "metrics.jsonl").read_text().count("step") == 2


def test_an_attempt_after_one_on_another_target_goes_on_after_its_lines(tmp_path: Path) -> None:
    """Attempt 1 ran on an ssh host, whose log came home into job.log directly (no mirror of
    it here); attempt 2 on Kaggle or Modal goes on after it. Its lines were once held back
    until its own text outgrew the whole job.log, which was then replaced by it."""
    (tmp_path / "job.log").write_text("ssh 1\nssh 2\n")
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n')
    logmirror.store(tmp_path, 2, logmirror.split("kaggle 1\n" + _rows([1])))
    logmirror.store(tmp_path, 2, logmirror.split("kaggle 1\nkaggle 2\n" + _rows([1, 2])))
    assert (tmp_path / "job.log").read_text() == "ssh 1\nssh 2\nkaggle 1\nkaggle 2\n"
    assert [line.split(",")[0] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == \
        ['{"step": 0}', '{"step": 1', '{"step": 2']


def test_a_joined_file_cut_off_between_its_appends_is_made_whole(tmp_path: Path) -> None:
    logmirror.store(tmp_path, 1, logmirror.split("one\n"))
    logmirror.store(tmp_path, 2, logmirror.split("two\n"))
    (tmp_path / "job.log").write_text("one\n")  # the append to the joined file never happened
    logmirror.store(tmp_path, 2, logmirror.split("two\nthree\n"))
    assert (tmp_path / "job.log").read_text() == "one\ntwo\nthree\n"
