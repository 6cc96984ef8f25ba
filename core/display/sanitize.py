"""Terminal safety for the engine's readers: the job-side filter (core/runtime/textsafe.py,
shared with the launcher so both sides keep the same rule).

Rich markup is a concern of the UI only: tui/output.py renders text so that no markup parser
ever reads what a job or a user wrote.
"""

from __future__ import annotations

from core.runtime.textsafe import printable

__all__ = ["printable"]
