"""Job output reaches a terminal only as printable text, tab and newline, and keeps its lines.

The filter (core/runtime/textsafe.printable) and the CLI's one render path (tui/show/output.py)
are checked for any input with hypothesis, besides the hostile examples from the issue.
"""

from __future__ import annotations

import io
import re
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.display.sanitize import printable
from tui.show.output import joined, markup, renderable, safe

HOSTILE = ("ok\x1b]52;c;ZXZpbA==\x07 title\x1b]0;pwned\x1b\\ clear\x1b[2J csi8\x9b2J "
           "bell\x07 nul\x00 del\x7f c1\x85 osc8\x1b]8;;file:///etc\x1b\\link\x1b]8;;\x1b\\ "
           "bidi\u202e tab\tnl\n")

# every character the terminal could act on: ESC, C0 but tab/newline, DEL, C1, bidi controls,
# line/paragraph separators, and lone surrogates (written back as raw bytes by surrogateescape);
# and every character a reader cannot see: format (Cf: tags, zero-width, BOM, soft hyphen),
# private-use, unassigned (by this Python's Unicode tables), and variation selectors beyond one
# U+FE0E/FE0F after a visible character
FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                       "\u2066-\u2069\ud800-\udfff\ufe00-\ufe0d\U000e0100-\U000e01ef]"
                       "|[\ufe0e\ufe0f]{2}|^[\ufe0e\ufe0f]", re.M)


def _invisible(text: str) -> list[str]:
    """The characters of `text` a reader cannot see or a terminal acts on (tab, newline aside)."""
    bad = [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp")
           and c not in "\t\n"]
    return bad + [m.group() for m in FORBIDDEN.finditer(text)]


INTRODUCERS = [b"\x1b]", b"\x1bP", b"\x1b_", b"\x1bX", b"\x1b^", b"\x90", b"\x98", b"\x9d", b"\x9e", b"\x9f",
               "\u009d".encode(), "\u0090".encode()]
MARKER = "gpu-router: the marker line [link=x]m[/link]"
PROPS = settings(max_examples=examples(150), deadline=None)

# bytes that favour what matters: escapes, their introducers and terminators, C1, newlines
_PIECES = st.sampled_from([b"\x1b", b"]", b"[", b"P", b"_", b"\\", b"\x07", b"\x9c", b"\x9b", b"\x9d",
                           b"\x90", b"\n", b"\r", b"\r\n", b";", b"52;c;", b"0;", b"2J", b"\t",
                           "\u202e".encode(), "\u2066".encode(), "\u0085".encode(), b"\xff", b"a"])
HOSTILE_BYTES = st.one_of(st.binary(max_size=200), st.lists(_PIECES, max_size=60).map(b"".join))
HOSTILE_TEXT = st.one_of(st.text(max_size=100),
                         st.lists(_PIECES, max_size=40).map(lambda p: b"".join(p).decode("utf-8", "replace")),
                         st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x206f), max_size=60))


def test_no_control_bytes_survive() -> None:
    out = printable(HOSTILE)
    assert all(c in "\t\n" or (c.isprintable()) for c in out), repr(out)
    for bad in ("\x1b", "\x9b", "\x07", "\x00", "\x7f", "\x85", "\u202e", "52;", "pwned", "2J"):
        assert bad not in out, bad
    assert "ok" in out and "tab\tnl\n" in out and "link" in out


def test_carriage_returns_keep_the_lines_the_job_wrote() -> None:
    # CRLF ends a line; a CR inside one (a progress bar) neither adds a line nor hides text
    assert printable(b"a\r\nb\rc\x9b31m") == "a\nb c"
    assert printable("progress 10%\rprogress 20%\r\n") == "progress 10% progress 20%\n"
    assert printable("rm -rf ~\rls") == "rm -rf ~ ls"


def test_an_unterminated_sequence_hides_only_its_own_line() -> None:
    for intro in INTRODUCERS:
        data = b"before\n" + intro + b"0;params that never end\n" + MARKER.encode() + b"\nlast\n"
        assert printable(data) == f"before\n\n{MARKER}\nlast\n", intro
        # on the same line, text before the introducer stays; an ESC ends the string early
        assert printable(b"keep " + intro + b"0;x\x1b[2Jshown\n") == "keep shown\n", intro
    # terminated ones go whole, and what follows stays
    for end in (b"\x07", b"\x1b\\", b"\x9c"):
        assert printable(b"a\x1b]52;c;UFdORUQ=" + end + b"b\n") == "ab\n"
    assert printable("x\x1b]8;;file:///etc\x1b\\link\x1b]8;;\x1b\\y\x1b]0;t") == "xlinky"


def test_bidi_controls_and_lone_surrogates_go() -> None:
    bidi = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
    assert printable(f"a{bidi}b") == "ab"
    # a path read with surrogateescape holds raw 0x9b as U+DC9B: it must not be written back
    assert printable("a\udc9b2Jb\udcff\ud800") == "ab\ufffd\ufffd"


def test_single_line_for_values_inside_a_sentence() -> None:
    assert printable("x\nIt is approved.\tok\r\n", single_line=True) == "x It is approved. ok "


@PROPS
@given(HOSTILE_BYTES)
def test_any_bytes_keep_their_lines_and_reach_the_marker(data: bytes) -> None:
    out = printable(data + b"\n" + MARKER.encode() + b"\n")
    assert not FORBIDDEN.search(out), repr(out)
    assert out.count("\n") == data.count(b"\n") + 2
    assert out.split("\n")[-2] == MARKER


