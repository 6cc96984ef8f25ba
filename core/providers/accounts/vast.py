"""Vast.ai: rentable offers (`GET /api/v0/bundles/?q=...`), the account's credit
(`/api/v0/users/current/`) and the user's instances (`/api/v0/instances/`).
Public API: https://docs.vast.ai/api-reference/overview-and-quickstart and
https://vast.ai/developers/api (read 2026-12-01).

Vast.ai is a market of single machines: offers of the same GPU and count are one row here,
priced at the cheapest, with `available` the number of such machines rentable now. `gpu_ram`
is in MB in Vast.ai's answers.
"""

from __future__ import annotations

import json
from typing import Any

from core.providers.accounts import readonly
from core.providers.accounts.models import Account, Instance, Offer, Reading, number, text

NAME = "vast"
TITLE = "Vast.ai"
BASE_URL = "https://console.vast.ai"
KEY_HELP = "an API key from cloud.vast.ai > Account > API Keys"
SEARCH = {"rentable": {"eq": True}, "rented": {"eq": False}, "order": [["dph_total", "asc"]],
          "limit": 200}


def read(base: str, key: str, timeout: float, now: float) -> Reading:
    headers = {"Authorization": f"Bearer {key}"}
    bundles = readonly.get(f"{base}/api/v0/bundles/", params={"q": json.dumps(SEARCH)},
                           headers=headers, timeout=timeout)
    user = readonly.get(f"{base}/api/v0/users/current/", headers=headers, timeout=timeout)
    instances = readonly.get(f"{base}/api/v0/instances/", headers=headers, timeout=timeout)
    user = user if isinstance(user, dict) else {}
    return Reading(provider=NAME, read_at=now,
                   account=Account(NAME, now, balance=number(user.get("credit"))),
                   offers=parse_offers(bundles, now), instances=parse_instances(instances, now))


def parse_offers(doc: Any, now: float) -> list[Offer]:
    groups: dict[tuple[str, int], Offer] = {}
    for o in (doc.get("offers") if isinstance(doc, dict) else None) or []:
        if not isinstance(o, dict) or o.get("rentable") is False:
            continue
        price = number(o.get("dph_total"))
        gpu = text(o.get("gpu_name"))
        if price is None or not gpu:
            continue
        count = int(number(o.get("num_gpus")) or 1)
        ram = number(o.get("gpu_ram"))
        seen = groups.get((gpu, count))
        if seen is None or price < seen.price_per_hour:
            groups[(gpu, count)] = Offer(
                provider=NAME, gpu=gpu, vram_gb=None if ram is None else round(ram / 1024, 1),
                price_per_hour=price, available=(seen.available if seen else 0) + 1,
                region=text(o.get("geolocation")), read_at=now, gpu_count=count)
        else:
            seen.available = (seen.available or 0) + 1
    return list(groups.values())


def parse_instances(doc: Any, now: float) -> list[Instance]:
    out: list[Instance] = []
    for i in (doc.get("instances") if isinstance(doc, dict) else None) or []:
        if not isinstance(i, dict):
            continue
        price = number(i.get("dph_total"))
        start = number(i.get("start_date"))
        cost = None if price is None or start is None else round(price * max(0.0, now - start) / 3600, 4)
        out.append(Instance(provider=NAME, id=text(i.get("id")) or "?", name=text(i.get("label")),
                            gpu=text(i.get("gpu_name")),
                            status=text(i.get("actual_status") or i.get("cur_state")) or "?",
                            price_per_hour=price, cost_so_far=cost, read_at=now,
                            gpu_count=int(number(i.get("num_gpus")) or 1)))
    return out
