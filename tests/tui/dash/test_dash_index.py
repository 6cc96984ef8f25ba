"""The dashboard's job index (tui/dash/jobindex.py): the order kept as jobs arrive and the
search texts kept per job must show exactly what sorting and filtering every job afresh would."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from core.jobs.states import State
from tests.props import examples
from tui.dash.filtering import JobFilter
from tui.dash.jobindex import JobIndex


@dataclass(frozen=True)
class Row:
    """A job's row as the index reads it (the fields the table's order and filter use, and
    the sweep a point belongs to)."""

    id: str
    short_id: str
    name: str
    state: State
    provider: str | None
    created_at: float
    group_id: str | None = None


WORDS = ["train", "eval", "llama", "sweep", "a100", "local", "kaggle", "run", "done", "fail"]
rows = st.builds(
    lambda n, name, state, provider, t: Row(f"{n:04x}" + "0" * 28, f"{n:04x}0000", name, state, provider, float(t)),
    st.integers(0, 40), st.sampled_from(WORDS).map(lambda w: f"{w}-x"), st.sampled_from(list(State)),
    st.sampled_from([None, "local", "kaggle", "lab-a100"]), st.integers(0, 5))  # few times: many ties
filters = st.lists(st.sampled_from(WORDS + [f"!{w}" for w in WORDS] + ["ru", "!", "0000"]), max_size=3).map(" ".join)


def naive(latest: dict[str, Row], job_filter: JobFilter) -> list[str]:
    return [r.id for r in sorted(latest.values(), key=lambda r: -r.created_at) if job_filter.matches(r)]


@settings(max_examples=examples(200), deadline=None)
@given(first=st.lists(rows, max_size=30), later=st.lists(rows, max_size=30), text=filters)
def test_the_kept_order_and_texts_show_what_a_fresh_sort_and_filter_would(first, later, text) -> None:
    index = JobIndex()
    latest: dict[str, Row] = {}
    loaded = list({r.id: r for r in first}.values())  # the first read: one row per job,
    loaded.sort(key=lambda r: -r.created_at)  # newest first, as the store reads them
    asyncio.run(index.load(loaded))
    latest.update((r.id, r) for r in loaded)
    for r in later:  # then rows change (a renamed or moved-on job) and new jobs arrive
        if r.id in latest:
            r = Row(r.id, r.short_id, r.name, r.state, r.provider, latest[r.id].created_at)
        index.put(r)
        latest[r.id] = r
    job_filter = JobFilter.parse(text)
    ids, keys = index.matching(job_filter)
    want = naive(latest, job_filter)
    # the same jobs, newest first (jobs of the same age may come in either order)
    assert sorted(ids) == sorted(want) and len(ids) == len(set(ids))
    assert keys == [-latest[i].created_at for i in ids] and keys == sorted(keys)
    assert [-latest[i].created_at for i in want] == keys
    assert asyncio.run(index.amatching(job_filter)) == (ids, keys)
    assert +index.counts == Counter(r.state for r in latest.values())
    assert index.newest(5) == [latest[i] for i in index.order[:5]]


def test_a_changed_row_is_found_by_its_new_words_and_no_longer_by_its_old_ones() -> None:
    index = JobIndex()
    job = Row("ab" * 16, "abababab", "alpha-run", State.RUNNING, "local", 1.0)
    index.put(job)
    assert index.matching(JobFilter.parse("alpha running"))[0] == [job.id]
    index.put(Row(job.id, job.short_id, "omega-run", State.FAILED, "kaggle", 1.0))
    assert index.matching(JobFilter.parse("alpha"))[0] == []
    assert index.matching(JobFilter.parse("running"))[0] == []
    assert index.matching(JobFilter.parse("omega failed kaggle"))[0] == [job.id]
    assert index.counts[State.RUNNING] == 0 and index.counts[State.FAILED] == 1


def test_the_first_read_keeps_the_store_order_of_jobs_of_the_same_age() -> None:
    same = [Row(f"{n:02x}" * 16, f"{n:02x}" * 4, f"j{n}", State.DONE, None, 5.0) for n in (9, 3, 7)]
    index = JobIndex()
    asyncio.run(index.load(same))
    assert index.order == [r.id for r in same]
    newer = Row("ee" * 16, "eeeeeeee", "new", State.ROUTING, None, 5.0)
    index.put(newer)  # a job read later, as old as them: the newer row goes first (rowid DESC)
    assert index.order[0] == newer.id
