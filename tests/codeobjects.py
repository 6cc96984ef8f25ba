"""A file object put in a code object store as a host's cache holds it (core/runtime/objstore.py's
layout), for the tests of the code folder, its take-over and its checks."""

from __future__ import annotations

import hashlib
from pathlib import Path

from core.runtime import objstore


def store_obj(objects: Path, data: bytes) -> str:
    """`data` stored under its sha256 in `objects`: its digest."""
    digest = hashlib.sha256(data).hexdigest()
    path = Path(objstore.object_path(str(objects), digest))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest
