"""A secret's value is masked in every form, wherever it sits in a line (issue 40).

core/runtime/launch.Masker (with core/runtime/redact.py) is the one filter of a job's log. For
each form the security table lists (raw, URL-encoded, base64 standard and URL-safe and inside a
Basic header, base32 in either case, hex plain, upper, `:` and space separated, escaped) and
each place in a line (alone, start, middle, end, glued to other text), the form never comes out
and the mask does. A form dropped from the masker, or a search anchored to the line's start,
fails its case.
"""

from __future__ import annotations

import base64
import urllib.parse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.runtime.launch import Masker
from tests.props import examples

SECRET = "hf_Zq8pL2mN4xR7vT1wY6sK9cB3dF5gH0jA"
MASK = b"[secret]"


def forms(value: str) -> dict[str, bytes]:
    raw = value.encode()
    return {
        "raw": raw,
        "url-encoded": urllib.parse.quote(value, safe="").encode(),
        "base64": base64.b64encode(raw),
        "base64 url-safe": base64.urlsafe_b64encode(raw),
        "base64 unpadded": base64.b64encode(raw).rstrip(b"="),
        "base32": base64.b32encode(raw),
        "base32 lower": base64.b32encode(raw).lower(),
        "hex": raw.hex().encode(),
        "hex upper": raw.hex().upper().encode(),
        "hex colons": raw.hex(":").encode(),
        "hex spaces": raw.hex(" ").encode(),
        "escaped": "".join(f"\\x{b:02x}" for b in raw).encode(),
    }


PLACES = {"alone": b"%s", "start": b"%s is it", "middle": b"token: %s (from env)", "end": b"the key is %s",
          "glued": b"key=%s;"}
CASES = [(f, p) for f in forms(SECRET) for p in PLACES]


def _masked(values: list[str], line: bytes) -> bytes:
    m = Masker(values)
    return m.feed(line + b"\n") + m.flush()


@pytest.mark.parametrize("form, place", CASES, ids=[f"{f}-{p}" for f, p in CASES])
def test_every_form_is_masked_wherever_it_sits(form: str, place: str) -> None:
    shown = forms(SECRET)[form]
    out = _masked([SECRET], PLACES[place] % shown)
    assert shown not in out, out
    assert MASK in out, out


def test_a_basic_header_hides_the_secret_inside_it() -> None:
    header = b"Authorization: Basic " + base64.b64encode(b"ada:" + SECRET.encode())
    out = _masked([SECRET], header)
    assert MASK in out and base64.b64encode(b"ada:" + SECRET.encode()) not in out, out
    assert base64.b64decode(out.split(b"Basic ")[1].split(b"[")[0] + b"==", validate=False).find(SECRET.encode()) < 0


def test_what_is_not_the_secret_is_left_alone() -> None:
    line = b"step 10 loss 0.25 lr 3e-4 hf_other_value_not_ours"
    assert _masked([SECRET], line) == line + b"\n"


_secret = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-",
                  min_size=12, max_size=40)


@settings(deadline=None, max_examples=examples(40))  # a masker compiles its patterns per value: the first is slow
@given(value=_secret, form=st.sampled_from(sorted(forms(SECRET))), place=st.sampled_from(sorted(PLACES)))
def test_any_secret_in_any_form_and_place_is_masked(value: str, form: str, place: str) -> None:
    shown = forms(value)[form]
    out = _masked([value], PLACES[place] % shown)
    assert shown not in out, (value, form, out)
    assert MASK in out
