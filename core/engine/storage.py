"""Keeping gpu-router's caches bounded: bundles, venvs, data and runtimes, at home and on hosts.

Every cache is content-addressed and can be rebuilt, so it is freed least-recently-used once a
location holds more than its cap (`storage:` in the user config; `cache_cap_gb` on a target).
Three things are never freed: what a live job needs (its bundle and data sets, by hash, from
the store), a venv a job runs in (the launcher holds its lock), and anything used in the last
`MIN_AGE_S` seconds (a launch may be about to rely on it: remote providers remember an upload
for less than this). `gpu gc` shows and frees; the supervisor enforces the caps after each job.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from core import paths
from core.config.user import UserConfig, load
from core.jobs.states import ACTIVE
from core.jobs.store import Store
from core.errors import UserError
from core.providers import registry
from core.providers.hostlink import run_sync
from core.runtime import cachescan

MIN_AGE_S = cachescan.MIN_AGE_S
GB = 1000**3  # as `gpu gc` and the rest of the CLI print sizes


@dataclass
class Entry:
    kind: str  # bundle | venv | data | runtime | wheelhouse | workdir | cluster (SkyPilot's, up)
    key: str
    path: str
    bytes: int
    used_at: float
    keep: str | None = None  # why it may not be freed, if it may not

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Location:
    """One place that holds caches: "home" (this machine) or a target's root on its host."""

    where: str
    cap_bytes: int | None
    entries: list[Entry] = field(default_factory=list)
    evict: list[Entry] = field(default_factory=list)
    freed: int = 0
    error: str | None = None

    @property
    def total(self) -> int:
        return sum(e.bytes for e in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {"where": self.where, "cap_bytes": self.cap_bytes, "bytes": self.total,
                "entries": len(self.entries), "evict": [e.to_json() for e in self.evict],
                "evict_bytes": sum(e.bytes for e in self.evict), "freed": self.freed,
                "error": self.error}


def caps(cfg: UserConfig) -> dict[str, int | None]:
    """Cap in bytes per location: home from `storage.home_cap_gb`, targets from their own
    `cache_cap_gb` or `storage.target_cap_gb`."""
    out: dict[str, int | None] = {"home": int(cfg.storage["home_cap_gb"] * GB)}
    for name, t in cfg.targets.items():
        if t.kind != "local":
            gb = t.options.get("cache_cap_gb", cfg.storage["target_cap_gb"])
            out[name] = int(gb * GB)
    return out


def needed(store: Store, target: str | None = None) -> set[str]:
    """Keys live jobs need: bundles and data sets by hash, working folders by job id (home:
    every live job's; a host: its own)."""
    keys: set[str] = set()
    for job in store.jobs(states=ACTIVE):
        if target is None or job.provider == target:
            keys.add(job.id)
            # a SkyPilot cluster is named by its job's short id and attempt: an earlier
            # attempt's left up is not needed (it kept paying beside the live one)
            keys.add(f"{job.short_id}-a{job.attempt}")
            if job.bundle_hash:
                keys.add(job.bundle_hash)
            keys.update(str(h) for h in (job.plan.get("data") or {}).values())
    return keys


def judge(rows: list[dict], needs: set[str], last_use: dict[str, float], now: float) -> list[Entry]:
    entries = []
    for row in rows:
        e = Entry(kind=row["kind"], key=row["key"], path=row["path"], bytes=int(row["bytes"]),
                  used_at=max(float(row["used_at"]), last_use.get(row["key"], 0.0)))
        if row.get("busy"):
            e.keep = "a job is using it"
        elif e.key in needs:
            e.keep = "a live job needs it"
        elif now - e.used_at < MIN_AGE_S and e.kind != "cluster":  # a cluster: `needs` says it all
            e.keep = f"used in the last {MIN_AGE_S / 60:g} minutes"
        entries.append(e)
    return entries


def choose(loc: Location, *, everything: bool = False) -> None:
    """Least recently used first, until the location is under its cap (or all, `everything`)."""
    total = loc.total
    # a cluster no live job needs costs money by the hour: always, whatever the cap
    loc.evict = [e for e in loc.entries if e.keep is None and e.kind == "cluster"]
    for e in sorted((e for e in loc.entries if e.keep is None and e.kind != "cluster"), key=lambda e: e.used_at):
        if not everything and (loc.cap_bytes is None or total <= loc.cap_bytes):
            break
        loc.evict.append(e)
        total -= e.bytes


def home(store: Store, cap: int | None, *, everything: bool = False, dry_run: bool = False) -> Location:
    """This machine's caches under gpu-router's home."""
    root = str(paths.home())
    loc = Location("home", cap)
    loc.entries = judge(cachescan.scan(root), needed(store), store.bundle_last_use(), time.time())
    choose(loc, everything=everything)
    if loc.evict and not dry_run:
        done = cachescan.evict(root, [e.path for e in loc.evict], MIN_AGE_S)
        _settle(loc, done)
    return loc


async def target(store: Store, name: str, provider: Any, cap: int | None, *,
                 everything: bool = False, dry_run: bool = False, timeout: float = 120.0) -> Location:
    """A remote target's caches, judged on its host (sizes, locks) and against the store."""
    loc = Location(name, cap)
    try:
        doc = await asyncio.wait_for(provider.cache_scan(), timeout)
        needs = await asyncio.to_thread(needed, store, name)  # a store read: off the event loop
        loc.entries = judge(doc["entries"], needs, {}, doc["now"])
        choose(loc, everything=everything)
        if loc.evict and not dry_run:
            _settle(loc, await asyncio.wait_for(provider.cache_evict([e.path for e in loc.evict]), timeout))
    except Exception as exc:  # noqa: BLE001 - an unreachable host is reported, not fatal
        loc.error = f"{type(exc).__name__}: {exc}"
    return loc


def _settle(loc: Location, done: dict) -> None:
    removed = set(done.get("removed", []))
    loc.freed = int(done.get("freed", 0))
    for e in loc.evict:
        if e.path not in removed:
            e.keep = next((k["why"] for k in done.get("kept", []) if k["path"] == e.path), "kept")
    loc.evict = [e for e in loc.evict if e.path in removed]


def collect(store: Store, cfg: UserConfig | None = None, providers: dict[str, Any] | None = None, *,
            only: list[str] | None = None, everything: bool = False,
            dry_run: bool = False) -> list[Location]:
    """`gpu gc`: every location (or `only` these), judged and, unless `dry_run`, freed."""
    cfg = cfg or load()
    limits = caps(cfg)
    unknown = sorted(set(only or []) - set(limits))
    if unknown:
        raise UserError(f"no cache location named {', '.join(unknown)}",
                        fix=f"locations: {', '.join(limits)} (home is this machine)")
    providers = providers if providers is not None else registry.build(cfg)
    out = []
    if not only or "home" in only:
        out.append(home(store, limits["home"], everything=everything, dry_run=dry_run))
    names = [n for n in limits if n != "home" and (not only or n in only)]

    async def remote() -> list[Location]:
        return list(await asyncio.gather(*(
            target(store, n, providers[n], limits[n], everything=everything, dry_run=dry_run)
            for n in names)))

    if names:
        out += run_sync(remote)
    return out
