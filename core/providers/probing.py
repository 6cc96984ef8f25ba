"""Every probe of a target goes through here: bounded, all at once, and a failure remembered.

Why one place: a target whose service does not answer (an offline laptop, a proxy, an endpoint
that accepts and never replies) used to hold `gpu targets`, `gpu plan` and every submit for a
minute or more, once per process, saying nothing. Here:

- **bounded end to end.** Each probe runs on its own daemon thread with its own event loop, and
  the caller waits for it at most the target's `probe_timeout_s` (its kind's default:
  core.config.targetopts.PROBE_TIMEOUT_S); past it the target is unavailable "Modal did not
  answer in 5 s". The clock starts once the provider's client library is imported
  (`probe_setup`): importing `modal` alone takes 5 s on a busy 2-core machine, which is not
  the service's silence. A daemon thread, not the loop's executor: a thread stuck in a client library
  never holds the process's exit (Python joins an executor's threads at exit, and
  `asyncio.run` joins its loop's executor).
- **concurrent.** Every target's probe starts at once, so `gpu targets` waits for the slowest
  one, not for the sum.
- **a failure remembered.** A probe that fails (no answer in time, an error, or the target
  saying it is unavailable) is remembered on disk for FAILURE_TTL_S (a host's for as long as
  its `probe_ttl_s` trusts any answer, default 30 s), keyed by the target's name and configuration, so the next command (its own process) says so at once instead of waiting
  again. `gpu targets probe NAME` forgets it and asks again. A success is remembered where the
  provider already remembers it (core.providers.service, core.providers.remoteprobe). This
  machine's own target is never remembered: its probe is local.

Providers whose probe calls a blocking client (Modal, Kaggle) call it through `off_loop`, for
the same reason: a daemon thread that the process does not wait for.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from core import paths
from core.providers.base import TargetInfo

FAILURE_TTL_S = 60.0
SETUP_LIMIT_S = 120.0  # a provider's probe_setup (imports): the bound's clock starts after it
DEFAULT_TIMEOUT_S = 5.0  # a provider object built without a config (core.config sets each one's)
LABELS = {"modal": "Modal", "kaggle": "Kaggle", "local": "this machine"}


def bound(provider: Any) -> float:
    """How long `provider`'s probe may take, connecting and answering, in seconds."""
    value = getattr(provider, "probe_timeout_s", None)
    return float(value) if isinstance(value, (int, float)) and value > 0 else DEFAULT_TIMEOUT_S


def label(provider: Any) -> str:
    """Who did not answer, in a person's words: "Modal", "Kaggle", "box's host"."""
    return LABELS.get(provider.kind) or f"{provider.name}'s host"


