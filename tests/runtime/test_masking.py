"""A secret's value never shows: the launcher's log filter, gpu.log and metric ingestion, for any
secret, any encoding, any control bytes inside it and any way the output is cut into reads.

The encodings are computed here independently of core/runtime/redact.py, and the checks are
what a reader of the stored log would do: look for the value and for each spelling of it.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.display.logtail import fold_returns
from core.engine.metricfile import parse_metrics
from core.runtime.launch import MASK, Masker
from core.runtime.textsafe import printable

FAST = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
MARK = " END-MARK\n"

# a secret: printable text (what a person stores in a keychain), 8 characters or more
secrets = st.text(st.characters(categories=["L", "M", "N", "P", "S"]) | st.just(" "),
                  min_size=8, max_size=24).filter(str.isprintable)
ascii_secrets = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=8, max_size=24)
surrounding = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from("é€\t"),
                      max_size=30)

# what may sit between two characters of a value without showing on screen
JUNK = [b"\x00", b"\x07", b"\x08", b"\x7f", b"\x1b[0m", b"\x1b[31;1m", b"\x1b]0;t\x07", b"\x1b[2J",
        b"\x9b1m", b"\xc2\x9b0m", "\u202e".encode(), "\u202d".encode(), "\u2066".encode(),
        "\u2069".encode(), "\u200e".encode(), "\u200f".encode(), "\u2028".encode(), b"\r"]


def _url_encode(value: str, escape: list[bool], upper: list[bool], plus: bool) -> str:
    """URL-encoding with the chosen characters escaped, in the chosen hex case."""
    out = []
    for i, ch in enumerate(value):
        if ch == " " and plus:
            out.append("+")
        elif escape[i % len(escape)]:
            hexed = "".join(f"%{b:02X}" for b in ch.encode())
            out.append(hexed if upper[i % len(upper)] else hexed.lower())
        else:
            out.append(ch)
    return "".join(out)


def _b64_secret_only(prefix: bytes, value: bytes, suffix: bytes, encode) -> str:
    """The base64 characters of prefix+value+suffix whose 6 bits all come from `value`."""
    text = encode(prefix + value + suffix).decode()
    start, end = 8 * len(prefix), 8 * (len(prefix) + len(value))
    first = -(-start // 6)
    last = end // 6  # exclusive: character i covers bits [6i, 6i + 6)
    return text[first:last]


@st.composite
def encodings(draw, secret: str) -> tuple[str, list[str]]:
    """One way a program prints the secret, and the strings that must not appear in the log."""
    raw = secret.encode()
    kind = draw(st.sampled_from(["raw", "b64", "b64url", "b64bare", "basic", "url", "hex", "HEX"]))
    if kind == "raw":
        return secret, [secret]
    if kind in ("b64", "b64url", "b64bare"):
        enc = base64.urlsafe_b64encode if kind == "b64url" else base64.b64encode
        text = enc(raw).decode()
        text = text.rstrip("=") if kind == "b64bare" else text
        return text, [text, text.rstrip("=")]
    if kind == "basic":  # Authorization: Basic base64(user:secret), at any byte alignment
        user = draw(st.text(st.characters(min_codepoint=0x61, max_codepoint=0x7A), max_size=5)) + ":"
        tail = draw(st.binary(max_size=4))
        enc = draw(st.sampled_from([base64.b64encode, base64.urlsafe_b64encode]))
        core = _b64_secret_only(user.encode(), raw, tail, enc)
        return "Authorization: Basic " + enc(user.encode() + raw + tail).decode(), [core]
    if kind == "url":
        n = len(secret)
        escape = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        upper = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        text = _url_encode(secret, escape, upper, draw(st.booleans()))
        return text, [text]
    text = raw.hex() if kind == "hex" else raw.hex().upper()
    return text, [text]


@st.composite
def noisy(draw, text: str) -> bytes:
    """The text's bytes with junk slipped in between characters."""
    pieces = [ch.encode() for ch in text]
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(pieces)))
        pieces.insert(at, draw(st.sampled_from(JUNK)))
    return b"".join(pieces)


def _run_pipeline(masker: Masker, data: bytes, cuts: list[int], pauses: list[bool]) -> bytes:
    """Feed `data` in reads cut at `cuts`, pausing (an idle flush) where asked."""
    out, last = [], 0
    for i, cut in enumerate(sorted(set(cuts)) + [len(data)]):
        out.append(masker.feed(data[last:cut]))
        if pauses[i % len(pauses)]:
            out.append(masker.idle())
        last = cut
    out.append(masker.flush())
    return b"".join(out)


