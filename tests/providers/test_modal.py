"""The modal target end to end: the installed `gpu`, the official `modal` client and a loopback
Modal control plane (tests/fake_modal.py) that really runs each spawned function. Nothing in
the client is patched: `MODAL_SERVER_URL` is the client's own setting; the token reaches the
client only through the keychain and the provider (never the environment of these commands).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import (copy_example, failed_here, gpu_exe, gpu_json, make_git_project, only_elsewhere,
                            resumable_script, run_gpu, run_in_terminal, wait_state)
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


CODE_CHECK = """import hashlib, os, pathlib
msg = pathlib.Path("msg.txt").read_text().strip()
print(f"msg={msg} exec={os.access('run.sh', os.X_OK)} link={os.readlink('msg-link')} "
      f"weights={hashlib.sha256(pathlib.Path('weights.txt').read_bytes()).hexdigest()[:16]}", flush=True)
pathlib.Path("msg.txt").write_text("the job wrote its own copy")  # private: no later job sees it
"""


INCOMPRESSIBLE = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(3000))  # 192 kB
WEIGHTS = "".join(hashlib.sha256(f"w{i}".encode()).hexdigest() for i in range(80_000))  # 5 MB: a blob


def test_a_one_file_change_uploads_that_file_and_the_manifest_and_the_job_runs_it(
        modal_fake: FakeModal, home: Path, tmp_path: Path) -> None:
    add_modal()
    project = make_git_project(tmp_path / "inc", {"train.py": CODE_CHECK, "msg.txt": "v1\n",
                                                  "run.sh": "#!/bin/sh\necho hi\n",
                                                  "lib/big.txt": INCOMPRESSIBLE, "weights.txt": WEIGHTS})
    (project / "run.sh").chmod(0o755)
    (project / "msg-link").symlink_to("msg.txt")

    def submit(*extra: str) -> str:
        sub = gpu_json("submit", "train.py", "--hours", "0.1", "--provider", "md", "--wait-s", "0", *extra,
                       cwd=project)
        short = sub["job"]["short_id"]
        done = wait_state(short, {"done", "failed", "cancelled"}, timeout=180)
        assert done["state"] == "done", run_gpu("logs", short).stdout + json.dumps(done)
        return run_gpu("logs", short).stdout

    weights = hashlib.sha256(WEIGHTS.encode()).hexdigest()
    assert f"msg=v1 exec=True link=msg.txt weights={weights[:16]}" in submit()
    first = len(modal_fake.received)
    assert weights in dict(modal_fake.received) and len(modal_fake.requests("BlobCreate")) == 1  # > 4 MiB
    assert first > 0

    # a submit of the same project touches the objects it reuses (their mtime is gc's "last
    # used"); one that does so while this upload runs must not fail it (Modal's client refuses a
    # file modified after the build started unless told the files never change)
    future = time.time() + 3600
    for obj in (home / "objects").rglob("*"):
        if obj.is_file():
            os.utime(obj, (future, future))
    assert "msg=v1 exec=True link=msg.txt" in submit("--env", "RUN=2")
    assert len(modal_fake.received) == first  # the same tree: every hash known, nothing sent

    (project / "msg.txt").write_text("v2\n")  # edited, not committed: what the user has on disk
    assert "msg=v2 exec=True link=msg.txt" in submit()
    sent = modal_fake.received[first:]
    by_hash = dict(sent)
    assert len(sent) == 2 and hashlib.sha256(b"v2\n").hexdigest() in by_hash, [len(c) for _, c in sent]
    (manifest,) = [json.loads(c) for h, c in sent if c != b"v2\n"]
    rows = {r[0]: r for r in manifest["entries"]}
    assert rows["msg.txt"][2] == hashlib.sha256(b"v2\n").hexdigest() and rows["msg-link"][1:3] == ["l", "msg.txt"]
    assert sum(len(c) for _, c in sent) < 2_000  # not the 190 kB file again, nor the runtime
    mounted = [f for mid in modal_fake.requests("FunctionCreate")[-1].function.mount_ids
               for f in modal_fake.mounts[mid] if f[0].startswith("/root/gr/objects/")]
    # the store holds v1's object too: the mount takes only this bundle's objects, by hash
    assert sorted(name.replace("/root/gr/objects/", "").replace("/", "") for name, _ in mounted) \
        == sorted(sha for _, sha in mounted) == sorted({r[2] for r in manifest["entries"] if r[1] != "l"})


PACKED_CHECK = """import hashlib, pathlib
files = sorted(p for p in pathlib.Path("src").rglob("*.py"))
print(f"files={len(files)} sum=" + hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:16],
      flush=True)