async def off_loop(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` on a daemon thread, awaited: like `asyncio.to_thread`, but a call that never
    returns holds neither the loop's shutdown nor the process's exit (see the module's doc)."""
    import asyncio  # lazy: off `gpu submit`'s start
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if not done.done():
            done.set_exception(error) if error is not None else done.set_result(value)

    def run() -> None:
        try:
            value, error = fn(*args), None
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            value, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop is closed: nobody waits for this answer any more
            pass

    threading.Thread(target=run, daemon=True, name=f"off-loop-{getattr(fn, '__name__', 'call')}").start()
    return await done


# -- failures remembered --------------------------------------------------------------------------

def _failure_file(provider: Any) -> Path:
    return paths.cache_dir() / "probe-failed" / f"{provider.name}.json"


def _config_key(provider: Any) -> str:
    """The target's configuration as probed: a changed target is not judged by an old failure."""
    doc = [provider.kind, getattr(provider, "options", None), bound(provider)]
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def remember_failure(provider: Any, why: str) -> None:
    path = _failure_file(provider)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps({"at": time.time(), "why": why, "key": _config_key(provider)}))
        os.replace(tmp, path)
    except OSError:  # a full or read-only home: the next command asks again, no worse
        pass


def forget_failure(provider: Any) -> None:
    _failure_file(provider).unlink(missing_ok=True)


def remembered_failure(provider: Any) -> tuple[str, float] | None:
    """(why, when) of this target's last failed probe, if it failed within FAILURE_TTL_S."""
    try:
        doc = json.loads(_failure_file(provider).read_text())
        at, why = float(doc["at"]), str(doc["why"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if doc.get("key") != _config_key(provider) or not 0 <= time.time() - at < failure_ttl(provider):
        return None
    return why, at


def failure_ttl(provider: Any) -> float:
    """How long a failed probe is remembered: FAILURE_TTL_S for a service; for a host as long
    as its own answers are trusted (`probe_ttl_s`, default remoteprobe.PROBE_TTL_S; 0
    remembers nothing), so a host that comes back is seen as soon as before."""
    ttl = (getattr(provider, "options", None) or {}).get("probe_ttl_s")
    if isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
        return min(float(ttl), FAILURE_TTL_S)
    if provider.kind in ("ssh", "slurm", "pbs"):
        from core.providers.remoteprobe import PROBE_TTL_S  # a host's: its transport, not for a local submit

        return PROBE_TTL_S
    return FAILURE_TTL_S


# -- the probe ------------------------------------------------------------------------------------

def unprobed_info(provider: Any, why: str) -> TargetInfo:
    """The target as unavailable without asking it: what it would offer (a Modal target keeps
    its GPU types and prices) and why not."""
    make = getattr(provider, "_info", None)
    try:
        info = make(False, why) if make is not None else None
    except Exception:  # noqa: BLE001 - a provider that cannot describe itself unasked
        info = None
    if info is None:
        info = TargetInfo(name=provider.name, kind=provider.kind, available=False, why_unavailable=why,
                          max_jobs=getattr(provider, "max_jobs", 1))
    return info


def failed_info(provider: Any, why: str, *, at: float | None = None, remembered: bool = False) -> TargetInfo:
    """The target as unavailable after a failed probe: why, and `details.probe_failed` for
    --json readers (what failed, when, whether this is the remembered answer)."""
    at = time.time() if at is None else at
    shown = why
    if remembered:
        shown = f"{why} ({time.time() - at:.0f} s ago; `gpu targets probe {provider.name}` asks again now)"
    info = unprobed_info(provider, shown)
    info.details = {**(info.details or {}), "probe_failed": {
        "why": why, "at": round(at, 3), "remembered": remembered, "timeout_s": bound(provider),
        "remembered_for_s": failure_ttl(provider)}}
    return info


def _ask(provider: Any, box: dict[str, Any], asking: threading.Event) -> None:
    """One probe, on the calling (daemon) thread: the provider's `probe_setup()` first where it
    has one (importing its client library: seconds of CPU on a busy machine, not the service's
    wait, so the bound's clock starts after it: `asking` is set then), then `probe_now` where
    the provider has a synchronous one (this machine; a remote host's cached answer or its own
    short thread), else its `probe()` on a fresh event loop."""
    try:
        setup = getattr(provider, "probe_setup", None)
        if setup is not None:
            setup()
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
        box["error"] = exc
        asking.set()
        return
    box["asking_at"] = time.monotonic()
    asking.set()
    try:
        if hasattr(provider, "probe_now"):
            box["value"] = provider.probe_now()
        else:
            import asyncio  # only here: this machine's probe (a submit's usual one) needs none

            box["value"] = asyncio.run(provider.probe())
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
        box["error"] = exc


def probe_all(providers: dict[str, Any], *, fresh: bool = False) -> dict[str, TargetInfo]:
    """Every provider's probe at once, each within its bound; a failure remembered (see the
    module's doc). `fresh`: past a remembered failure (the provider's own cache is its own
    affair: `forget_probe` first to pass it too). Never raises for a target's sake."""
    out: dict[str, TargetInfo] = {}
    asked: dict[str, tuple[Any, threading.Thread, dict[str, Any], threading.Event]] = {}
    for name, p in providers.items():
        if p.kind != "local":
            if fresh:
                forget_failure(p)
            else:
                known = remembered_failure(p)
                if known is not None:
                    out[name] = failed_info(p, known[0], at=known[1], remembered=True)
                    continue
        box: dict[str, Any] = {}
        asking = threading.Event()
        t = threading.Thread(target=_ask, args=(p, box, asking), daemon=True, name=f"probe-{name}")
        t.start()
        asked[name] = (p, t, box, asking)
    for name, (p, t, box, asking) in asked.items():
        asking.wait(SETUP_LIMIT_S)
        t.join(max(box.get("asking_at", time.monotonic()) + bound(p) - time.monotonic(), 0.0))
        if t.is_alive():
            why = f"{label(p)} did not answer in {bound(p):g} s"
        elif "error" in box:
            exc = box["error"]
            why = f"the probe of {name} failed ({type(exc).__name__}: {exc})"[:300]
        else:
            info = box["value"]
            if not info.available and p.kind != "local" and info.why_unavailable and not info.answered:
                remember_failure(p, info.why_unavailable)
            out[name] = info
            continue
        if p.kind != "local":
            remember_failure(p, why)
        out[name] = failed_info(p, why)
    return {name: out[name] for name in providers}  # in the config's order
