"""The targets as the router and `gpu targets` see them: probed facts plus quota and price."""

from __future__ import annotations

import asyncio
from typing import Any

from core.config.user import UserConfig, load
from core.jobs.states import LAUNCHED, State
from core.jobs.store import Store
from core.planning.usage import quota_left
from core.providers import registry
from core.providers.base import TargetInfo


async def _probe(provider: Any) -> TargetInfo:
    try:
        return await asyncio.wait_for(provider.probe(), 30)
    except Exception as exc:  # noqa: BLE001 - an unreachable target is a fact, not a crash
        return TargetInfo(name=provider.name, kind=provider.kind, available=False,
                          why_unavailable=f"probe failed: {exc}")


def infos(store: Store, cfg: UserConfig | None = None,
          provs: dict[str, Any] | None = None) -> dict[str, TargetInfo]:
    cfg = cfg or load()
    provs = provs or registry.build(cfg)

    async def gather() -> list[TargetInfo]:
        return list(await asyncio.gather(*(_probe(p) for p in provs.values())))

    probed = {}
    for name, p in provs.items():
        if hasattr(p, "probe_now"):  # cheap and synchronous: no event loop needed
            probed[name] = p.probe_now()
    rest = {n: p for n, p in provs.items() if n not in probed}
    if rest:
        for info in asyncio.run(gather()) if rest else []:
            probed[info.name] = info
    running: dict[str, int] = {}
    for job in store.jobs(states=LAUNCHED):
        running[job.provider or ""] = running.get(job.provider or "", 0) + 1
    waiting: dict[str, int] = {}  # placed, not started: each takes a slot before a new job would
    for job in store.jobs(states=[State.ROUTING]):
        waiting[job.provider or ""] = waiting.get(job.provider or "", 0) + 1
    for name, info in probed.items():
        t = cfg.targets[name]
        left = quota_left(store, t)
        if t.price_per_hour or not info.offer_prices:  # a provider's own price table, unless the config sets one
            info.price_per_hour = t.price_per_hour
            info.offer_prices = {}
        if left["hours"] is not None or info.quota_hours_left is None:
            info.quota_hours_left = left["hours"]  # the config's weekly hours, else the provider's own
        info.credits_left = left["credits"]
        info.session_limit_hours = t.session_limit_hours or info.session_limit_hours
        info.running = running.get(name, 0)
        info.waiting = waiting.get(name, 0)
        info.max_jobs = t.max_jobs  # the config's, whatever the probe said (the supervisor's limit)
        if not t.enabled:
            info.available = False
            info.why_unavailable = "disabled in your config"
        if info.available and left["hours"] is not None and left["hours"] <= 0:
            info.available = False
            info.why_unavailable = "no quota left this week"
        if info.available and left["credits"] is not None and left["credits"] <= 0:
            info.available = False
            info.why_unavailable = "no credits left"
    return probed
