"""TensorPool (engine.tensorpool.dev): only the key check is read.

Its public API (https://docs.tensorpool.dev/api/introduction and /api/authentication, read
2026-12-01) documents bearer-token access and `GET /me` to verify a token ("returns your
account information", no fields documented). It documents no endpoint for prices, free
capacity or a balance, and no response shape for listing the user's clusters or jobs, so
gpu-router reads nothing more: offers, instances and the balance are shown as unavailable
rather than read from endpoints we would have to invent.
"""

from __future__ import annotations

from core.providers.accounts import readonly
from core.providers.accounts.models import Account, Reading

NAME = "tensorpool"
TITLE = "TensorPool"
BASE_URL = "https://engine.tensorpool.dev"
KEY_HELP = "an API token from tensorpool.dev/dashboard/profile"


def read(base: str, key: str, timeout: float, now: float) -> Reading:
    readonly.get(f"{base}/me", headers={"Authorization": f"Bearer {key}"}, timeout=timeout)
    return Reading(provider=NAME, read_at=now,
                   account=Account(NAME, now, balance_note="TensorPool's public API documents no balance"),
                   unavailable=["offers", "instances", "balance"])
