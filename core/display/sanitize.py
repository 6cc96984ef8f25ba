"""Terminal safety for the engine's readers: the job-side filter (core/runtime/textsafe.py,
shared with the launcher so both sides keep the same rule).

Rich markup is a concern of the UI only: tui/output.py renders text so that no markup parser
ever reads what a job or a user wrote.
"""

from __future__ import annotations

import math
from typing import Any

from core.runtime.textsafe import printable

__all__ = ["printable", "printable_doc"]


def printable_doc(value: Any) -> Any:
    """A document as a person or an agent may read it (`gpu ... --json`, MCP tool results):
    every string, key and log bytes through `printable`, so what JSON would only escape (a tag
    character, a bidi override) is gone, not handed back by the parser; numbers JSON cannot
    hold become text."""
    if isinstance(value, (str, bytes)):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(k)): printable_doc(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable_doc(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return printable(str(value))
