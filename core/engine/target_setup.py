"""Adding, removing, probing and trusting targets: the operations `gpu targets ...` calls.

Apart from core/engine/targets.py (what the router reads on every submit) because these load
the SSH stack, which a submit to the local machine never needs.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.config.edit import remove_target, save_target
from core.config.user import load
from core.jobs.states import ACTIVE
from core.jobs.store import Store
from core.errors import UserError, shorten
from core.providers import probing, registry
from core.providers.base import TargetInfo
from core.transport import ssh
from core.transport.base import Unreachable


def configured(name: str) -> tuple[Any, Any]:
    """The target's config entry and its provider object; an unknown name is a UserError."""
    cfg = load()
    if name not in cfg.targets:
        raise UserError(f"there is no target named {shorten(name)}", fix="see `gpu targets`")
    return cfg.targets[name], registry.build(cfg)[name]


def probe(name: str) -> TargetInfo:
    """Probe one target now, past any cached answer or remembered failure (a wrong host or key
    is said at once), within its `probe_timeout_s` like every probe."""
    _, provider = configured(name)
    if hasattr(provider, "forget_probe"):  # cached answers (a host's, this machine's sandbox) go
        provider.forget_probe()
    return probing.probe_all({name: provider}, fresh=True)[name]


def add(name: str, body: dict, *, probe_now: bool = True) -> tuple[Path, TargetInfo | None]:
    """Save a target into the user's config (checked by loading it back), then probe it."""
    path = save_target(name, body)
    return path, (probe(name) if probe_now else None)


def add_kaggle(name: str, body: dict, credentials: str, *, probe_now: bool = True) -> tuple[Path, TargetInfo | None]:
    """A kaggle target: its credentials (kaggle.json's text or an API token) go into the
    keychain, checked for shape first; only the options go into the config file."""
    from core.providers.kaggle.wire import parse_credentials, secret_name
    from core.secrets import keychain

    creds = parse_credentials(credentials)
    keychain.set(secret_name(name), json.dumps(creds))
    return add(name, body, probe_now=probe_now)


def add_modal(name: str, body: dict, token: str, *, probe_now: bool = True) -> tuple[Path, TargetInfo | None]:
    """A modal target: its token (id and secret) goes into the keychain, checked for shape
    first; only the options go into the config file."""
    from core.providers.modal.wire import parse_token, secret_name
    from core.secrets import keychain

    keychain.set(secret_name(name), json.dumps(parse_token(token)))
    return add(name, body, probe_now=probe_now)


def add_skypilot(name: str, body: dict, *, probe_now: bool = True,
                 tell: Any = None) -> tuple[Path, TargetInfo | None]:
    """A skypilot target: SkyPilot's own venv first (ours made with uv unless the person names
    theirs, which is checked and never installed into), then the entry, then the probe. The
    venv is made before the entry is saved: a target whose SkyPilot cannot be installed is not
    left in the config."""
    import os

    from core.providers.skypilot import venv as skyvenv

    named = body.get("venv")
    where = Path(os.path.expanduser(named)) if named else skyvenv.default_path()
    mark = skyvenv.installed(where)
    spec = skyvenv.spec_for(body.get("clouds"), None if named else (mark or {}).get("spec"))
    if not named and (mark is None or mark.get("spec") != spec) and tell is not None:
        tell(f"making SkyPilot's own venv at {where} ({spec}, about 100 packages: a minute or a few)")
    skyvenv.ensure(where, named=bool(named), spec=spec)
    return add(name, body, probe_now=probe_now)


def remove(name: str, store: Store, *, force: bool = False) -> Path:
    """Drop a target from the user's config; refused while its jobs have not ended."""
    live = [j for j in store.jobs(states=ACTIVE) if j.provider == name]
    if live and not force:
        raise UserError(f"{len(live)} job(s) have not ended on {name}: "
                        + ", ".join(j.short_id for j in live[:10]),
                        fix="cancel them (gpu cancel ID) or pass --force")
    return remove_target(name)


@dataclass
class HostKey:
    """The key a target's SSH host presents now, and what known_hosts says of it."""

    target: str
    host: str
    fingerprint: str
    algorithm: str
    known_hosts: str
    trusted: bool  # this very key is recorded already
    changed: bool  # another key is recorded for the host
    key: Any = field(repr=False, default=None)
    endpoint: Any = field(repr=False, default=None)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "host": self.host, "fingerprint": self.fingerprint,
                "algorithm": self.algorithm, "known_hosts": self.known_hosts, "trusted": self.trusted}


def host_key(name: str) -> HostKey:
    """Fetch the host key a target presents (nothing is trusted by looking)."""
    _, provider = configured(name)
    ep = getattr(provider.transport, "ep", None)
    if ep is None:
        raise UserError(f"{name} runs on this machine: there is no host key to trust")
    try:
        key = asyncio.run(ssh.fetch_host_key(ep))
    except Unreachable as exc:
        raise UserError(str(exc), fix="check --host and --port (gpu targets add ... again)") from None
    recorded = ssh.recorded_keys(ep)
    return HostKey(target=name, host=ep.label(), fingerprint=ssh.fingerprint(key),
                   algorithm=key.get_algorithm(), known_hosts=str(ep.known_hosts_file()),
                   trusted=any(k.public_data == key.public_data for k in recorded),
                   changed=bool(recorded), key=key, endpoint=ep)


def trust(hk: HostKey, *, replace: bool = False) -> Path:
    """Record a fetched host key in known_hosts: the one deliberate way to accept a key.

    The caller has had a person confirm `hk.fingerprint` (typed yes, or the same fingerprint
    given back); a key that differs from the recorded one needs `replace` as well.
    """
    ep = hk.endpoint
    if hk.changed and not hk.trusted and not replace:
        raise UserError(f"the host key of {hk.host} CHANGED: it now presents {hk.fingerprint}, and "
                        f"{hk.known_hosts} records another key for {ep.pattern()}",
                        fix=f"only if its admin confirms {hk.fingerprint}: "
                            f"gpu targets trust {hk.target} --replace")
    path = ssh.trust_host_key(ep, hk.key, replace=hk.changed)
    _, provider = configured(hk.target)
    provider.forget_probe()
    probing.forget_failure(provider)  # "host key not trusted" was the failure: ask again
    return path
