r"""What may leave a job: secret values masked in every form they take, metric keys kept short.

Shipped beside the launcher (standard library only). The launcher masks every byte it writes
to the job log with `SecretPattern`; the `gpu` module checks metric names and values with it
before they are written; home masks the names of outputs and checkpoints with it, and the
names in its copy of the checkpoint marker (core/secrets/names.py, applied in
core/packaging/safe_extract.py and core/packaging/checkpoints/mirroring.py; the job's own marker
keeps the names it wrote, so that its listing and marker still agree).

Masking guards against accidental display (a library that prints its config, a traceback
that shows a header); a job that holds a secret can always leak it on purpose, which is why
the sandbox and approvals exist.

A secret is looked for in the forms a program prints it in:
- as written, and with any of its characters escaped, each in any of these spellings (one
  pattern covers every mix, with QP soft line breaks `=\n` allowed anywhere): URL `%XX`
  (either hex case, `+` for a space) and double URL `%25XX`; quoted-printable `=XX`; JSON and
  Python `\uXXXX` (surrogate pairs for characters past U+FFFF), `\UXXXXXXXX`, `\xXX`, `\/`,
  `\"`, `\\`; HTML `&#NN;`, `&#xHH;` (up to 4 leading zeros, `;` optional as browsers
  allow) and `&amp;` `&lt;` `&gt;` `&quot;` `&apos;`;
- base64, standard and URL-safe, padded or not, and inside the base64 of a longer string
  (an HTTP Basic header is base64 of `user:secret`): for each of the three byte alignments,
  the base64 characters that depend on the secret's bytes alone; also wrapped into lines
  (`\n` or `\r\n` anywhere inside), as MIME and PEM writers print base64;
- base32 (RFC 4648), upper case and lower, padded or not, and inside the base32 of a longer
  string: for each of the five byte alignments in a 5-byte group, the base32 characters that
  depend on the secret's bytes alone (as for base64; not wrapped into lines);
- hex, lower and upper case, also with its bytes separated by `:` or a space (`de:ad:be:ef`,
  `DE AD BE EF`: how openssl, `xxd -g1` and `hexdump -C` print bytes) and in xxd's groups of
  two bytes (`dead beef`, at either byte alignment); a dump's line breaks (every 16 bytes)
  and hexdump's double space after 8 bytes are not followed; JSON and Python string escapes
  of the whole value.
A multi-line secret (a PEM key) is also looked for line by line, since logs are read by line.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Iterator

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


def _base64_cores(raw: bytes) -> set[bytes]:
    """The base64 characters that depend on the secret's bytes alone, for each alphabet and
    byte alignment (what any base64 text that holds the secret contains)."""
    cores: set[bytes] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for offset in range(3):
            text = encode(bytes(offset) + raw).rstrip(b"=")
            ragged = 1 if (offset + len(raw)) % 3 else 0
            core = text[_B64_SKIP[offset]:len(text) - ragged]
            if len(core) >= 2:
                cores.add(core)
    return cores


def _base32_forms(raw: bytes) -> set[bytes]:
    """The secret's base32 on its own (padded or not) and inside any longer base32 text, upper
    and lower case: for each byte offset of its start in a 5-byte group, the characters whose 5
    bits all come from the secret (one that mixes in a neighbour's bits is left out)."""
    whole = base64.b32encode(raw)
    forms = {whole, whole.rstrip(b"=")}
    for offset in range(5):
        text = base64.b32encode(bytes(offset) + raw)
        first, last = -(-8 * offset // 5), 8 * (offset + len(raw)) // 5  # character i: bits [5i, 5i+5)
        forms.add(text[first:last])
    return forms | {f.lower() for f in forms}


def _hex_forms(raw: bytes) -> set[bytes]:
    """Hex, lower and upper case: plain, with the bytes separated by `:` or a space, and in
    xxd's groups of two bytes (`dead beef`) for either byte alignment of the value's start."""
    forms: set[bytes] = set()
    for text in (raw.hex(), raw.hex().upper()):
        pairs = [text[i:i + 2] for i in range(0, len(text), 2)]
        forms |= {text.encode(), ":".join(pairs).encode(), " ".join(pairs).encode()}
        for head in (0, 2):  # the first group: two bytes of the value, or its first byte alone
            groups = [text[:head]] if head else []
            groups += [text[i:i + 4] for i in range(head, len(text), 4)]
            forms.add(" ".join(groups).encode())
    return forms


def _escaped_forms(value: str) -> set[bytes]:
    """How JSON and Python's repr spell the value, when that differs from the value itself."""
    forms = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], repr(value)[1:-1]}
    return {_utf8(f) for f in forms}


