"""Following a log that is huge, grows, gets truncated or is replaced by rotation."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.display.logtail import Follower, fold_returns, tail_lines


def test_the_end_of_a_big_log_comes_without_reading_it_all(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    with open(log, "wb") as f:
        for i in range(200_000):
            f.write(f"line {i}\n".encode())
        f.write(b"partial without newline")
    lines, offset = tail_lines(log, 5)
    assert lines == [f"line {i}" for i in range(199_995, 200_000)]
    assert offset == log.stat().st_size - len(b"partial without newline")


def test_short_files_empty_files_and_missing_files(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    assert tail_lines(log, 10) == ([], 0)
    log.write_bytes(b"")
    assert tail_lines(log, 10) == ([], 0)
    log.write_bytes(b"one\ntwo\n")
    assert tail_lines(log, 10)[0] == ["one", "two"]


def test_follow_appends_truncation_and_rotation(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_bytes(b"a\nb\n")
    f = Follower(log)
    assert f.start(10) == ["a", "b"]
    with open(log, "ab") as w:
        w.write(b"c\nhalf")
    assert f.read() == (["c"], False)
    with open(log, "ab") as w:
        w.write(b" done\n")
    assert f.read() == (["half done"], False)
    log.write_bytes(b"x\n")  # truncated and rewritten, shorter than before
    assert f.read() == (["x"], True)
    rotated = tmp_path / "job.log.1"
    os.rename(log, rotated)
    log.write_bytes(b"fresh\n")  # a new file under the same name
    lines, reset = f.read()
    assert reset and lines == ["fresh"]


def test_escape_sequences_never_leave_the_follower(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_bytes(b"ok\x1b]52;c;ZXZpbA==\x07 \x1b[2J\x9b31m done\n")
    lines = Follower(log).start(5)
    assert lines == ["ok  done"]


_CHUNKS = st.lists(st.sampled_from([b"\x1b]0;", b"\x1bP", b"\x1b_", b"\x9d", b"\x90", b"\x9b2J", b"\x07",
                                    b"\x1b\\", b"\r", b"\r\n", b"text", "\u202e".encode(), b"\xff", b"\n"]),
                   max_size=40).map(b"".join)


@settings(max_examples=examples(100), deadline=None)
@given(garbage=_CHUNKS, more=_CHUNKS)
def test_the_tail_keeps_every_line_the_job_wrote_whatever_it_wrote(tmp_path_factory, garbage: bytes,
                                                                   more: bytes) -> None:
    """What the dashboard's log pane shows: one entry per line written, none holding a newline
    or a control, and a line written after any garbage arrives intact."""
    import re

    log = tmp_path_factory.mktemp("tail") / "job.log"
    log.write_bytes(garbage + b"\nMARKER after garbage\n")
    follower = Follower(log)
    first = follower.start(10_000)
    with open(log, "ab") as f:
        f.write(more + b"\nlast line\n")
    lines = first + follower.read()[0]
    assert len(lines) == garbage.count(b"\n") + more.count(b"\n") + 4
    assert lines[garbage.count(b"\n") + 1] == "MARKER after garbage" and lines[-1] == "last line"
    assert not any(re.search("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", line) for line in lines)


def test_a_progress_bar_shows_its_last_state() -> None:
    assert fold_returns(b"  0%\r 50%\r100%\n") == b"100%\n"
    assert fold_returns(b"100%\r\nnext\r\n") == b"100%\nnext\n"  # a CR before the newline blanks nothing
    assert fold_returns(b"step 3\r\r\nhalf\r") == b"step 3\nhalf"
    assert fold_returns(b"plain\n") == b"plain\n"


_WITH_RETURNS = st.one_of(st.binary(max_size=300),
                          st.lists(st.sampled_from([b"\r", b"\n", b"\r\n", b"\r\r", b"a", b"bc", b" 50%",
                                                    b"\x1b[2K", b"\xff"]), max_size=60).map(b"".join))


@settings(max_examples=examples(300), deadline=None)
@given(data=_WITH_RETURNS)
def test_folding_any_bytes_keeps_each_line_as_its_last_segment(data: bytes) -> None:
    """For any bytes: no carriage return comes out, as many lines come out as went in, and
    each line shown is (a suffix of) what the job wrote after that line's last return."""
    out = fold_returns(data)
    assert b"\r" not in out
    lines_in, lines_out = data.split(b"\n"), out.split(b"\n")
    assert len(lines_out) == len(lines_in)
    for shown, written in zip(lines_out, lines_in):
        last_segment = written.rstrip(b"\r").split(b"\r")[-1]
        assert last_segment.endswith(shown)
        assert shown == last_segment  # as a terminal shows a redrawn bar: nothing of it cut


@settings(max_examples=examples(100), deadline=None)
@given(data=_WITH_RETURNS)
def test_the_tail_and_the_follower_fold_what_they_read(tmp_path_factory, data: bytes) -> None:
    """What `gpu logs -f` and the dashboard show is the folded, filtered log, line for line."""
    from core.display.sanitize import printable

    log = tmp_path_factory.mktemp("fold") / "job.log"
    log.write_bytes(data + b"\n")
    expected = [printable(line) for line in fold_returns(data).split(b"\n")]
    assert tail_lines(log, 100_000)[0] == expected
    assert Follower(log).read()[0] == expected  # from the start, as appended bytes are read
