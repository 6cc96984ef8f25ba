"""Notifications to the person (`notify:` apprise URLs), against a loopback webhook.

apprise's `json://127.0.0.1:PORT/PATH` posts {title, message, type} to a small HTTP server this
file starts: the real apprise client, unpatched, talking to a real socket. What a person who
stepped away reads: a held agent job arrives once, with the exact approve line and the price and
never the job's secret; a job's end arrives once, also after the supervisor restarts; a dead URL
is one line in `gpu daemon --status` and never a failed job.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.errors import UserError
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state, write_user_config

SECRET = "tok-N0tify/VALUE+with=chars"
QUICK = "print('ran', flush=True)\n"
PRINTER = (
    "import os, sys\n"
    "v = os.environ.get('MY_TOKEN', '')\n"
    "print('token', v, flush=True)\n"
)


class Webhook:
    """An HTTP server on 127.0.0.1 that keeps every JSON body posted to it, in order."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self._cond = threading.Condition()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with hook._cond:
                    hook.messages.append({"path": self.path, **json.loads(body)})
                    hook._cond.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def url(self, path: str = "hook") -> str:
        return f"json://127.0.0.1:{self.port}/{path}"

    def wait_count(self, n: int, timeout: float = 60) -> list[dict]:
        """The messages once there are at least `n` (fails with what came, after `timeout`)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.messages) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{n} messages did not arrive in {timeout}s: {self.messages}")
                self._cond.wait(left)
            return list(self.messages)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.close()


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _forms(value: str) -> list[str]:
    return [value, base64.b64encode(value.encode()).decode(), urllib.parse.quote(value, safe="")]


def _text(message: dict) -> str:
    return f"{message.get('title', '')}\n{message.get('message', '')}"


@pytest.mark.slow
def test_a_held_agent_job_and_its_end_arrive_once_without_its_secret(keychain, home: Path, tmp_path: Path,
                                                                     webhook: Webhook) -> None:
    assert run_gpu("secrets", "set", "MY_TOKEN", input=SECRET + "\n").returncode == 0
    write_user_config("targets:\n  metered: {kind: local, price_per_hour: 2.0}\n"
                      "  local: {kind: local, enabled: false}\n"
                      f"notify:\n  - {webhook.url()}\n")
    project = make_git_project(tmp_path / "p", {"show.py": PRINTER, "a.py": QUICK})
    # an agent (--json) pastes the secret's value into the arguments too: after a flag named
    # like a secret's it is refused outright; after another, the message masks it
    refused = run_gpu("submit", "show.py", "--secret", "MY_TOKEN", "--hours", "0.5", "--wait-s", "0",
                      "--json", "--", "--token", SECRET, cwd=project)
    assert refused.returncode == 2 and "secrets may not be passed in args" in refused.stdout
    assert SECRET not in refused.stdout + refused.stderr
    sub = gpu_json("submit", "show.py", "--secret", "MY_TOKEN", "--hours", "0.5", "--wait-s", "0",
                   "--", "--label", SECRET, cwd=project)
    job = sub["job"]
    assert job["state"] == "awaiting_approval", sub
    short = job["short_id"]

    held = webhook.wait_count(1)[0]  # the submit started a supervisor to tell the person
    text = _text(held)
    assert short in held["title"] and "waits for your approval" in held["title"]
    assert f"gpu approve {short}" in text.splitlines()[-2]  # the exact line, on its own
    assert "$1.00" in text and "$2.00/hour" in text  # 0.5 h at $2.00 an hour
    assert "MY_TOKEN" in text  # what it reads is said; its value is not
    # the command (with the pasted value) is the job's words: never beside the approve line
    # (tests/engine/test_job_text.py); the message says where to see it
    assert f"gpu status {short}" in text and "--label" not in text
    for form in _forms(SECRET):
        assert form not in text
    assert str(home) not in text and str(project) not in text and str(tmp_path) not in text

    from core.engine.approvals import approve
    from core.jobs.store import Store

    approve(Store(), job["id"], digest=job["digest"], actor="test")
    assert wait_state(short, {"done", "failed"}, timeout=90)["state"] == "done"
    ended = webhook.wait_count(2)[1]
    assert short in ended["title"] and "is done" in ended["title"] and ended["type"] == "success"
    assert "exited with status 0" in ended["message"] and f"gpu logs {short}" in ended["message"]

    # a restarted supervisor sends neither again: it goes on from what was claimed. Each URL's
    # messages go in event order, so once a later job's end arrives, a repeat would have too.
    stopped = gpu_json("daemon", "--stop")
    assert stopped["stopped"] is True
    deadline = time.monotonic() + 30
    while gpu_json("daemon", "--status")["running"]:
        assert time.monotonic() < deadline, "the supervisor did not stop"
        time.sleep(0.2)
    second = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
    assert second["state"] != "awaiting_approval", second
    assert wait_state(second["short_id"], {"done", "failed"}, timeout=90)["state"] == "done"
    messages = webhook.wait_count(3)
    assert second["short_id"] in messages[2]["title"] and "is done" in messages[2]["title"]
    assert len(messages) == 3, [m["title"] for m in messages]
    for m in messages:
        for form in _forms(SECRET):
            assert form not in _text(m), m
    assert all(m["path"] == "/hook" for m in messages)


@pytest.mark.slow
def test_a_dead_url_is_one_status_line_and_the_job_still_ends_done(home: Path, tmp_path: Path,
                                                                     webhook: Webhook) -> None:
    dead = f"json://127.0.0.1:{closed_port()}/gone"
    write_user_config(f"notify:\n  - {dead}\n  - url: {webhook.url()}\n    events: [done, failed]\n")
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    job = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
    assert wait_state(job["short_id"], {"done", "failed"}, timeout=90)["state"] == "done"
    assert "is done" in webhook.wait_count(1)[0]["title"]

    deadline = time.monotonic() + 60  # the dead URL is tried 3 times, 1 s and 4 s apart
    while True:
        doc = gpu_json("daemon", "--status")
        if doc["notify"]["failing"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert doc["notify"]["urls"] == 2
    failing = doc["notify"]["failing"]
    assert [f["url"] for f in failing] == [dead], failing
    assert failing[0]["missed"] == 1 and failing[0]["job"] == job["short_id"]
    assert "127.0.0.1" in failing[0]["error"]
    lines = [ln for ln in run_gpu("daemon", "--status").stdout.splitlines() if ln.startswith("notify:")]
    assert len(lines) == 1 and dead in lines[0] and "failing" in lines[0], lines
    assert gpu_json("status", job["short_id"])["state"] == "done"  # the job is untouched
    assert len(webhook.messages) == 1  # the live URL got its message once, the dead one cost it nothing


@pytest.mark.slow  # a dead URL is tried three times with apprise's real backoff (about 5 s)
def test_notify_test_reports_each_url(home: Path, webhook: Webhook) -> None:
    proc = run_gpu("notify", "test", "--json")
    assert proc.returncode == 2 and "no notify URLs" in proc.stderr and "notify:" in proc.stderr
    helped = run_gpu("notify", "test", "--help")
    assert helped.returncode == 0 and "--json" in helped.stdout and "test message" in helped.stdout

    token = "s3cretT0kenValue"
    dead = f"json://me:{token}@127.0.0.1:{closed_port()}/gone"
    write_user_config(f"notify:\n  - {webhook.url('ok')}\n  - {{url: '{dead}', events: [failed]}}\n")
    proc = run_gpu("notify", "test", "--json")
    assert proc.returncode == 1, proc.stderr
    sent = json.loads(proc.stdout)["sent"]
    assert [s["ok"] for s in sent] == [True, False]
    assert sent[0]["url"] == webhook.url("ok") and sent[0]["tries"] == 1
    assert sent[1]["tries"] == 3 and sent[1]["error"]
    assert token not in proc.stdout + proc.stderr  # a URL's password is never shown
    got = webhook.wait_count(1)
    assert len(got) == 1 and got[0]["path"] == "/ok" and "test" in got[0]["title"]

    write_user_config(f"notify:\n  - {webhook.url('ok')}\n")
    proc = run_gpu("notify", "test")
    assert proc.returncode == 0 and proc.stdout.startswith("sent") and webhook.url("ok") in proc.stdout


def test_the_config_names_a_bad_entry_by_place_never_by_its_url(home: Path) -> None:
    from core.config import user

    token = "xoxb-never-shown-123456"
    cases = [
        ("notify: json://127.0.0.1/x\n", "notify must be a list"),
        (f"notify:\n  - 'not a url {token}'\n", "notify[0].url is not an apprise URL"),
        (f"notify:\n  - url: slack://{token}\n    events: [done, exploded]\n", "notify[0].events must be"),
        (f"notify:\n  - ntfy://ntfy.sh/t\n  - {{url: slack://{token}, when: always}}\n",
         "notify[1] must be an apprise URL or {url, events}"),
    ]
    for text, words in cases:
        write_user_config(text)
        with pytest.raises(UserError) as err:
            user.load()
        assert words in err.value.message(), (text, err.value.message())
        assert token not in err.value.message()
    write_user_config("notify:\n  - ntfy://ntfy.sh/t\n  - {url: 'json://h/x', events: [failed, done]}\n")
    got = user.load().notify
    assert got[0].events == frozenset(user.NOTIFY_EVENTS)
    assert got[1].events == {"failed", "done"}


def test_each_move_counts_as_its_event_and_is_claimed_once(home: Path) -> None:
    """A real store: each kind of ending maps to its event, a kill rule's to stopped_by_rule,
    a denial to none; a second collect (a restarted supervisor's) finds nothing to send."""
    from core.config.user import NotifyURL
    from core.engine import notify
    from core.jobs.states import State
    from core.jobs.store import Store

    store = Store()
    notifier = notify.Notifier()
    notifier.configure([NotifyURL("json://127.0.0.1:1/x")])
    assert notifier.collect(store) == []  # the URL is added: it gets what happens from now on

    def job(n: int, *moves: tuple[State, str]) -> None:
        row = {"id": f"{n:032x}", "short_id": f"{n:08x}", "name": f"job{n}", "provider": "local",
               "project_dir": str(home / "p"), "outputs_dir": str(home / "p" / "runs" / f"{n:08x}"),
               "fingerprint": f"f{n}", "request": {}, "plan": {"target": "local"}}
        store.insert_job(row, reason="submitted", actor="test")
        for dst, reason in moves:
            store.transition(row["id"], dst, reason, actor="test")

    running = [(State.ROUTING, "placed"), (State.PROVISIONING, "starting"), (State.RUNNING, "runs")]
    job(1, *running, (State.DONE, "exited with status 0"))
    job(2, *running, (State.FAILED, f"exited with status 3: see {home}/jobs/x/log"))
    job(3, *running, (State.FAILED, "stopped by kill rule nan_metric: loss is NaN"))
    job(4, *running, (State.CANCELLED, "cancelled by cli"))
    job(5, (State.ROUTING, "placed"), (State.AWAITING_APPROVAL, "held"), (State.DENIED, "denied by me"))
    moves = notifier.collect(store)
    kinds = [(job.short_id, sorted(notify.kinds_of(e, job))) for e, job in moves]
    assert kinds == [("00000001", ["done"]), ("00000002", ["failed"]), ("00000003", ["stopped_by_rule"]),
                     ("00000004", ["cancelled"]), ("00000005", ["approval_wait"])]
    failed = notify.build(*moves[1])
    assert "failed" in failed.title and "[gpu-router home]/jobs/x/log" in failed.body
    assert str(home) not in failed.body
    assert notify.Notifier(urls=[NotifyURL("json://127.0.0.1:1/x")]).collect(store) == []
