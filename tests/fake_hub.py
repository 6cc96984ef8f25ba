"""A loopback Hugging Face Hub: the part of its HTTP API that `huggingface_hub` calls to pin a
dataset revision and download its files, answered the way huggingface.co answers.

The real client talks to it through `HF_ENDPOINT=http://127.0.0.1:PORT`. It serves:

- `GET /api/datasets/{repo}[/revision/{rev}]`: the dataset info (`sha`, `siblings`, `private`);
- `GET /api/datasets/{repo}/tree/{rev}[/{path}]?recursive=`: the file listing, with `lfs` entries;
- `HEAD|GET /datasets/{repo}/resolve/{rev}/{file}`: `X-Repo-Commit`, `ETag` (the git blob id)
  and `Content-Length`; a large ("LFS") file answers 302 to a second server standing in for the
  CDN, with `X-Linked-Etag` (its sha256) and `X-Linked-Size`, as the Hub does.

Errors carry the Hub's `X-Error-Code`: an unknown or private repo is 401 `RepoNotFound` without a
token (404 with one), an unknown revision 404 `RevisionNotFound`, a file 404 `EntryNotFound`, a
wrong token 401 "Invalid credentials in Authorization header". Every request is recorded (method,
path, the token it carried) so a test can say what was asked and what was downloaded.
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Seen:
    server: str  # "hub" or "cdn"
    method: str
    path: str  # unquoted, without the query
    query: dict
    token: str | None  # what `Authorization: Bearer ...` carried


@dataclass
class Repo:
    private: bool = False
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit sha
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> path -> bytes


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    LFS_FROM = 1024  # files this large are "LFS": served from the CDN by a redirect

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.seen: list[Seen] = []
        self.token: str | None = None  # the one token this hub accepts
        self.stall: set[str] = set()  # file paths whose body stops halfway until `release`
        self.stalled = threading.Event()  # set once a stalled body has started
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.cdn = _serve(self, "cdn")
        self.hub = _serve(self, "hub")
        self.url = f"http://127.0.0.1:{self.hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn.server_address[1]}"

    # -- what the hub holds -----------------------------------------------------------------

    def commit(self, repo_id: str, files: dict[str, bytes], *, ref: str = "main",
               private: bool = False) -> str:
        """A new commit of `repo_id` holding exactly `files`, which `ref` now points at."""
        repo = self.repos.setdefault(repo_id, Repo(private=private))
        repo.private = private
        sha = hashlib.sha1(json.dumps([repo_id, len(repo.commits), sorted(
            (p, git_blob_id(b)) for p, b in files.items())]).encode()).hexdigest()
        repo.commits[sha] = dict(files)
        repo.refs[ref] = sha
        return sha

    # -- what was asked ---------------------------------------------------------------------

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    def downloads(self) -> list[str]:
        """Paths of the file bodies sent (GET of a resolve URL answered 200, or of the CDN)."""
        return [s.path for s in self.requests() if s.method == "GET"
                and (s.server == "cdn" or "/resolve/" in s.path)]

    def forget(self) -> None:
        with self._lock:
            self.seen.clear()

    def close(self) -> None:
        self.release.set()
        for server in (self.hub, self.cdn):
            server.shutdown()
            server.server_close()


def _serve(hub: FakeHub, role: str) -> ThreadingHTTPServer:
    class Handler(_Handler):
        pass

    Handler.hub, Handler.role = hub, role
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name=f"fake-{role}").start()
    return server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub
    role: str

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet
        pass

    def do_HEAD(self) -> None:  # noqa: N802
        self._route(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._route(body=True)

    # -- routing ----------------------------------------------------------------------------

    def _route(self, body: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        auth = self.headers.get("Authorization") or ""
        token = auth[7:] if auth.lower().startswith("bearer ") else (auth or None)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.hub.record(Seen(self.role, self.command, path, query, token))
        if self.role == "cdn":
            return self._cdn(path, body, token)
        if token is not None and token != self.hub.token:
            return self._error(401, message="Invalid credentials in Authorization header")
        parts = url.path.split("/")  # still quoted: a revision may hold %2F
        if url.path.startswith("/api/datasets/"):
            repo_id = "/".join(urllib.parse.unquote(p) for p in parts[3:5])
            rest = parts[5:]
            repo = self._repo(repo_id, token)
            if repo is None:
                return
            if not rest:
                return self._info(repo_id, repo, "main")
            if rest[0] == "revision" and len(rest) == 2:
                return self._info(repo_id, repo, urllib.parse.unquote(rest[1]))
            if rest[0] == "tree" and len(rest) >= 2:
                sub = "/".join(urllib.parse.unquote(p) for p in rest[2:])
                return self._tree(repo, urllib.parse.unquote(rest[1]), sub,
                                  query.get("recursive", "").lower() == "true")
        if url.path.startswith("/datasets/") and len(parts) >= 7 and parts[4] == "resolve":
            repo_id = "/".join(urllib.parse.unquote(p) for p in parts[2:4])
            repo = self._repo(repo_id, token)
            if repo is None:
                return
            filename = "/".join(urllib.parse.unquote(p) for p in parts[6:])
            return self._resolve(repo, urllib.parse.unquote(parts[5]), filename, body)
        self._error(404, message="Not Found")

    def _repo(self, repo_id: str, token: str | None) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None or (repo.private and token is None):
            # the Hub does not say whether a repo exists to someone who may not see it
            self._error(404 if token else 401, code="RepoNotFound", message="Repository not found")
            return None
        return repo

    def _commit(self, repo: Repo, revision: str) -> str | None:
        sha = repo.refs.get(revision, revision)
        if sha not in repo.commits:
            self._error(404, code="RevisionNotFound", message=f"Invalid rev id: {revision}")
            return None
        return sha

    # -- answers ----------------------------------------------------------------------------

    def _info(self, repo_id: str, repo: Repo, revision: str) -> None:
        sha = self._commit(repo, revision)
        if sha is None:
            return
        files = repo.commits[sha]
        self._json({"_id": hashlib.md5(repo_id.encode()).hexdigest()[:24], "id": repo_id,
                    "author": repo_id.split("/")[0], "sha": sha, "private": repo.private,
                    "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                    "lastModified": "2025-01-01T00:00:00.000Z",
                    "createdAt": "2025-01-01T00:00:00.000Z",
                    "siblings": [{"rfilename": p} for p in sorted(files)],
                    "usedStorage": sum(len(b) for b in files.values())})

    def _tree(self, repo: Repo, revision: str, sub: str, recursive: bool) -> None:
        sha = self._commit(repo, revision)
        if sha is None:
            return
        prefix = f"{sub.strip('/')}/" if sub.strip("/") else ""
        entries: dict[str, dict] = {}
        for path, data in sorted(repo.commits[sha].items()):
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix):].split("/")
            folders = rel[:-1] if recursive else rel[:1] if len(rel) > 1 else []
            for i in range(len(folders)):
                d = prefix + "/".join(rel[:i + 1])
                entries.setdefault(d, {"type": "directory", "oid": git_blob_id(d.encode()),
                                       "size": 0, "path": d})
            if len(rel) > 1 and not recursive:
                continue
            entry = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path}
            if len(data) >= FakeHub.LFS_FROM:
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                "pointerSize": 134}
            entries[path] = entry
        self._json(list(entries.values()))

    def _resolve(self, repo: Repo, revision: str, filename: str, body: bool) -> None:
        sha = self._commit(repo, revision)
        if sha is None:
            return
        data = repo.commits[sha].get(filename)
        if data is None:
            return self._error(404, code="EntryNotFound", message=f"{filename} does not exist",
                               extra={"X-Repo-Commit": sha})
        if len(data) >= FakeHub.LFS_FROM:
            digest = hashlib.sha256(data).hexdigest()
            self.send_response(302)
            self.send_header("Location", f"{self.hub.cdn_url}/blobs/{digest}")
            self.send_header("X-Repo-Commit", sha)
            self.send_header("X-Linked-Etag", f'"{digest}"')
            self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("ETag", f'"{git_blob_id(data)}"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._file(data, {"X-Repo-Commit": sha, "ETag": f'"{git_blob_id(data)}"'}, body,
                   stall=filename in self.hub.stall)

    def _cdn(self, path: str, body: bool, token: str | None) -> None:
        digest = path.rsplit("/", 1)[-1]
        for repo in self.hub.repos.values():
            for files in repo.commits.values():
                for name, data in files.items():
                    if hashlib.sha256(data).hexdigest() == digest:
                        return self._file(data, {"ETag": f'"{digest}"'}, body,
                                          stall=name in self.hub.stall)
        self._error(404, message="NoSuchKey")

    def _file(self, data: bytes, headers: dict[str, str], body: bool, stall: bool = False) -> None:
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not body:
            return
        if stall:  # half the body, then silence: a download cut off in the middle
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            self.hub.stalled.set()
            self.hub.release.wait(60)
            self.close_connection = True
            return
        self.wfile.write(data)

    def _json(self, doc: object) -> None:
        raw = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)

    def _error(self, status: int, *, message: str, code: str | None = None,
               extra: dict[str, str] | None = None) -> None:
        raw = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)