def fixed_forms(value: str) -> set[bytes]:
    """Every fixed spelling of one secret value that is looked for (not the URL pattern)."""
    raw = _utf8(value)
    forms = {raw} | _hex_forms(raw) | _base32_forms(raw)
    forms |= _base64_forms(raw) | _escaped_forms(value)
    return {f for f in forms if len(f) >= MIN_SECRET_LEN}


_SOFT_BREAK = rb"(?:=\r?\n)?"  # a quoted-printable soft line break, allowed between any two bytes
_NAMED = {"&": [b"&amp;?"], "<": [b"&lt;?"], ">": [b"&gt;?"], '"': [b"&quot;?"], "'": [b"&apos;"]}
_SHORT = {"/": b"/", '"': b'"', "\\": b"\\", "'": b"'", "\b": b"b", "\f": b"f", "\n": b"n",
          "\r": b"r", "\t": b"t"}  # one-letter backslash escapes (JSON, Python)
WRAPPED_MIN_LINE = 64  # base64 is wrapped at 64 (PEM) or 76 (MIME) characters a line


def _hex(n: int, width: int) -> bytes:
    """`n` in hex of this width, each letter in either case."""
    return b"".join(f"[{c}{c.lower()}]".encode() if c.isalpha() else c.encode()
                    for c in f"{n:0{width}X}")


def _url_byte(b: int) -> list[bytes]:
    """One byte as it may be printed: %25XX (URL-encoded twice), %XX, =XX (quoted-printable),
    literally; a space also as `+`, and as a return, which a reader that shows returns as
    spaces turns back into it (`ab\rcd` reads `ab cd` there).

    The escapes come first: for `%` itself the literal is a prefix of its own escape `%25`,
    and an alternation takes the first branch that matches, which would leave the `25` shown."""
    hexed = _hex(b, 2)
    alts = [b"%25" + hexed, b"%" + hexed, b"=" + hexed, re.escape(bytes([b]))]
    return alts + [rb"\+", rb"\r"] if b == 0x20 else alts


def _char_escapes(ch: str) -> list[bytes]:
    """One character as JSON, Python or HTML escape it (whole-character escapes)."""
    code = ord(ch)
    digits = str(code).encode()
    alts = [b"&#0{0,4}" + digits + b";?", b"&#[xX]0{0,4}" + _hex(code, 1) + b";?"]
    alts += _NAMED.get(ch, [])
    if code <= 0xFFFF:
        alts.append(rb"\\u" + _hex(code, 4))
    else:  # UTF-16 surrogate pair, as JSON writes it
        hi, lo = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        alts.append(rb"\\u" + _hex(hi, 4) + rb"\\u" + _hex(lo, 4))
    alts.append(rb"\\U" + _hex(code, 8))
    if code <= 0xFF:
        alts.append(rb"\\x" + _hex(code, 2))
    if ch in _SHORT:
        alts.append(rb"\\" + re.escape(_SHORT[ch]))
    return alts


def _char_alternatives(ch: str, tail: bytes = b"") -> list[bytes]:
    """One character of a value in each of its printed spellings, each followed by `tail`.

    Every branch starts with a literal byte: the regex engine then skips in C to the positions
    where one of those bytes is (a branch that starts with a group defeats that)."""
    raw = _utf8(ch)
    rest = b"".join(_SOFT_BREAK + b"(?:" + b"|".join(_url_byte(b)) + b")" for b in raw[1:])
    if 0xDC80 <= ord(ch) <= 0xDCFF:  # a raw byte os.environ could not decode: byte-wise only
        return [alt + tail for alt in _url_byte(ord(ch) - 0xDC00)]
    return [alt + tail for alt in [*_char_escapes(ch), *(alt + rest for alt in _url_byte(raw[0]))]]


def _char_reach(ch: str) -> int:
    """The most bytes one character's spelling can take, a soft break after it included."""
    return max(8 * len(_utf8(ch)), 14) + 3


