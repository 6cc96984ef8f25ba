"""Read every configured account at once, briefly cached, never waiting past a timeout.

Why this shape: `gpu plan` and the dashboard show what a job would cost elsewhere, and a
provider that is slow or down must not hold them up. So each provider is read in its own
thread with its own timeout (3 s by default) and all of them in parallel: the caller waits at
most the longest timeout, whatever happens. A reading is kept on disk (`<data dir>/cache/
accounts/<provider>.json`, no key in it) and reused for 60 s; when a read fails or times out,
the last known reading is shown with its age and why it could not be refreshed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from core import paths
from core.providers.accounts import lambdacloud, primeintellect, readonly, runpod, tensorpool, vast
from core.providers.accounts.models import Reading

PROVIDERS = {m.NAME: m for m in (tensorpool, lambdacloud, primeintellect, vast, runpod)}
CACHE_TTL_S = 60.0
DEFAULT_TIMEOUT_S = 3.0


@dataclass
class Settings:
    """One account's settings from the user config (`accounts: {NAME: {...}}`)."""

    provider: str
    base_url: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def url(self) -> str:
        return (self.base_url or PROVIDERS[self.provider].BASE_URL).rstrip("/")


@dataclass
class Status:
    """What is known of one account now: `state` says where the figures come from."""

    provider: str
    state: str  # fresh (read now) | cached (read < 60 s ago) | stale (read failed: last known) | failed | no_key
    reading: Reading | None = None
    error: str | None = None
    fix: str | None = None
    key_refused: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self, now: float) -> dict[str, Any]:
        mod = PROVIDERS[self.provider]
        doc: dict[str, Any] = {"provider": self.provider, "title": mod.TITLE, "state": self.state,
                               "read_at": None, "age_s": None, "error": self.error, "fix": self.fix,
                               "key_refused": self.key_refused}
        if self.reading is not None:
            doc.update(self.reading.to_json())
            doc["state"], doc["error"], doc["fix"] = self.state, self.error, self.fix
            doc["key_refused"] = self.key_refused
            doc["age_s"] = round(max(0.0, now - self.reading.read_at), 1)
        else:
            doc.update(account=None, offers=[], instances=[], unavailable=[])
        return doc


def cache_file(provider: str) -> Path:
    return paths.cache_dir() / "accounts" / f"{provider}.json"


def _load_cache(s: Settings) -> Reading | None:
    try:
        doc = json.loads(cache_file(s.provider).read_text())
        if doc.get("base_url") != s.url():
            return None  # read from another endpoint: not this account's figures
        return Reading.from_json(doc["reading"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_cache(s: Settings, reading: Reading) -> None:
    path = cache_file(s.provider)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps({"base_url": s.url(), "reading": reading.to_json()}))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def forget(provider: str) -> None:
    cache_file(provider).unlink(missing_ok=True)


def read_one(s: Settings, key: str, now: float | None = None) -> Reading:
    """Read one account now (raises readonly.AccountError / KeyRefused / Timeout)."""
    return PROVIDERS[s.provider].read(s.url(), key, s.timeout_s, time.time() if now is None else now)


def read_all(settings: list[Settings], key_for: Callable[[str], str | None], *,
             refresh: bool = False, clock: Callable[[], float] = time.time) -> list[Status]:
    """Every account's status: from the cache when it is fresh (unless `refresh`), else read
    now in parallel, each within its own timeout; a failure falls back on the last reading."""
    now = clock()
    out: dict[str, Status] = {}
    todo: list[tuple[Settings, str, Reading | None]] = []
    for s in settings:
        cached = _load_cache(s)
        if cached is not None and not refresh and now - cached.read_at < CACHE_TTL_S:
            out[s.provider] = Status(s.provider, "cached", cached)
            continue
        key = key_for(s.provider)
        if not key:
            out[s.provider] = Status(s.provider, "stale" if cached else "no_key", cached,
                                     error="no API key in the keychain",
                                     fix=f"gpu accounts add {s.provider}")
            continue
        todo.append((s, key, cached))
    results: dict[str, Any] = {}

    def work(s: Settings, key: str) -> None:
        try:
            results[s.provider] = read_one(s, key)
        except Exception as exc:  # noqa: BLE001 - a failing provider is a fact to show, not a crash
            results[s.provider] = exc

    threads = []
    for s, key, _ in todo:
        # daemon: a provider that trickles bytes past its timeout never holds up the exit
        t = threading.Thread(target=work, args=(s, key), daemon=True, name=f"account-{s.provider}")
        t.start()
        threads.append((t, time.monotonic() + s.timeout_s + 0.5))
    for (t, deadline), (s, _, cached) in zip(threads, todo):
        t.join(max(0.0, deadline - time.monotonic()))
        result = results.get(s.provider) if not t.is_alive() else None
        if isinstance(result, Reading):
            try:
                save_cache(s, result)
            except OSError:
                pass  # a full disk loses the cache, not the figures
            out[s.provider] = Status(s.provider, "fresh", result)
            continue
        if result is None or isinstance(result, readonly.Timeout):
            why = f"no answer within {s.timeout_s:g} s"
        else:
            why = str(result)
        refused = isinstance(result, readonly.KeyRefused)
        out[s.provider] = Status(
            s.provider, "stale" if cached else "failed", cached, error=why,
            fix=(f"the key may have expired or been revoked: gpu accounts add {s.provider}" if refused
                 else "showing the last figures read" if cached else None),
            key_refused=refused)
    return [out[s.provider] for s in settings]
