"""The modal target end to end: the installed `gpu`, the official `modal` client and a loopback
Modal control plane (tests/fake_modal.py) that really runs each spawned function. Nothing in
the client is patched: `MODAL_SERVER_URL` is the client's own setting; the token reaches the
client only through the keychain and the provider (never the environment of these commands).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_example, gpu_json, make_git_project, resumable_script, run_gpu, wait_state
from tests.fake_modal import FakeModal

pytestmark = pytest.mark.slow

TOKEN_ID, TOKEN_SECRET = "ak-fake0token0id", "as-fake0token0secret0123"


@pytest.fixture
def modal_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keychain, home: Path):
    fake = FakeModal(tmp_path / "modal", token_id=TOKEN_ID, token_secret=TOKEN_SECRET)
    monkeypatch.setenv("MODAL_SERVER_URL", fake.url)
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    yield fake
    from tests.conftest import _stop_world

    _stop_world(home)
    fake.close()


def add_modal(*extra: str) -> dict:
    proc = run_gpu("targets", "add", "modal", "md", "--token-stdin", "--json", *extra,
                   input=f"{TOKEN_ID} {TOKEN_SECRET}\n")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads(proc.stdout)


def _no_token_anywhere(fake: FakeModal, *roots: Path) -> None:
    for root in roots:
        for p in root.rglob("*"):
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                assert TOKEN_SECRET.encode() not in data and TOKEN_ID.encode() not in data, p
    for call in fake.calls:  # sent as call metadata only, never inside a request
        assert TOKEN_SECRET.encode() not in call["raw"], call["method"]


def test_a_job_runs_on_modal_comes_home_and_an_unchanged_resubmit_uploads_nothing(
        modal_fake: FakeModal, home: Path, tmp_path: Path) -> None:
    added = add_modal()
    assert added["probe"]["available"] is True and "token" not in json.dumps(added["config"])
    md = next(t for t in gpu_json("targets")["targets"] if t["name"] == "md")
    assert md["kind"] == "modal" and md["gpu"] == "1x T4" and md["price_per_hour"] == 0.5904
    assert md["offer_prices"]["H100"] == 3.9492 and md["details"]["prices"]["as_of"]
    assert md["max_hours"] == pytest.approx(19.07, abs=0.01)
    listing = run_gpu("targets", env={"COLUMNS": "200"}).stdout  # the price table, dated, in text too
    assert "md per hour (https://modal.com/pricing, as of" in listing
    assert "T4 $0.59" in listing and "H100 $3.95" in listing and "B200* $6.25" in listing

    project = copy_example(tmp_path / "quickstart")
    plan = gpu_json("plan", "--hours", "0.1", "--provider", "md", "--vram-gb", "60", cwd=project)["plan"]
    assert plan["offer"] == "A100-80GB" and plan["price_per_hour"] == 2.4984  # cheapest that fits
    over = run_gpu("plan", "--hours", "20", "--provider", "md", "--json", cwd=project)  # past Modal's 24 h cap
    assert over.returncode == 2 and "Modal caps a function at 24 h" in json.loads(over.stdout)["error"]

    sub = gpu_json("submit", "--hours", "0.1", "--provider", "md", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=180)
    assert done["state"] == "done", run_gpu("logs", short).stdout + json.dumps(done)
    out = Path(sub["job"]["outputs_dir"])
    result = json.loads((out / "result.json").read_text())
    assert result["steps"] == 60
    assert gpu_json("metrics", short)["metrics"]["loss"]["points"] == 60
    assert "done: w=" in run_gpu("logs", short).stdout
    fetch = run_gpu("fetch", short, "outputs/", cwd=project)  # the container is gone: said, with the fix
    assert fetch.returncode == 2 and "keeps nothing of a job's working folder" in fetch.stderr
    assert "outputs:" in fetch.stderr

    (fn,) = modal_fake.requests("FunctionCreate")
    f = fn.function
    assert f.resources.gpu_config.gpu_type == "T4" and f.block_network is True
    assert 600 < f.timeout_secs <= 0.1 * 1.25 * 3600 + 600
    assert any(v.mount_path == "/root/gr/state" for v in f.volume_mounts)
    images = [r.image for r in modal_fake.requests("ImageGetOrCreate")]
    reqs = (project / "requirements.txt").read_text().split()
    assert any(all(p.split("=")[0].split(">")[0] in " ".join(i.dockerfile_commands) for p in reqs)
               for i in images), [list(i.dockerfile_commands) for i in images]
    assert all(c["authorized"] for c in modal_fake.calls)

    before = modal_fake.uploaded_bytes
    assert before > 0
    again = gpu_json("submit", "--hours", "0.1", "--provider", "md", "--env", "RUN=2", "--wait-s", "0", cwd=project)
    assert wait_state(again["job"]["short_id"], {"done", "failed"}, timeout=180)["state"] == "done"
    assert modal_fake.uploaded_bytes == before  # every file's hash was known: nothing sent
    assert len(modal_fake.requests("FunctionCreate")) == 2
    assert "MODAL_TOKEN_SECRET" not in os.environ
    _no_token_anywhere(modal_fake, home, project, tmp_path / "modal")


def test_a_failing_job_shows_its_traceback_and_cancel_stops_the_call(modal_fake: FakeModal, home: Path,
                                                                     tmp_path: Path) -> None:
    add_modal("--gpu", "L4")
    bad = make_git_project(tmp_path / "bad", {"train.py": "def f():\n    raise ValueError('boom here')\nf()\n"})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--gpu", "H100", "--wait-s", "0", cwd=bad)
    failed = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert failed["state"] == "failed" and failed["exit_code"] == 1
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert "Traceback" in log and "ValueError: boom here" in log
    assert modal_fake.requests("FunctionCreate")[-1].function.resources.gpu_config.gpu_type == "H100"

    slow = make_git_project(tmp_path / "slow", {"train.py": "import time\nwhile True:\n    time.sleep(0.2)\n"})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--provider", "md", "--wait-s", "0", cwd=slow)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=120)
    assert modal_fake.requests("FunctionCreate")[-1].function.resources.gpu_config.gpu_type == "L4"
    gpu_json("cancel", short)
    assert wait_state(short, {"cancelled", "failed", "done"}, timeout=120)["state"] == "cancelled"
    assert modal_fake.requests("FunctionCallCancel")
    (call,) = [c for c in modal_fake.function_calls.values() if c.status == 4 or c.proc.poll() is not None][-1:]
    assert call.proc.poll() is not None


RESUMABLE = resumable_script(24)


def test_a_call_at_its_timeout_resumes_from_the_checkpoint_on_the_volume(modal_fake: FakeModal, home: Path,
                                                                        tmp_path: Path) -> None:
    add_modal()
    cfg = Path(home).parent / "user-config.yaml"
    doc = yaml.safe_load(cfg.read_text())
    doc["targets"]["md"].update(session_limit_hours=0.00278, checkpoint_lead_s=3)  # 10 s calls
    cfg.write_text(yaml.safe_dump(doc))
    project = make_git_project(tmp_path / "r", {"train.py": RESUMABLE})
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--provider", "md", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=240)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    steps = json.loads((Path(sub["job"]["outputs_dir"]) / "steps.json").read_text())
    assert steps == list(range(24))
    assert gpu_json("metrics", short)["metrics"]["loss"]["points"] == 24  # every session's rows, once  # every step once, across the calls
    created = modal_fake.requests("FunctionCreate")
    assert len(created) >= 2 and all(c.function.timeout_secs <= 10 for c in created)
    assert len({c.function.volume_mounts[0].volume_id for c in created}) == 1  # one volume, every attempt
    events = gpu_json("status", short, "--verbose")["events"]
    assert any("session ended on md" in e["reason"] for e in events)
    assert "resuming from the last checkpoint" in run_gpu("logs", short).stdout
    # a copy came home with the calls' results (where a move to another target reads it)
    kept = Path(sub["job"]["outputs_dir"]) / "checkpoint" / "steps.json"
    assert json.loads(kept.read_text()) == list(range(24))
