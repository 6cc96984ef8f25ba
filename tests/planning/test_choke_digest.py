"""The plan's digest binds every field an approval rests on (issue 40).

An approval binds to the digest, so a field left out of it is a field an agent may change after
a person said yes. For every digested field (DIGEST_FIELDS) and every optional key `digest()`
binds when present, a change of that field alone changes the digest; a field outside the
digest (the digest itself, where the plan says a file is) does not. The list of bound fields is
written out here: a field dropped from the digest, or a new one added without a test, fails.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.planning import plan as planmod
from core.planning.plan import DIGEST_FIELDS, digest

# The fields an approval binds, written out: a change to DIGEST_FIELDS must change this too.
BOUND = ("bundle_hash", "command", "env", "secrets", "data", "target", "gpu", "vram_gb", "hours")
# Bound when present (absent: the digest of an older plan is unchanged).
OPTIONAL = ("smoke", "resources", "data_sources", "image", "packages", "not_secret", "extras", "resume")

BASE = {
    "bundle_hash": "b" * 64,
    "workdir": ".",
    "command": ["python", "train.py", "--lr", "3e-4"],
    "python_file": True,
    "env": {"EPOCHS": "3"},
    "secrets": ["HF_TOKEN"],
    "data": {"imagenet": "d" * 64},
    "target": "local",
    "gpu": "1x RTX 4090",
    "vram_gb": 16,
    "hours": 1.0,
}

# For each field, a value that differs from BASE's (and, for an optional one, from absent).
CHANGED = {
    "bundle_hash": "c" * 64,
    "command": ["python", "train.py", "--lr", "3e-3"],
    "env": {"EPOCHS": "4"},
    "secrets": ["HF_TOKEN", "WANDB_API_KEY"],
    "data": {"imagenet": "e" * 64},
    "target": "lab",
    "gpu": "1x A100",
    "vram_gb": 80,
    "hours": 2.0,
    "smoke": True,
    "resources": {"gpus": 2},
    "data_sources": {"imagenet": "hf://datasets/o/n@" + "a" * 40},
    "image": "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
    "packages": ["torch==2.5.1"],
    "not_secret": ["EPOCHS"],
    "extras": ["train"],
    "resume": {"attempt": 2, "checkpoint": "f" * 64},
}


def test_the_digested_fields_are_the_ones_written_here() -> None:
    assert DIGEST_FIELDS == BOUND


@pytest.mark.parametrize("field", [*BOUND, *OPTIONAL])
def test_a_change_of_any_bound_field_alone_changes_the_digest(field: str) -> None:
    changed = {**copy.deepcopy(BASE), field: CHANGED[field]}
    assert changed[field] != BASE.get(field)
    assert digest(changed) != digest(BASE), f"{field} does not bind the digest"


@pytest.mark.parametrize("field", ["gpu", "target", "hours", "vram_gb"])
def test_two_plans_differing_only_in_where_and_on_what_get_two_digests(field: str) -> None:
    """The mutation experiment's case: `gpu` out of DIGEST_FIELDS gave one digest to both."""
    a = dict(BASE)
    b = {**BASE, field: CHANGED[field]}
    assert digest(a) != digest(b)


@pytest.mark.parametrize("field", OPTIONAL)
def test_an_optional_field_binds_only_when_present(field: str) -> None:
    """Absent and empty are the same plan (an older plan's digest holds); present binds."""
    empty = {**BASE, field: type(CHANGED[field])()}  # False, {}, [], ""
    assert digest(empty) == digest(BASE)
    assert digest({**BASE, field: CHANGED[field]}) != digest(BASE)


def test_what_is_not_an_approval_s_business_leaves_the_digest() -> None:
    other = {**BASE, "digest": "0" * 64, "workdir": "sub", "python_file": False}
    assert digest(other) == digest(BASE)


def test_build_plan_digests_the_plan_it_returns(tmp_path) -> None:
    """The digest a plan carries is the digest of its own fields (nothing bound is added after)."""
    from core.config.request import JobRequest

    class _Bundle:
        hash = "b" * 64
        project_rel = "."

    req = JobRequest(project_dir=str(tmp_path), script="train.py", hours=1.0)
    built = planmod.build_plan(req, _Bundle(), "local", "1x A100", {})
    assert built["digest"] == digest(built)
    other = planmod.build_plan(req, _Bundle(), "local", "1x H100", {})
    assert other["digest"] != built["digest"]


_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                       lambda kids: st.lists(kids, max_size=3)
                       | st.dictionaries(st.text(max_size=5), kids, max_size=3), max_leaves=6)


@given(field=st.sampled_from([*BOUND, *OPTIONAL]), value=_values)
def test_any_new_value_of_a_bound_field_changes_the_digest(field: str, value) -> None:
    """For any value: if the canonical plan (with the field) differs, so does the digest."""
    before = {**BASE, **({field: CHANGED[field]} if field in OPTIONAL else {})}
    after = {**before, field: value}
    if field in OPTIONAL and not value:
        after.pop(field)  # absent and empty are one plan
    same = planmod.canonical_bytes(_bound(after)) == planmod.canonical_bytes(_bound(before))
    assert (digest(after) == digest(before)) == same


def _bound(plan: dict) -> dict:
    """The bound part of a plan, as this test (not plan.py) reads the rule."""
    doc = {k: plan.get(k) for k in BOUND}
    doc.update({k: plan[k] for k in OPTIONAL if plan.get(k)})
    if "smoke" in doc:
        doc["smoke"] = True  # a smoke run binds as a flag: its time cap is the rules' own
    return doc
