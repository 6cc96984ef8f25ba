"""An exit record is the job's to write (its folder on a host, its stream home from a cluster):
whatever it holds, the supervisor reads a number or nothing and a bounded text from it, never
an exception each tick (`{"code": "0"}` made every poll of the job raise)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.providers.base import MAX_DETAIL, Poll, exited_poll

pytestmark = pytest.mark.quick

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3000),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
DOC = st.one_of(JSON, st.fixed_dictionaries({"code": JSON, "error": JSON}))


@settings(max_examples=300, deadline=None)
@given(DOC)
def test_any_exit_record_reads_as_a_status_or_none_and_a_bounded_text(doc: object) -> None:
    poll = exited_poll(doc)
    assert poll.phase == "exited"
    assert poll.exit_code is None or (type(poll.exit_code) is int and -256 < poll.exit_code < 256)
    assert isinstance(poll.detail, str) and len(poll.detail) <= MAX_DETAIL


@settings(max_examples=200, deadline=None)
@given(JSON, JSON)
def test_a_poll_built_from_any_fields_holds_a_status_or_none(code: object, detail: object) -> None:
    poll = Poll("exited", exit_code=code, detail=detail)  # type: ignore[arg-type]
    assert poll.exit_code is None or type(poll.exit_code) is int
    assert isinstance(poll.detail, str) and len(poll.detail) <= MAX_DETAIL


def test_what_a_job_wrote_is_read_as_it_means() -> None:
    assert exited_poll({"code": 3, "error": "boom"}) == Poll("exited", exit_code=3, detail="boom")
    assert exited_poll({"code": -9}).detail == "killed by signal 9"
    forged = exited_poll({"code": "0"})
    assert forged.exit_code is None and "not a number ('0')" in forged.detail
    assert exited_poll({"code": True}).exit_code is None
