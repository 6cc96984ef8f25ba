"""The mask knows the encodings people print (issue 39, item 4): base32 (RFC 4648, upper and
lower case, padded or not, alone or inside the base32 of a longer string at any byte alignment)
and hex with its bytes separated by `:` or a space (openssl, `xxd -g1`, `hexdump -C`) or in
xxd's groups of two bytes (`dead beef`), in every
place a secret is masked: the job log (`launch.Masker`), metric names (`gpu.log`), and the names
of files that come home (`core/secrets/names.NameMask`), all through one `SecretPattern`.

The encodings here come from the standard library (`base64.b32encode`, `bytes.hex(sep)`), not
from core/runtime/redact.py; the checks are a reader's: the form is gone, and decoding what is
left at every offset does not give the value back. Ordinary text, hex digests and base32 of
other data are left as they are.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import io
import json
import os
import re
import uuid
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.runtime.launch import Masker
from core.runtime.redact import SecretPattern
from core.secrets.names import NameMask

FAST = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# secret values of several alphabets, 8 to 64 characters
secrets = st.one_of(
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=8, max_size=64),
    st.text(st.characters(categories=["L", "N"]), min_size=8, max_size=64),
    st.text(st.characters(categories=["L", "M", "N", "P", "S"]) | st.just(" "), min_size=8,
            max_size=64).filter(lambda s: s.isprintable() and len(s.strip()) >= 8),
    st.text(st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"), min_size=8, max_size=64),  # a base32 key
    st.text(st.sampled_from("0123456789abcdef"), min_size=8, max_size=64),  # a hex key
    st.text(st.sampled_from("0123456789"), min_size=8, max_size=64),
)
surrounding = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from("é€\t"),
                      max_size=40)


def _b32_secret_only(prefix: bytes, raw: bytes, suffix: bytes, lower: bool) -> str:
    """The base32 characters of prefix+raw+suffix whose 5 bits all come from `raw`."""
    text = base64.b32encode(prefix + raw + suffix).decode()
    first, last = -(-8 * len(prefix) // 5), 8 * (len(prefix) + len(raw)) // 5  # char i: bits [5i, 5i+5)
    core = text[first:last]
    return core.lower() if lower else core


@st.composite
def printed(draw, secret: str) -> tuple[str, list[str], str]:
    """(how a program printed the value, the strings that must not survive, the kind)."""
    raw = secret.encode()
    kind = draw(st.sampled_from(["b32", "b32bare", "b32lower", "b32lowerbare", "b32inside",
                                 "hex:", "HEX:", "hex ", "HEX ", "xxd"]))
    if kind == "xxd":  # xxd's (and xxd -u's) groups of two bytes, the value at either alignment
        prefix, suffix = draw(st.binary(max_size=3)), draw(st.binary(max_size=3))
        dump = (prefix + raw + suffix).hex()
        dump = dump.upper() if draw(st.booleans()) else dump
        return " ".join(dump[i:i + 4] for i in range(0, len(dump), 4)), [], "hex"
    if kind.startswith("hex") or kind.startswith("HEX"):
        text = raw.hex(kind[3])
        text = text.upper() if kind.startswith("HEX") else text
        return text, [text], kind
    if kind == "b32inside":  # the value inside the base32 of a longer string, any alignment
        prefix, suffix = draw(st.binary(max_size=9)), draw(st.binary(max_size=6))
        lower = draw(st.booleans())
        text = base64.b32encode(prefix + raw + suffix).decode()
        text = text.lower() if lower else text
        return text, [_b32_secret_only(prefix, raw, suffix, lower)], kind
    text = base64.b32encode(raw).decode()
    text = text.rstrip("=") if kind.endswith("bare") else text
    text = text.lower() if "lower" in kind else text
    return text, [text, text.rstrip("=")], kind


def _b32_decodings(text: str) -> list[bytes]:
    """The base32 in `text` (either case) decoded at each of the eight character offsets."""
    body = re.sub(r"[^A-Z2-7]", "", text.upper())
    out = []
    for i in range(8):
        part = body[i:][:len(body[i:]) // 8 * 8]
        with contextlib.suppress(binascii.Error):
            out.append(base64.b32decode(part))
    return out


def _hex_decodings(text: str) -> list[bytes]:
    """The hex digits in `text` (separators and all else dropped) decoded at both offsets."""
    body = re.sub(r"[^0-9A-Fa-f]", "", text)
    return [bytes.fromhex(body[i:][:len(body[i:]) // 2 * 2]) for i in range(2)]


def _assert_gone(out: str, secret: str, forbidden: list[str], kind: str) -> None:
    for form in [secret, *forbidden]:
        if len(form) >= 4:
            assert form not in out, (form, out)
    decodings = _b32_decodings(out) if kind.startswith("b32") else _hex_decodings(out)
    assert not any(secret.encode() in d for d in decodings), out


@FAST
@given(data=st.data(), secret=secrets, before=surrounding, after=surrounding)
def test_no_base32_or_separated_hex_form_survives_the_pattern(data, secret: str, before: str,
                                                                after: str) -> None:
    """SecretPattern.mask, which every place that masks calls: the form is gone."""
    form, forbidden, kind = data.draw(printed(secret))
    out = SecretPattern([secret]).mask((before + form + after).encode()).decode()
    _assert_gone(out, secret, forbidden, kind)


@FAST
@given(data=st.data(), secret=secrets, before=surrounding, after=surrounding)
def test_no_base32_or_separated_hex_form_survives_the_log_filter(data, secret: str, before: str,
                                                                   after: str) -> None:
    """The launcher's job-log filter, the output cut into any reads, with a long log around it
    (so the windowed search runs, not only the one-pass one)."""
    form, forbidden, kind = data.draw(printed(secret))
    filler = b"".join(b"step %d loss 0.%04d lr 3e-4\n" % (i, i * 37 % 10000) for i in range(120))
    payload = filler + (before + form + after + "\n").encode() + filler
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(payload)), max_size=5))))
    masker = Masker([secret])
    out, last = [], 0
    for cut in [*cuts, len(payload)]:
        out.append(masker.feed(payload[last:cut]))
        last = cut
    out.append(masker.flush())
    text = b"".join(out).decode("utf-8")
    _assert_gone(text, secret, forbidden, kind)
    assert text.startswith(filler.decode()) and text.endswith(filler.decode())  # the rest is kept


@FAST
@given(data=st.data(), secret=secrets)
def test_a_file_name_holding_a_base32_or_separated_hex_form_comes_home_masked(data, secret: str) -> None:
    """The names of outputs and checkpoints (core/secrets/names.py)."""
    form, forbidden, kind = data.draw(printed(secret))
    name = f"cache/tok_{form}.pt"
    masked = NameMask("job", {"MY_TOKEN": secret}).mask(name)
    _assert_gone(masked, secret, forbidden, kind)
    assert masked.startswith("cache/tok_") and masked.endswith(".pt")


@contextlib.contextmanager
def _job_env(secret: str, metrics: Path):
    saved = dict(os.environ)
    os.environ.update({"GPU_ROUTER_SECRET_ENV": "MY_TOKEN", "MY_TOKEN": secret,
                       "GPU_ROUTER_METRICS_FILE": str(metrics)})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@FAST
@given(secret=st.text(st.characters(categories=["L", "N"]) | st.sampled_from("_.-/"),
                      min_size=8, max_size=40).filter(str.isprintable),
       form=st.sampled_from(["upper", "lower", "inside"]), prefix=st.sampled_from(["", "m_", "val/"]))
def test_gpu_log_drops_a_metric_named_with_the_base32_of_a_secret(tmp_path_factory, secret: str,
                                                                   form: str, prefix: str) -> None:
    """The report: the base32 of a secret used as a metric name reached `gpu metrics`, the
    store and job.json; the job's `gpu.log` (where the name rule is kept) now drops it."""
    from core.runtime import gpu

    raw = secret.encode()
    text = base64.b32encode(b"k:" + raw if form == "inside" else raw).decode().rstrip("=")
    key = prefix + (text.lower() if form == "lower" else text)
    metrics = tmp_path_factory.mktemp("m") / "metrics.jsonl"
    err = io.StringIO()
    gpu._warned.clear()
    with _job_env(secret, metrics), contextlib.redirect_stderr(err):
        gpu.log(step=3, loss=0.5, **{key: 1.0})  # over 64 characters: dropped by the name rule
    stored = metrics.read_text()
    row = json.loads(stored)
    assert set(row) == {"ts", "step", "loss"}, row
    assert not any(secret.encode() in d for d in _b32_decodings(stored + err.getvalue()))
    assert "dropped" in err.getvalue()


