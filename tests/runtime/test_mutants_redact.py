"""The forms a secret is masked in, each written out, and the pattern's fast path equal to its
slow one (issue 40: `python bench/mutation.py --module redact`).

tests/runtime/test_masking.py, tests/runtime/test_mask_encodings.py and tests/runtime/test_choke_masking.py check that a
secret never comes out of the log filter, on samples; here each form builder of
core/runtime/redact.py is pinned on an example a reader can check by hand (hex with its
separators and xxd's groups, base32 and base64 at each byte alignment, the escaped spellings),
and held to its rule as a property: the base64 or base32 of any text that holds the secret
contains one of its forms, whatever comes before and after. Then `SecretPattern`: which values
are looked for, masking a long log through windows gives what masking it whole gives, a mask
that re-forms a secret is masked again, and what is kept out when it never stops.
"""

from __future__ import annotations

import base64
import functools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from core.runtime import redact
from core.runtime.redact import MASK, WITHHELD, SecretPattern
from tests.props import examples


def test_hex_forms_plain_separated_and_in_xxd_groups_either_case() -> None:
    assert redact._hex_forms(b"\xde\xad\xbe\xef\x01") == {
        b"deadbeef01", b"de:ad:be:ef:01", b"de ad be ef 01", b"dead beef 01", b"de adbe ef01",
        b"DEADBEEF01", b"DE:AD:BE:EF:01", b"DE AD BE EF 01", b"DEAD BEEF 01", b"DE ADBE EF01"}


def test_base32_forms_at_each_alignment_either_case() -> None:
    # b32("secret") = ONSWG4TFOQ======; inside longer base32 at byte offsets 0..4 of a 5-byte group
    upper = {b"ONSWG4TFOQ======", b"ONSWG4TFOQ", b"ONSWG4TFO", b"ZWKY3SMV2", b"GZLDOJSX", b"43FMNZGK5",
             b"TMVRXEZLU"}
    assert redact._base32_forms(b"secret") == upper | {f.lower() for f in upper}


def test_base64_forms_and_cores_at_each_alignment() -> None:
    # b64("secret") = c2VjcmV0 (no padding: 6 bytes); at offsets 1 and 2 of a 3-byte group
    assert redact._base64_forms(b"secret") == {b"c2VjcmV0", b"zZWNyZX", b"NlY3Jld"}
    assert redact._base64_forms(b"sec") == {b"c2Vj", b"NlY", b"zZW"}
    # "ab": YWI= ; padded whole, unpadded, and the characters that depend on its bytes alone
    assert redact._base64_forms(b"ab") == {b"YWI=", b"YWI", b"YW", b"Fi", b"hY"}
    # the standard and URL-safe alphabets part at + / and - _
    assert redact._base64_forms(b"\xfb\xff") == {b"+/8=", b"+/8", b"+/", b"v/", b"7/", b"-_8=", b"-_8", b"-_", b"v_", b"7_"}
    assert redact._base64_cores(b"ab") == {b"YW", b"Fi", b"hY"}
    assert redact._base64_cores(b"a") == set()  # no character depends on one byte alone


@given(raw=st.binary(min_size=6, max_size=24), before=st.binary(max_size=7), after=st.binary(max_size=7))
def test_any_base64_holding_the_secret_holds_one_of_its_forms(raw: bytes, before: bytes, after: bytes) -> None:
    forms = redact._base64_forms(raw)
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        text = encode(before + raw + after)
        assert any(f in text for f in forms), (raw, before, after)
        if not before and not after:
            assert text in forms and text.rstrip(b"=") in forms
    cores = redact._base64_cores(raw)
    assert all(any(c in encode(before + raw + after) for c in cores)
               for encode in (base64.b64encode, base64.urlsafe_b64encode))


@given(raw=st.binary(min_size=6, max_size=24), before=st.binary(max_size=9), after=st.binary(max_size=9))
def test_any_base32_holding_the_secret_holds_one_of_its_forms(raw: bytes, before: bytes, after: bytes) -> None:
    forms = redact._base32_forms(raw)
    text = base64.b32encode(before + raw + after)
    assert any(f in text for f in forms) and any(f in text.lower() for f in forms), (raw, before, after)


