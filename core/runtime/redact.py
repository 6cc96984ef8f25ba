"""What may leave a job: secret values masked in every form they take, metric keys kept short.

Shipped beside the launcher (standard library only). The launcher masks every byte it writes
to the job log with `SecretPattern`; the `gpu` module checks metric names and values with it
before they are written; the supervisor applies `metric_key_ok` again where it ingests metrics.

A secret is looked for in the forms a program prints it in:
- as written, and URL-encoded with any set of characters left unescaped (each character
  literally or as %XX in either hex case, `+` for a space): one pattern covers both;
- base64, standard and URL-safe, padded or not, and inside the base64 of a longer string
  (an HTTP Basic header is base64 of `user:secret`): for each of the three byte alignments,
  the base64 characters that depend on the secret's bytes alone;
- hex, lower and upper case; JSON and Python string escapes when they differ from the value.
A multi-line secret (a PEM key) is also looked for line by line, since logs are read by line.
"""

from __future__ import annotations

import base64
import json
import re

MASK = b"[secret]"
MIN_SECRET_LEN = 4  # shorter values would hide ordinary text and protect nothing
WITHHELD = b"[output withheld: it kept forming a secret value]\n"

METRIC_KEY = re.compile(r"[A-Za-z0-9_./-]{1,64}")
METRIC_KEY_RULE = "1 to 64 characters from A-Z a-z 0-9 _ . / -"
CONFIG_TEXT_MAX = 256  # characters of a text setting (a tracked run's config) that are kept
CONFIG_LIST_MAX = 64  # items of a list setting that are kept

SMALL = 2048  # below this many bytes one pass of the full pattern beats finding windows
_B64_SKIP = (0, 2, 3)  # leading characters that also depend on the bytes before the secret


def metric_key_ok(key: object) -> bool:
    """Metric names are plain identifiers: no room for a pasted value or terminal codes."""
    return isinstance(key, str) and METRIC_KEY.fullmatch(key) is not None


def _utf8(value: str) -> bytes:
    try:
        return value.encode("utf-8", "surrogateescape")  # os.environ's undecodable bytes, back
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")


def _base64_forms(raw: bytes) -> set[bytes]:
    """The secret's base64 on its own (padded or not) and inside any longer base64 text."""
    forms: set[bytes] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw)
        forms |= {whole, whole.rstrip(b"=")}
        for offset in range(3):  # the secret starts at byte offset 0, 1 or 2 of a 3-byte group
            text = encode(bytes(offset) + raw).rstrip(b"=")
            ragged = 1 if (offset + len(raw)) % 3 else 0  # last character mixes in what follows
            forms.add(text[_B64_SKIP[offset]:len(text) - ragged])
    return forms


def _escaped_forms(value: str) -> set[bytes]:
    """How JSON and Python's repr spell the value, when that differs from the value itself."""
    forms = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], repr(value)[1:-1]}
    return {_utf8(f) for f in forms}


def fixed_forms(value: str) -> set[bytes]:
    """Every fixed spelling of one secret value that is looked for (not the URL pattern)."""
    raw = _utf8(value)
    forms = {raw, raw.hex().encode(), raw.hex().upper().encode()}
    forms |= _base64_forms(raw) | _escaped_forms(value)
    return {f for f in forms if len(f) >= MIN_SECRET_LEN}


def _url_byte(b: int) -> list[bytes]:
    """One byte as a URL may carry it: %XX in either hex case, literally, `+` for a space.

    The escape comes first: for `%` itself the literal is a prefix of its own escape `%25`,
    and an alternation takes the first branch that matches, which would leave the `25` shown."""
    hi, lo = f"{b:02X}"
    hexes = [f"[{c}{c.lower()}]" if c.isalpha() else c for c in (hi, lo)]
    alts = [("%" + hexes[0] + hexes[1]).encode(), re.escape(bytes([b]))]
    return alts + [rb"\+"] if b == 0x20 else alts


def _url_alternatives(raw: bytes) -> list[bytes]:
    """The value as written or URL-encoded with any characters left unescaped.

    Split on the first byte so that every alternative starts with a literal: the regex engine
    then skips ahead to candidate positions in C instead of trying every position."""
    rest = b"".join(b"(?:" + b"|".join(_url_byte(b)) + b")" for b in raw[1:])
    return [alt + rest for alt in _url_byte(raw[0])]