def _assert_hidden(out: bytes, secret: str, forbidden: list[str]) -> None:
    """Hidden in job.log as stored and in every view of it a reader gets: progress bars folded
    to their last state (`gpu logs`, the dashboard), or each return shown as a space."""
    text = out.decode("utf-8")
    assert printable(text, keep_returns=True) == text, \
        "the stored log must already be terminal-safe (carriage returns stay, for the readers to fold)"
    folded = fold_returns(out).decode("utf-8")
    for view in (text, folded, printable(text)):
        for form in [secret, *forbidden]:
            if len(form) >= 4:
                assert form not in view, (form, view)
        assert secret not in urllib.parse.unquote(view), view


@FAST
@given(data=st.data(), secret=secrets)
def test_no_form_of_a_secret_survives_the_log_filter(data, secret: str) -> None:
    """Any secret, any encoding, junk inside it, any reads and pauses: the log never shows it."""
    text, forbidden = data.draw(encodings(secret))
    payload = (data.draw(surrounding).encode() + data.draw(noisy(text)) + MARK.encode())
    masker = Masker([secret])
    assume(not masker.secrets.holds(MARK.encode()))
    cuts = data.draw(st.lists(st.integers(0, len(payload)), max_size=6))
    pauses = data.draw(st.lists(st.booleans(), min_size=1, max_size=4))
    out = _run_pipeline(masker, payload, cuts, pauses)
    _assert_hidden(out, secret, forbidden)
    assert out.endswith(MARK.encode()), "text around a secret is kept"


@FAST
@given(data=st.data(), values=st.lists(ascii_secrets, min_size=3, max_size=3, unique=True))
def test_three_secrets_in_one_stream_split_anywhere(data, values: list[str]) -> None:
    lines = []
    expected = []
    for value in values:
        text, forbidden = data.draw(encodings(value))
        lines.append(data.draw(noisy(text)) + b" ok\n")
        expected.append((value, forbidden))
    payload = b"".join(lines)
    cuts = data.draw(st.lists(st.integers(0, len(payload)), max_size=8))
    out = _run_pipeline(Masker(values), payload, cuts, [False])
    for value, forbidden in expected:
        _assert_hidden(out, value, forbidden)
    assert out.count(b" ok\n") == 3


@FAST
@given(secret=secrets, pieces=st.integers(2, 6))
@example(secret="     0  0", pieces=2)  # read twice over: from the 0 of an escape, and from the real 0
@example(secret="     0  0", pieces=3)  # the same with the second reading cut by a pause
@example(secret="        ", pieces=2)  # all blanks: a later reading adds only the text's own space
def test_a_value_split_over_many_reads_with_pauses_is_masked(secret: str, pieces: int) -> None:
    """A job writes half a (partly URL-escaped) value, sleeps, then writes the rest: the pause
    shows what it can of the line, never the first half of the value."""
    escaped = _url_encode(secret, [True, False], [True], plus=False)
    raw = b"token=" + escaped.encode() + b" done"
    size = -(-len(raw) // pieces)
    out = _run_pipeline(Masker([secret]), raw, list(range(size, len(raw), size)), [True])
    _assert_hidden(out, secret, [escaped])
    # the whole value masked, but for its edge blanks (escaped or not), which hide nothing
    assert out.startswith(b"token=") and out.endswith(b" done") and out.count(MASK.encode()) == 1, out
    assert set(out[6:-5].replace(MASK.encode(), b"").replace(b"%20", b" ")) <= {32}, out


@pytest.mark.parametrize("secret, raw", [
    ("ab cdef gh", b"x ab\rcdef gh\n"),  # a return where the value has a blank
    (" 000    ", b"\x00\x00 \r000     END-MARK\n"),  # one before a short core's blanks (hypothesis)
    ("  00 zz", b"x \r00\rzz\n"),
])
def test_a_return_in_place_of_a_blank_never_shows_the_value(secret: str, raw: bytes) -> None:
    """A reader that shows returns as spaces (printable) turns `ab\rcd` into `ab cd`: a return
    where the value has a blank is the blank, in every view."""
    masker = Masker([secret])
    out = masker.feed(raw) + masker.flush()
    _assert_hidden(out, secret, [])
    assert MASK.encode() in out


@FAST
@given(secret=secrets, junk=st.sampled_from(JUNK[:-1]), at=st.integers(1, 7))
def test_control_bytes_inside_a_value_do_not_rejoin_it_on_screen(secret: str, junk: bytes, at: int) -> None:
    raw = secret.encode()
    cut = len(secret[:at].encode())
    masker = Masker([secret])
    out = masker.feed(b"v=" + raw[:cut] + junk + raw[cut:] + b"\n") + masker.flush()
    assert secret.encode() not in out and secret not in printable(out)
    assert printable(out) == out.decode(), "stored already filtered: a terminal shows it as stored"


def test_a_long_line_without_newlines_is_written_in_pieces_and_still_masked() -> None:
    secret = "Zq8-long-line-secret"
    hidden = b"Zq8-long\x1b[0m-line-secret"  # shows as the secret once the code is removed
    masker = Masker([secret])
    body = (b"x" * 70_000 + hidden) * 3
    out = b"".join(masker.feed(body[i:i + 1000]) for i in range(0, len(body), 1000))
    assert len(out) > 100_000  # pieces went out before any newline came
    out += masker.flush()
    assert secret not in printable(out) and out.count(MASK.encode()) == 3


def test_a_multi_line_secret_is_masked_line_by_line() -> None:
    """A PEM-like value printed one line at a time, each behind a prefix, never whole."""
    key = "-----BEGIN FAKE-----\nQUJDREVGR0hJSktMTU5PUFFSU1RVVldY\nWVphYmNkZWZnaGlq\n-----END FAKE-----"
    masker = Masker([key])
    out = b"".join(masker.feed(f"> {line}\n".encode()) for line in key.splitlines()) + masker.flush()
    for line in key.splitlines():
        assert line.encode() not in out
    assert out.count(b"> ") == 4


def test_gpu_router_s_own_lines_start_on_a_fresh_line(tmp_path: Path) -> None:
    from core.runtime.launch import JobLog

    log = JobLog(str(tmp_path / "job.log"), Masker(["hunter2-secret"]))
    log.write(b"no newline at the end hunter2-secret")
    log.line("attempt 1: exited with status 0")
    log.close()
    assert (tmp_path / "job.log").read_bytes() == (
        b"no newline at the end [secret]\n[gpu-router] attempt 1: exited with status 0\n")


# -- metrics ------------------------------------------------------------------------------------

KEY_RULE = re.compile(r"[A-Za-z0-9_./-]{1,64}")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)