"""


def test_a_bundle_whose_objects_are_in_pack_files_runs_on_modal(modal_fake: FakeModal, home: Path,
                                                                tmp_path: Path) -> None:
    """A first pack of many files keeps its objects in pack files at home; Modal's mount takes
    files, so they are copied out before the mount, and the job sees every byte."""
    add_modal()
    src = {f"src/m{i:03d}.py": f"X = {i}\n" * (i % 5 + 1) for i in range(90)}
    project = make_git_project(tmp_path / "packed", {"train.py": PACKED_CHECK, **src})
    want = hashlib.sha256(b"".join(text.encode() for _, text in sorted(src.items()))).hexdigest()[:16]
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--provider", "md", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=180)
    assert done["state"] == "done", run_gpu("logs", short).stdout + json.dumps(done)
    assert list((home / "objects" / "packs").glob("*.pack"))  # the pack files the objects came from
    assert f"files=90 sum={want}" in run_gpu("logs", short).stdout


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


# a job deaf to the checkpoint request: Modal stops each call at its timeout. It logs a step's
# row before it saves the step (a call stopped between the two does the step again: its row
# twice, never none) and saves by rename (a call stopped mid-save leaves the last whole one)
DEAF = """
import json, os, time
import gpu
ckpt = gpu.checkpoint_dir() / "steps.json"
done = json.loads(ckpt.read_text()) if ckpt.exists() else []
for step in range(len(done), 24):
    time.sleep(0.5)
    gpu.log(step=step, loss=1.0 / (step + 1))
    done.append(step)
    (gpu.checkpoint_dir() / "steps.tmp").write_text(json.dumps(done))
    os.replace(gpu.checkpoint_dir() / "steps.tmp", ckpt)
(gpu.output_dir() / "steps.json").write_text(json.dumps(done))
"""


def test_rows_a_call_writes_after_modal_reported_its_timeout_still_come_home(
        modal_fake: FakeModal, home: Path, tmp_path: Path) -> None:
    """Modal reports the timeout at once and the container goes on a moment (here 4 s): home
    reads the volume when the timeout is reported, and the rows written after that reach
    neither the call's stream nor that read. They are on the volume, and come home when the
    next call there has ended (the flake: 23 points of 24 under load)."""
    add_modal()
    modal_fake.timeout_kill_after_s = 4
    cfg = Path(home).parent / "user-config.yaml"
    doc = yaml.safe_load(cfg.read_text())
    doc["targets"]["md"].update(session_limit_hours=0.00278, checkpoint_lead_s=3)  # 10 s calls
    cfg.write_text(yaml.safe_dump(doc))
    project = make_git_project(tmp_path / "r", {"train.py": DEAF})
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--provider", "md", "--wait-s", "0", cwd=project)
    short, job_id = sub["job"]["short_id"], sub["job"]["id"]
    done = wait_state(short, {"done", "failed"}, timeout=240)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    assert json.loads((Path(sub["job"]["outputs_dir"]) / "steps.json").read_text()) == list(range(24))
    assert any("Modal stopped the function at its timeout" in e["reason"]
               for e in gpu_json("status", short, "--verbose")["events"])
    written = sorted(r for f in (modal_fake.root / "volumes").glob("*/job/metrics.jsonl")
                     for r in f.read_text().splitlines())
    assert {json.loads(r)["step"] for r in written} == set(range(24))
    # every row the job wrote came home, once: in the joined file and in what `gpu metrics` counts
    assert sorted((home / "jobs" / job_id / "metrics.jsonl").read_text().splitlines()) == written
    assert gpu_json("metrics", short)["metrics"]["loss"]["points"] == len(written)


def _held_script(total: int, holds: tuple[int, ...], marked: bool) -> str:
    """A job of `total` steps that saves each one to its checkpoint (with gpu.checkpoint_saved()
    when `marked`, beside a 1 MB file written once) and, before each step in `holds`, waits
    until the test's go file for it exists, deaf to should_checkpoint: on Modal the call is
    then stopped at its timeout, and hands no result back."""
    return f'''
import json, os, time
import gpu
ckpt = gpu.checkpoint_dir()
done = json.loads((ckpt / "steps.json").read_text()) if (ckpt / "steps.json").exists() else []
print(f"attempt {{gpu.attempt()}} starts after {{len(done)}} steps", flush=True)
if {marked!r} and not (ckpt / "big.bin").exists():
    (ckpt / "big.bin").write_bytes(bytes(range(1, 256)) * 4112)
for step in range(len(done), {total}):
    while step in {holds!r} and not os.path.exists(os.path.join(os.environ["GO_DIR"], f"go-{{step}}")):
        time.sleep(0.1)
    done.append(step)
    (ckpt / "steps.json").write_text(json.dumps(done))
    if {marked!r}:
        gpu.checkpoint_saved()
    gpu.log(step=step, loss=1.0 / (step + 1))
(gpu.output_dir() / "steps.json").write_text(json.dumps(done))
'''


def _short_calls(home: Path, targets: dict | None = None, **options) -> None:
    """Calls of 6 s (Modal stops them there), md's `options`, and other `targets`."""
    cfg = Path(home).parent / "user-config.yaml"
    doc = yaml.safe_load(cfg.read_text())
    doc["targets"]["md"].update(session_limit_hours=0.00167, checkpoint_lead_s=2, **options)
    doc["targets"].update(targets or {})
    cfg.write_text(yaml.safe_dump(doc))


