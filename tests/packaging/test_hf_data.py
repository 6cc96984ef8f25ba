"""hf://datasets/ data: pinned and downloaded on the submitting machine by the real
`huggingface_hub` client (talking to a loopback Hub, tests/fake_hub.py), cached by content,
shipped like any data set; the token comes from the keychain and goes nowhere else."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, gpu_exe, gpu_json, make_git_project, pty_session, run_gpu, wait_state
from tests.fake_hub import FakeHub
from tests.services import free_port

BIG = bytes(range(256)) * 20  # 5 KiB: an "LFS" file, sent by the CDN after a redirect
FILES = {"train/a.csv": b"x,y\n1,2\n3,4\n", "train/big.bin": BIG, "README.md": b"# tiny\n"}

READER = """\
import json, os, gpu
root = gpu.data_dir() / "tiny"
seen = {str(p.relative_to(root)): p.read_bytes().hex() for p in sorted(root.rglob("*")) if p.is_file()}
(gpu.output_dir() / "seen.json").write_text(json.dumps(seen))
(gpu.output_dir() / "env.json").write_text(json.dumps(sorted(os.environ.values())))
"""


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A loopback Hub for this test's `gpu` processes, and an HF_HOME of its own."""
    server = FakeHub()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    yield server
    server.close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_git_project(tmp_path / "p", {"read.py": READER})


def _plan(project: Path, *data: str, env: dict | None = None) -> subprocess.CompletedProcess:
    args = [a for d in data for a in ("--data", d)]
    return run_gpu("plan", "read.py", "--hours", "0.1", *args, "--json", cwd=project, env=env)


