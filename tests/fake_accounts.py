"""GPU cloud account APIs on loopback, one HTTP server per provider, serving the recorded
response shapes of tests/data/accounts/<provider>/ (each file names its source and date).

gpu-router's own client (core/providers/accounts/readonly.py) talks to them unchanged through
the `accounts: {NAME: {base_url: ...}}` setting. Every request is recorded with its method,
path, query, body and whether it carried the right key, whatever the method (PUT, DELETE,
PATCH... are answered 405 and recorded too), so tests assert that no write ever left. A
server can answer 401 as the provider does for an expired key (`expired`), or stall before
answering (`stall_s`) to stand for a provider that is down.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "accounts"
PROVIDERS = ("tensorpool", "lambda", "primeintellect", "vast", "runpod")
# (method, path) -> fixture, per provider; paths as the providers document them
ROUTES = {
    "lambda": {("GET", "/api/v1/instance-types"): "instance-types", ("GET", "/api/v1/instances"): "instances"},
    "vast": {("GET", "/api/v0/bundles"): "bundles", ("GET", "/api/v0/users/current"): "users-current",
             ("GET", "/api/v0/instances"): "instances"},
    "primeintellect": {("GET", "/api/v1/availability"): "availability", ("GET", "/api/v1/pods"): "pods"},
    "tensorpool": {("GET", "/me"): "me"},
    "runpod": {("POST", "/graphql"): "graphql"},
}

ALL_REQUESTS: list[dict[str, Any]] = []  # every request any fake received in this process


def fixture(provider: str, name: str) -> dict[str, Any]:
    return json.loads((DATA / provider / f"{name}.json").read_text())


class FakeProvider:
    def __init__(self, provider: str, key: str) -> None:
        self.provider = provider
        self.key = key
        self.expired = False
        self.stall_s = 0.0
        self.overrides: dict[str, Any] = {}  # fixture name -> the body to serve instead
        self.requests: list[dict[str, Any]] = []
        self._release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                fake._answer(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        url = urllib.parse.urlsplit(h.path)
        auth = h.headers.get("Authorization") or ""
        record = {"provider": self.provider, "method": h.command, "path": url.path,
                  "query": urllib.parse.parse_qs(url.query), "body": body.decode(errors="replace"),
                  "authorized": auth == f"Bearer {self.key}"}
        self.requests.append(record)
        ALL_REQUESTS.append(record)
        if self.stall_s:
            self._release.wait(self.stall_s)
        route = ROUTES[self.provider].get((h.command, url.path.rstrip("/") or "/"))
        if route is None:
            return self._send(h, 405 if h.command != "GET" else 404, {"error": "not here"})
        if self.expired or not record["authorized"]:
            doc = fixture(self.provider, "error-401")
            return self._send(h, doc["status"], doc["body"])
        doc = self.overrides.get(route) or fixture(self.provider, route)["body"]
        if self.provider == "runpod":
            doc = self._graphql(body, doc)
        self._send(h, 200, doc)

    @staticmethod
    def _graphql(body: bytes, doc: dict) -> dict:
        """Answer the root fields the query asks for (myself, gpuTypes), as RunPod would."""
        asked = json.loads(body or b"{}").get("query", "")
        return {"data": {k: v for k, v in doc["data"].items() if k in asked}}

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a stalled answer past its timeout)


class FakeAccounts:
    """All five providers at once, each with its own key."""

    def __init__(self, keys: dict[str, str] | None = None) -> None:
        self.keys = keys or {p: f"key-{p}-{'x' * 8}-secret" for p in PROVIDERS}
        self.fakes = {p: FakeProvider(p, self.keys[p]) for p in PROVIDERS}

    def __getitem__(self, provider: str) -> FakeProvider:
        return self.fakes[provider]

    def config(self, providers: tuple[str, ...] = PROVIDERS, timeout_s: float | None = None) -> str:
        """The user config's accounts: section pointing each provider at its fake."""
        lines = ["accounts:"]
        for p in providers:
            extra = f", timeout_s: {timeout_s}" if timeout_s else ""
            lines.append(f"  {p}: {{base_url: '{self.fakes[p].base_url}'{extra}}}")
        return "\n".join(lines) + "\n"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [r for f in self.fakes.values() for r in f.requests]

    def close(self) -> None:
        for f in self.fakes.values():
            f.close()
