"""The two ways the dependency reader sees a project (core/packaging/requirements.py): a folder's
shipped listing at submit, and a stored bundle at launch. Both follow a link only to a file inside
the bundle, and what did not ship says why; so the same project reads the same at submit and on
every target.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Iterable

from core.errors import UserError

MAX_LINK_HOPS = 8
KEEP_BYTES = 4 << 20  # a bundle file's bytes kept while reading it (larger ones: their hash only)



class _Files(ABC):
    """Shared link handling: a link is followed only to a file inside the bundle."""

    @abstractmethod
    def _kind(self, rel: str) -> str | None:  # "file", "link" or None
        ...

    @abstractmethod
    def _link(self, rel: str) -> str:
        ...

    @abstractmethod
    def _bytes(self, rel: str) -> bytes:
        ...

    @abstractmethod
    def _all(self) -> Iterable[str]:
        ...

    def read(self, rel: str) -> bytes | None:
        for _ in range(MAX_LINK_HOPS):
            kind = self._kind(rel)
            if kind == "file":
                return self._bytes(rel)
            if kind != "link":
                return None
            target = self._link(rel)
            if target.startswith("/"):
                return None
            rel = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
            if rel == ".." or rel.startswith("../"):
                return None
        return None

    def files_under(self, rel: str) -> list[str]:
        rel = "" if rel in ("", ".") else rel
        prefix = rel + "/" if rel else ""
        return sorted(p for p in self._all() if self._kind(p) == "file" and (p == rel or p.startswith(prefix)))

    def missing_reason(self, rel: str) -> str | None:
        return None

    def digest(self, rel: str) -> bytes:
        """sha256 of a regular file's content (a local path requirement's hash is made of these)."""
        return hashlib.sha256(self._bytes(rel)).digest()


class BundleFiles(_Files):
    """A stored bundle (its manifest over file objects, core.packaging.objects), or a bundle
    tar.gz: what every target installs from (small files read once and kept)."""

    def __init__(self, bundle: Path) -> None:
        self._kinds: dict[str, str] = {}
        self._links: dict[str, str] = {}
        self._data: dict[str, bytes] = {}  # small files, whole: requirement files are among them
        self._digests: dict[str, bytes | str] = {}  # every regular file (hex from a manifest)
        self._objects: dict[str, str] = {}  # a manifest's small files, by their object's hash
        if bundle.suffix == ".json":
            self._from_manifest(bundle)
        else:
            self._from_archive(bundle)

    def _from_manifest(self, manifest: Path) -> None:
        # 20,000 rows: plain strings kept, each object's path and bytes made only when asked
        # (a Path and a bytes.fromhex per row were most of a launch's 0.7 s here)
        from core.runtime import codetree
        kinds, links, digests, small = self._kinds, self._links, self._digests, self._objects
        for rel, kind, ref, size in codetree.read_manifest(str(manifest)):
            if kind == "l":
                kinds[rel], links[rel] = "link", ref
                continue
            kinds[rel] = "file"
            digests[rel] = ref
            if size <= KEEP_BYTES:
                small[rel] = ref  # read when asked for

    def _from_archive(self, bundle: Path) -> None:
        import tarfile
        with tarfile.open(bundle, "r:gz") as tar:
            for member in tar:
                name = posixpath.normpath(member.name.lstrip("./")) if member.name not in ("", ".") else ""
                if member.issym():
                    self._kinds[name], self._links[name] = "link", member.linkname
                if not member.isreg():
                    continue
                self._kinds[name] = "file"
                f = tar.extractfile(member)
                h = hashlib.sha256()
                kept = bytearray()
                while f is not None and (chunk := f.read(1 << 20)):
                    h.update(chunk)
                    if len(kept) <= KEEP_BYTES:
                        kept += chunk
                self._digests[name] = h.digest()
                if len(kept) <= KEEP_BYTES:
                    self._data[name] = bytes(kept)

    def _kind(self, rel: str) -> str | None:
        return self._kinds.get(rel)

    def _link(self, rel: str) -> str:
        return self._links[rel]

    def _bytes(self, rel: str) -> bytes:
        if rel not in self._data and rel in getattr(self, "_objects", {}):
            from core.packaging import objects
            self._data[rel] = objects.read_object(self._objects[rel])
        if rel not in self._data:
            raise UserError(f"{rel} is larger than {KEEP_BYTES >> 20} MiB: not a requirements file pip would read",
                            where=rel, fix="name a requirements file, or a package folder or wheel")
        return self._data[rel]

    def _all(self) -> Iterable[str]:
        return self._digests.keys()

    def digest(self, rel: str) -> bytes:
        d = self._digests[rel]
        return bytes.fromhex(d) if isinstance(d, str) else d


class ListingFiles(_Files):
    """A project folder as a bundle listing sees it (core.packaging.bundle.Listing): only what
    ships is there; what was left out says why. Used at submit, before anything is packed."""

    def __init__(self, listing) -> None:
        self._listing = listing
        self._left_out = {item["path"].rstrip("/"): item.get("reason", "left out")
                          for item in [*listing.withheld, *listing.ignored]}

    def _kind(self, rel: str) -> str | None:
        e = self._listing.entries.get(rel)
        return None if e is None else e.kind

    def _link(self, rel: str) -> str:
        return self._listing.entries[rel].link or ""

    def _bytes(self, rel: str) -> bytes:
        # the listing said: a regular file; a link swapped in since is not followed
        fd = os.open(self._listing.root / rel, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def _all(self) -> Iterable[str]:
        return self._listing.entries.keys()

    def missing_reason(self, rel: str) -> str | None:
        for path, reason in self._left_out.items():
            if rel == path or rel.startswith(path + "/"):
                return reason
        return None
