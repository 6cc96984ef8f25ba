"""Prime Intellect: GPU availability and prices across its marketplace
(`GET /api/v1/availability/`) and the user's pods (`GET /api/v1/pods/`).
Public API: https://docs.primeintellect.ai/api-reference/check-gpu-availability and
https://docs.primeintellect.ai/api-reference/pods/get-pods (read 2026-12-01).

Its public API reference, as read, documents no balance or wallet endpoint: the balance is
said to be unavailable, not guessed. A pod's cost so far is its `priceHr` times the time since
`createdAt` (the API gives no running total for a live pod).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.providers.accounts import readonly
from core.providers.accounts.models import Account, Instance, Offer, Reading, number, text

NAME = "primeintellect"
TITLE = "Prime Intellect"
BASE_URL = "https://api.primeintellect.ai"
KEY_HELP = "an API key from app.primeintellect.ai > Settings > API keys, with Availability and Instances read"
LIVE = {"ACTIVE", "PROVISIONING", "PENDING"}


def read(base: str, key: str, timeout: float, now: float) -> Reading:
    headers = {"Authorization": f"Bearer {key}"}
    avail = readonly.get(f"{base}/api/v1/availability/", params={"gpu_count": 1}, headers=headers,
                         timeout=timeout)
    pods = readonly.get(f"{base}/api/v1/pods/", params={"offset": 0, "limit": 100}, headers=headers,
                        timeout=timeout)
    return Reading(provider=NAME, read_at=now,
                   account=Account(NAME, now, balance_note="Prime Intellect's public API documents no balance"),
                   offers=parse_offers(avail, now), instances=parse_pods(pods, now),
                   unavailable=["balance"])


def parse_offers(doc: Any, now: float) -> list[Offer]:
    out: list[Offer] = []
    for items in doc.values() if isinstance(doc, dict) else []:
        for o in items if isinstance(items, list) else []:
            if not isinstance(o, dict):
                continue
            prices = o.get("prices") if isinstance(o.get("prices"), dict) else {}
            price = number(prices.get("onDemand")) or number(prices.get("communityPrice"))
            if not price:
                continue
            stock = text(o.get("stockStatus"))
            where = "/".join(x for x in (text(o.get("provider")), text(o.get("dataCenter"))) if x) or None
            out.append(Offer(provider=NAME, gpu=text(o.get("gpuType")) or "?",
                             vram_gb=number(o.get("gpuMemory")), price_per_hour=price,
                             available=0 if (stock or "").lower() == "unavailable" else None,
                             region=where, read_at=now, gpu_count=int(number(o.get("gpuCount")) or 1),
                             stock=stock))
    return out


def _epoch(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse_pods(doc: Any, now: float) -> list[Instance]:
    out: list[Instance] = []
    for p in (doc.get("data") if isinstance(doc, dict) else None) or []:
        if not isinstance(p, dict):
            continue
        status = text(p.get("status")) or "?"
        price = number(p.get("priceHr"))
        start = _epoch(p.get("createdAt"))
        cost = None
        if price is not None and start is not None and status.upper() in LIVE:
            cost = round(price * max(0.0, now - start) / 3600, 4)
        out.append(Instance(provider=NAME, id=text(p.get("id")) or "?", name=text(p.get("name")),
                            gpu=text(p.get("gpuName")), status=status, price_per_hour=price,
                            cost_so_far=cost, read_at=now, gpu_count=int(number(p.get("gpuCount")) or 1)))
    return out
