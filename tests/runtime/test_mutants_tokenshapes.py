"""A key block is hidden to its END line, and what follows it shows (issue 40: the survivor of
`python bench/mutation.py --module tokenshapes`: the END line looked for with `.match` at the
BEGIN line's end, so it was never found after the key's body and everything to the end of the
text was hidden: the key still, but also the message's own words after it); and the rest of its
survivors: overlapping parts hidden as one, touching ones as two, every secret of a text, the
added finders (the token table) used unless `table=False`, a stray END line before the key."""

from __future__ import annotations

import pytest

from core.runtime import tokenshapes
from core.runtime.tokenshapes import mask, spans

BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\nq1w2e3r4t5y6u7i8o9p0\n"


def test_a_key_block_is_hidden_to_its_end_line_only() -> None:
    for kind in ("", "RSA ", "OPENSSH ", "ENCRYPTED "):
        block = f"-----BEGIN {kind}PRIVATE KEY-----\n{BODY}-----END {kind}PRIVATE KEY-----"
        text = f"config error in key.pem:\n{block}\nsee docs/secrets.md"
        assert mask(text) == "config error in key.pem:\n[hidden: a private key block]\nsee docs/secrets.md"
        start = text.index("-----BEGIN")
        assert (start, start + len(block), "a private key block") in spans(text)


def test_a_key_block_without_its_end_is_hidden_to_the_end_of_the_text() -> None:
    text = f"cut off: -----BEGIN PRIVATE KEY-----\n{BODY}"
    assert mask(text) == "cut off: [hidden: a private key block]"


# -- the rest of `python bench/mutation.py --module tokenshapes`'s survivors: how the parts that
# -- the finders find become one text, and the added finders (the token table) -------------------

PLAIN = "abcdefghijklmnopqrstuvwxyz0123456789"  # no shape of SECRET_VALUES in it


@pytest.fixture
def finds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, str]]:
    """An added finder that finds what the test puts in the returned list (the token table's
    place, the table itself left out)."""
    found: list[tuple[int, int, str]] = []
    monkeypatch.setattr(tokenshapes, "_FINDERS", [])
    tokenshapes.add_finder(lambda text: list(found))
    return found


def test_overlapping_parts_are_hidden_as_one_and_touching_parts_as_two(finds) -> None:
    """A chain of parts, each overlapping the one before (though not the first), is one hidden
    part named by the first; a part inside another adds nothing; parts that only touch, and
    parts apart, are hidden each, with the text between them shown."""
    finds[:] = [(2, 6, "a"), (4, 9, "b"), (8, 12, "c")]
    assert tokenshapes.mask(PLAIN) == "ab[hidden: a]" + PLAIN[12:]
    finds[:] = [(2, 12, "a"), (3, 5, "b"), (14, 16, "c")]
    assert tokenshapes.mask(PLAIN) == "ab[hidden: a]mn[hidden: c]" + PLAIN[16:]
    finds[:] = [(2, 6, "a"), (6, 9, "b")]
    assert tokenshapes.mask(PLAIN) == "ab[hidden: a][hidden: b]" + PLAIN[9:]
    finds[:] = [(0, 2, "a"), (4, 6, "b"), (8, 10, "c"), (12, 14, "d")]
    assert tokenshapes.mask(PLAIN) == "[hidden: a]cd[hidden: b]gh[hidden: c]kl[hidden: d]" + PLAIN[14:]
    finds[:] = [(2, 6, "a"), (3, 9, "b"), (20, 25, "c")]
    assert tokenshapes.mask(PLAIN) == "ab[hidden: a]jklmnopqrst[hidden: c]" + PLAIN[25:]


def test_two_secrets_apart_in_one_text_are_both_hidden() -> None:
    one, two = "ghp_" + "a" * 36, "AKIA" + "B" * 16
    assert tokenshapes.mask(f"first {one} then {two} end", table=False) == \
        "first [hidden: a GitHub token] then [hidden: an AWS access key] end"


def test_the_added_finders_count_unless_asked_not_to(finds) -> None:
    """`spans` and `mask` use the token table (an added finder) by default, and not with
    table=False."""
    finds[:] = [(3, 7, "a table token")]
    assert tokenshapes.spans(PLAIN) == [(3, 7, "a table token")]
    assert tokenshapes.spans(PLAIN, table=False) == []
    assert tokenshapes.mask(PLAIN) == "abc[hidden: a table token]" + PLAIN[7:]
    assert tokenshapes.mask(PLAIN, table=True) == "abc[hidden: a table token]" + PLAIN[7:]
    assert tokenshapes.mask(PLAIN, table=False) == PLAIN


def test_a_finder_is_added_once(finds) -> None:
    def more(text: str) -> list[tuple[int, int, str]]:
        return [(0, 1, "more")]

    tokenshapes.add_finder(more)
    tokenshapes.add_finder(more)
    assert tokenshapes._FINDERS.count(more) == 1
    assert tokenshapes.spans(PLAIN) == [(0, 1, "more")]


def test_an_end_line_before_the_key_does_not_end_it() -> None:
    """A stray END line earlier in the text (a key quoted twice, the first cut): the block
    still runs from its BEGIN to the END after it, and the key's body never shows."""
    block = f"-----BEGIN PRIVATE KEY-----\n{BODY}-----END PRIVATE KEY-----"
    text = f"-----END PRIVATE KEY----- then {block} done"
    assert tokenshapes.mask(text, table=False) == \
        "-----END PRIVATE KEY----- then [hidden: a private key block] done"