def _plan_ok(project: Path, *data: str, env: dict | None = None) -> dict:
    proc = _plan(project, *data, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["plan"]


def _cache(home: Path) -> Path:
    return home / "cache" / "hf"


def _hub_calls(hub: FakeHub) -> list[str]:
    """What the client asked the Hub for, leaving out its once-a-day telemetry lookup."""
    return [f"{s.method} {s.path}" for s in hub.requests() if s.path != "/api/agent-harnesses"]


@pytest.mark.slow
def test_the_job_reads_the_data_set_and_a_second_job_downloads_nothing(
        home: Path, hub: FakeHub, project: Path, tmp_path: Path) -> None:
    sha = hub.commit("acme/tiny", FILES)
    first = gpu_json("submit", "read.py", "--hours", "0.1", "--data", "hf://datasets/acme/tiny",
                     "--name", "one", "--wait-s", "0", cwd=project)
    # pinned at submit: the job names gpu-router's copy of that commit, the plan the commit
    assert sorted(hub.downloads()) == sorted(
        [f"/datasets/acme/tiny/resolve/{sha}/train/a.csv", f"/datasets/acme/tiny/resolve/{sha}/README.md",
         f"/blobs/{hashlib.sha256(BIG).hexdigest()}"])
    assert all(s.token is None for s in hub.requests()), "a token was sent for a public data set"
    done = wait_state(first["job"]["short_id"], {"done", "failed"}, timeout=60)
    assert done["state"] == "done", run_gpu("logs", first["job"]["short_id"]).stdout
    out = Path(first["job"]["outputs_dir"])
    seen = json.loads((out / "seen.json").read_text())
    assert {k: bytes.fromhex(v) for k, v in seen.items()} == FILES
    doc = json.loads((out / "job.json").read_text())["job"]
    assert doc["plan"]["data_sources"] == {"tiny": f"hf://datasets/acme/tiny@{sha}"}
    assert doc["request"]["data"] == [{"name": "tiny", "kind": "path",
                                       "origin": f"hf://datasets/acme/tiny@{sha}",
                                       "source": str(_cache(home) / "acme" / "tiny" / sha / "all")}]

    hub.forget()
    second = gpu_json("submit", "read.py", "--hours", "0.1", "--data", "hf://datasets/acme/tiny",
                      "--name", "two", "--wait-s", "0", cwd=project)
    assert hub.downloads() == []
    assert _hub_calls(hub) == ["GET /api/datasets/acme/tiny"]  # main's sha, nothing else
    assert second["job"]["digest"] == first["job"]["digest"]  # the same plan, data and all
    done = wait_state(second["job"]["short_id"], {"done", "failed"}, timeout=60)
    assert done["state"] == "done", run_gpu("logs", second["job"]["short_id"]).stdout
    again = json.loads((Path(second["job"]["outputs_dir"]) / "seen.json").read_text())
    assert again == seen
    plans = [json.loads((Path(j["job"]["outputs_dir"]) / "job.json").read_text())["job"]["plan"]
             for j in (first, second)]
    assert plans[0]["data"] == plans[1]["data"]  # one content hash: shipped once per target
    # the client's own cache under HF_HOME was never used
    assert not (tmp_path / "hf-home" / "hub").exists()


def test_a_pinned_commit_already_cached_asks_the_hub_nothing(home: Path, hub: FakeHub,
                                                             project: Path) -> None:
    sha = hub.commit("acme/tiny", FILES)
    uri = f"hf://datasets/acme/tiny@{sha}/train"
    plan = _plan_ok(project, uri)
    assert plan["data_sources"] == {"train": uri}
    assert len(hub.downloads()) == 2  # train/a.csv and train/big.bin only: the path limits it
    hub.forget()
    assert _plan_ok(project, uri)["digest"] == plan["digest"]
    assert hub.requests() == []
    # even with the Hub gone
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    assert _plan_ok(project, uri, env=env)["digest"] == plan["digest"]


def test_a_path_is_a_name_not_a_pattern(home: Path, hub: FakeHub, project: Path) -> None:
    """`sub [dir]` is that folder only: as a glob it would also match `sub d/`."""
    sha = hub.commit("acme/odd", {"sub [dir]/x.csv": b"1\n", "sub d/y.csv": b"2\n", "top.csv": b"3\n"})
    plan = _plan_ok(project, "rows=hf://datasets/acme/odd/sub [dir]")
    assert plan["data_sources"] == {"rows": f"hf://datasets/acme/odd@{sha}/sub [dir]"}
    assert hub.downloads() == [f"/datasets/acme/odd/resolve/{sha}/sub [dir]/x.csv"]


def test_a_branch_that_moved_is_pinned_again_and_binds_the_digest(home: Path, hub: FakeHub,
                                                                  project: Path) -> None:
    old = hub.commit("acme/tiny", FILES)
    before = _plan_ok(project, "hf://datasets/acme/tiny")
    new = hub.commit("acme/tiny", {**FILES, "train/a.csv": b"x,y\n5,6\n"})
    hub.forget()
    after = _plan_ok(project, "hf://datasets/acme/tiny")
    assert before["data_sources"]["tiny"].endswith(f"@{old}")
    assert after["data_sources"]["tiny"].endswith(f"@{new}")
    assert after["data"]["tiny"] != before["data"]["tiny"]
    assert after["digest"] != before["digest"]
    assert len(hub.downloads()) == 3
    # the old commit stays usable by its sha
    assert _plan_ok(project, f"hf://datasets/acme/tiny@{old}")["data"] == before["data"]


def _person(project: Path, *args: str) -> tuple[int, str]:
    """The installed `gpu` on a real pty with no agent marker: a person at a terminal."""
    status, out = pty_session([gpu_exe(), *args], lambda out: None, cwd=project,
                              env={**os.environ, "TERM": "xterm", "COLUMNS": "200"}, timeout=90)
    return status, out.decode(errors="replace")


def test_a_private_data_set_takes_the_keychain_token_and_nothing_keeps_it(
        keychain, home: Path, hub: FakeHub, project: Path, tmp_path: Path) -> None:
    token = "hf_" + os.urandom(16).hex()
    hub.token = token
    sha = hub.commit("acme/secret-set", {"tiny/a.csv": b"private,rows\n"}, private=True)
    uri = "hf://datasets/acme/secret-set/tiny"
    plan = ["plan", "read.py", "--hours", "0.1", "--data", uri]

    # no token stored: refused at submit, and the shell's own HF_TOKEN is not sent behind its back
    status, out = _person(project, *plan)
    assert status == 2, out
    assert "gpu secrets set HF_TOKEN" in out and uri in out and "Traceback" not in out
    assert [s.token for s in hub.requests() if s.server == "hub"][-1] is None

    # a token the Hub refuses is said to be the keychain's
    assert run_gpu("secrets", "set", "HF_TOKEN", input="hf_stale_token_0000\n").returncode == 0
    status, out = _person(project, *plan)
    assert status == 2 and "refused the HF_TOKEN from the keychain" in out, out

    assert run_gpu("secrets", "set", "HF_TOKEN", input=token + "\n").returncode == 0
    hub.forget()
    # an agent's submit never reads the keychain before a person says yes: refused, nothing sent
    proc = run_gpu("submit", "read.py", "--hours", "0.1", "--data", uri, "--json", cwd=project)
    assert proc.returncode == 2 and "needs a person" in proc.stdout and "gpu secrets set" in proc.stdout, proc.stdout
    assert {s.token for s in hub.requests() if s.server == "hub"} <= {None}
    assert gpu_json("jobs")["jobs"] == []
    # the person's own submit downloads it with the keychain's token, and only that token
    hub.forget()
    status, out = _person(project, "submit", "read.py", "--hours", "0.1", "--data", uri, "--wait-s", "0")
    assert status == 0, out
    asked = hub.requests()
    assert [s for s in asked if s.server == "hub" and s.path != "/api/agent-harnesses"]
    assert {s.token for s in asked if s.server == "hub" and s.path != "/api/agent-harnesses"} == {token}
    assert hub.downloads() == [f"/datasets/acme/secret-set/resolve/{sha}/tiny/a.csv"]
    (job,) = gpu_json("jobs")["jobs"]
    sub = {"job": job}
    # now cached: an agent's submit pinned to that commit needs neither the Hub nor the token
    hub.forget()
    pinned = gpu_json("plan", "read.py", "--hours", "0.1", "--data", f"hf://datasets/acme/secret-set@{sha}/tiny",
                      cwd=project)
    assert pinned["plan"]["data_sources"] and hub.requests() == []
    done = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=60)
    assert done["state"] == "done", run_gpu("logs", sub["job"]["short_id"]).stdout
    out = Path(sub["job"]["outputs_dir"])
    assert token not in json.loads((out / "env.json").read_text())  # the job never had it

    from core.jobs.store import Store

    Store().conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for root in (home, out, tmp_path / "hf-home"):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert token.encode() not in path.read_bytes(), f"{path} holds the token"
    for bundle in home.rglob("*.tar.gz"):  # any one-archive form made from the objects
        with tarfile.open(bundle) as tar:
            for member in tar.getmembers():
                f = tar.extractfile(member)
                assert f is None or token.encode() not in f.read(), f"{bundle}:{member.name}"
    assert token not in run_gpu("logs", sub["job"]["short_id"]).stdout
    assert token not in run_gpu("status", sub["job"]["short_id"], "--json", "--verbose").stdout