def test_the_fixed_forms_of_a_value_are_these_and_none_shorter_than_four() -> None:
    assert redact.fixed_forms("ab1") == {
        b"616231", b"61:62:31", b"61 62 31", b"6162 31", b"61 6231",
        b"MFRDC===", b"MFRDC", b"MFRD", b"CYRR", b"QWEM", b"BMIY", b"YLCG",
        b"mfrdc===", b"mfrdc", b"mfrd", b"cyrr", b"qwem", b"bmiy", b"ylcg", b"YWIx"}
    value = 'pa"ss\\w\u00f6rd'
    forms = redact.fixed_forms(value)
    assert {value.encode(), b'pa\\"ss\\\\w\\u00f6rd', b'pa\\"ss\\\\w\xc3\xb6rd', b'pa"ss\\\\w\xc3\xb6rd'} <= forms
    assert b"7061227373" + b"5c77c3b67264" in forms  # its UTF-8 bytes in hex


def test_undecodable_bytes_and_lone_surrogates_are_encoded_not_dropped() -> None:
    assert redact._utf8("ab\udcffcd") == b"ab\xffcd"  # os.environ's undecodable byte, back
    assert redact._utf8("ab\ud800cd") == b"ab\xed\xa0\x80cd"  # no byte to go back to: kept as UTF-8
    assert SecretPattern(["ab\udcffcd"]).mask(b"x ab\xffcd y") == b"x " + MASK + b" y"


def test_the_values_looked_for_are_each_secret_and_each_of_its_lines_without_edge_blanks() -> None:
    assert redact.secret_values(["  ab\r\ncd  ", "abc", "x\ny", "hunter2", "hunter2", " abcd "]) == [
        "ab\r\ncd", "  ab", "cd  ", "hunter2", "abcd"]
    assert redact.secret_values(["one\rtwo2\nthree"]) == ["one\rtwo2\nthree", "two2", "three"]
    assert redact.secret_values(["abcd"]) == ["abcd"]
    assert redact.secret_values([]) == []


def test_a_replacement_keeps_the_line_breaks_it_covered() -> None:
    m = re.search(rb"ab\r?\ncd\ne", b"xx ab\r\ncd\ne yy")
    assert redact._masked(m.group()) == MASK + b"\n\n"
    assert redact._masked(b"ab") == MASK


def test_minimal_keeps_the_strings_that_contain_none_of_the_others() -> None:
    assert redact._minimal({b"abc", b"b", b"xbz", b"cd", b"abcd"}) == [b"b", b"cd"]
    assert redact._minimal({b"long", b"lon", b"on"}) == [b"on"]
    assert redact._minimal(set()) == []


def test_a_pattern_of_no_values_finds_and_changes_nothing() -> None:
    empty = SecretPattern([])
    assert bool(empty) is False and empty.regex is None
    assert empty.holds("anything") is False and empty.holds(b"anything") is False
    assert empty.mask(b"anything") == b"anything"
    short = SecretPattern(["abc", ""])  # shorter than MIN_SECRET_LEN: nothing to look for
    assert bool(short) is False and short.mask(b"abc") == b"abc"


def test_holds_reads_text_and_bytes_in_every_form() -> None:
    p = SecretPattern(["hunter2x"])
    assert bool(p) is True
    assert p.holds("pw=hunter2x") is True and p.holds(b"pw=hunter2x") is True
    assert p.holds(base64.b64encode(b"u:hunter2x")) is True
    assert p.holds("hunter2y") is False and p.holds(b"") is False
    assert p.mask(b"pw=hunter2x;") == b"pw=" + MASK + b";"


def test_a_mask_that_forms_the_secret_again_is_masked_again() -> None:
    p = SecretPattern(["et][s"])  # the brackets of MASK join its neighbours into the value
    assert (p.reforms, p.scan_all) == (True, True)
    assert p.mask(b"et][set][s") == b"[secr[secret]ecret]"
    assert p.mask(b"cr et][set][s]") == b"cr [secr[secret]ecret]]"
    assert p.mask(b"x et][s y") == b"x " + MASK + b" y"
    inside = SecretPattern(["cret]"])  # a value inside MASK itself: every mask forms it again
    assert inside.reforms is True
    assert inside.mask(b"a cret] b") == WITHHELD


def test_a_value_that_the_withheld_notice_holds_leaves_nothing() -> None:
    assert SecretPattern(["secret"]).mask(b"my secret") == b""


def test_a_plain_value_does_not_rescan() -> None:
    p = SecretPattern(["hunter2x"])
    assert (p.reforms, p.scan_all) == (False, False)
    assert SecretPattern(["ab[cd"]).reforms is True
    assert SecretPattern(["abc"]).scan_all is False  # no value: nothing rescanned


SECRETS = ["hunter2x", "Zq8pL2mN4xR7vT1wY6sK9cB3", "p@ss w0rd!", "k%e=y&<v>"]