@FAST
@given(rows=st.lists(st.dictionaries(st.text(max_size=80), json_values, max_size=6), max_size=5))
def test_ingested_metrics_have_safe_names_and_numbers_only(rows: list[dict]) -> None:
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    parsed, last = parse_metrics(data)
    for step, key, value, ts in parsed:
        assert KEY_RULE.fullmatch(key), key
        assert isinstance(value, float) and value == value and abs(value) != float("inf")
        assert step is None or isinstance(step, int)
    assert all(k == "_step" or KEY_RULE.fullmatch(k) for k in last)
    assert not any(isinstance(v, str) for v in last.values())


@contextlib.contextmanager
def _job_env(secret: str, metrics: Path):
    saved = dict(os.environ)
    os.environ.update({"GPU_ROUTER_SECRET_ENV": "OTHER,MY_TOKEN", "MY_TOKEN": secret,
                       "OTHER": "", "GPU_ROUTER_METRICS_FILE": str(metrics)})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _key_forms(secret: str) -> list[str]:
    raw = secret.encode()
    return [secret, raw.hex(), raw.hex().upper(), base64.urlsafe_b64encode(raw).decode().rstrip("="),
            base64.b64encode(raw).decode(), urllib.parse.quote(secret, safe="")]


@FAST
@given(secret=st.text(st.characters(categories=["L", "N"]) | st.sampled_from("_.-/"),
                      min_size=8, max_size=24).filter(str.isprintable),
       form=st.integers(0, 5), prefix=st.sampled_from(["", "m_", "val/"]))
def test_gpu_log_drops_a_metric_named_after_a_secret(tmp_path_factory, secret: str, form: int,
                                                    prefix: str) -> None:
    from core.runtime import gpu

    metrics = tmp_path_factory.mktemp("m") / "metrics.jsonl"
    key = prefix + _key_forms(secret)[form]
    err = io.StringIO()
    gpu._warned.clear()
    with _job_env(secret, metrics), contextlib.redirect_stderr(err):
        gpu.log(step=3, loss=0.5, **{key: 1.0})
    stored = metrics.read_text()
    for f in _key_forms(secret):
        assert f not in stored
    assert json.loads(stored)["loss"] == 0.5
    assert "[gpu]" in err.getvalue() and "dropped" in err.getvalue()
    for f in _key_forms(secret):
        assert f not in err.getvalue()