def test_a_download_cut_off_leaves_no_entry_and_the_next_submit_completes(
        home: Path, hub: FakeHub, project: Path) -> None:
    sha = hub.commit("acme/tiny", FILES)
    hub.stall = {"train/big.bin"}
    proc = subprocess.Popen([gpu_exe(), "plan", "read.py", "--hours", "0.1", "--data",
                             "hf://datasets/acme/tiny", "--json"], cwd=project,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert hub.stalled.wait(30), "the download never started"
        time.sleep(0.2)  # the other files of the commit land meanwhile
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    commit = _cache(home) / "acme" / "tiny" / sha
    assert not (commit / "all").exists()
    assert [p.name.startswith(".part-") for p in commit.iterdir()] == [True]

    hub.stall = set()
    hub.release.set()
    plan = _plan_ok(project, "hf://datasets/acme/tiny")
    assert (commit / "all" / "train" / "big.bin").read_bytes() == BIG
    assert sorted(p.name for p in commit.iterdir()) == ["all"]  # the dead one's part swept
    assert plan["data_sources"] == {"tiny": f"hf://datasets/acme/tiny@{sha}"}


@pytest.mark.parametrize("uri,says", [
    ("hf://datasets/acme/nope", ["has no public data set acme/nope", "gpu secrets set HF_TOKEN"]),
    ("hf://datasets/acme/tiny@v9", ["has no revision 'v9'", "branch, tag or commit sha"]),
    ("hf://datasets/acme/tiny/test", ["has no file or folder 'test'", "leave it out"]),
])
def test_what_the_hub_does_not_have_is_refused_at_submit(home: Path, hub: FakeHub, project: Path,
                                                         uri: str, says: list[str]) -> None:
    hub.commit("acme/tiny", FILES)
    proc = _plan(project, uri)
    assert proc.returncode == 2, proc.stderr
    for words in [uri, *says]:
        assert words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr) < 1200
    assert not list(_cache(home).glob("acme/*/*/*"))  # nothing that looks like an entry