def _forms(value: str) -> list[bytes]:
    raw = value.encode()
    return [raw, raw.hex().encode(), raw.hex(":").upper().encode(), base64.b64encode(b"user:" + raw),
            base64.b32encode(raw).lower(), "".join(f"%{b:02X}" for b in raw).encode(),
            base64.b64encode(raw * 8)[:40] + b"\n" + base64.b64encode(raw * 8)[40:]]


@functools.cache
def _pattern(values: tuple[str, ...]) -> SecretPattern:
    return SecretPattern(list(values))  # compiling is the slow part: once per set of values


@settings(deadline=None, max_examples=examples(100))  # a first pass compiles the pattern: slow once
@given(data=st.data())
def test_masking_a_long_log_through_windows_gives_what_masking_it_whole_gives(data) -> None:
    """Above SMALL bytes `mask` runs the pattern only on windows around anchors and escapes;
    the result must be the whole pass's, byte for byte, wherever the forms sit (both ends too)."""
    values = data.draw(st.sampled_from([SECRETS[:1], SECRETS[1:3], SECRETS]))
    p = _pattern(tuple(values))
    filler = data.draw(st.sampled_from([b"x", b"ab ", b"loss=0.1 step=3\n", b"%20", b"&#"]))
    pieces = []
    for _ in range(data.draw(st.integers(1, 4))):
        pieces.append(filler * data.draw(st.integers(0, 200)))
        pieces.append(data.draw(st.sampled_from([f for v in values for f in _forms(v)])))
    if data.draw(st.booleans()):
        pieces.append(filler * 200)
    log = b"".join(pieces)
    log += b"." * max(0, redact.SMALL - len(log))  # long enough for the windows
    whole = p._mask_all(log)
    assert p.mask(log) == whole
    for v in values:
        assert v.encode() not in p.mask(log)


def test_the_windows_of_a_long_log_cover_each_find_and_merge_when_they_touch() -> None:
    p = SecretPattern(["hunter2x"])
    reach = p.longest
    far = b"." * 5000
    log = b"hunter2x" + far + b"HUNTER2X".lower() + far + b"hunter2x"
    spans = p._windows(log)
    assert spans == [(0, 8 + reach), (5008 - reach, 5016 + reach), (10016 - reach, len(log))]
    assert p.mask(log) == MASK + far + MASK + far + MASK
    near = b"hunter2x" + b"." * 10 + b"hunter2x" + far
    assert p._windows(near) == [(0, 26 + reach)]
    assert p._windows(b"." * 5000) == []
    assert p.mask(b"." * 5000) == b"." * 5000
    escaped = b"." * 3000 + b"hunter%32x" + b"." * 3000  # an escape without an anchor
    assert p.mask(escaped) == b"." * 3000 + MASK + b"." * 3000


def test_the_reach_of_a_window_is_the_longest_any_form_can_be() -> None:
    p = SecretPattern(["hunter2x"])
    assert p.longest == max(sum(redact._char_reach(c) for c in "hunter2x"),
                            *(2 * len(f) for f in redact._base64_cores(b"hunter2x")),
                            *(len(f) for f in redact.fixed_forms("hunter2x")))
    assert p.longest == 8 * 17


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_masking_text_without_the_secret_changes_nothing(data: bytes) -> None:
    p = _pattern(("hunter2x", "Zq8pL2mN4xR7vT1w"))
    if not p.holds(data):
        assert p.mask(data) == data
        assert p.mask(data * 20) == data * 20


def test_an_encoding_that_ends_in_x_keeps_its_last_character() -> None:
    """Only padding is stripped from an encoding: a form ending in X (a letter of both
    alphabets) keeps it, or that character of the secret would show."""
    assert redact._base64_forms(b"secre\x17") == {b"c2VjcmUX", b"NlY3JlF", b"zZWNyZR"}
    assert redact._base64_cores(b"secre\x17") == {b"c2VjcmUX", b"NlY3JlF", b"zZWNyZR"}
    upper = {b"ONSWGAAX", b"ZWKYYAC", b"GZLDAAL", b"43FMMAB", b"TMVRQAF"}
    assert redact._base32_forms(b"sec\x00\x17") == upper | {f.lower() for f in upper}


def test_every_value_is_looked_for_in_its_escaped_spellings_not_only_the_last() -> None:
    p = SecretPattern(["hunter2x", "other-secret"])
    assert p.mask(b"a hunter%32x b") == b"a " + MASK + b" b"  # the first value, URL-escaped
    assert p.mask(b"x other%2Dsecret y") == b"x " + MASK + b" y"


