"""What a target behind a service's API (kaggle, modal) has in common: its credentials, kept
as JSON in the keychain under `<kind>:<target>` (read into this process's memory only, never an
environment, a file or a command line), and its probe, remembered on disk for PROBE_TTL_S so a
burst of submits (each its own process) asks the service once.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from core import paths
from core.errors import UserError
from core.providers.base import TargetInfo

PROBE_TTL_S = 60.0


def secret_name(kind: str, target: str) -> str:
    return f"{kind}:{target}"


def last_probe(kind: str, target: str) -> dict | None:
    """The last probe remembered for a target, however old ({"at", "details", ...}), or None:
    what `gpu cost` shows of a service's own account (Kaggle's quota) without asking it."""
    try:
        doc = json.loads((paths.cache_dir() / f"probe-{kind}-{target}.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


class ServiceTarget:
    """Mixed into a provider that has `name`, `kind`, `_info(available, why)`, and says what
    its credentials are called (`credentials_name`, e.g. "Kaggle credentials") and what the
    fix reads them from (`credentials_from`)."""

    name: str
    kind: str
    credentials_name = "credentials"
    credentials_from = "them"
    _stored_credentials: dict[str, str] | None = None

    def _credentials(self) -> dict[str, str]:
        if self._stored_credentials is None:
            from core.secrets import keychain

            raw = keychain.get(secret_name(self.kind, self.name))
            if not raw:
                raise UserError(f"no {self.credentials_name} for target {self.name} in the keychain",
                                fix=f"run `gpu targets add {self.kind} {self.name}` (it reads {self.credentials_from})")
            self._stored_credentials = json.loads(raw)
        return self._stored_credentials

    def _probe_file(self) -> Path:
        return paths.cache_dir() / f"probe-{self.kind}-{self.name}.json"  # last_probe reads it too

    def _cached_probe(self) -> TargetInfo | None:
        try:
            doc = json.loads(self._probe_file().read_text())
        except (OSError, ValueError):
            return None
        if time.time() - float(doc.get("at", 0)) > PROBE_TTL_S:
            return None
        info = self._info(bool(doc["available"]), doc.get("why"))
        if doc.get("quota_hours_left") is not None:
            info.quota_hours_left = doc["quota_hours_left"]
        if doc.get("details"):
            info.details = doc["details"]
        return info

    def _store_probe(self, info: TargetInfo) -> None:
        path = self._probe_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        tmp.write_text(json.dumps({"at": time.time(), "available": info.available, "why": info.why_unavailable,
                                   "quota_hours_left": info.quota_hours_left, "details": info.details}))
        os.replace(tmp, path)

    def forget_probe(self) -> None:
        self._probe_file().unlink(missing_ok=True)