def _text_patterns(value: str) -> list[bytes]:
    """The value as written or with any of its characters escaped, in any mix of spellings: one
    branch per spelling of its first character (so each starts with a literal, see above)."""
    rest = b"".join(_SOFT_BREAK + b"(?:" + b"|".join(_char_alternatives(ch)) + b")" for ch in value[1:])
    return _char_alternatives(value[0], rest)


def _escape_finder(values: list[str]) -> re.Pattern[bytes] | None:
    """A pattern for every escape some value's character can take: each match of the full
    pattern that is not one of the anchors (see SecretPattern) contains one of these."""
    raws = {b for v in values for b in _utf8(v)}
    chars = {c for v in values for c in v}
    if not raws:
        return None
    hexes = b"|".join(_hex(b, 2) for b in sorted(raws))
    alts = [b"%(?:25)?(?:" + hexes + b")", b"=(?:" + hexes + b"|\r?\n)", rb"&#", rb"\\[uUx]"]
    alts += [n[:-2] if n.endswith(b";?") else n for c in sorted(chars & set(_NAMED)) for n in _NAMED[c]]
    alts += [rb"\\" + re.escape(_SHORT[c]) for c in sorted(chars & set(_SHORT))]
    return re.compile(b"|".join(alts))


def _wrapped(form: bytes) -> bytes:
    """A base64 form with a line break (\n or \r\n) allowed between any two characters."""
    return rb"(?:\r?\n)?".join(re.escape(bytes([c])) for c in form)


