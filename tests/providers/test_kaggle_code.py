"""The chain of code data sets a kaggle target keeps per project (core/providers/kaggle/code.py):
which data set a bundle adds, which ones its kernel mounts, and when a new base is cut because
Kaggle caps a kernel's data sources. Pure planning: the end-to-end path (uploads, the kernel
building the code folder) is tests/providers/test_kaggle.py's, against the fake Kaggle."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from core.errors import UserError
from core.providers.kaggle.code import plan
from tests.props import examples


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def bundle(files: dict[str, str]) -> tuple[str, list[str]]:
    """A bundle's hash and its objects' digests, from its files' contents."""
    digests = [h(files[k]) for k in sorted(files)]
    return h(repr(sorted(files.items()))), digests


def test_a_change_adds_a_delta_of_the_changed_file_and_mounts_only_what_it_needs() -> None:
    files = {"train.py": "v1", "a.py": "a", "b.py": "b", "c.py": "c"}
    chain: list[dict] = []
    b1, d1 = bundle(files)
    chain, base, mounts = plan(chain, b1, d1, room=3)
    assert mounts == [base["slug"]] and sorted(base["objects"]) == sorted(d1)

    files["train.py"] = "v2"
    b2, d2 = bundle(files)
    chain, delta, mounts = plan(chain, b2, d2, room=3)
    assert delta["objects"] == [h("v2")]  # only the changed file's content
    assert mounts == [delta["slug"], base["slug"]] and chain == [base, delta]

    files["train.py"] = "v3"  # the same file again: the previous delta is no longer mounted
    b3, d3 = bundle(files)
    chain, delta3, mounts = plan(chain, b3, d3, room=3)
    assert delta3["objects"] == [h("v3")] and mounts == [delta3["slug"], base["slug"]]

    again, own, mounts_again = plan(chain, b2, d2, room=3)  # an earlier bundle: its own data set
    assert own is delta and again == chain and mounts_again == [delta["slug"], base["slug"]]


def test_a_delta_that_would_pass_the_cap_cuts_a_new_base() -> None:
    files = {"a.py": "a", "b.py": "b", "c.py": "c", "d.py": "d"}
    b, d = bundle(files)
    chain, _, _ = plan([], b, d, room=3)
    files["a.py"] = "a2"
    chain, _, mounts = plan(chain, *bundle(files), room=3)
    files["b.py"] = "b2"
    chain, _, mounts = plan(chain, *bundle(files), room=3)
    assert len(mounts) == 3  # its own (b2), a2's delta, and the base (c, d): at the cap
    files["c.py"] = "c2"
    b4, d4 = bundle(files)
    chain, new_base, mounts = plan(chain, b4, d4, room=3)  # four would be needed: a new base
    assert chain == [new_base] and mounts == [new_base["slug"]]
    assert sorted(new_base["objects"]) == sorted(d4)
    files["d.py"] = "d2"
    chain, after, mounts = plan(chain, *bundle(files), room=3)  # deltas grow from the new base
    assert after["objects"] == [h("d2")] and mounts == [after["slug"], new_base["slug"]]


def test_no_room_for_code_is_a_clear_error() -> None:
    with pytest.raises(UserError) as err:
        plan([], *bundle({"a.py": "a"}), room=0)
    assert "fewer --data" in err.value.fix


def test_data_sets_are_named_by_what_they_hold() -> None:
    """Two chains never claim one name for different contents, and the same content gets the
    same name (so a data set Kaggle already has is found, not made twice)."""
    one = {"a.py": "a", "b.py": "b"}
    b1, d1 = bundle(one)
    _, first, _ = plan([], b1, d1, room=5)
    _, same, _ = plan([], b1, d1, room=5)
    assert same["slug"] == first["slug"]
    chain, _, _ = plan([], *bundle({"a.py": "a"}), room=5)
    _, as_delta, _ = plan(chain, b1, d1, room=5)  # the same bundle holding fewer objects
    assert as_delta["slug"] != first["slug"] and as_delta["objects"] == [h("b")]


@hsettings(max_examples=examples(100), deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from("abcdef"), st.sampled_from("0123"), min_size=1),
                min_size=1, max_size=12),
       st.integers(min_value=1, max_value=4))
def test_every_bundle_mounts_all_its_objects_within_the_room(versions: list[dict], room: int) -> None:
    """Whatever the history, a kernel mounts at most `room` code data sets, its own first, and
    they hold every object its manifest names; data sets of one chain never hold one object twice."""
    chain: list[dict] = []
    for files in versions:
        b, digests = bundle({k: f"{k}={v}" for k, v in files.items()})
        chain, own, mounts = plan(chain, b, digests, room)
        by_slug = {s["slug"]: s for s in chain}
        assert mounts[0] == own["slug"] and len(mounts) <= room and len(set(mounts)) == len(mounts)
        assert set(digests) <= {d for s in mounts for d in by_slug[s]["objects"]}
        held = [d for s in chain for d in s["objects"]]
        assert len(held) == len(set(held))
