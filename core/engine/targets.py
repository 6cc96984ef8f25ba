"""The targets as the router and `gpu targets` see them: probed facts plus quota and price.

Probing goes through core.providers.probing (bounded, concurrent, failures remembered); a
request's plan probes only the targets its pin leaves (`for_request`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.config.request import JobRequest
from core.config.user import UserConfig, load
from core.jobs.states import LAUNCHED, State
from core.jobs.store import Store
from core.planning.router import pinned
from core.planning.usage import quota_left
from core.providers import probing, registry
from core.providers.base import TargetInfo


def kinds(cfg: UserConfig) -> dict[str, str]:
    """Every configured target's kind, by name: what a pin is judged by, with no probe."""
    return {name: t.kind for name, t in cfg.targets.items()}


def for_request(req: JobRequest, store: Store, cfg: UserConfig) -> dict[str, TargetInfo]:
    """The targets `req` may run on, probed: only those its `provider` pin leaves (a submit
    pinned to this machine asks nothing of Modal), all of them without one. A pin that names
    nothing configured (colab, a kind with no target) is refused here, before any probe."""
    names, _ = pinned(req.provider, kinds(cfg))
    return infos(store, cfg, only=names)


def infos(store: Store, cfg: UserConfig | None = None, provs: dict[str, Any] | None = None,
          only: Iterable[str] | None = None) -> dict[str, TargetInfo]:
    """Each target (or those named in `only`) probed, all at once and each within its
    `probe_timeout_s` (core.providers.probing), with quota, price and load from the config and
    the store. A disabled target other than this machine is not asked at all."""
    cfg = cfg or load()
    provs = provs or registry.build(cfg)
    if only is not None:
        wanted = set(only)
        provs = {n: p for n, p in provs.items() if n in wanted}
    skip = {n for n, p in provs.items() if not cfg.targets[n].enabled and p.kind != "local"}
    probed = probing.probe_all({n: p for n, p in provs.items() if n not in skip})
    for name in skip:
        probed[name] = probing.unprobed_info(provs[name], "disabled in your config")
    probed = {n: probed[n] for n in provs}  # in the config's order
    running = store.count_by_provider(LAUNCHED)
    waiting = store.count_by_provider([State.ROUTING])  # placed, not started: each takes a slot before a new job would
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


def remember_probe(name: str, *, quota_hours_left: float | None = None) -> bool:
    """Keep an available answer for target `name` in its probe cache, as a probe that asked it
    now would: the seeded demo (tui/dash/demo.py) shows its Kaggle target as an account with
    quota would, with no credentials and no network. False if `name` has no probe cache."""
    provider = registry.build(load()).get(name)
    if provider is None or not hasattr(provider, "_store_probe") or not hasattr(provider, "_info"):
        return False
    info = provider._info(True)
    info.quota_hours_left = quota_hours_left
    provider._store_probe(info)
    return True
