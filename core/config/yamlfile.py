"""Reading a YAML file (`gpu.yaml`, the user's config): its text, read safely, and what it
parsed to last time, remembered by content.

Why a memory: PyYAML's import and its parse are ~15-25 ms of every `gpu submit` (the user
config and the project's gpu.yaml are read each time), while the files change rarely. The
parse itself stays in `core.config.safeyaml` (its limits, its errors); this module only keeps a
successful result, in a file under the cache folder, keyed by the file's path and the sha256
of its text, and gives it back while the text is the same. A failed parse is never kept: an
error is said every time. Only a result that survives a JSON round trip unchanged is kept (a
date, a set or a non-string key is parsed afresh each time), so a remembered value equals a
fresh parse exactly.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any, Callable

from core import paths
from core.errors import UserError

MAX_BYTES = 1 << 20


def read_text(path: Path, limit: int = MAX_BYTES) -> str | None:
    """The file's text, or None when there is no such file.

    Opened without blocking and checked to be a regular file first: a FIFO or a device named
    like a config would otherwise hang or stream forever.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror}", where=str(path),
                        fix="check the file's name and permissions") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError("is not a regular file", where=str(path),
                            fix="make it a plain YAML file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UserError(f"is larger than {limit // 1024} KiB", where=str(path),
                        fix="keep settings in it, not data: pass large inputs with data: NAME=PATH")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"is not UTF-8 text (byte {exc.start})", where=str(path),
                        fix="save it as UTF-8") from None


def _parser_stamp() -> str:
    """What the parse depends on besides the text: safeyaml's own source (its limits), so an
    upgrade of gpu-router never answers from an older parse."""
    try:
        st = os.stat(Path(__file__).with_name("safeyaml.py"))
    except OSError:
        return ""
    return f"{st.st_size}:{st.st_mtime_ns}"


def remembered(path: Path, text: str, kind: str, parse: Callable[[str], Any]) -> Any:
    """`parse(text)`, or what it returned for this very text last time.

    `kind` names the shape `parse` returns ("user-config/1"): a caller that changes its shape
    changes its kind. The memory is best effort: an unreadable or damaged cache file is a
    miss, and one that cannot be written is skipped."""
    key = hashlib.sha256(f"{kind}\0{_parser_stamp()}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()
    name = hashlib.sha256(os.fsencode(str(path))).hexdigest()[:32]
    cache = paths.cache_dir() / "yaml" / f"{name}.json"
    try:
        doc = json.loads(cache.read_bytes())
        if doc["key"] == key:
            return doc["value"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = parse(text)
    try:
        blob = json.dumps({"key": key, "value": value}, allow_nan=False)
        if json.loads(blob)["value"] == value:  # exact: no tuple, date, set or int key was bent
            cache.parent.mkdir(exist_ok=True)
            tmp = cache.with_name(f".{name}.{os.getpid()}.tmp")
            tmp.write_text(blob)
            os.replace(tmp, cache)
    except (TypeError, ValueError, OSError):
        pass
    return value
