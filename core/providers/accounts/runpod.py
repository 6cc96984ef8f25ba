"""RunPod: GPU types with their lowest current price and stock, the account's balance and spend
rate, and the user's pods, in one GraphQL query to https://api.runpod.io/graphql.
Public API: https://graphql-spec.runpod.io/ and https://docs.runpod.io/sdks/graphql/manage-pods
(read 2026-12-01). Only a `query` is ever sent (see readonly.query).
"""

from __future__ import annotations

from typing import Any

from core.providers.accounts import readonly
from core.providers.accounts.models import Account, Instance, Offer, Reading, number, text

NAME = "runpod"
TITLE = "RunPod"
BASE_URL = "https://api.runpod.io"
KEY_HELP = "an API key from runpod.io > Settings > API Keys (read-only is enough)"

QUERY = """
query gpuRouterAccount {
  myself {
    clientBalance
    currentSpendPerHr
    pods { id name desiredStatus costPerHr gpuCount machine { gpuDisplayName } runtime { uptimeInSeconds } }
  }
  gpuTypes {
    id displayName memoryInGb securePrice communityPrice
    lowestPrice(input: {gpuCount: 1}) { minimumBidPrice uninterruptablePrice stockStatus }
  }
}
"""


def read(base: str, key: str, timeout: float, now: float) -> Reading:
    data = readonly.query(f"{base}/graphql", QUERY, headers={"Authorization": f"Bearer {key}"},
                          timeout=timeout)
    data = data if isinstance(data, dict) else {}
    me = data.get("myself") if isinstance(data.get("myself"), dict) else {}
    account = Account(NAME, now, balance=number(me.get("clientBalance")),
                      spend_per_hour=number(me.get("currentSpendPerHr")))
    return Reading(provider=NAME, read_at=now, account=account,
                   offers=parse_offers(data.get("gpuTypes"), now),
                   instances=parse_pods(me.get("pods"), now))


def parse_offers(types: Any, now: float) -> list[Offer]:
    out: list[Offer] = []
    for t in types if isinstance(types, list) else []:
        if not isinstance(t, dict):
            continue
        low = t.get("lowestPrice") if isinstance(t.get("lowestPrice"), dict) else {}
        prices = [p for p in (number(low.get("uninterruptablePrice")), number(t.get("securePrice")),
                              number(t.get("communityPrice"))) if p]
        if not prices:
            continue  # not offered now (RunPod lists retired types with price 0 or null)
        stock = text(low.get("stockStatus"))
        sold_out = bool(low) and stock is None and number(low.get("uninterruptablePrice")) is None
        out.append(Offer(provider=NAME, gpu=text(t.get("displayName")) or text(t.get("id")) or "?",
                         vram_gb=number(t.get("memoryInGb")), price_per_hour=prices[0],
                         available=0 if sold_out else None, region=None,
                         read_at=now, gpu_count=1, stock=stock))
    return out


def parse_pods(pods: Any, now: float) -> list[Instance]:
    out: list[Instance] = []
    for p in pods if isinstance(pods, list) else []:
        if not isinstance(p, dict):
            continue
        price = number(p.get("costPerHr"))
        runtime = p.get("runtime") if isinstance(p.get("runtime"), dict) else {}
        up = number(runtime.get("uptimeInSeconds"))
        machine = p.get("machine") if isinstance(p.get("machine"), dict) else {}
        out.append(Instance(provider=NAME, id=text(p.get("id")) or "?", name=text(p.get("name")),
                            gpu=text(machine.get("gpuDisplayName")),
                            status=text(p.get("desiredStatus")) or "?", price_per_hour=price,
                            cost_so_far=None if price is None or up is None else round(price * up / 3600, 4),
                            read_at=now, gpu_count=int(number(p.get("gpuCount")) or 1)))
    return out