def test_overlapping_readings_of_a_value_are_masked_as_one_stretch_of_whole_escapes() -> None:
    """`0  0` is read in `%20 %200%20 %30` from the 0 of the second escape and again from the
    real 0: both readings go under one mask, which never leaves half an escape beside it."""
    pattern = redact.SecretPattern(["     0  0"])
    data = b"token=%20 %20 %200%20 %30 done"
    assert list(pattern.spans(data)) == [(10, 25)]
    assert pattern.mask(data) == b"token=%20 " + MASK + b" done"
    assert pattern.safe_cut(data, 20) == 10 and pattern.safe_cut(data, 8) == 8 and pattern.safe_cut(data, 26) == 26
    # `00 0` read from the start (`00`, the escaped blank, the `0` after it) and again from the
    # `0` of `%20` to the end: the second reading's tail goes under the mask too
    assert redact.SecretPattern(["00 0"]).mask(b"00%200 0") == MASK


# A value that begins another (a password and the same password with more after it): at one
# position the regex takes the first branch that matches, so the shorter value's form could be
# read where the longer one's begins and the longer one's tail was left on show beside the mask.
SHORT = "s3cr3tPrefixValue"
LONG = SHORT + "AndTheRestOfTheMuchLongerSecretValueHere1234567890"


def test_a_value_that_begins_another_leaves_none_of_the_longer_on_show() -> None:
    for values in (["abcd", "abcdefgh"], ["abcdefgh", "abcd"]):
        p = SecretPattern(values)
        assert p.mask(b"x abcdefgh y") == b"x " + MASK + b" y"  # was `x [secret]efgh y`
        assert p.mask(b"x abcd%65fgh y") == b"x " + MASK + b" y"
        assert p.mask(b"x abcd y") == b"x " + MASK + b" y"
    # a text form where a longer fixed form begins: `6162` is the start of the hex of `abcd`
    assert SecretPattern(["6162", "abcd"]).mask(b"x 61626364 y") == b"x " + MASK + b" y"


def test_a_longer_values_wrapped_base64_is_masked_whole_where_a_shorter_ones_form_begins_it() -> None:
    """The longer value's base64, wrapped (as MIME and PEM writers print it), begins with the
    shorter value's: masked as if the shorter value were not a secret, its line break kept (only
    the last character, which mixes in what follows, and the padding are left)."""
    encoded = base64.b64encode(LONG.encode())
    alone = SecretPattern([LONG])
    for values in ([SHORT, LONG], [LONG, SHORT]):
        p = SecretPattern(values)
        # the break after the shorter value's form (its fixed form read first) and inside it
        # (its wrapped form read first)
        for cut in (64, 10):
            text = b"x " + encoded[:cut] + b"\n" + encoded[cut:] + b" y"
            assert p.mask(text) == alone.mask(text) == b"x " + MASK + b"\nA== y"


def test_a_value_with_a_blank_is_found_in_a_long_log_with_its_blank_as_a_plus() -> None:
    """Above SMALL bytes the pattern runs only around anchors: a value's longest run without a
    blank is one, since a URL form writes the blank as `+`, which is no escape."""
    p = SecretPattern(["abcd efgh"])
    log = b"." * 3000 + b"q=abcd+efgh" + b"." * 3000
    assert p.mask(log) == b"." * 3000 + b"q=" + MASK + b"." * 3000


def test_a_long_log_that_keeps_re_forming_a_value_is_withheld_whole() -> None:
    """A value that a mask re-forms is masked over the whole text, however long (not window by
    window): each pass re-forms it one byte further back, so after the last pass the notice
    stands for all of it, as it does for a short text."""
    p = SecretPattern(["x[secret]"])
    assert (p.reforms, p.scan_all) == (True, True)
    assert p.mask(b"x" * 300 + b"[secret]") == WITHHELD
    assert p.mask(b"x" * 3000 + b"[secret]") == WITHHELD


def test_a_value_of_blanks_only_is_masked_and_the_texts_own_blank_after_it_kept() -> None:
    """A setting of blanks only (kept whole: its core is empty) has no piece between blanks to
    anchor on but itself; masked, a later reading of it that adds only the text's own space
    beside the mask is not taken: the space stays."""
    p = SecretPattern(["        "])
    assert p.mask(b"token=" + b" " * 8 + b" done") == b"token=" + MASK + b" done"
    assert p.mask(b"x  y") == b"x  y"
