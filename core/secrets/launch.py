"""Secrets for a job: read from the keychain at launch, for its environment only."""

from __future__ import annotations

from core.errors import UserError
from core.engine.store import Job


def secrets_for_launch(job: Job) -> dict[str, str]:
    """The job's secret values by name; never stored, logged or shown."""
    names = job.request.get("secrets") or []
    if not names:
        return {}
    from core.secrets import keychain

    values = {}
    for name in names:
        value = keychain.get(name)
        if value is None:
            raise UserError(f"secret {name} is not in the keychain",
                            fix=f"store it with `gpu secrets set {name}`, then submit again")
        values[name] = value
    return values
