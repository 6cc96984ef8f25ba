"""Secrets live in a real keychain, reach only the job's environment, and never a log or the store."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import urllib.parse
import uuid
from pathlib import Path

import pytest

from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state

SECRET = "tok-3xAmPle/VALUE+with=chars"

PRINTER = (
    "import base64, os, urllib.parse\n"
    "v = os.environ['MY_TOKEN']\n"
    "print('raw', v)\n"
    "print('b64', base64.b64encode(v.encode()).decode())\n"
    "print('url', urllib.parse.quote(v, safe=''))\n"
    "import sys; print('err', v, file=sys.stderr)\n"
    "import gpu; (gpu.output_dir() / 'note.txt').write_text('wrote without the secret')\n"
)


def _forms(value: str) -> list[bytes]:
    return [value.encode(), base64.b64encode(value.encode()),
            urllib.parse.quote(value, safe="").encode()]


def _all_bytes(*roots: Path) -> list[tuple[Path, bytes]]:
    out = []
    for root in roots:
        for p in root.rglob("*"):
            if p.is_file() and not p.is_symlink():
                out.append((p, p.read_bytes()))
    return out


@pytest.mark.slow
def test_a_job_reads_its_secret_and_nothing_keeps_it(keychain, home: Path, tmp_path: Path) -> None:
    proc = run_gpu("secrets", "set", "MY_TOKEN", input=SECRET + "\n")
    assert proc.returncode == 0, proc.stderr
    assert gpu_json("secrets", "list")["secrets"] == ["MY_TOKEN"]
    assert SECRET not in run_gpu("secrets", "list").stdout

    project = make_git_project(tmp_path / "p", {"show.py": PRINTER})
    sub = gpu_json("submit", "show.py", "--secret", "MY_TOKEN", "--hours", "0.1", "--wait-s", "0",
                   cwd=project)
    assert sub["job"]["state"] == "awaiting_approval"
    assert "reads MY_TOKEN from your keychain" in sub["guidance"]["tell_user"]
    from core.engine.approvals import approve
    from core.jobs.store import Store

    approve(Store(), sub["job"]["id"], digest=sub["job"]["digest"], actor="test")
    doc = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=60)
    assert doc["state"] == "done", run_gpu("logs", sub["job"]["short_id"]).stdout

    shown = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert "raw [secret]" in shown and "b64 [secret]" in shown and "url [secret]" in shown
    assert "err [secret]" in shown
    status = run_gpu("status", sub["job"]["short_id"], "--json", "--verbose").stdout
    for form in _forms(SECRET):
        assert form.decode() not in shown and form.decode() not in status
    # nothing on disk: the store (and its WAL), the job folder, runs/, job.json
    Store().conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for path, data in _all_bytes(home, project / "runs"):
        for form in _forms(SECRET):
            assert form not in data, f"{path} holds the secret"
    assert (project / "runs" / sub["job"]["short_id"] / "job.json").exists()


def test_a_missing_secret_is_refused_at_submit_before_any_approval(keychain, home: Path,
                                                                     tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"show.py": PRINTER})
    proc = run_gpu("submit", "show.py", "--secret", "NOT_SET", "--hours", "0.1", "--wait-s", "0",
                   "--json", cwd=project)
    assert proc.returncode == 2
    assert "secret NOT_SET is not in the keychain" in proc.stderr and "gpu secrets set NOT_SET" in proc.stderr
    assert gpu_json("jobs")["jobs"] == []  # nothing is held for a person to approve


def test_a_secret_removed_after_submit_fails_the_job_with_the_fix(keychain, home: Path,
                                                                 tmp_path: Path) -> None:
    from core.engine.approvals import approve
    from core.jobs.store import Store

    assert run_gpu("secrets", "set", "GONE_TOKEN", input="v-" + uuid.uuid4().hex).returncode == 0
    project = make_git_project(tmp_path / "p", {"show.py": PRINTER})
    sub = gpu_json("submit", "show.py", "--secret", "GONE_TOKEN", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert run_gpu("secrets", "rm", "GONE_TOKEN").returncode == 0
    approve(Store(), sub["job"]["id"], digest=sub["job"]["digest"], actor="test")
    doc = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=60)
    assert doc["state"] == "failed" and "gpu secrets set GONE_TOKEN" in doc["reason"]


def test_a_secret_with_no_keychain_at_all_is_refused_at_submit(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"show.py": PRINTER})
    env = {**os.environ, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    proc = run_gpu("submit", "show.py", "--secret", "ANY_TOKEN", "--hours", "0.1", "--wait-s", "0",
                   cwd=project, env=env)
    assert proc.returncode == 2 and "no native keychain is available" in proc.stderr


def test_without_a_keychain_the_message_says_how_to_get_one(home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    env["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=/nonexistent/bus"
    for backend in (None, "keyring.backends.null.Keyring", "keyring.backends.fail.Keyring"):
        e = dict(env)
        if backend:
            e["PYTHON_KEYRING_BACKEND"] = backend
        import subprocess
        from tests.conftest import gpu_exe

        proc = subprocess.run([gpu_exe(), "secrets", "set", "X_TOKEN"], input="v\n", text=True,
                              capture_output=True, env=e, timeout=60)
        assert proc.returncode == 2, (backend, proc.stderr)
        assert "no native keychain is available" in proc.stderr, (backend, proc.stderr)
        assert "dbus-run-session" in proc.stderr and "gnome-keyring-daemon" in proc.stderr


@pytest.mark.parametrize("entry", [
    # a short word passes under a key's or a token's name (a placeholder, not a key), never under
    # a password's: what a weak password is
    "WANDB_API_KEY=abc123def", "HF_TOKEN=abc123def", "DB_PASSWORD=x", "MY_SECRET=s3cr3t-v",
    "AUTH=x9y8z7w", "AWS_CREDENTIALS=ak1:sk2", "api_key=k3y-v4l", "SERVICE_PASSWD=x",
    "X=AKIAIOSFODNN7EXAMPLE", "X=ghp_abcdefghijklmnopqrstuvwxyz0123", "X=github_pat_11ABCDEFG0123456789abcdef",
    "X=hf_abcdefghijklmnopqrstuvwxyz", "X=sk-abcdefghijklmnop1234", "X=sk-ant-api03-abcdefghijklmnop",
    "X=-----BEGIN OPENSSH PRIVATE KEY-----", "X=postgres://user:pw@db.internal/prod",
    "X=Zx8Kq2LmN4pR7sT1vW3yA5bC6dE9fG0h", "X=0123456789abcdef0123456789abcdef01234567",
    "apiKey=k3y-v4l", "MY_AUTH_HEADER=Basic dXNlcjpwYXNz",
    "X=glpat-abcdefghijklmnopqrstu", "X=xoxb-1234567890-abcdef", "X=sk_live_abcdefghijkl",
])
def test_secret_looking_env_is_refused(entry: str, home: Path, tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "a.py").write_text("print(1)\n")
    proc = run_gpu("submit", "a.py", "--env", entry, "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert proc.returncode == 2, entry
    assert "looks like" in proc.stderr and "gpu secrets set" in proc.stderr
    assert "secrets:" in proc.stderr
    value = entry.split("=", 1)[1]
    if len(value) > 6:
        assert value not in proc.stderr  # the refusal does not print the secret either


def test_ordinary_env_passes(home: Path, tmp_path: Path) -> None:
    from core.secrets.scan import env_problem

    ordinary = {"WANDB_MODE": "offline", "OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "0,1",
                "TOKENIZERS_PARALLELISM": "false", "PUBLIC_URL": "https://example.com/k.pub",
                "HF_HOME": "/data/hf", "RUN_NAME": "exp_2024_11_29_lr3e-4_bs32_warmup1000",
                "MODEL": "meta-llama/Llama-3.1-8B-Instruct", "URL": "https://example.com/a/b",
                "KEYBOARD": "us", "AUTHOR": "ada", "LR": "3e-4", "SEED": "1234567890",
                "PUBLIC_KEY_URL": "https://example.com/k.pub",  # a URL without credentials
                "MAX_NEW_TOKENS": "256", "AUTH_MODE": "none", "PASS_AT_K": "10",
                "GIT_COMMIT": "0123456789abcdef0123456789abcdef01234567"}
    for name, value in ordinary.items():
        assert env_problem(name, value) is None, (name, value)
    project = tmp_path / "p"
    project.mkdir()
    (project / "a.py").write_text("print(1)\n")
    proc = run_gpu("plan", "a.py", "--hours", "0.1", *[f"--env={k}={v}" for k, v in ordinary.items()],
                   cwd=project)
    assert proc.returncode == 0, proc.stderr


def test_the_store_schema_has_no_place_for_values(home: Path) -> None:
    from core.jobs.store import Store

    Store()
    con = sqlite3.connect(home / "store.sqlite3")
    cols = {r[1] for t in ("jobs", "events", "metrics", "usage") for r in con.execute(f"PRAGMA table_info({t})")}
    assert not any("secret" in c or "password" in c for c in cols)


LEAKS = r'''
import base64, os, sys, time, urllib.parse
import gpu
v = os.environ["MY_TOKEN"]
b = v.encode()
print("raw", v)
print("basic Authorization: Basic", base64.b64encode(b"ada:" + b).decode())
print("b64url", base64.urlsafe_b64encode(b).decode().rstrip("="))
print("url", urllib.parse.quote(v, safe="/").replace("%2B", "%2b"))
print("hex", b.hex(), b.hex().upper())
print("bidi", v[:5] + "\u202e" + v[5:], "esc", v[:3] + "\x1b[0m" + v[3:], "nul", v[:9] + "\x00" + v[9:])
sys.stdout.write("split " + v[:7]); sys.stdout.flush(); time.sleep(1)
sys.stdout.write(v[7:] + " joined\n"); sys.stdout.flush()
print("err", v, file=sys.stderr)
gpu.log(step=1, loss=0.5, **{"k_" + b.hex(): 1.0, "k_" + base64.urlsafe_b64encode(b).decode().rstrip("="): 2.0})
(gpu.output_dir() / "note.txt").write_text("wrote without the secret")
import openscience_track as ost
ost.config(url="https://ada:" + v + "@host/x", lr=0.1, **{"k_" + b.hex(): 1})
ost.summary(best=0.9, **{"s_" + base64.b64encode(b).decode().rstrip("="): 2.0})
'''


def _spellings(value: str) -> list[bytes]:
    b = value.encode()
    forms = [value, b.hex(), b.hex().upper(), base64.b64encode(b).decode(),
             base64.urlsafe_b64encode(b).decode().rstrip("="), urllib.parse.quote(value, safe=""),
             urllib.parse.quote(value, safe="/").replace("%2B", "%2b"),
             base64.b64encode(b"ada:" + b).decode()[8:-4]]
    return [f.encode() for f in forms]


async def _dashboard_text() -> str:
    """Everything the dashboard draws for the job: its row, log tail, charts and detail screen."""
    from tui.dash.app import DashApp
    from tui.dash.widgets import LogTail

    app = DashApp(live=False, bell=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.5)
        text = app.export_screenshot() + "\n".join(app.query_one(LogTail).lines)
        await pilot.press("enter")
        await pilot.pause(0.5)
        text += app.export_screenshot()
    return text


@pytest.mark.slow
def test_no_form_of_a_keychain_secret_is_stored_or_shown(keychain, home: Path, tmp_path: Path) -> None:
    """A real job on the local target, a real keychain secret, pip printing it (a requirements
    line with ${MY_TOKEN}), the job printing it in every spelling, with control codes inside and
    split over two writes, and naming a metric after it: nothing kept or shown holds it."""
    import asyncio
    import html

    assert run_gpu("secrets", "set", "MY_TOKEN", input=SECRET + "\n").returncode == 0
    project = make_git_project(tmp_path / "p", {
        "leak.py": LEAKS,
        "requirements.txt": "--index-url http://127.0.0.1:9/${MY_TOKEN}/simple\npytest\n"})
    sub = gpu_json("submit", "leak.py", "--secret", "MY_TOKEN", "--hours", "0.1", "--wait-s", "0",
                   cwd=project)
    from core.engine.approvals import approve
    from core.jobs.store import Store

    approve(Store(), sub["job"]["id"], digest=sub["job"]["digest"], actor="test")
    short = sub["job"]["short_id"]
    doc = wait_state(short, {"done", "failed"}, timeout=120)
    logs = run_gpu("logs", short).stdout
    assert doc["state"] == "done", logs
    assert "Looking in indexes: http://127.0.0.1:9/[secret]/simple" in logs  # pip's line, masked
    assert "split [secret] joined" in logs and "[gpu] a metric was dropped" in logs
    assert "[gpu] a config value was dropped" in logs  # openscience_track's config and summary
    tracked = gpu_json("status", short)
    assert tracked["config"] == {"lr": 0.1} and tracked["final"] == {"best": 0.9}
    shown = [logs, run_gpu("status", short, "--json", "--verbose").stdout, run_gpu("status", short).stdout,
             run_gpu("metrics", short).stdout, run_gpu("metrics", short, "--json").stdout,
             run_gpu("jobs", "--json").stdout, html.unescape(asyncio.run(_dashboard_text()))]
    assert "loss" in shown[4] and "split [secret] joined" in shown[-1]  # the dashboard's log tail
    from core.runtime.textsafe import printable

    for text in shown:
        flat = printable(text).replace("\n", "").encode()
        for form in _spellings(SECRET):
            assert form not in text.encode() and form not in flat, (form, text[:2000])
    Store().conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    files = _all_bytes(home, project / "runs")
    assert any(p.name == "metrics.jsonl" for p, _ in files) and any(p.name == "job.json" for p, _ in files)
    for path, data in files:
        for form in _spellings(SECRET):
            assert form not in data, f"{path} holds the secret"


def test_secrets_list_without_a_keychain_is_an_error_with_the_fix(home: Path) -> None:
    env = {**os.environ, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    proc = run_gpu("secrets", "list", env=env)
    assert proc.returncode == 2
    assert "no native keychain is available" in proc.stderr and "gnome-keyring-daemon" in proc.stderr


NAMER = (
    "import base64, json, os, gpu\n"
    "v = os.environ['MY_TOKEN']\n"
    "out, ckpt = gpu.output_dir(), gpu.checkpoint_dir()\n"
    "(out / ('cache_' + v.replace('/', '_') + '.json')).write_text('{\"hit\": 1}')\n"
    "(out / ('key-' + v.encode().hex())).mkdir()\n"
    "(out / ('key-' + v.encode().hex()) / 'data.bin').write_bytes(b'payload')\n"
    "(out / 'plain.txt').write_text('ok')\n"
    "(ckpt / ('tok_' + base64.urlsafe_b64encode(v.encode()).decode().rstrip('=') + '.pt')).write_bytes(b'w' * 64)\n"
    "(ckpt / 'step.json').write_text(json.dumps({'step': 3}))\n"
    "print('saved', gpu.checkpoint_saved())\n"
)


@pytest.mark.slow
def test_a_job_that_names_files_after_its_secret_brings_them_home_masked(keychain, home: Path,
                                                                       tmp_path: Path) -> None:
    """A real sandboxed job on the local target reads its keychain secret and names an output
    after it (the value, its hex in a folder name) and a checkpoint file after its base64; it
    marks the save. runs/<id>/ (outputs, the kept checkpoint, job.json) holds the files with
    their bytes under masked names, and no name or byte at home outside the local target's
    own job folder holds a form of the value."""
    value = "ghp_" + uuid.uuid4().hex[:20]  # a token whose name forms are plain file names
    assert run_gpu("secrets", "set", "MY_TOKEN", input=value + "\n").returncode == 0
    project = make_git_project(tmp_path / "p", {"namer.py": NAMER})
    sub = gpu_json("submit", "namer.py", "--secret", "MY_TOKEN", "--hours", "0.1", "--wait-s", "0",
                   cwd=project)
    from core.engine.approvals import approve
    from core.jobs.store import Store

    approve(Store(), sub["job"]["id"], digest=sub["job"]["digest"], actor="test")
    short = sub["job"]["short_id"]
    doc = wait_state(short, {"done", "failed"}, timeout=120)
    assert doc["state"] == "done", run_gpu("logs", short).stdout
    runs = project / "runs" / short
    names = sorted(p.relative_to(runs).as_posix() for p in runs.rglob("*"))
    assert (runs / "cache_[secret].json").read_text() == '{"hit": 1}', names
    assert (runs / "key-[secret]" / "data.bin").read_bytes() == b"payload", names
    assert (runs / "plain.txt").read_text() == "ok"
    assert (runs / "checkpoint" / "tok_[secret].pt").read_bytes() == b"w" * 64, names
    marker = json.loads((runs / "checkpoint" / ".complete").read_text())
    assert sorted(marker["files"]) == ["step.json", "tok_[secret].pt"]
    forms = _spellings(value) + [base64.urlsafe_b64encode(value.encode()).rstrip(b"="),
                                 value.encode().hex().encode()]
    local_job = home / "jobs" / sub["job"]["id"]
    Store().conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for root in (home, project / "runs"):
        for path in root.rglob("*"):
            if path == local_job or local_job in path.parents:
                continue  # the local target's job folder: the job's own files, as it wrote them
            rel = path.relative_to(root).as_posix().encode()
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
            for form in forms:
                assert form not in rel and form not in data, (path, form)


@pytest.mark.parametrize("name", ["HF_TOKEN", "_x", "a1", "1A", "A-B", "A B", "A\n", "", "Ä", "x.y"])
def test_a_secret_is_named_by_the_same_rule_as_a_job_env_entry(name: str) -> None:
    """The secret store (a floor below the config) keeps its own copy of the env-name rule; the
    two never disagree, or a stored secret could not reach its job's environment."""
    from core.config.schema import ENV_NAME_RE
    from core.secrets.store import NAME_RE

    assert bool(NAME_RE.match(name)) == bool(ENV_NAME_RE.match(name))