def _wait_home_checkpoint(short: str, test, timeout: float = 120) -> dict:
    """`gpu status --json` until its home checkpoint passes `test`."""
    deadline = time.monotonic() + timeout
    doc: dict = {}
    while time.monotonic() < deadline:
        doc = gpu_json("status", short)
        if doc.get("checkpoint") and test(doc["checkpoint"]):
            return doc
        assert doc["state"] not in ("done", "failed", "cancelled"), doc
        time.sleep(0.2)
    raise AssertionError(f"no such checkpoint came home in {timeout}s: {doc}")


def test_a_call_stopped_at_its_timeout_brings_its_checkpoint_home_from_the_volume(
        modal_fake: FakeModal, home: Path, tmp_path: Path) -> None:
    add_modal()
    _short_calls(home, max_resumes=10)
    go = tmp_path / "go"
    go.mkdir()
    project = make_git_project(tmp_path / "h", {"train.py": _held_script(7, (3, 5), marked=True)})
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--provider", "md", "--env", f"GO_DIR={go}",
                   "--wait-s", "0", cwd=project)
    short, job_id = sub["job"]["short_id"], sub["job"]["id"]

    # the first call saved checkpoint 3, then Modal stopped it: no result, yet 3 is home
    status = _wait_home_checkpoint(short, lambda c: True)
    assert status["checkpoint"]["generation"] == 3 and status["checkpoint"]["files"] == 2, status
    assert json.loads((home / "jobs" / job_id / "ckpt-home" / "steps.json").read_text()) == [0, 1, 2]
    events = gpu_json("status", short, "--verbose")["events"]
    assert any("Modal stopped the function at its timeout" in e["reason"] for e in events), events
    assert all(c.status in (None, 4) for c in modal_fake.function_calls.values())  # 4: TIMEOUT, no result
    (go / "go-3").touch()

    # the next call resumes from 3 on the volume, saves 5 and is stopped too: 5 comes home,
    # and the 1 MB file that did not change is not downloaded again
    status = _wait_home_checkpoint(short, lambda c: c["generation"] == 5)
    assert json.loads((home / "jobs" / job_id / "ckpt-home" / "steps.json").read_text()) == [0, 1, 2, 3, 4]
    assert modal_fake.block_gets.count("job/ckpt/big.bin") == 1, modal_fake.block_gets
    assert modal_fake.block_gets.count("job/ckpt/steps.json") == 2, modal_fake.block_gets
    (go / "go-5").touch()

    done = wait_state(short, {"done", "failed"}, timeout=180)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    assert json.loads((Path(sub["job"]["outputs_dir"]) / "steps.json").read_text()) == list(range(7))
    assert gpu_json("metrics", short)["metrics"]["loss"]["points"] == 7  # every step once
    log = run_gpu("logs", short).stdout
    assert "starts after 3 steps" in log and "starts after 5 steps" in log


