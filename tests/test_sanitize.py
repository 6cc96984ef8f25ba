"""Job output reaches a terminal only as printable text, tab and newline."""

from core.display.sanitize import markup_safe, printable

HOSTILE = ("ok\x1b]52;c;ZXZpbA==\x07 title\x1b]0;pwned\x1b\\ clear\x1b[2J csi8\x9b2J "
           "bell\x07 nul\x00 del\x7f c1\x85 osc8\x1b]8;;file:///etc\x1b\\link\x1b]8;;\x1b\\ "
           "bidi\u202e tab\tnl\n")


def test_no_control_bytes_survive() -> None:
    out = printable(HOSTILE)
    assert all(c in "\t\n" or (c.isprintable()) for c in out), repr(out)
    for bad in ("\x1b", "\x9b", "\x07", "\x00", "\x7f", "\x85", "\u202e", "52;", "pwned", "2J"):
        assert bad not in out, bad
    assert "ok" in out and "tab\tnl\n" in out and "link" in out


def test_bytes_and_carriage_returns() -> None:
    assert printable(b"a\r\nb\rc\x9b31m") == "a\nb\nc"
    assert printable("progress 10%\rprogress 20%") == "progress 10%\nprogress 20%"


def test_markup_lookalikes_are_inert() -> None:
    from rich.text import Text

    safe = markup_safe("[link=file:///etc]x[/link] [bold]y")
    rendered = Text.from_markup(safe)
    assert rendered.plain == "[link=file:///etc]x[/link] [bold]y"
    assert not rendered.spans
