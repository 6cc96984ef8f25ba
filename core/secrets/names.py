"""File names that come home from a job that holds secrets: masked, and sealed for a resume.

A job that reads a secret may name a file after it by accident (a cache keyed by a token,
`tok_<value>.pt`). Outputs and checkpoints come home under names where every form of every
secret the job declared (core/runtime/redact.py) is replaced by `[secret]`; the values are read
from the keychain at that moment and never kept.

A checkpoint must still resume: the job looks for `tok_<value>.pt`, not `tok_[secret].pt`. So
the checkpoint manifest keeps, beside a masked name, the real name *sealed* (Fernet, AES with
an HMAC) under a key derived from the job's own secret values and its id. Home then holds no
secret in any name, and no readable secret anywhere; a restore onto a new target reads the
values from the keychain again (as the launch does anyway) and unseals the name. Where the
value changed since (a rotated token), the seal does not open and the file is restored under its
masked name: the job sees a checkpoint without that file, never a wrong one.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Mapping

from core.jobs.store import Job
from core.runtime.redact import SecretPattern
from core.secrets import keychain

SEAL_ROUNDS = 100_000  # PBKDF2 rounds: a weak secret is as hard to guess from a seal as from a hash


def job_secrets(job: Job) -> dict[str, str]:
    """The job's declared secrets as the keychain holds them now (a removed one is left out:
    nothing can be masked for it, and its value is gone from home's reach too). Raises the
    keychain's UserError when no keychain answers: names cannot be checked then."""
    values: dict[str, str] = {}
    for name in job.request.get("secrets") or []:
        value = keychain.get(name)
        if value is not None:
            values[name] = value
    return values


class NameMask:
    """Masks names with one job's secret values; seals and unseals the real names."""

    def __init__(self, job_id: str, values: Mapping[str, str]) -> None:
        self._job_id = job_id
        self._values = dict(values)
        self._pattern = SecretPattern(list(self._values.values()))
        self._fernet = None

    def __bool__(self) -> bool:
        return bool(self._pattern)

    def mask(self, text: str) -> str:
        """`text` with every form of every value replaced by [secret]."""
        if not self._pattern:
            return text
        raw = text.encode("utf-8", "surrogateescape")
        return self._pattern.mask(raw).decode("utf-8", "surrogateescape")

    def _cipher(self):
        if self._fernet is None:
            from cryptography.fernet import Fernet  # asyncssh's dependency; AES-CBC + HMAC

            material = json.dumps(sorted(self._values.items())).encode("utf-8", "surrogateescape")
            key = hashlib.pbkdf2_hmac("sha256", material, b"gpu-router name seal " + self._job_id.encode(),
                                      SEAL_ROUNDS)
            self._fernet = Fernet(base64.urlsafe_b64encode(key))
        return self._fernet

    def seal(self, real: str) -> str:
        """The real name, readable only with the same secret values."""
        return self._cipher().encrypt(real.encode("utf-8", "surrogateescape")).decode()

    def unseal(self, token: str) -> str | None:
        """The real name, or None when the values changed (or the token is not ours)."""
        from cryptography.fernet import InvalidToken

        try:
            return self._cipher().decrypt(token.encode()).decode("utf-8", "surrogateescape")
        except (InvalidToken, ValueError):
            return None


def for_job(job: Job) -> NameMask | None:
    """The mask for a job that declared secrets (read from the keychain now), else None."""
    if not job.request.get("secrets"):
        return None
    return NameMask(job.id, job_secrets(job))


def for_restore(job_id: str, values: Mapping[str, str] | None) -> NameMask | None:
    """The mask a restore unseals with: the values the launch just read."""
    return NameMask(job_id, values) if values else None
