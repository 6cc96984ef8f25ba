"""SkyPilot's prices as a target's offers: what the adapter's `prices` answer (SkyPilot's
catalog for the enabled clouds, `slurm.pricing` for a Slurm infra) becomes for the router.

One offer per GPU type, at the cheapest machine any enabled cloud lists with one GPU of it, and
for N of it the cheapest machine that holds N (machines come in shapes: the router reads
`count_prices`, not N times one), with every row that could serve it as the offer's
*candidates*. SkyPilot's server picks the instance at launch, so what a person
approves is a ceiling and the candidate set: `binding(...)` is what a plan carries of it
(`plan_binding`, in the plan's digest), and what the launch is held to.

Pure functions of the recorded answer: tested without a server.
"""

from __future__ import annotations

import math
from typing import Any

# a price ceiling is the offer's price with this much room (a cloud's price moves by cents between
# the plan and the launch; the person approved "about this much", not "exactly this row")
CEILING_MARGIN = 1.10


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def rows(prices: dict) -> list[dict]:
    """Every usable row of a `prices` answer, one offer each: a GPU type, a count, a cloud, a
    region, an instance type, its list and spot prices (None where the cloud has none), the
    GPU's memory in GB (0 where the catalog does not say: a Slurm GRES name)."""
    out = []
    for name, offers in (prices.get("gpus") or {}).items():
        for row in offers if isinstance(offers, list) else []:
            if not isinstance(row, dict):
                continue
            count = row.get("accelerator_count")
            if isinstance(count, float) and count.is_integer():
                count = int(count)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                continue
            out.append({"gpu": str(name).upper(), "count": count, "cloud": str(row.get("cloud") or "?").lower(),
                        "region": row.get("region"), "instance_type": row.get("instance_type"),
                        "price": _number(row.get("price")), "spot_price": _number(row.get("spot_price")),
                        "memory_gb": _number(row.get("device_memory")) or 0.0})
    return out


def cost(row: dict, spot: bool) -> float | None:
    """What a row's machine costs an hour (spot where asked and listed), or None if unpriced:
    a job that needs fewer GPUs than the machine has pays for the machine all the same."""
    return row["spot_price"] if spot and row["spot_price"] is not None else row["price"]


def cheapest(found: list[dict], count: int, spot: bool = False) -> float | None:
    """The cheapest machine among `found` that holds `count` GPUs (None: none does): what N
    GPUs cost, what a plan's ceiling is made from, what a launch is held to."""
    able = [c for r in found if r["count"] >= count and (c := cost(r, spot)) is not None]
    return min(able) if able else None


def count_prices(found: list[dict], spot: bool = False) -> dict[int, float]:
    """{N: the cheapest machine that holds N GPUs} for N up to the most a row has (a cloud's
    machines come in shapes: 3 GPUs cost what the 4- or 8-GPU machine costs)."""
    most = min(max((r["count"] for r in found), default=0), MAX_COUNT)
    return {n: round(c, 4) for n in range(1, most + 1) if (c := cheapest(found, n, spot)) is not None}


MAX_COUNT = 64


def offers(prices: dict, spot: bool = False) -> dict[str, dict]:
    """{GPU type: {"price": the cheapest machine with one of it, "memory_gb", "count_max",
    "count_prices": {N: the cheapest machine with N}, "candidates": [rows]}}, cheapest type
    first; a type no enabled cloud prices is left out (nothing to bind a ceiling to).
    Candidates are the type's priced rows, cheapest machine first."""
    by_type: dict[str, list[dict]] = {}
    for row in rows(prices):
        if cost(row, spot) is not None:
            by_type.setdefault(row["gpu"], []).append(row)
    out: dict[str, dict] = {}
    for gpu, found in by_type.items():
        found.sort(key=lambda r: (cost(r, spot), r["count"], r["cloud"], str(r["region"])))
        out[gpu] = {"price": round(cost(found[0], spot), 4),
                    "memory_gb": max(r["memory_gb"] for r in found),
                    "count_max": max(r["count"] for r in found),
                    "count_prices": count_prices(found, spot),
                    "candidates": found}
    return dict(sorted(out.items(), key=lambda kv: (kv[1]["price"], kv[0])))


def binding(offer: dict, count: int = 1, spot: bool = False) -> dict:
    """What a plan for `count` GPUs of `offer` binds: the hourly ceiling handed to SkyPilot
    (`Resources(max_hourly_cost=...)`, and held by gpu-router itself where SkyPilot ignores it:
    0.14.1 does on Slurm) and the candidates that fit under it. The ceiling is the cheapest
    machine that holds `count` GPUs, at its spot price where spot is asked, with room."""
    base = cheapest(offer["candidates"], count, spot)
    ceiling = round((offer["price"] * count if base is None else base) * CEILING_MARGIN, 4)
    fits = [{k: r[k] for k in SLIM} for r in offer["candidates"]
            if r["count"] >= count and (c := cost(r, spot)) is not None and c <= ceiling]
    return {"max_hourly_cost": ceiling, "use_spot": spot, "candidates": fits}


SLIM = ("cloud", "region", "instance_type", "count", "price", "spot_price")


def plan_binding(details: dict, offer: str | None, checkpoint: str | None, restart: str) -> dict | None:
    """The binding a plan on a skypilot target carries, from its probe's details and the
    offer the router chose (`FAKE`, `FAKE:2`); None where the details price no such type."""
    gpu, _, n = str(offer or "").partition(":")
    entry = (details.get("prices") or {}).get(gpu)
    if not isinstance(entry, dict) or not entry.get("rows"):
        return None
    count = int(n) if n.isdigit() else 1
    return binding({"price": entry["usd_per_hour"], "candidates": entry["rows"]}, count,
                   use_spot(checkpoint, restart))


def use_spot(checkpoint: str | None, restart: str) -> bool:
    """Spot only where losing the machine costs nothing the job cannot get back: the request
    allows restarts and the job checkpoints (it resumes from its checkpoint elsewhere)."""
    return bool(checkpoint) and restart == "allow"