def secret_values(values: list[str]) -> list[str]:
    """The values to look for: each secret, and each line of a multi-line one."""
    out: list[str] = []
    for value in values:
        for part in [value, *re.split(r"\r\n|\r|\n", value)]:
            if len(part) >= MIN_SECRET_LEN and part not in out:
                out.append(part)
    return out


class SecretPattern:
    """One compiled pattern for all of a job's secrets in all their forms, and a cheap way to
    find where it can match.

    Every match contains either one of `anchors` (a fixed form, or the longest run without a
    space of a value, which a URL form without escapes keeps literally) or a %XX escape of a
    byte some value has. `mask` finds those with `bytes.find` and one regex that starts with
    a literal `%` (both scan in C at memory speed) and runs the full pattern only on windows
    around them: a log of ordinary lines costs a few fast scans per chunk, not a regex walk."""

    def __init__(self, values: list[str]) -> None:
        fixed: set[bytes] = set()
        patterns: list[bytes] = []
        anchors: set[bytes] = set()
        escapes: set[int] = set()
        longest = 0
        for value in secret_values(values):
            raw = _utf8(value)
            fixed |= fixed_forms(value)
            patterns += _url_alternatives(raw)
            anchors.add(max(raw.split(b" "), key=len))
            escapes |= set(raw)
            longest = max(longest, 3 * len(raw))
        ordered = sorted(fixed, key=len, reverse=True)  # at one position the longest form wins
        self.longest = max([longest, *map(len, ordered)])  # the most text one match can span
        # the URL forms first: they also match the value as written, byte for byte, and take
        # an escape over the literal byte (`%25` over `%`), so a match runs to its longest end
        alternatives = patterns + [re.escape(f) for f in ordered]
        self.regex = re.compile(b"|".join(alternatives)) if alternatives else None
        self.anchors = _minimal(anchors | fixed)
        self.escape = re.compile(b"%(?:" + b"|".join(_url_byte(b)[0][1:] for b in sorted(escapes))
                                 + b")") if escapes else None
        # a value with a bracket, or a form inside MASK, could be re-formed by a replacement
        self.reforms = bool(self.regex) and (any(c in f for f in fixed for c in b"[]")
                                             or self.regex.search(MASK) is not None)
        self.scan_all = self.reforms or any(len(a) < MIN_SECRET_LEN for a in self.anchors)

    def __bool__(self) -> bool:
        return self.regex is not None

    def holds(self, data: bytes | str) -> bool:
        """Does this text contain a secret in any form?"""
        if self.regex is None:
            return False
        return self.regex.search(_utf8(data) if isinstance(data, str) else data) is not None

    def mask(self, data: bytes) -> bytes:
        """The text with every secret form replaced by MASK."""
        if self.regex is None:
            return data
        if self.scan_all or len(data) < SMALL:
            return self._mask_all(data)
        spans = self._windows(data)
        if not spans:
            return data
        out, last = [], 0
        for start, end in spans:
            out += [data[last:start], self._mask_all(data[start:end])]
            last = end
        out.append(data[last:])
        return b"".join(out)

    def _windows(self, data: bytes) -> list[tuple[int, int]]:
        """Merged spans around every anchor and escape, wide enough to hold any match there."""
        reach = self.longest
        spans = []
        for anchor in self.anchors:
            at = data.find(anchor)
            while at != -1:
                spans.append((at - reach, at + len(anchor) + reach))
                at = data.find(anchor, at + 1)
        for m in self.escape.finditer(data):
            spans.append((m.start() - reach, m.end() + reach))
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([max(start, 0), end])
        return [(s, min(e, len(data))) for s, e in merged]

    def _mask_all(self, data: bytes) -> bytes:
        """Every match replaced; again while a replacement joins its neighbours into a new
        match (only possible for values with a bracket or inside MASK)."""
        for _ in range(4):
            data, count = self.regex.subn(MASK, data)
            if not count or not self.reforms or self.regex.search(data) is None:
                return data
        return b"" if self.regex.search(WITHHELD) else WITHHELD


def _minimal(strings: set[bytes]) -> list[bytes]:
    """The strings that contain none of the others: finding those finds them all."""
    kept: list[bytes] = []
    for s in sorted(strings, key=len):
        if not any(k in s for k in kept):
            kept.append(s)
    return kept
