"""A Kaggle API on loopback that the official client (kagglesdk, under the `kaggle` package)
talks to unchanged, with `KAGGLE_API_ENVIRONMENT=LOCALHOST` (http://localhost:80/api/v1/...).

It speaks the calls gpu-router's kaggle target makes, in Kaggle's wire format (POST JSON with
camelCase fields, `{code, message}` errors, protobuf-JSON durations), and keeps what a real
account keeps: data sets made from uploaded blobs, kernels and their versions, the weekly GPU
quota. A pushed kernel really runs: its code is written to a session folder laid out as on
Kaggle (`working/` as the current folder, each data set and each source kernel's output under
`input/<slug>/`), run by this Python in a subprocess with the kernel's session timeout, and
everything it leaves under `working/` is the session's output, served file by file.

A kernel pushed with `enableInternet: false` (Kaggle's default) runs with no network at all, as
on Kaggle: in a network namespace of its own (`unshare --net --map-current-user`, which works
unprivileged), where not even this fake on 127.0.0.1 can be reached. `enableInternet: true` is
granted only when the test marks the account phone-verified (`phone_verified=True`); otherwise
the push is answered with an error saying internet needs phone verification (our reading of
Kaggle's refusal, not checked against kaggle.com) and nothing runs.

Every call is recorded (`calls`), with whether it carried credentials, so tests assert what was
sent: private, GPU on, the machine shape, the data sets by content hash, no secret anywhere.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def _kill_session(sid: int, sig: int) -> None:
    """Every process of the kernel's session (the launcher leads a group of its own inside it),
    as Kaggle stopping the session's machine would."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    os.kill(int(entry), sig)
            except (ProcessLookupError, PermissionError):
                pass


MAX_DATASET_FILES = 1000  # Kaggle's answer past it: "The file count exceeds the maximum of 1000"
MAX_KERNEL_SOURCES = 20  # the cap gpu-router assumes (core/providers/kaggle/code.SOURCES_CAP)


class Session:
    """One run of one kernel version."""

    def __init__(self, root: Path, kernel: str, version: int, body: dict) -> None:
        self.root = root
        self.kernel = kernel
        self.version = version
        self.body = body
        self.status = "QUEUED"
        self.failure = ""
        self.proc: subprocess.Popen | None = None
        self.started = time.time()
        self.ended: float | None = None
        self.cancelled = False

    @property
    def working(self) -> Path:
        return self.root / "working"

    @property
    def stdout(self) -> Path:
        return self.root / "stdout.txt"


