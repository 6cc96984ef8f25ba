"""The plan digest's exact form (issue 40: survivors of `python bench/mutation.py --module plan`).

tests/planning/test_choke_digest.py shows that a change of each bound field changes the digest. These
pin what it is computed over, so that the mutants that still tell a smoke run from another
(`doc["smoke"] = None`, a bound key spelled otherwise, `ensure_ascii` or the separators changed)
are caught too: an approval in flight, or a plan stored before an upgrade, keeps its digest only
if the document and its bytes stay exactly these.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from core.planning.plan import digest

PLAN = {
    "bundle_hash": "b" * 64, "workdir": ".", "command": ["python", "entraîner.py", "--lr", "3e-4"],
    "env": {"EPOCHS": "3", "LANG": "fr_FR.UTF-8", "A_FIRST": "é"}, "secrets": ["HF_TOKEN"],
    "data": {"données": "d" * 64, "raw": "/data/caf\udce9"}, "target": "local", "gpu": "1x RTX 4090",
    "vram_gb": 16, "hours": 1.5, "smoke": True, "resources": {"gpus": 2, "partition": "gpu"},
    "data_sources": {"données": "hf://datasets/o/n@" + "a" * 40}, "image": "python:3.11-slim",
    "packages": ["torch==2.5.1"], "not_secret": ["EPOCHS"], "extras": ["train"],
    "resume": {"attempt": 2, "checkpoint": "f" * 64},
}


def test_the_digest_is_sha256_of_this_document_in_these_bytes() -> None:
    """Written out: the bound fields and every optional key under its own name with its own
    value, keys sorted, no spaces, non-ASCII as itself in UTF-8, a non-UTF-8 path (surrogate
    escape) as its own byte."""
    doc = {k: PLAN[k] for k in ("bundle_hash", "command", "env", "secrets", "data", "target", "gpu",
                                "vram_gb", "hours", "smoke", "resources", "data_sources", "image",
                                "packages", "not_secret", "extras", "resume")}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert '"smoke":true' in text and "entraîner" in text
    raw = text.encode("utf-8", "surrogateescape")
    assert b"caf\xe9" in raw
    assert digest(PLAN) == hashlib.sha256(raw).hexdigest()
    # and the value itself, so a change of form shows as a change here, not only in a formula
    assert digest(PLAN) == "49a4b17835da6f080e2185a593fdc2c3d22f6c2edbafc68128c4a1205f8ca7c4"


def test_key_order_inside_a_value_does_not_change_the_digest() -> None:
    """The same plan read back with its mappings in another order (a store, JSON round trips)
    has the same digest: an approval is not lost to insertion order."""
    reordered = {k: (dict(reversed(list(v.items()))) if isinstance(v, dict) else v)
                 for k, v in reversed(list(PLAN.items()))}
    assert reordered == PLAN and list(reordered["env"]) != list(PLAN["env"])
    assert digest(reordered) == digest(PLAN)


@pytest.mark.parametrize("key, other", [
    ("resume", {"attempt": 3, "checkpoint": "f" * 64}),
    ("resources", {"gpus": 4, "partition": "gpu"}),
    ("data_sources", {"données": "hf://datasets/o/n@" + "b" * 40}),
    ("image", "python:3.12-slim"),
])
def test_another_value_of_an_optional_key_is_another_digest(key: str, other: object) -> None:
    """Not only present against absent: a resumed job's next attempt, another GPU count, another
    pinned commit or image is a new plan."""
    assert digest({**PLAN, key: other}) != digest(PLAN)