def test_gpu_log_keeps_names_short_and_plain(tmp_path: Path) -> None:
    from core.runtime import gpu

    metrics = tmp_path / "metrics.jsonl"
    err = io.StringIO()
    gpu._warned.clear()
    with _job_env("unused-secret-value", metrics), contextlib.redirect_stderr(err):
        gpu.log(step=1, **{"loss": 1.0, "val/acc": 0.5, "x" * 65: 1.0, "bad\x1b]0;t": 2.0,
                           "has space": 3.0, "note": "text", "n": float("nan")})
    row = json.loads(metrics.read_text())
    assert set(row) == {"ts", "step", "loss", "val/acc", "nonfinite"}
    assert row["nonfinite"] == {"n": "nan"}  # named for the nan_metric kill rule, never stored as a number
    assert err.getvalue().count("[gpu] metric") == 3 and "\x1b" not in err.getvalue()


def test_a_numeric_secret_is_not_written_as_a_metric_value(tmp_path: Path) -> None:
    from core.runtime import gpu

    metrics = tmp_path / "metrics.jsonl"
    gpu._warned.clear()
    with _job_env("98765432", metrics), contextlib.redirect_stderr(io.StringIO()):
        gpu.log(step=1, loss=0.25, pin=98765432)
    assert "98765432" not in metrics.read_text() and json.loads(metrics.read_text())["loss"] == 0.25


@FAST
@given(data=st.binary(max_size=300) | st.text(max_size=100).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_the_stored_text_is_what_the_terminal_filter_leaves(data: bytes) -> None:
    """The launcher runs `printable` only on lines with more than printable ASCII: the text it
    stores is already filtered (carriage returns kept, for the readers to fold progress bars),
    and plain ASCII lines are left exactly as `printable` would."""
    from core.runtime.launch import terminal_safe

    out = terminal_safe(data)
    assert printable(out, keep_returns=True).encode() == out
    if all(b in (9, 10, 13) or 0x20 <= b < 0x7F for b in data):
        assert out == data == printable(data, keep_returns=True).encode()


def test_a_paused_partial_line_shows_and_the_next_own_line_starts_fresh(tmp_path: Path) -> None:
    from core.runtime.launch import JobLog

    log = JobLog(str(tmp_path / "job.log"), Masker([]))
    log.write(b"loading...")
    log.idle()  # the job paused: the partial line shows now
    assert (tmp_path / "job.log").read_bytes() == b"loading..."
    log.line("attempt 1: exited with status 0")
    log.close()
    assert (tmp_path / "job.log").read_bytes() == (
        b"loading...\n[gpu-router] attempt 1: exited with status 0\n")


def test_a_secret_popped_from_the_environment_is_still_kept_out_of_metrics(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    code = ("import os, gpu\nv = os.environ.pop('MY_TOKEN')\n"
            "gpu.log(step=1, loss=0.5, **{'k_' + v.encode().hex(): 1.0})\n")
    import subprocess
    import sys

    from core.runtime import GPU_MODULE_DIR

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(GPU_MODULE_DIR.parent),
                               "GPU_ROUTER_SECRET_ENV": "MY_TOKEN", "MY_TOKEN": "popped-secret-1",
                               "GPU_ROUTER_METRICS_FILE": str(metrics)})
    assert proc.returncode == 0, proc.stderr
    assert b"popped-secret-1".hex() not in metrics.read_text() and "loss" in metrics.read_text()


def test_a_value_ending_in_percent_is_masked_whole_when_url_encoded() -> None:
    """`%` is a prefix of its own escape `%25`: the escape must win, or `25` is left shown."""
    secret = "pw-0-0-%"
    for written in (b"pw-0-0-%25", b"pw%2D0-0-%25", b"pw-0-0-%"):
        masker = Masker([secret])
        out = masker.feed(b"token=" + written + b" done\n") + masker.flush()
        assert out == b"token=" + MASK.encode() + b" done\n", (written, out)


# -- the forms a library prints by accident: JSON, HTML, double URL, quoted-printable, MIME -------
# Each encoder and decoder here is written independently of core/runtime/redact.py; the check
# is a reader's: the encoded form is not in the log, and decoding the log the same way does not
# give the secret back.

import html  # noqa: E402
import quopri  # noqa: E402

any_secrets = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
                      min_size=4, max_size=16).filter(lambda s: len(s.encode()) >= 4)
plain_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20)


