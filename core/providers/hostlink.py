"""How a remote target reaches its host: the transport its options describe (SSH to `host`, or
this machine with `local: true`), and running that asynchronous talk to its end from
synchronous code (a probe asked while planning, `gpu gc`, `gpu fetch`, `gpu targets add`).
"""

from __future__ import annotations

import threading
from typing import Any

from core.transport.base import Transport
from core.transport.local import LocalTransport


def make_transport(name: str, options: dict) -> Transport:
    """The transport a target's options describe: SSH to `host`, or this machine (`local`)."""
    if options.get("local"):
        return LocalTransport(name, env={str(k): str(v) for k, v in (options.get("env") or {}).items()})
    from core.transport.ssh import Endpoint, SSHTransport, silence_for

    # the link is declared dead within the target's grace, so the grace is what decides
    grace = options.get("unreachable_grace_s")
    grace = float(grace) if isinstance(grace, (int, float)) and not isinstance(grace, bool) and grace > 0 else 600.0
    ep = Endpoint(host=str(options["host"]), port=int(options.get("port") or 22),
                  user=options.get("user"), key=options.get("key"),
                  known_hosts=options.get("known_hosts"),
                  connect_timeout=float(options.get("connect_timeout_s") or 10),
                  silent_s=silence_for(grace))
    return SSHTransport(ep, name=name)


def run_sync(coro_fn) -> Any:
    """Run an async function to completion from synchronous code, even inside a running loop
    (a fresh loop in a short-lived thread), closing the connections it opened."""
    import asyncio  # lazy: off `gpu submit`'s start
    from core.transport.ssh import close_all

    box: dict[str, Any] = {}

    async def wrapped() -> Any:
        try:
            return await coro_fn()
        finally:
            await close_all()

    def target() -> None:
        try:
            box["value"] = asyncio.run(wrapped())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")
