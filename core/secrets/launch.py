"""Secrets for a job: checked at submit, read from the keychain at launch, for its environment only."""

from __future__ import annotations

from core.jobs.store import Job
from core.errors import UserError
from core.secrets import keychain


def _missing(name: str) -> UserError:
    return UserError(f"secret {name} is not in the keychain",
                     fix=f"store it with `gpu secrets set {name}`, then submit again")


def check_available(names: list[str]) -> None:
    """Every secret the job names is in the keychain (and there is a keychain): said at submit,
    before anyone is asked to approve a job that could never start. The value is not kept."""
    for name in names:
        if keychain.get(name) is None:
            raise _missing(name)


def secrets_for_launch(job: Job) -> dict[str, str]:
    """The job's secret values by name; never stored, logged or shown."""
    names = job.request.get("secrets") or []
    if not names:
        return {}
    values = {}
    for name in names:
        value = keychain.get(name)
        if value is None:  # removed since the submit
            raise _missing(name)
        values[name] = value
    return values
