"""The user's GPU cloud accounts as the fronts see them: `gpu accounts`, the "elsewhere" beside
`gpu plan`, and the dashboard's targets pane.

Read-only by construction (every request leaves through core/providers/accounts/readonly.py).
The API key of each account lives only in the keychain as `account:<provider>`; this module
reads it for the request and passes it nowhere else. An account is configured when the user
config lists it under `accounts:`; with none listed nothing here touches the keychain or the
network, so a submit or a plan without accounts costs nothing.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from core.config import user as userconfig
from core.errors import UserError, shorten

KEY_PREFIX = "account:"


def _reader():
    from core.providers.accounts import reader  # loaded only where an account is configured

    return reader


def _key_name(provider: str) -> str:
    return KEY_PREFIX + provider


def check_provider(provider: str) -> str:
    if provider not in userconfig.ACCOUNT_PROVIDERS:
        raise UserError(f"{shorten(provider)} is not an account gpu-router can read",
                        fix=f"accounts: {', '.join(userconfig.ACCOUNT_PROVIDERS)}")
    return provider


def _settings(cfg: userconfig.UserConfig) -> list:
    reader = _reader()
    return [reader.Settings(provider=name, base_url=body.get("base_url"),
                            timeout_s=body.get("timeout_s", reader.DEFAULT_TIMEOUT_S))
            for name, body in cfg.accounts.items()]


def _key_for(provider: str) -> str | None:
    from core.secrets import keychain

    try:
        return keychain.get(_key_name(provider))
    except UserError:
        return None  # no keychain here: said as "no API key", with the fix


def configured(cfg: userconfig.UserConfig | None = None) -> list[str]:
    return list((cfg or userconfig.load()).accounts)


def snapshot(*, refresh: bool = False, cfg: userconfig.UserConfig | None = None,
             clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """`gpu accounts --json`: {accounts: [...], read_at}; each account with its state (fresh,
    cached, stale, failed, no_key), when it was read and how long ago, its balance, offers
    and instances. Nothing is read when no account is configured."""
    cfg = cfg or userconfig.load()
    now = clock()
    if not cfg.accounts:
        return {"accounts": [], "read_at": now}
    statuses = _reader().read_all(_settings(cfg), _key_for, refresh=refresh, clock=clock)
    return {"accounts": [s.to_json(now) for s in statuses], "read_at": now}


def refused(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The accounts whose key the provider refused (an expired or revoked key)."""
    return [a for a in doc.get("accounts", []) if a.get("key_refused")]


def add(provider: str, key: str, *, base_url: str | None = None, timeout_s: float | None = None,
        probe: bool = True) -> tuple[str, dict[str, Any] | None]:
    """Store `key` in the keychain as account:<provider> and list the account in the user
    config; probe it first, so a key the provider refuses is never stored."""
    from core.config import edit
    from core.secrets import keychain

    check_provider(provider)
    key = key.strip()
    if not key or any(c in key for c in "\r\n\t ") or len(key) > 4096:
        raise UserError(f"that is not an API key for {provider} (empty, too long, or with spaces)",
                        fix=f"gpu accounts add {provider}, and paste the key when asked")
    body: dict[str, Any] = {}
    if base_url:
        body["base_url"] = base_url
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    userconfig.check_accounts({provider: body}, "the arguments")  # the same checks the config gets
    reader = _reader()
    settings = reader.Settings(provider=provider, base_url=body.get("base_url"),
                               timeout_s=body.get("timeout_s", reader.DEFAULT_TIMEOUT_S))
    probed = None
    if probe:
        from core.providers.accounts import readonly

        title = reader.PROVIDERS[provider].TITLE
        try:
            reading = reader.read_one(settings, key)
        except readonly.KeyRefused as exc:
            raise UserError(f"{title} refused this API key: {exc}; nothing was stored",
                            fix=f"check the key ({reader.PROVIDERS[provider].KEY_HELP}), then "
                                f"gpu accounts add {provider}") from None
        except readonly.AccountError as exc:
            probed = {"provider": provider, "state": "failed", "error": f"{title}: {exc}"}
        else:
            reader.save_cache(settings, reading)
            probed = reader.Status(provider, "fresh", reading).to_json(time.time())
    keychain.set(_key_name(provider), key)
    path = edit.save_section_key("accounts", provider, body)
    return str(path), probed


def remove(provider: str) -> dict[str, Any]:
    """Forget the account: its key from the keychain, its entry from the config, its cache."""
    from core.config import edit
    from core.secrets import keychain

    check_provider(provider)
    cfg = userconfig.load()
    had_key = keychain.delete(_key_name(provider))
    path = None
    if provider in cfg.accounts:
        path = str(edit.save_section_key("accounts", provider, None))
    _reader().forget(provider)
    if path is None and not had_key:
        raise UserError(f"no {provider} account is set up", fix="see `gpu accounts` for the accounts")
    return {"removed": provider, "key_deleted": had_key, "saved_to": path}


# -- what a job would cost elsewhere -------------------------------------------------------


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def matches(offer: dict[str, Any], gpu: str | None, vram_gb: float | None) -> bool:
    """An offer fits a request's `--gpu` (its name inside the offer's, ignoring case, spaces
    and punctuation: T4, a100, "RTX 4090") and `--vram-gb` (at least that much per GPU)."""
    if offer.get("available") == 0:
        return False
    if gpu and _norm(gpu) not in _norm(str(offer.get("gpu") or "")):
        return False
    if vram_gb:
        have = offer.get("vram_gb")
        if have is None or float(have) < float(vram_gb):
            return False
    return True


def elsewhere(gpu: str | None, vram_gb: float | None, hours: float | None, *,
              cfg: userconfig.UserConfig | None = None,
              clock: Callable[[], float] = time.time) -> dict[str, Any] | None:
    """The cheapest current offer across the accounts for the request's GPU and VRAM, and what
    the job would cost there (hours x price): informational, never part of the plan's digest.
    None when no account is configured (then nothing is read)."""
    cfg = cfg or userconfig.load()
    if not cfg.accounts:
        return None
    doc = snapshot(cfg=cfg, clock=clock)
    fits = [o for a in doc["accounts"] for o in a.get("offers") or [] if matches(o, gpu, vram_gb)]
    fits.sort(key=lambda o: (o["price_per_hour"], o.get("gpu_count") or 1))
    best = None
    if fits:
        o = fits[0]
        best = {**o, "age_s": round(max(0.0, doc["read_at"] - o["read_at"]), 1), "hours": hours,
                "estimated_cost": round(o["price_per_hour"] * hours, 2) if hours else None}
    return {"cheapest": best, "matched": len(fits),
            "request": {"gpu": gpu, "vram_gb": vram_gb, "hours": hours},
            "accounts": [{k: a.get(k) for k in ("provider", "title", "state", "read_at", "age_s", "error", "fix")}
                         for a in doc["accounts"]]}
