"""What a process can be started with: the size of the script line, args and env together.

Its own module, below both the schema (which reads values) and the sweep (which makes each
point's final values): both hold a request to it, and neither may import the other's users.
"""

from __future__ import annotations

import os
from typing import Any

from core.errors import UserError

MAX_ITEM_BYTES = 32 * 1024  # one argument, the script line, or one NAME=value of env
MAX_COMMAND_BYTES = 128 * 1024  # the script line, its args and env together


def text_bytes(text: str) -> int:
    """The size `text` has as an argument of a process; ValueError when it cannot be one."""
    if "\x00" in text:
        raise ValueError("text without NUL bytes")
    try:
        return len(os.fsencode(text))
    except UnicodeError:
        raise ValueError("valid text (it holds an unpaired surrogate)") from None


def check_command_size(req: Any, where: str) -> None:
    """The script line, args and env together must fit what a process can be started with
    (a request, or a sweep's point with its values put in: core.config.sweep)."""
    size = sum(text_bytes(a) + 1 for a in [req.script or "", *req.args])
    size += sum(text_bytes(f"{k}={v}") + 1 for k, v in req.env.items())
    if size > MAX_COMMAND_BYTES:
        raise UserError(f"the script line, args and env come to {size} bytes, more than "
                        f"{MAX_COMMAND_BYTES // 1024} KiB", where=where,
                        fix="pass large inputs as files: put them in the project or use data: NAME=PATH")