def _wrapped_anchors(form: bytes) -> list[bytes]:
    """Pieces of a base64 form one of which survives any wrapping: line breaks are at least
    WRAPPED_MIN_LINE characters apart, so of two neighbouring pieces of half that length at
    most one holds a break (and a short form breaks at most once: one half is whole)."""
    if len(form) <= WRAPPED_MIN_LINE:
        half = -(-len(form) // 2)
        return [form[:half], form[len(form) - half:]]
    size = WRAPPED_MIN_LINE // 2
    return [form[i:i + size] for i in range(0, len(form) - size + 1, size)]


def secret_values(values: list[str]) -> list[str]:
    """The values to look for: each secret and each line of a multi-line one, without their
    leading and trailing blanks. Edge blanks hide nothing, yet a reader can supply them (a
    return shown as a space joins ` ab` + `\r` + `cd` into ` ab cd`), so the core is what is
    masked and what must never show."""
    out: list[str] = []
    for value in values:
        for part in [value, *re.split(r"\r\n|\r|\n", value)]:
            core = part.strip()
            form = core if len(core) >= MIN_SECRET_LEN else part
            if len(form) >= MIN_SECRET_LEN and form not in out:
                out.append(form)
    return out


class SecretPattern:
    """One compiled pattern for all of a job's secrets in all their forms, and a cheap way to
    find where it can match.

    Every match contains either one of `anchors` (a fixed form, the longest run without a
    space of a value, which a URL form without escapes keeps literally, or a piece of a base64
    form that survives its wrapping) or an escape of a character some value has (`%XX`,
    `=XX`, a QP soft break, `&#`, `\\u`...). `mask` finds those with `bytes.find` and one
    regex whose branches start with a literal (both scan in C at memory speed) and runs the
    full pattern only on windows around them: a log of ordinary lines costs a few fast scans
    per chunk, not a regex walk."""

    def __init__(self, values: list[str]) -> None:
        fixed: set[bytes] = set()
        patterns: list[bytes] = []
        wrapped: set[bytes] = set()
        anchors: set[bytes] = set()
        longest = 0
        # a value before the shorter ones it begins with: at one position the regex takes the
        # first text branch that matches, and `abcd` read in `abcdefgh` left `efgh` on show
        values = sorted(secret_values(values), key=len, reverse=True)
        for value in values:
            raw = _utf8(value)
            fixed |= fixed_forms(value)
            patterns += _text_patterns(value)
            anchors.add(max(raw.split(b" "), key=len))
            longest = max(longest, sum(_char_reach(c) for c in value))
            for form in _base64_cores(raw):
                wrapped.add(form)
                anchors.update(_wrapped_anchors(form))
        ordered = sorted(fixed, key=len, reverse=True)  # at one position the longest form wins
        self.longest = max([longest, *(2 * len(f) for f in wrapped), *map(len, ordered)])
        # the text forms first: they also match the value as written, byte for byte, and take
        # an escape over the literal byte (`%25` over `%`), so a match runs to its longest end;
        # a wrapped base64 form last: unwrapped, the fixed forms (padding included) match first
        alternatives = _by_first_byte(patterns, ordered)
        unwrap = [_wrapped(f) for f in sorted(wrapped, key=len, reverse=True)]
        alternatives += unwrap
        self.regex = re.compile(b"|".join(alternatives)) if alternatives else None
        # ... so a text form beats a longer fixed one, and a fixed form a longer wrapped one, that
        # starts where it does (a value's base64 at the start of a longer value's, wrapped):
        # `spans` asks these for the longest fixed and the longest wrapped form at a match's start
        self.longer = [re.compile(_trie(ordered)), re.compile(b"|".join(unwrap))]
        # looked for in the text folded to lower case: one anchor for a form in either case
        # (hex, base32), the same windows for the rest
        self.anchors = _minimal({a.lower() for a in anchors | fixed})
        self.escape = _escape_finder(values)
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
        folded = data.lower()  # ASCII letters only: every byte keeps its place
        for anchor in self.anchors:
            at = folded.find(anchor)
            while at != -1:
                spans.append((at - reach, at + len(anchor) + reach))
                at = folded.find(anchor, at + 1)
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
            data, count = self._replace_spans(data)
            if not count or not self.reforms or self.regex.search(data) is None:
                return data
        return b"" if self.regex.search(WITHHELD) else WITHHELD

    def _replace_spans(self, data: bytes) -> tuple[bytes, int]:
        """Each run of overlapping matches (`spans`) replaced as one."""
        out, last, count = [], 0, 0
        for start, end in self.spans(data):
            out += [data[last:start], _masked(data[start:end])]
            last = end
            count += 1
        out.append(data[last:])
        return b"".join(out), count

    def spans(self, data: bytes, pos: int = 0) -> Iterator[tuple[int, int]]:
        """The stretches of `data` a mask covers, in order, from `pos`. A plain left-to-right
        replace takes the first match and goes on after it, but a form can start inside
        another: in `%20 %200%20 %30`, the value `0  0` (its blanks escaped or not) is read from
        the `0` of the first `%20`, and again from the real `0` after it; masking only the first
        reading left the real one's tail (`%20 %30`) on show. So a match is widened by every
        match that starts inside it, and to whole URL escapes at its ends (half an escape left
        beside a mask is a stray `%2`)."""
        last = 0
        while (m := self.regex.search(data, pos)) is not None:
            start, end = m.start(), self._longest_end(data, m)
            nxt = start + 1
            while nxt < end and (more := self.regex.search(data, nxt)) is not None and more.start() < end:
                more_end = self._longest_end(data, more)
                if not _BLANKS.fullmatch(data, end, max(end, more_end)):  # more than edge blanks
                    end = more_end
                nxt = more.start() + 1
            start, end = max(_escape_start(data, start), last), _escape_end(data, end)
            yield start, end
            last = end
            pos = end if end > m.start() else m.start() + 1  # an empty match: step over a byte

    def _longest_end(self, data: bytes, m: re.Match[bytes]) -> int:
        """Where the longest reading that starts where `m` does ends. The regex takes a
        position's first branch that matches, a fixed form before a wrapped one, so where a
        value's form begins a longer value's form (a value that begins another, `abcd` and
        `abcdefgh`), the shorter one matched: the longer one's base64, wrapped, showed its
        tail beside the mask."""
        end = m.end()
        for longer in self.longer:
            if (other := longer.match(data, m.start())) is not None and other.end() > end:
                end = other.end()
        return end

    def safe_cut(self, data: bytes, cut: int) -> int:
        """`cut`, moved back to the start of a masked stretch that reaches past it: the text
        before the result can go out masked, and what a later read adds to the rest can still
        join a form that began before `cut` (a value written in pieces with pauses)."""
        if self.regex is None:
            return cut
        for start, end in self.spans(data, max(0, cut - self.longest)):
            if start >= cut:
                break
            if end > cut:
                return start
        return cut


_QUANTIFIERS = b"?*+{"


def _first_byte(branch: bytes) -> tuple[bytes, bytes] | None:
    """(the literal byte a text branch starts with, the rest of the branch), or None where its
    first atom is not one unquantified literal byte."""
    if branch[:1] == b"\\":
        if len(branch) < 2 or branch[1:2].isalnum():  # a class such as \d, not a literal
            return None
        first, rest = branch[1:2], branch[2:]
    elif branch[:1] and branch[:1] not in b"([.^$|)*+?{":
        first, rest = branch[:1], branch[1:]
    else:
        return None
    return None if rest[:1] and rest[:1] in _QUANTIFIERS else (first, rest)


def _trie(forms: list[bytes]) -> bytes:
    """Literal byte strings as one pattern that branches where they part, the longest match
    preferred at each fork (as the longest-first alternation it replaces)."""
    root: dict = {}
    for form in forms:
        node = root
        for b in form:
            node = node.setdefault(b, {})
        node[None] = {}  # a form ends here

    def emit(node: dict) -> bytes:
        out = b""
        while len(node) == 1 and None not in node:  # a run without forks: no recursion
            (b, node), = node.items()
            out += re.escape(bytes([b]))
        forks = [re.escape(bytes([b])) + emit(child)
                 for b, child in sorted((b, c) for b, c in node.items() if b is not None)]
        if not forks:
            return out
        forks += [b""] if None in node else []  # ending here is the shortest choice: last
        return out + (forks[0] if len(forks) == 1 else b"(?:" + b"|".join(forks) + b")")

    return emit(root)


def _by_first_byte(patterns: list[bytes], fixed: list[bytes]) -> list[bytes]:
    """The text branches and the fixed forms (longest first) as one branch per first byte.

    The regex engine tries a position's branches one by one; grouped, it tries one per byte
    that a form starts with, then only the forms that start with the byte that is there. Which
    branch wins at a position is unchanged: within a byte's group the text branches come first,
    in their order, then the fixed forms longest first (`_trie`), as in the flat list, and
    branches that start with different bytes never both match at one position."""
    groups: dict[bytes, tuple[list[bytes], list[bytes]]] = {}
    for branch in patterns:
        split = _first_byte(branch)
        if split is None:  # cannot happen with the branches built here; keep the order then
            return patterns + [re.escape(f) for f in fixed]
        groups.setdefault(split[0], ([], []))[0].append(split[1])
    for form in fixed:
        groups.setdefault(form[:1], ([], []))[1].append(form[1:])
    out = []
    for first, (texts, forms) in groups.items():
        rests = texts + ([_trie(forms)] if forms else [])
        out.append(re.escape(first) + (rests[0] if len(rests) == 1 else b"(?:" + b"|".join(rests) + b")"))
    return out


_HEX = frozenset(b"0123456789abcdefABCDEF")
# blanks in any spelling a value's blank has here: a later reading that adds only these to a mask
# adds edge blanks, which hide nothing (secret_values), and would take the text's own spaces
_BLANKS = re.compile(rb"(?:%(?:25)?20|=20|[ +\r])*")


def _escape_start(data: bytes, start: int) -> int:
    """`start`, moved back to the `%` of a URL escape (`%2|0`) it falls inside: a mask never
    leaves half an escape beside it."""
    if start >= 1 and data[start - 1] == 0x25 and start < len(data) and data[start] in _HEX:
        return start - 1
    if start >= 2 and data[start - 2] == 0x25 and data[start - 1] in _HEX and start < len(data) \
            and data[start] in _HEX:
        return start - 2
    return start


def _escape_end(data: bytes, end: int) -> int:
    """`end`, moved on past a URL escape it falls inside (`%|20`, `%2|0`)."""
    if end >= 1 and data[end - 1] == 0x25 and len(data) >= end + 2 and all(b in _HEX for b in data[end:end + 2]):
        return end + 2
    if end >= 2 and data[end - 2] == 0x25 and data[end - 1] in _HEX and end < len(data) and data[end] in _HEX:
        return end + 1
    return end


def _masked(text: bytes) -> bytes:
    """MASK, and the line breaks a wrapped form spanned: the log keeps its lines."""
    return MASK + b"\n" * text.count(b"\n")


def _minimal(strings: set[bytes]) -> list[bytes]:
    """The strings that contain none of the others: finding those finds them all."""
    kept: list[bytes] = []
    for s in sorted(strings, key=len):
        if not any(k in s for k in kept):
            kept.append(s)
    return kept