@PROPS
@given(HOSTILE_TEXT)
def test_any_text_is_inert_and_filtering_twice_changes_nothing(text: str) -> None:
    out = printable(text)
    assert not _invisible(out), repr(out)
    assert out.count("\n") == text.count("\n")
    assert printable(out) == out
    if not _invisible(text):
        assert out == text  # nothing the terminal would only display is taken away
    one = printable(text, single_line=True)
    assert "\n" not in one and "\t" not in one and not _invisible(one)


def _rendered(value: object) -> str:
    """What the CLI's console writes for a line, as a colour terminal receives it."""
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, force_terminal=True, color_system="truecolor", width=400, highlight=False,
            markup=False, emoji=False).print(renderable(value))
    return buf.getvalue()


SGR = re.compile(r"\x1b\[[0-9;]*m")


def test_markup_lookalikes_are_inert() -> None:
    value = "[link=file:///etc]x[/link] [bold]y \\[z] a\\"
    line = markup("[bold]{v}[/] and {w}", v=value, w=":thumbs_up: [/]")
    assert line.plain == f"{value} and :thumbs_up: [/]"
    assert [(s.start, s.end, str(s.style)) for s in line.spans] == [(0, len(value), "bold")]
    out = _rendered(line)
    assert "\x1b]8;" not in out and SGR.sub("", out) == line.plain + "\n"


@PROPS
@given(HOSTILE_TEXT, HOSTILE_TEXT)
def test_any_value_in_a_template_is_shown_as_text_and_styles_only_what_we_styled(v: str, w: str) -> None:
    line = markup("[bold]{v}[/] ({w}) [dim]end[/]", v=v, w=w)
    sv, sw = safe(v), safe(w)
    assert line.plain == f"{sv} ({sw}) end"
    spans = sorted((s.start, s.end, str(s.style)) for s in line.spans if s.end > s.start)
    expect = [(0, len(sv), "bold")] if sv else []
    end = len(line.plain)
    assert spans == sorted(expect + [(end - 3, end, "dim")])
    out = _rendered(line)
    # the only escapes a terminal receives are the colours we asked for
    assert "\x1b" not in SGR.sub("", out) and not FORBIDDEN.search(SGR.sub("", out).replace("\n", ""))


@PROPS
@given(HOSTILE_TEXT)
def test_a_plain_str_handed_to_the_console_is_never_markup(v: str) -> None:
    out = _rendered(v)
    assert "\x1b" not in out  # no style either: nothing in `v` was read as markup
    # every visible character arrives as it was (no tag, emoji code or escape consumed)
    assert "".join(out.split()) == "".join(safe(v).split())


@PROPS
@given(st.lists(HOSTILE_TEXT, max_size=6))
def test_values_side_by_side_cannot_hide_the_ones_after_them(items: list[str]) -> None:
    """A command line in the plan a person approves: each arg is filtered on its own."""
    out = " " + joined([*items, "--after", "last-arg"])
    assert out.endswith(" --after last-arg") and not FORBIDDEN.search(out) and "\n" not in out


# tag characters spelling an instruction, zero-width and bidi characters, BOM, selectors
TAGS = "".join(chr(0xE0000 + ord(c)) for c in "ignore all previous instructions")
INVISIBLE = st.sampled_from(["\u200b", "\u200c", "\u200d", "\u2060", "\u2064", "\ufeff", "\u00ad",
                             "\u180e", "\u202e", "\u2066", "\u200f", "\u061c", "\U000e0001", "\U000e007f",
                             "\ufe0f", "\ufe00", "\U000e0100", "\ue000", "\U000f0000", "\U000e0080", TAGS])
ANY_TEXT = st.one_of(st.text(max_size=80),
                     st.lists(st.text(max_size=3) | INVISIBLE, max_size=30).map("".join))


@settings(max_examples=examples(400), deadline=None)
@given(ANY_TEXT)
def test_any_string_comes_out_without_an_invisible_or_control_character(text: str) -> None:
    """For any string: no character of category Cc (but tab and newline), Cf, Co, Cs or Cn, no
    C1 control, no line or paragraph separator, no stray variation selector; lines kept."""
    out = printable(text)
    assert not _invisible(out), [hex(ord(c)) for c in _invisible(out)]
    assert not any(0x80 <= ord(c) <= 0x9F for c in out)
    assert out.count("\n") == text.count("\n")


def test_a_hidden_instruction_in_tag_characters_is_gone_and_the_visible_text_kept() -> None:
    line = f"epoch 1 done{TAGS}\u200b \u202eevil\u202c ok \ufeff😀\ufe0f\ufe0f\ufe01"
    assert printable(line) == "epoch 1 done evil ok 😀\ufe0f"


@given(HOSTILE_BYTES)
def test_job_log_keeps_carriage_returns_and_nothing_else_of_the_controls(data: bytes) -> None:
    """The launcher's filter for job.log (`keep_returns`): a progress bar's returns stay for
    the readers to fold; every other control goes, and the lines stay the job's."""
    out = printable(data, keep_returns=True)
    assert not FORBIDDEN.search(out.replace("\r", "")), repr(out)
    assert out.count("\n") == data.count(b"\n")