def test_a_job_leaving_modal_after_a_timeout_resumes_elsewhere_from_the_volume_checkpoint(
        modal_fake: FakeModal, home: Path, tmp_path: Path) -> None:
    add_modal()
    # no resume on md: the job moves, to this machine (dearer than md, so md ran it first; at
    # $5/hour its 0.5 h stay under the 5 USD an agent may spend unheld)
    _short_calls(home, {"local": {"kind": "local", "price_per_hour": 5}}, max_resumes=0)
    go = tmp_path / "go"
    go.mkdir()
    project = make_git_project(tmp_path / "m", {"train.py": _held_script(6, (3,), marked=False)})
    # the go folder is also a data set: the local sandbox then shows it, live, at its own path
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--env", f"GO_DIR={go}", "--data", f"go={go}",
                   "--wait-s", "0", cwd=project)
    short, job_id = sub["job"]["short_id"], sub["job"]["id"]
    assert sub["job"]["provider"] == "md", sub
    # a hostile server lists names outside the checkpoint folder beside the job's own file
    hostile = {"job/ckpt/../x": b"evil", "job/ckpt/../../../../escape": b"evil", "/abs-evil": b"evil",
               "job/ckpt/sub/../../../y": b"evil"}
    modal_fake.volume_extra[f"gr-job-{job_id}"] = hostile

    moved = _wait_home_checkpoint(short, lambda c: True)
    assert moved["checkpoint"]["files"] == 1 and moved["checkpoint"]["target"] == "md", moved
    (go / "go-3").touch()
    done = wait_state(short, {"done", "failed"}, timeout=180)
    doc = gpu_json("status", short, "--verbose")
    assert done["state"] == "done", (doc["reason"], run_gpu("logs", short).stdout)
    assert doc["provider"] == "local" and doc["attempt"] == 2
    move = next(e for e in doc["events"] if e["reason"].startswith("migrating from md to local"))
    assert "from checkpoint" in move["reason"] and move["data"]["checkpoint"]["files"] == 1
    assert json.loads((Path(doc["outputs_dir"]) / "steps.json").read_text()) == list(range(6))
    assert "attempt 2 starts after 3 steps" in run_gpu("logs", short).stdout
    # md's rows (steps 0-2, mirrored home into the job's metrics.jsonl, where this machine's
    # attempt goes on writing) are each in the store once, never read again after the move
    series = gpu_json("metrics", short)["metrics"]["loss"]["series"]
    assert [p["step"] for p in series] == list(range(6)), series

    # the hostile names were refused: never asked for, nothing written anywhere for them
    asked = [r.path for r in modal_fake.requests("VolumeGetFile2")]
    assert asked and not set(asked) & set(hostile), asked
    cache = home / "cache" / "modal-ckpt" / job_id / "1" / "ckpt"
    for name in hostile:
        assert not (cache / name).exists() and not Path(name).exists(), name
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes() == b"evil"]