def test_an_unreachable_hub_is_a_clear_error(home: Path, hub: FakeHub, project: Path) -> None:
    port = free_port()
    proc = _plan(project, "hf://datasets/acme/tiny", env={"HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert proc.returncode == 2, proc.stderr
    assert f"the Hub at http://127.0.0.1:{port} could not be reached" in proc.stderr
    assert "check the network" in proc.stderr and "Traceback" not in proc.stderr
    proc = _plan(project, "hf://datasets/acme/tiny", env={"HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2 and "HF_HUB_OFFLINE is set" in proc.stderr, proc.stderr
    assert hub.requests() == []


def test_submit_imports_no_hub_client_without_hf_data() -> None:
    code = ("import sys; import tui.cli, core.engine.service, core.planning.plan, "
            "core.packaging.hfdata; print('huggingface_hub' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'core' / 'runtime'}"})
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.slow
def test_on_an_ssh_target_the_data_set_is_uploaded_once_per_content(
        sshd, home: Path, hub: FakeHub, project: Path, tmp_path: Path) -> None:
    """A real OpenSSH host: the downloaded copy ships like any data set, once per content hash."""
    from tests.providers.test_ssh import add_box

    hub.commit("acme/tiny", FILES)
    add_box(sshd, tmp_path)
    jobs = []
    for name in ("one", "two"):
        sub = gpu_json("submit", "read.py", "--provider", "box", "--hours", "0.1", "--name", name,
                       "--data", "hf://datasets/acme/tiny", "--wait-s", "0", cwd=project)
        done = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=90)
        assert done["state"] == "done", run_gpu("logs", sub["job"]["short_id"]).stdout
        jobs.append(sub["job"])
    for job in jobs:
        seen = json.loads((Path(job["outputs_dir"]) / "seen.json").read_text())
        assert {k: bytes.fromhex(v) for k, v in seen.items()} == FILES
    hashes = {json.loads((Path(j["outputs_dir"]) / "job.json").read_text())["job"]["plan"]["data"]["tiny"]
              for j in jobs}
    assert len(hashes) == 1
    host_data = tmp_path / "remote" / "data"
    assert [p.name for p in host_data.glob("*.ready")] == [f"{hashes.pop()}.ready"]
    assert len(hub.downloads()) == 3  # the Hub was downloaded from once, for the first job
