"""How long commands wait on a Modal target that does not answer (issue 25, point 1).

    python bench/probe_wait.py [--code DIR] [--modes silent,closed]

A Modal target whose endpoint is a loopback socket that accepts and never answers (`silent`),
or whose port is closed (`closed`), reached by the official `modal` client through its own
`MODAL_SERVER_URL`; the token in a private keychain (tests/services.Keychain: dbus and
gnome-keyring). For each mode it times, wall clock, with the installed `gpu`:

- `gpu targets --json` the first time (the probe runs to its bound),
- `gpu targets --json` again at once (the failure is remembered: nothing is asked),
- `gpu submit train.py --provider local --json --wait-s 0` in a fresh home (Modal is not asked).

`--code DIR` runs another checkout's code (PYTHONPATH=DIR), e.g. the commit before the fix:
`mkdir /tmp/before && git archive 859bb70 | tar -x -C /tmp/before`. Each command is cut at
600 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import committed_project, parse_small, REPO, gpu_entry_point, log, private_world  # noqa: E402

sys.path.insert(0, str(REPO))
from tests.services import Keychain  # noqa: E402

TOKEN = "ak-bench0token0id as-bench0token0secret0123"


class Silent:
    """Accepts, reads, never answers; counts connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        ready.wait(10)

    def _serve(self, ready: threading.Event) -> None:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            while await reader.read(65536):
                pass

        server = self.loop.run_until_complete(asyncio.start_server(accepted, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: list[str], env: dict, cwd: Path | None = None, stdin: str | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    try:
        out = subprocess.run(gpu_entry_point() + args, env=env, cwd=cwd, capture_output=True, text=True,
                             input=stdin, timeout=600)
        text = out.stdout
    except subprocess.TimeoutExpired:
        text = "(cut at 600 s)"
    return time.perf_counter() - t0, text


def why(doc_text: str) -> str:
    try:
        doc = json.loads(doc_text)
    except ValueError:
        return doc_text[-120:]
    md = next((t for t in doc.get("targets", []) if t["name"] == "md"), None)
    return (md or {}).get("why_unavailable") or "?"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--code", help="a checkout whose code to run (PYTHONPATH)", default=str(REPO))
    ap.add_argument("--modes", default="silent,closed")
    opts = parse_small(ap, {'modes': 'closed'})
    world = private_world("probe-wait")
    kc = Keychain(world.tmp / "keychain")
    try:
        project = committed_project(world.tmp / "proj", {"train.py": "print('hello')\n"})
        for mode in opts.modes.split(","):
            server = Silent() if mode == "silent" else None
            port = server.port if server else closed_port()
            for attempt in ("targets", "submit"):
                home = world.tmp / f"home-{mode}-{attempt}"
                home.mkdir()
                env = {**os.environ, **kc.env, "PYTHONPATH": opts.code, "GPU_ROUTER_HOME": str(home),
                       "GPU_ROUTER_CONFIG": str(world.tmp / f"cfg-{mode}-{attempt}.yaml"),
                       "MODAL_SERVER_URL": f"http://127.0.0.1:{port}",
                       "MODAL_CONFIG_PATH": str(world.tmp / "no-modal.toml")}
                run(["targets", "add", "modal", "md", "--token-stdin", "--no-probe"], env, stdin=TOKEN + "\n")
                if attempt == "targets":
                    first, text = run(["targets", "--json"], env)
                    log(f"{mode}: gpu targets --json         {first:6.1f} s  md: {why(text)}")
                    seen = server.connections if server else None
                    second, text = run(["targets", "--json"], env)
                    log(f"{mode}: gpu targets --json again   {second:6.1f} s  md: {why(text)}"
                        + (f"  (new connections: {server.connections - seen})" if server else ""))
                else:
                    seen = server.connections if server else None
                    took, _ = run(["submit", "train.py", "--provider", "local", "--json", "--wait-s", "0"],
                                  env, cwd=project)
                    log(f"{mode}: gpu submit --provider local {took:6.1f} s"
                        + (f"  (connections to Modal: {server.connections - seen})" if server else ""))
    finally:
        world.cleanup()  # every tmp/home-* (the submits' supervisors and jobs), before the keychain
        kc.close()


if __name__ == "__main__":
    main()
