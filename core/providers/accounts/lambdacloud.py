"""Lambda (cloud.lambda.ai): instance types with price and the regions that have capacity now,
and the user's instances. Public API: https://docs-api.lambda.ai/api/cloud (read 2026-12-01).

Lambda's API gives no account balance; it is said so, not guessed. It gives no count of free
machines either, only the regions that have capacity: `available` is 0 for a sold-out type
and unknown (None) otherwise, with the regions in `stock`.
"""

from __future__ import annotations

import re
from typing import Any

from core.providers.accounts import readonly
from core.providers.accounts.models import Account, Instance, Offer, Reading, number, text

NAME = "lambda"
TITLE = "Lambda"
BASE_URL = "https://cloud.lambda.ai"
KEY_HELP = "an API key from cloud.lambda.ai > API keys"
_VRAM = re.compile(r"(\d+(?:\.\d+)?)\s*GB", re.I)


def read(base: str, key: str, timeout: float, now: float) -> Reading:
    headers = {"Authorization": f"Bearer {key}"}
    types = readonly.get(f"{base}/api/v1/instance-types", headers=headers, timeout=timeout)
    instances = readonly.get(f"{base}/api/v1/instances", headers=headers, timeout=timeout)
    return Reading(provider=NAME, read_at=now,
                   account=Account(NAME, now, balance_note="Lambda's API gives no balance"),
                   offers=parse_offers(types, now), instances=parse_instances(instances, now))


def _gpu(it: dict) -> tuple[str, float | None]:
    desc = text(it.get("gpu_description")) or text(it.get("description")) or text(it.get("name")) or "?"
    m = _VRAM.search(desc)
    name = desc.split("(")[0].strip() or desc
    return name, (float(m.group(1)) if m else None)


def parse_offers(doc: Any, now: float) -> list[Offer]:
    out: list[Offer] = []
    data = doc.get("data") if isinstance(doc, dict) else None
    for entry in (data or {}).values() if isinstance(data, dict) else []:
        it = entry.get("instance_type") if isinstance(entry, dict) else None
        if not isinstance(it, dict):
            continue
        cents = number(it.get("price_cents_per_hour"))
        if cents is None:
            continue
        specs = it.get("specs") if isinstance(it.get("specs"), dict) else {}
        gpus = int(number(specs.get("gpus")) or 1)
        regions = [text(r.get("name")) for r in entry.get("regions_with_capacity_available") or []
                   if isinstance(r, dict)]
        gpu, vram = _gpu(it)
        out.append(Offer(provider=NAME, gpu=gpu, vram_gb=vram, price_per_hour=cents / 100,
                         available=None if regions else 0, region=regions[0] if regions else None,
                         read_at=now, gpu_count=gpus,
                         stock=f"capacity in {len(regions)} region{'s' * (len(regions) != 1)}"
                         if regions else "no capacity"))
    return out


def parse_instances(doc: Any, now: float) -> list[Instance]:
    out: list[Instance] = []
    for inst in (doc.get("data") if isinstance(doc, dict) else None) or []:
        if not isinstance(inst, dict):
            continue
        it = inst.get("instance_type") if isinstance(inst.get("instance_type"), dict) else {}
        cents = number(it.get("price_cents_per_hour"))
        specs = it.get("specs") if isinstance(it.get("specs"), dict) else {}
        gpu, _ = _gpu(it) if it else (None, None)
        out.append(Instance(provider=NAME, id=text(inst.get("id")) or "?", name=text(inst.get("name")),
                            gpu=gpu, status=text(inst.get("status")) or "?",
                            price_per_hour=None if cents is None else cents / 100,
                            cost_so_far=None,  # Lambda's instance gives no launch time or cost
                            read_at=now, gpu_count=int(number(specs.get("gpus")) or 1)))
    return out
