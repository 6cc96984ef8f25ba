"""Terminal safety for the engine's readers: the job-side filter (core/runtime/textsafe.py,
shared with the launcher so both sides keep the same rule).

Rich markup is a concern of the UI only: tui/show/output.py renders text so that no markup parser
ever reads what a job or a user wrote.
"""

from __future__ import annotations

import math
import re
from typing import Any

from core.runtime.textsafe import printable

__all__ = ["printable", "printable_doc"]


_RAW_BYTES = re.compile("[\udc80-\udcff]+")


def _keeping_raw_bytes(text: str) -> str:
    """`printable`, but a file name's bytes that are not UTF-8 (Python holds them as the
    surrogates U+DC80-U+DCFF, which JSON writes as \\udcXX escapes) are kept, so a listing
    names the very file: they are no character at all, so nothing can hide in them."""
    if text.isascii() or not _RAW_BYTES.search(text):
        return printable(text)
    out, at = [], 0
    for m in _RAW_BYTES.finditer(text):
        out.append(printable(text[at:m.start()]))
        out.append(m.group())
        at = m.end()
    out.append(printable(text[at:]))
    return "".join(out)


def printable_doc(value: Any) -> Any:
    """A document as a person or an agent may read it (`gpu ... --json`, MCP tool results):
    every string, key and log bytes through `printable`, so what JSON would only escape (a tag
    character, a bidi override) is gone, not handed back by the parser; numbers JSON cannot
    hold become text."""
    if isinstance(value, bytes):
        return printable(value)
    if isinstance(value, str):
        return _keeping_raw_bytes(value)
    if isinstance(value, dict):
        return {_keeping_raw_bytes(str(k)): printable_doc(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable_doc(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return printable(str(value))
