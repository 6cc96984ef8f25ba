"""Terminal safety for the UI: the job-side filter (core/runtime/textsafe.py, shared with the
launcher so stored logs are already safe) plus Rich markup made inert."""

from __future__ import annotations

from core.runtime.textsafe import printable

__all__ = ["markup_safe", "printable"]


def markup_safe(text: str) -> str:
    """Printable text with rich/Textual markup made inert (`[link=...]` shows as text)."""
    return printable(text).replace("[", r"\[")