def test_a_job_moved_from_one_modal_target_to_another_stores_each_metric_row_once(
        modal_fake: FakeModal, home: Path, tmp_path: Path) -> None:
    """Attempt 1 on md logs steps 0-2 and its call ends at Modal's timeout; the job moves to
    md2, another Modal target, dearer than an agent's per-job budget, so the move waits for a
    person's approval. md2's rows are mirrored home into the same metrics.jsonl that already
    holds md's, and `gpu metrics` shows steps 0-5 once each: md2's read goes on where md's
    stopped, never again from the top of the file."""
    add_modal()
    proc = run_gpu("targets", "add", "modal", "md2", "--gpu", "L40S", "--token-stdin", "--json",
                   input=f"{TOKEN_ID} {TOKEN_SECRET}\n")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # md goes first (cheaper); no resume on md: the job moves to md2 (0.5 h of an L40S is over
    # the 0.5 USD budget: held)
    _short_calls(home, {"local": {"kind": "local", "enabled": False}}, max_resumes=0)
    cfg = Path(home).parent / "user-config.yaml"
    doc = yaml.safe_load(cfg.read_text())
    doc.setdefault("budget", {})["per_job"] = 0.5
    cfg.write_text(yaml.safe_dump(doc))
    go = tmp_path / "go"
    go.mkdir()
    project = make_git_project(tmp_path / "m", {"train.py": _held_script(6, (3,), marked=False)})
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--env", f"GO_DIR={go}", "--wait-s", "0",
                   cwd=project)
    short = sub["job"]["short_id"]
    assert sub["job"]["provider"] == "md", sub
    held = wait_state(short, {"awaiting_approval", "done", "failed"}, timeout=120)
    assert held["state"] == "awaiting_approval" and held["provider"] == "md2", held
    (go / "go-3").touch()
    code, out = run_in_terminal([gpu_exe(), "approve", short], short)
    assert code == 0, out
    done = wait_state(short, {"done", "failed"}, timeout=180)
    doc = gpu_json("status", short, "--verbose")
    assert done["state"] == "done", (doc["reason"], run_gpu("logs", short).stdout)
    assert doc["provider"] == "md2" and doc["attempt"] == 2, doc
    assert any(e["reason"].startswith("migrating from md to md2 (approved)") for e in doc["events"]), \
        [e["reason"] for e in doc["events"]]
    assert "attempt 2 starts after 3 steps" in run_gpu("logs", short).stdout
    series = gpu_json("metrics", short)["metrics"]["loss"]["series"]
    assert [p["step"] for p in series] == list(range(6)), series


def test_a_job_failed_here_and_resumed_on_modal_stores_each_metric_row_once(
        modal_fake: FakeModal, home: Path, tmp_path: Path) -> None:
    """Attempt 1 runs on this machine, logs steps 0-2 into the job's metrics.jsonl and fails;
    `gpu resume` places attempt 2 on Modal (this machine is off now), which logs steps 3-5,
    mirrored home into that same file. `gpu metrics` shows steps 0-5 once each. And attempt 2
    starts from the checkpoint attempt 1 saved here (a job moved onto Modal once started from
    nothing: only the job's volume was looked at)."""
    add_modal()
    short = failed_here(tmp_path / "r")
    only_elsewhere(home)
    assert gpu_json("resume", short)["job"]["provider"] == "md"
    done = wait_state(short, {"done", "failed"}, timeout=180)
    doc = gpu_json("status", short, "--verbose")
    assert done["state"] == "done", (doc["reason"], run_gpu("logs", short).stdout)
    assert doc["provider"] == "md" and doc["attempt"] == 2, doc
    assert "attempt 2 logs steps 3-5" in run_gpu("logs", short).stdout
    assert "attempt 1 finds no checkpoint" in run_gpu("logs", short).stdout
    assert "attempt 2 finds the checkpoint of attempt 1" in run_gpu("logs", short).stdout
    assert "restored the checkpoint it came with from home" in run_gpu("logs", short).stdout
    series = gpu_json("metrics", short)["metrics"]["loss"]["series"]
    assert [p["step"] for p in series] == list(range(6)), series


def test_a_volume_read_that_fails_is_logged_and_the_job_goes_on(modal_fake: FakeModal, home: Path,
                                                                 tmp_path: Path) -> None:
    add_modal()
    _short_calls(home)
    modal_fake.refuse_reads = True
    go = tmp_path / "go"
    go.mkdir()
    project = make_git_project(tmp_path / "f", {"train.py": _held_script(4, (2,), marked=True)})
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--provider", "md", "--env", f"GO_DIR={go}",
                   "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    deadline = time.monotonic() + 120
    while "could not be read" not in (home / "supervisor.log").read_text():
        assert time.monotonic() < deadline, (home / "supervisor.log").read_text()
        time.sleep(0.2)
    assert "checkpoint" not in gpu_json("status", short)  # nothing came: home keeps what it had
    (go / "go-2").touch()
    done = wait_state(short, {"done", "failed"}, timeout=180)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    assert json.loads((Path(sub["job"]["outputs_dir"]) / "steps.json").read_text()) == list(range(4))
    assert "starts after 2 steps" in run_gpu("logs", short).stdout  # the volume itself still had it