def _json_char(ch: str, how: int, upper: bool) -> str:
    if how == 0:
        return ch
    if how == 1 and ch in '/"\\':
        return "\\" + ch
    units = ch.encode("utf-16-be")
    out = "".join(f"\\u{int.from_bytes(units[i:i + 2], 'big'):04x}" for i in range(0, len(units), 2))
    return out.upper().replace("\\U", "\\u") if upper else out


def _json_decode(text: str) -> str:
    def one(m: re.Match) -> str:
        e = m.group(1)
        return chr(int(e[1:], 16)) if e[0] in "uU" else e

    joined = re.sub(r"\\(u[0-9a-fA-F]{4}|[/\"\\])", one, text)
    return joined.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _html_char(ch: str, how: int) -> str:
    named = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
    return [ch, f"&#{ord(ch)};", f"&#x{ord(ch):x};", f"&#X{ord(ch):X};", named.get(ch, ch)][how]


def _double_url_char(ch: str, how: int) -> str:
    escaped = "".join(f"%{b:02X}" for b in ch.encode())
    return [ch, escaped, escaped.replace("%", "%25")][how]


def _b64_decodings(text: str) -> list[bytes]:
    """The base64 in `text` decoded at each of the four character offsets, junk skipped."""
    body = re.sub(r"[^A-Za-z0-9+/]", "", text)
    return [base64.b64decode(body[i:][:len(body[i:]) // 4 * 4]) for i in range(4)]


@st.composite
def accidental_forms(draw, secret: str) -> tuple[bytes, str, object]:
    """(the bytes a program prints, the secret's encoded form inside them, the decoder)."""
    kind = draw(st.sampled_from(["json", "html", "url2", "qp", "mime"]))
    before, after = draw(plain_text), draw(plain_text)
    n = len(secret)
    hows = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    if kind == "json":
        upper = draw(st.booleans())
        form = "".join(_json_char(c, min(h, 2), upper) for c, h in zip(secret, hows))
        return (before + form + after).encode(), form, _json_decode
    if kind == "html":
        form = "".join(_html_char(c, h) for c, h in zip(secret, hows))
        return (before + form + after).encode(), form, html.unescape
    if kind == "url2":
        form = "".join(_double_url_char(c, min(h, 2)) for c, h in zip(secret, hows))
        return (before + form + after).encode(), form, lambda t: urllib.parse.unquote(urllib.parse.unquote(t))
    if kind == "qp":  # the standard library's encoder: soft line breaks at 76 columns
        data = quopri.encodestring((before + secret + after).encode(), quotetabs=draw(st.booleans()))
        return data + b"\n", "", lambda t: quopri.decodestring(t.encode()).decode("utf-8", "replace")
    head = draw(st.binary(max_size=80))  # any alignment, any position in the lines
    data = base64.encodebytes(head + secret.encode() + draw(st.binary(max_size=20)))
    if draw(st.booleans()):
        data = data.replace(b"\n", b"\r\n")
    return b"Content-Transfer-Encoding: base64\n\n" + data, "", None


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), secret=any_secrets)
def test_no_accidental_form_of_any_secret_survives_or_decodes_back(data, secret: str) -> None:
    """Any secret, printed JSON-escaped, HTML-escaped, URL-encoded twice, quoted-printable or
    MIME-wrapped base64 inside other text, read in any pieces: the log holds no such form, and
    decoding the log the same way does not give the secret back."""
    payload, form, decode = data.draw(accidental_forms(secret))
    masker = Masker([secret])
    cuts = data.draw(st.lists(st.integers(0, len(payload)), max_size=6))
    out = _run_pipeline(masker, payload, cuts, data.draw(st.lists(st.booleans(), min_size=1, max_size=3)))
    text = out.decode("utf-8")
    if len(form) >= 4:
        assert form not in text, (form, text)
    if decode is None:  # MIME: base64 at every offset
        assert not any(secret.encode() in d for d in _b64_decodings(text)), text
    else:
        assert secret not in decode(text), (text, decode(text))
    assert secret not in text


def test_a_secret_wrapped_over_base64_lines_read_line_by_line_is_masked() -> None:
    """MIME base64 written one line per read: the value split over two lines is still found."""
    secret = "wrapped-secret-Zx8Kq2LmN4pR7"
    body = base64.encodebytes(b"x" * 50 + secret.encode() + b"y" * 50)
    masker = Masker([secret])
    out = b"".join(masker.feed(line) for line in body.splitlines(keepends=True)) + masker.flush()
    assert out.count(b"\n") == body.count(b"\n")
    assert not any(secret.encode() in d for d in _b64_decodings(out.decode()))