class FakeKaggle:
    def __init__(self, root: Path, *, port: int = 80, user: str = "alice", key: str = "k-secret-123",
                 token: str | None = None, quota_hours: float = 30.0, used_hours: float = 0.0,
                 queue_s: float = 0.0, phone_verified: bool = False) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.user, self.key, self.token = user, key, token
        self.quota_s = quota_hours * 3600
        self.used_s = used_hours * 3600
        self.queue_s = queue_s
        self.phone_verified = phone_verified
        self.stall: set[str] = set()  # methods that answer only after the client gave up
        self.calls: list[dict] = []
        self.blobs: dict[str, bytes] = {}
        self.declared: dict[str, int] = {}  # blob token -> the contentLength its upload announced
        self.datasets: dict[str, dict[str, bytes]] = {}  # "owner/slug" -> files
        self.sessions: dict[str, Session] = {}  # "owner/slug" -> its latest session
        self.kernel_ids: dict[int, str] = {}
        self.uploaded_bytes = 0
        self._lock = threading.Lock()
        self._n = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                fake._post(self)

            def do_PUT(self) -> None:  # noqa: N802
                fake._put(self)

            def do_GET(self) -> None:  # noqa: N802
                fake._get(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        for s in self.sessions.values():
            if s.proc is not None:
                _kill_session(s.proc.pid, 9)
        self.server.shutdown()
        self.server.server_close()

    # -- what tests read ------------------------------------------------------------------------

    def methods(self) -> list[str]:
        return [c["method"] for c in self.calls]

    def bodies(self, method: str) -> list[dict]:
        return [c["body"] for c in self.calls if c["method"] == method]

    def wait_session(self, kernel: str, states: set[str], timeout: float = 60) -> Session:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.sessions.get(kernel)
            if s is not None:
                self._advance(s)
                if s.status in states:
                    return s
            time.sleep(0.1)
        raise AssertionError(f"kernel {kernel} never reached {states}")

    # -- the wire -------------------------------------------------------------------------------

    def _reply(self, h: BaseHTTPRequestHandler, code: int, body: Any, ctype: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _error(self, h: BaseHTTPRequestHandler, code: int, message: str) -> None:
        self._reply(h, code, {"code": code, "message": message})

    def _authorized(self, auth: str | None) -> bool:
        if not auth:
            return False
        if auth.startswith("Basic "):
            return base64.b64decode(auth[6:]).decode() == f"{self.user}:{self.key}"
        return bool(self.token) and auth == f"Bearer {self.token}"

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b"{}"
        body = json.loads(raw or b"{}")
        parts = h.path.split("/")
        service, method = (parts[-2], parts[-1]) if len(parts) >= 2 else ("", "")
        auth = h.headers.get("Authorization")
        with self._lock:
            self.calls.append({"service": service, "method": method, "body": body,
                               "authorized": self._authorized(auth), "raw": raw.decode(errors="replace")})
        if method in self.stall:
            time.sleep(30)
        if method == "IntrospectToken":
            return self._reply(h, 200, {"active": bool(self.token) and body.get("token") == self.token,
                                        "username": self.user})
        if not self._authorized(auth):
            return self._error(h, 401, "Unauthenticated")
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return self._error(h, 404, f"unhandled {service}/{method}")
        code, answer = handler(body)
        if code >= 400:
            return self._error(h, code, str(answer))
        self._reply(h, code, answer)

    def _put(self, h: BaseHTTPRequestHandler) -> None:
        token = h.path.rsplit("/", 1)[-1]
        data = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        if self.declared.get(token) != len(data):  # an unknown token, or not the length announced
            return self._error(h, 400, f"upload {token}: {len(data)} bytes, announced {self.declared.get(token)}")
        with self._lock:
            self.calls.append({"service": "upload", "method": "PUT", "body": {"token": token, "bytes": len(data)},
                               "authorized": self._authorized(h.headers.get("Authorization")), "raw": ""})
            self.blobs[token] = data
            self.uploaded_bytes += len(data)
        self._reply(h, 200, {})

    def _get(self, h: BaseHTTPRequestHandler) -> None:
        # /output/<owner>/<slug>/<path>: a session's output file
        parts = h.path.split("/", 4)
        if len(parts) == 5 and parts[1] == "output":
            s = self.sessions.get(f"{parts[2]}/{parts[3]}")
            path = (s.working / parts[4]) if s else None
            if path and path.is_file() and path.resolve().is_relative_to(s.working.resolve()):
                return self._reply(h, 200, path.read_bytes(), "application/octet-stream")
        self._error(h, 404, "not found")

    # -- datasets and blobs ---------------------------------------------------------------------

    def _m_GetDatasetStatus(self, body: dict) -> tuple[int, Any]:
        ref = f"{body.get('ownerSlug')}/{body.get('datasetSlug')}"
        if ref not in self.datasets:
            return 404, f"dataset {ref} not found"
        return 200, {"status": "READY"}

    def _m_StartBlobUpload(self, body: dict) -> tuple[int, Any]:
        with self._lock:
            self._n += 1
            token = f"blob{self._n}-{body.get('name')}"
            self.declared[token] = int(body.get("contentLength") or 0)
        return 200, {"token": token, "createUrl": f"{self.base}/upload/{token}"}

    def _m_CreateDataset(self, body: dict) -> tuple[int, Any]:
        ref = f"{body.get('ownerSlug')}/{body.get('slug')}"
        files = {}
        if len(body.get("files", [])) > MAX_DATASET_FILES:
            return 400, f"The file count exceeds the maximum of {MAX_DATASET_FILES}"
        for f in body.get("files", []):
            token = f.get("token")
            if token not in self.blobs:
                return 400, f"unknown blob token {token}"
            files[token.split("-", 1)[1]] = self.blobs[token]
        self.datasets[ref] = files
        return 200, {"ref": ref, "url": f"{self.base}/datasets/{ref}", "status": "ok", "error": ""}

    # -- kernels --------------------------------------------------------------------------------

    def _m_GetAcceleratorQuotaStatistics(self, body: dict) -> tuple[int, Any]:
        for s in list(self.sessions.values()):
            self._advance(s)
        running = sum(time.time() - s.started for s in self.sessions.values() if s.status == "RUNNING")
        refresh = (datetime.now(timezone.utc) + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        return 200, {"quotaRefreshTime": refresh,
                     "gpuQuota": {"timeUsed": f"{int(self.used_s)}s", "timeReserved": f"{int(running)}s",
                                  "totalTimeAllowed": f"{int(self.quota_s)}s"}}

    def _m_SaveKernel(self, body: dict) -> tuple[int, Any]:
        ref = body.get("slug", "")
        owner, _, slug = ref.partition("/")
        if owner != self.user or not slug:
            return 400, f"bad kernel slug {ref}"
        if body.get("enableInternet") and not self.phone_verified:
            return 200, {"ref": f"/code/{ref}", "error": "Internet access requires a phone-verified account "
                                                          "(kaggle.com > Settings > Phone verification)"}
        sources = [*body.get("datasetDataSources", []), *body.get("kernelDataSources", [])]
        if len(sources) > MAX_KERNEL_SOURCES:
            return 200, {"ref": f"/code/{ref}", "error": f"a kernel takes at most {MAX_KERNEL_SOURCES} "
                                                         f"data sources, {len(sources)} were given"}
        for src in body.get("datasetDataSources", []):
            if src not in self.datasets:
                return 200, {"ref": f"/code/{ref}", "error": "", "invalidDatasetSources": [src]}
        with self._lock:
            self._n += 1
            kernel_id = self._n
        version = sum(1 for c in self.calls if c["method"] == "SaveKernel" and c["body"].get("slug") == ref)
        session = Session(self.root / slug / f"v{version}", ref, version, body)
        shutil.rmtree(session.root, ignore_errors=True)
        session.working.mkdir(parents=True)
        inputs = session.root / "input"
        for src in body.get("datasetDataSources", []):
            d = inputs / src.split("/", 1)[1]
            d.mkdir(parents=True, exist_ok=True)
            for name, data in self.datasets[src].items():
                (d / name).write_bytes(data)
        for src in body.get("kernelDataSources", []):
            prev = self.sessions.get(src)
            if prev is not None:
                shutil.copytree(prev.working, inputs / src.split("/", 1)[1], symlinks=True)
        (session.root / "kernel.py").write_text(body.get("text", ""))
        self.sessions[ref] = session
        self.kernel_ids[kernel_id] = ref
        if not self.queue_s:
            self._start(session)
        return 200, {"ref": f"/code/{ref}", "url": f"{self.base}/code/{ref}", "versionNumber": version,
                     "kernelId": kernel_id, "error": ""}

    def _start(self, s: Session) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KAGGLE_", "GPU_ROUTER_"))}
        out = open(s.stdout, "wb")  # noqa: SIM115 - the child writes to it
        cmd = [sys.executable, str(s.root / "kernel.py")]
        if not s.body.get("enableInternet"):  # no network at all: its own, empty namespace
            cmd = ["unshare", "--net", "--map-current-user", *cmd]
        s.proc = subprocess.Popen(cmd, cwd=s.working, env=env,
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        out.close()
        s.started = time.time()
        s.status = "RUNNING"

    def _advance(self, s: Session) -> None:
        """Move a session on: start it after the queue time, end it when its process ends or
        its session timeout passes (Kaggle kills it then)."""
        if s.status == "QUEUED" and time.time() - s.started >= self.queue_s:
            self._start(s)
        if s.status not in ("RUNNING", "CANCEL_REQUESTED") or s.proc is None:
            return
        limit = s.body.get("sessionTimeoutSeconds")
        code = s.proc.poll()
        if code is None and s.status == "RUNNING" and limit and time.time() - s.started > float(limit):
            _kill_session(s.proc.pid, 9)
            s.proc.wait()
            s.status, s.failure = "ERROR", "Your notebook exceeded the allowed session time"
        elif code is not None:
            s.status = "CANCEL_ACKNOWLEDGED" if s.cancelled else ("COMPLETE" if code == 0 else "ERROR")
            s.failure = "" if code == 0 else f"Your notebook hit an unhandled error (exit {code})"
        if s.status not in ("RUNNING", "CANCEL_REQUESTED"):
            s.ended = time.time()
            self.used_s += s.ended - s.started

    def _session(self, body: dict) -> Session | None:
        s = self.sessions.get(f"{body.get('userName')}/{body.get('kernelSlug')}")
        if s is not None:
            self._advance(s)
        return s

    def _m_GetKernelSessionStatus(self, body: dict) -> tuple[int, Any]:
        s = self._session(body)
        if s is None:
            return 404, "kernel not found"
        return 200, {"status": s.status, "failureMessage": s.failure}

    def _m_ListKernelSessionOutput(self, body: dict) -> tuple[int, Any]:
        s = self._session(body)
        if s is None:
            return 404, "kernel not found"
        text = s.stdout.read_text(errors="replace") if s.stdout.exists() else ""
        log = json.dumps([{"stream_name": "stdout", "time": 0.0, "data": line + "\n"}
                          for line in text.splitlines()])
        files = []
        if s.status not in ("QUEUED", "RUNNING"):  # Kaggle lists output once the session ended
            for p in sorted(s.working.rglob("*")):
                if p.is_file() and not p.is_symlink():
                    rel = p.relative_to(s.working).as_posix()
                    files.append({"fileName": rel, "url": f"{self.base}/output/{s.kernel}/{rel}"})
        return 200, {"files": files, "log": log}

    def _m_CancelKernelSession(self, body: dict) -> tuple[int, Any]:
        ref = self.kernel_ids.get(int(body.get("kernelSessionId") or 0))
        s = self.sessions.get(ref or "")
        if s is None:
            return 404, "no such session"
        s.cancelled = True
        if s.proc and s.proc.poll() is None:
            _kill_session(s.proc.pid, 9)  # Kaggle stops the whole machine
        s.status = "CANCEL_REQUESTED"
        return 200, {}