def test_rows_a_lost_call_wrote_after_the_streams_last_read_come_from_the_volume(
        modal_fake: FakeModal, home: Path, tmp_path: Path) -> None:
    """Modal stopped a call (no result): the rows its job wrote in the last half second never
    reached the log stream, but they are in the job's metrics file on its volume. Home adds the
    ones it lacks, once, at the end of what it keeps (the supervisor reads by byte offset)."""
    import asyncio
    from types import SimpleNamespace

    import modal

    from core.config import user as userconfig
    from core.providers import logmirror
    from core.providers.modal.target import ModalProvider
    from core.providers.modal.volume import VOLUME_METRICS

    add_modal()
    provider = ModalProvider.from_config(userconfig.load().targets["md"])
    job = SimpleNamespace(id="0123456789abcdef0123456789abcdef", short_id="01234567", attempt=2)
    name = provider.volume_name(job)
    modal.Volume.from_name(name, create_if_missing=True, client=provider.client()).hydrate()
    rows = [json.dumps({"_step": i, "loss": 1 / (i + 1)}).encode() for i in range(5)]
    on_volume = modal_fake.volume_dir(name) / VOLUME_METRICS
    on_volume.parent.mkdir(parents=True, exist_ok=True)
    on_volume.write_bytes(b"\n".join(rows) + b"\n" + b'{"_step": 5, "lo')  # the last row half written
    local = provider.local_dir(job)
    logmirror.store(local, 1, {"metrics": b"\n".join(rows[:2]) + b"\n"})  # attempt 1: all streamed
    logmirror.store(local, 2, {"metrics": rows[2] + b"\n"})  # attempt 2: its last two rows were not
    before = (local / "metrics.jsonl").read_bytes()

    asyncio.run(provider._metrics_from_volume(job, 30))
    after = (local / "metrics.jsonl").read_bytes()
    assert after.startswith(before) and after[len(before):] == rows[3] + b"\n" + rows[4] + b"\n"
    asyncio.run(provider._metrics_from_volume(job, 30))  # a second read adds nothing
    assert (local / "metrics.jsonl").read_bytes() == after
    assert any(r.path.endswith("metrics.jsonl") for r in modal_fake.requests("VolumeGetFile2"))


PREEMPTED = """
import json, time
import gpu
ckpt = gpu.checkpoint_dir() / "steps.json"
done = json.loads(ckpt.read_text()) if ckpt.exists() else []
print(f"attempt {gpu.attempt()} starts after {len(done)} steps", flush=True)
for step in range(len(done), 16):
    time.sleep(0.4)
    done.append(step)
    tmp = gpu.checkpoint_dir() / "steps.json.tmp"
    tmp.write_text(json.dumps(done))
    tmp.replace(ckpt)
    print(f"step {step}", flush=True)
(gpu.output_dir() / "steps.json").write_text(json.dumps(done))
"""


def test_an_input_modal_reruns_after_a_preemption_goes_on_from_the_volume_checkpoint(
        modal_fake: FakeModal, home: Path, tmp_path: Path) -> None:
    add_modal()
    project = make_git_project(tmp_path / "pre", {"train.py": PREEMPTED})
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--provider", "md", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    deadline = time.monotonic() + 120
    while "step 4\n" not in run_gpu("logs", short).stdout:
        assert time.monotonic() < deadline, run_gpu("logs", short).stdout
        time.sleep(0.2)
    (running,) = [c for c in modal_fake.function_calls.values() if c.status is None]
    modal_fake.preempt(running.id)

    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=180)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", (done["reason"], log)
    assert running.containers == 2 and len(modal_fake.requests("FunctionPutInputs")) == 1  # one input, run twice
    assert done["attempt"] == 1  # Modal's rerun is the same attempt: gpu-router saw no session end
    assert "Modal ran this input again in a new container" in log
    again = [int(line.split()[-2]) for line in log.splitlines() if line.startswith("attempt 1 starts after")]
    assert again[0] == 0 and again[1] >= 5, log  # the second container began where the volume's checkpoint was
    steps = json.loads((Path(sub["job"]["outputs_dir"]) / "steps.json").read_text())
    assert steps == list(range(16))  # every step, once