def _ordinary_line(draw) -> str:
    """One line such as a job prints, with digests and ids of other data in it."""
    blob = draw(st.binary(min_size=1, max_size=40))
    digest = draw(st.sampled_from([hashlib.sha256, hashlib.sha1, hashlib.md5]))(blob).digest()
    pieces = [
        digest.hex(), digest.hex().upper(), digest.hex(":"), digest.hex(" ").upper(),
        base64.b32encode(digest).decode(), base64.b32encode(digest).decode().lower().rstrip("="),
        base64.b64encode(digest).decode(), str(uuid.UUID(bytes=hashlib.md5(blob).digest())),
        f"step {draw(st.integers(0, 10**6))} loss {draw(st.floats(0, 10)):.6f}",
        draw(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)),
    ]
    chosen = draw(st.lists(st.sampled_from(pieces), min_size=1, max_size=4))
    return " ".join(chosen)


@FAST
@given(data=st.data(), secret=secrets)
def test_ordinary_text_digests_and_base32_of_other_data_are_left_alone(data, secret: str) -> None:
    """No false masking: text that does not hold the value, digests of other data in hex (plain,
    `:` and space separated, either case), base32 and base64, are unchanged."""
    lines = "\n".join(_ordinary_line(data.draw) for _ in range(data.draw(st.integers(1, 6)))) + "\n"
    assume(secret not in lines and secret.strip() not in lines)
    raw = lines.encode()
    assert SecretPattern([secret]).mask(raw) == raw
    long = raw * (4096 // len(raw) + 1)  # the windowed search too
    assert SecretPattern([secret]).mask(long) == long
    masker = Masker([secret])
    assert masker.feed(long) + masker.flush() == long


def test_the_examples_of_the_report() -> None:
    """The forms named in the issue, for one token."""
    secret = "hf_Zx8Kq2LmN4pR7sT1vW3yA5bC6dE9fG0hJk"
    raw = secret.encode()
    pattern = SecretPattern([secret])
    b32 = base64.b32encode(raw).decode()
    for form in [b32, b32.rstrip("="), b32.lower(), b32.lower().rstrip("="),
                 raw.hex(":"), raw.hex(":").upper(), raw.hex(" "), raw.hex(" ").upper(),
                 raw.hex(" ", -2), raw.hex(" ", -2).upper(), raw.hex(" ", 2)]:
        assert pattern.mask(f"value: {form} end".encode()) == b"value: [secret] end", form
    basic = base64.b32encode(b"user:" + raw + b"\n").decode()
    assert not any(raw in d for d in _b32_decodings(pattern.mask(basic.encode()).decode()))
    digest = hashlib.sha256(b"other data").hexdigest()
    for text in (digest, digest.upper(), bytes.fromhex(digest).hex(":"),
                 base64.b32encode(bytes.fromhex(digest)).decode()):
        assert pattern.mask(text.encode()) == text.encode()


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), values=st.lists(secrets, min_size=1, max_size=2))
def test_grouping_the_pattern_by_first_byte_changes_no_match(data, values: list[str]) -> None:
    """The pattern's branches are grouped by their first byte (a trie for the fixed forms) to
    keep the cost per log byte down; every match is where, and as long as, the flat
    alternation's (text spellings first, fixed forms longest first, wrapped base64 last)."""
    from core.runtime import redact

    pattern = SecretPattern(values)
    texts, fixed, wrapped = [], set(), set()
    for value in redact.secret_values(values):
        texts += redact._text_patterns(value)
        fixed |= redact.fixed_forms(value)
        wrapped |= redact._base64_cores(redact._utf8(value))
    flat = re.compile(b"|".join(texts + [re.escape(f) for f in sorted(fixed, key=len, reverse=True)]
                                + [redact._wrapped(f) for f in sorted(wrapped, key=len, reverse=True)]))
    parts = []
    for _ in range(data.draw(st.integers(1, 5))):
        value = data.draw(st.sampled_from(values))
        form, _, _ = data.draw(printed(value))
        parts += [data.draw(surrounding), data.draw(st.sampled_from([form, value, value[:-1], form[1:]]))]
    text = "".join(parts).encode()
    assert [m.span() for m in pattern.regex.finditer(text)] == [m.span() for m in flat.finditer(text)]
