"""The kaggle target end to end: the installed `gpu`, the official Kaggle client (kagglesdk,
declared in pyproject.toml as what core/providers/kaggle/ imports) and a loopback Kaggle API (tests/fake_kaggle.py) that really
runs each pushed kernel. Nothing in the client is patched: `KAGGLE_API_ENVIRONMENT=LOCALHOST`
is the client's own switch to http://localhost.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import (copy_example, failed_here, gpu_json, make_git_project, only_elsewhere, resumable_script,
                            run_gpu, wait_state)
from tests.fake_kaggle import FakeKaggle

pytestmark = pytest.mark.slow

KEY = "k-secret-123"


@pytest.fixture
def kaggle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keychain, home: Path):
    """The fake Kaggle on 127.0.0.1:80 (where the client's LOCALHOST environment points)."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 80)) == 0:
            pytest.fail("port 80 on 127.0.0.1 is taken: the Kaggle client's LOCALHOST environment needs it")
    fake = FakeKaggle(tmp_path / "kaggle", port=80, key=KEY)
    monkeypatch.setenv("KAGGLE_API_ENVIRONMENT", "LOCALHOST")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    yield fake
    from tests.conftest import _stop_world

    _stop_world(home)
    fake.close()


def add_kaggle(tmp_path: Path, *extra: str) -> dict:
    creds = tmp_path / "kaggle.json"
    creds.write_text(json.dumps({"username": "alice", "key": KEY}))
    return gpu_json("targets", "add", "kaggle", "kg", "--kaggle-json", str(creds), *extra)


def _no_secret_anywhere(home: Path, fake: FakeKaggle, *more: Path) -> None:
    for root in (home, *more):
        for p in root.rglob("*"):
            if p.is_file() and not p.is_symlink():
                assert KEY.encode() not in p.read_bytes(), f"the Kaggle key is in {p}"
    for call in fake.calls:
        assert KEY not in call["raw"], f"the key was sent in {call['method']}"


def test_a_job_runs_on_kaggle_and_comes_home(kaggle: FakeKaggle, home: Path, tmp_path: Path) -> None:
    added = add_kaggle(tmp_path)
    assert added["probe"]["available"] is True and added["probe"]["quota_hours_left"] == 30
    assert added["probe"]["details"]["user"] == "alice"
    assert "key" not in json.dumps(added["config"])  # the key went to the keychain, not the config
    listed = gpu_json("targets")
    kg = next(t for t in listed["targets"] if t["name"] == "kg")
    assert kg["kind"] == "kaggle" and kg["quota_hours_left"] == 30 and kg["gpu"] == "2x T4"

    project = copy_example(tmp_path / "quickstart")
    plan = gpu_json("plan", "--hours", "0.1", cwd=project)["plan"]
    assert plan["target"] == "kg"  # free quota first
    assert any("of its 30 h of free quota left" in r for r in plan["reasons"])
    sub = gpu_json("submit", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    assert sub["job"]["provider"] == "kg"
    done = wait_state(short, {"done", "failed"}, timeout=240)
    assert done["state"] == "done", run_gpu("logs", short).stdout + json.dumps(done)

    out = Path(sub["job"]["outputs_dir"])
    result = json.loads((out / "result.json").read_text())
    assert result["steps"] == 60 and abs(result["w"] - 3) < 1.0
    assert gpu_json("metrics", short)["metrics"]["loss"]["points"] == 60
    log = run_gpu("logs", short).stdout
    assert "done: w=" in log and "attempt 1: exited with status 0" in log

    # numpy (the requirement) is in the "image": its package list was read once by a CPU kernel
    pushes = [b for b in kaggle.bodies("SaveKernel") if b["slug"] != "alice/gr-image-probe"]
    (push,) = pushes
    assert any("every one: nothing to ship" in e["reason"]
               for e in gpu_json("status", short, "--verbose")["events"])
    assert push["isPrivate"] is True and push["enableGpu"] is True and push["enableInternet"] is False
    assert push["machineShape"] == "NvidiaTeslaT4" and push["slug"] == f"alice/gr-{short}-a1"
    created = kaggle.bodies("CreateDataset")  # the code's base data set and the runtime's
    assert sorted(c["slug"][:5] for c in created) == ["gr-c-", "gr-rt"]
    assert all(c["isPrivate"] is True and f"alice/{c['slug']}" in push["datasetDataSources"] for c in created)
    bundle_hash = gpu_json("status", short, "--verbose")["plan"]["bundle_hash"]
    assert any(bundle_hash[:32] in call["body"].get("name", "") for call in kaggle.calls
               if call["method"] == "StartBlobUpload")
    assert all(c["authorized"] for c in kaggle.calls if c["service"] != "upload")

    # unchanged: the data set is found, nothing but the kernel goes up
    before = (len(kaggle.bodies("CreateDataset")), len(kaggle.bodies("PUT")), kaggle.uploaded_bytes)
    again = gpu_json("submit", "--hours", "0.1", "--wait-s", "0", "--env", "RUN=2", cwd=project)
    assert wait_state(again["job"]["short_id"], {"done", "failed"}, timeout=240)["state"] == "done"
    assert (len(kaggle.bodies("CreateDataset")), len(kaggle.bodies("PUT")), kaggle.uploaded_bytes) == before
    assert len([b for b in kaggle.bodies("SaveKernel") if b["slug"] != "alice/gr-image-probe"]) == 2
    _no_secret_anywhere(home, kaggle, project, tmp_path / "kaggle")


def test_a_failing_job_says_kaggles_message_and_cancel_stops_a_session(kaggle: FakeKaggle, home: Path,
                                                                      tmp_path: Path) -> None:
    add_kaggle(tmp_path)
    bad = make_git_project(tmp_path / "bad", {"train.py": "import sys\nprint('boom', flush=True)\nsys.exit(3)\n"})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--gpu", "P100", "--wait-s", "0", cwd=bad)
    failed = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert failed["state"] == "failed" and failed["exit_code"] == 3
    assert "Your notebook hit an unhandled error" in failed["reason"]  # Kaggle's own message
    assert "boom" in run_gpu("logs", sub["job"]["short_id"]).stdout
    assert kaggle.bodies("SaveKernel")[-1]["machineShape"] == "NvidiaTeslaP100"  # the GPU asked for

    slow = make_git_project(tmp_path / "slow", {"train.py": "import time\nwhile True:\n    time.sleep(0.2)\n"})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=slow)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=120)
    gpu_json("cancel", short)
    assert wait_state(short, {"cancelled", "failed", "done"}, timeout=120)["state"] == "cancelled"
    session = kaggle.sessions[f"alice/gr-{short}-a1"]
    assert session.proc.poll() is not None and session.status.startswith("CANCEL")
    # stopped on Kaggle's own side (its web page): the job ends cancelled, saying where
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--env", "RUN=2", "--wait-s", "0", cwd=slow)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=120)
    kernel_id = next(k for k, ref in kaggle.kernel_ids.items() if ref == f"alice/gr-{short}-a1")
    kaggle._m_CancelKernelSession({"kernelSessionId": kernel_id})
    ended = wait_state(short, {"cancelled", "failed", "done"}, timeout=120)
    assert (ended["state"], ended["reason"]) == ("cancelled", "cancelled on Kaggle")


def test_no_quota_left_routes_elsewhere_with_the_reason(kaggle: FakeKaggle, home: Path, tmp_path: Path) -> None:
    kaggle.used_s = kaggle.quota_s - 0.5 * 3600  # half an hour left this week
    kaggle.token = "KGAT_0123456789abcdef"  # an API token this time, typed on standard input
    added = run_gpu("targets", "add", "kaggle", "kg", "--token-stdin", "--json", input=kaggle.token + "\n")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["probe"]["details"]["user"] == "alice"
    project = copy_example(tmp_path / "q")
    plan = gpu_json("plan", "--hours", "2", cwd=project)
    assert plan["plan"]["target"] == "local"
    assert "kg has 0.5 h of quota left this week, and 2 h were asked for" in plan["plan"]["passed_over"]["kg"]
    # Kaggle's own figure feeds the "over half the remaining quota" rule
    held = gpu_json("submit", "--hours", "0.4", "--provider", "kg", "--wait-s", "0", cwd=project)
    assert held["guidance"]["needs_approval"] is True
    holds = gpu_json("status", held["job"]["short_id"], "--verbose")["plan"]["holds"]
    (quota,) = [h for h in holds if h["rule"] == "quota"]
    assert "of the 0.5 h" in quota["reason"], quota
    for p in home.rglob("*"):
        if p.is_file():
            assert kaggle.token.encode() not in p.read_bytes(), p
    kaggle.used_s = kaggle.quota_s
    run_gpu("targets", "probe", "kg")
    listed = {t["name"]: t for t in gpu_json("targets")["targets"]}
    assert listed["kg"]["available"] is False and "no Kaggle GPU quota left" in listed["kg"]["why_unavailable"]


RESUMABLE = resumable_script(30)


def test_a_session_at_its_time_limit_resumes_from_its_checkpoint(kaggle: FakeKaggle, home: Path,
                                                                 tmp_path: Path) -> None:
    """30 steps of 0.5 s do not fit one 12 s session: the job saves before the limit, and a
    new kernel that reads the previous session's output finishes it, every step done once."""
    add_kaggle(tmp_path)
    cfg = Path(home).parent / "user-config.yaml"
    doc = yaml.safe_load(cfg.read_text())
    doc["targets"]["kg"].update(session_limit_hours=0.00334, checkpoint_lead_s=4)  # 12 s sessions
    cfg.write_text(yaml.safe_dump(doc))
    project = make_git_project(tmp_path / "r", {"train.py": RESUMABLE})
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=240)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    steps = json.loads((Path(sub["job"]["outputs_dir"]) / "steps.json").read_text())
    assert steps == list(range(30))
    assert gpu_json("metrics", short)["metrics"]["loss"]["points"] == 30  # every session's rows, once
    # the first session's checkpoint came home from its output (where a move elsewhere reads it)
    kept = Path(sub["job"]["outputs_dir"]) / "checkpoint" / "steps.json"  # mirrored home, then an output
    assert json.loads(kept.read_text()) == list(range(30))
    pushes = kaggle.bodies("SaveKernel")
    assert len(pushes) >= 2 and pushes[1]["kernelDataSources"] == [f"alice/gr-{short}-a1"]
    assert all(p["sessionTimeoutSeconds"] <= 13 for p in pushes)
    events = gpu_json("status", short, "--verbose")["events"]
    assert any("session ended on kg" in e["reason"] for e in events)
    assert any("resuming on kg" in e["reason"] for e in events)


def test_provider_colab_is_refused_at_submit_with_the_way_to_attach_one(home: Path, tmp_path: Path) -> None:
    project = copy_example(tmp_path / "c")
    proc = run_gpu("submit", "--provider", "colab", "--hours", "0.1", "--json", cwd=project)
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert "no job API" in doc["error"] and "gpu targets add ssh colab" in doc["fix"]
    assert gpu_json("jobs")["jobs"] == []  # nothing was submitted


READER = '''
import gpu
text = (gpu.data_dir() / "ds" / "a.txt").read_text()
(gpu.output_dir() / "seen.txt").write_text(text)
open("notes.txt", "w").write("left beside the script")
'''


def test_a_data_set_goes_up_once_and_undeclared_work_is_fetched(kaggle: FakeKaggle, home: Path,
                                                                tmp_path: Path) -> None:
    add_kaggle(tmp_path)
    data = tmp_path / "ds"
    data.mkdir()
    (data / "a.txt").write_text("data from home")
    project = make_git_project(tmp_path / "d", {"train.py": READER})
    shorts = []
    for run in (1, 2):
        sub = gpu_json("submit", "train.py", "--hours", "0.1", "--data", f"ds={data}", "--env", f"RUN={run}",
                       "--wait-s", "0", cwd=project)
        shorts.append(sub["job"]["short_id"])
        assert wait_state(shorts[-1], {"done", "failed"}, timeout=120)["state"] == "done"
        assert (Path(sub["job"]["outputs_dir"]) / "seen.txt").read_text() == "data from home"
    created = [b["slug"] for b in kaggle.bodies("CreateDataset")]
    assert len(created) == 3 and sum(s.startswith("gr-data-") for s in created) == 1  # code, runtime, data: once
    assert any(src.endswith(created[-1]) or "gr-data-" in src
               for src in kaggle.bodies("SaveKernel")[-1]["datasetDataSources"])
    fetched = gpu_json("fetch", shorts[-1], "notes.txt", cwd=project)
    assert fetched["files"] == 1
    assert (project / "runs" / shorts[-1] / "notes.txt").read_text() == "left beside the script"


def test_a_kaggle_that_hangs_is_given_up_on_after_api_timeout_s(kaggle: FakeKaggle, home: Path,
                                                                tmp_path: Path) -> None:
    add_kaggle(tmp_path, "--no-probe")
    cfg = Path(home).parent / "user-config.yaml"
    doc = yaml.safe_load(cfg.read_text())
    doc["targets"]["kg"]["api_timeout_s"] = 1
    cfg.write_text(yaml.safe_dump(doc))
    kaggle.stall = {"GetAcceleratorQuotaStatistics"}
    started = time.monotonic()
    probe = run_gpu("targets", "probe", "kg", "--json")
    assert time.monotonic() - started < 25  # the fake answers after 30 s: the client gave up first
    doc = json.loads(probe.stdout)["probe"]
    assert doc["available"] is False and "timeout" in doc["why_unavailable"].lower()


async def test_provider_kaggle_pins_the_kind_the_readme_adds(kaggle: FakeKaggle, home: Path,
                                                             tmp_path: Path) -> None:
    """The README's `gpu targets add kaggle kg`, then `provider: kaggle` (the contract's word: a
    kind) in gpu.yaml, on the command line and in `gpu_submit` over MCP, runs on kg."""
    import os

    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from tests.conftest import gpu_exe

    add_kaggle(tmp_path)
    project = copy_example(tmp_path / "pin")
    assert gpu_json("plan", "--smoke", cwd=project)["plan"]["target"] == "local"  # unpinned: a smoke test stays here
    gpu_yaml = project / "gpu.yaml"
    gpu_yaml.write_text(gpu_yaml.read_text() + "provider: kaggle\n")
    plan = gpu_json("plan", "--smoke", cwd=project)["plan"]
    assert plan["target"] == "kg" and plan["reasons"][0] == "pinned with provider=kaggle: kg is the one kaggle target"
    assert gpu_json("plan", "--smoke", "--provider", "local", cwd=project)["plan"]["target"] == "local"  # the flag wins
    refused = run_gpu("plan", "--provider", "modal", "--json", cwd=project)
    assert refused.returncode == 2 and "gpu targets add modal NAME" in json.loads(refused.stdout)["fix"]

    plain = copy_example(tmp_path / "mcp")  # the pin comes from the tool's argument alone
    params = StdioServerParameters(command=gpu_exe(), args=["mcp"], env=dict(os.environ))
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                res = await s.call_tool("gpu_submit", {"project_dir": str(plain), "provider": "kaggle",
                                                       "smoke": True, "hours": 0.1, "wait_s": 0},
                                        read_timeout_seconds=120)
    assert not res.is_error, res.content[0].text
    job = res.structured_content["job"]
    assert job["provider"] == "kg"
    done = wait_state(job["short_id"], {"done", "failed"}, timeout=240)
    assert done["state"] == "done", run_gpu("logs", job["short_id"]).stdout + json.dumps(done)
    (push,) = [b for b in kaggle.bodies("SaveKernel") if b["slug"] != "alice/gr-image-probe"]
    assert push["slug"] == f"alice/gr-{job['short_id']}-a1"


SHOWS = '''
import gpu, pathlib
(gpu.output_dir() / "msg.txt").write_text(pathlib.Path("msg.txt").read_text())
'''


def _code_set(kaggle: FakeKaggle, slug: str) -> tuple[list[list], list[str]]:
    """What the fake holds in a code data set: the manifest's rows and the object tar's members."""
    import gzip
    import io
    import tarfile

    files = kaggle.datasets[f"alice/{slug}"]
    (manifest,) = [v for k, v in files.items() if k.endswith(".grm")]
    tars = [v for k, v in files.items() if k.endswith(".gro")]
    members: list[str] = []
    for blob in tars:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
            members += [m.name for m in tar]
    return json.loads(gzip.decompress(manifest))["entries"], members


def test_a_changed_file_ships_as_one_small_delta_over_the_base(kaggle: FakeKaggle, home: Path,
                                                              tmp_path: Path) -> None:
    """The first submit uploads every object once, as the base; a second one with one file
    changed uploads one small delta (that file's object and the manifest), its kernel mounts the
    base and that delta, and the job sees the new content. Editing the same file again mounts
    the base and the newest delta only."""
    import hashlib
    import os

    add_kaggle(tmp_path)
    lib = {f"lib/part{i}.txt": os.urandom(8192).hex() for i in range(40)}  # ~650 kB of code
    project = make_git_project(tmp_path / "inc", {"train.py": SHOWS, "msg.txt": "first\n", **lib})

    def submit(run: int) -> tuple[dict, int, list[dict]]:
        before_puts, before_sets = len(kaggle.bodies("PUT")), len(kaggle.bodies("CreateDataset"))
        sub = gpu_json("submit", "train.py", "--hours", "0.1", "--env", f"RUN={run}", "--wait-s", "0", cwd=project)
        short = sub["job"]["short_id"]
        assert wait_state(short, {"done", "failed"}, timeout=240)["state"] == "done", run_gpu("logs", short).stdout
        sent = sum(p["bytes"] for p in kaggle.bodies("PUT")[before_puts:])
        return sub, sent, kaggle.bodies("CreateDataset")[before_sets:]

    first, sent1, made1 = submit(1)
    assert (Path(first["job"]["outputs_dir"]) / "msg.txt").read_text() == "first\n"
    (base,) = [m["slug"] for m in made1 if m["slug"].startswith("gr-c-")]
    rows, members = _code_set(kaggle, base)
    assert {r[0] for r in rows} >= {"train.py", "msg.txt", *lib}
    assert sorted(members) == sorted({r[2] for r in rows if r[1] != "l"})  # every object, once
    assert sent1 > 300_000  # hex: gzip halves it

    (project / "msg.txt").write_text("second\n")
    second, sent2, made2 = submit(2)
    assert (Path(second["job"]["outputs_dir"]) / "msg.txt").read_text() == "second\n"
    (delta,) = [m["slug"] for m in made2]  # one data set, nothing else went up
    _, members2 = _code_set(kaggle, delta)
    assert members2 == [hashlib.sha256(b"second\n").hexdigest()]  # one file: the changed one
    files2 = kaggle.datasets[f"alice/{delta}"]
    assert len(files2) == 2 and sent2 == sum(len(v) for v in files2.values())  # manifest + one object
    assert sent2 < 4_000 and sent2 < sent1 / 100
    push = kaggle.bodies("SaveKernel")[-1]
    assert f"alice/{base}" in push["datasetDataSources"] and f"alice/{delta}" in push["datasetDataSources"]

    (project / "msg.txt").write_text("third\n")
    third, _, made3 = submit(3)
    assert (Path(third["job"]["outputs_dir"]) / "msg.txt").read_text() == "third\n"
    (delta3,) = [m["slug"] for m in made3]
    code_sources = [s for s in kaggle.bodies("SaveKernel")[-1]["datasetDataSources"] if "/gr-c-" in s]
    assert sorted(code_sources) == sorted([f"alice/{base}", f"alice/{delta3}"])  # not the old delta


def test_a_tampered_object_is_refused_and_a_lost_base_is_uploaded_again(kaggle: FakeKaggle, home: Path,
                                                                        tmp_path: Path) -> None:
    """The kernel checks each object against its hash: a base whose bytes changed on Kaggle's
    side fails the job with the reason, before any of the project's code runs. A base deleted on
    Kaggle breaks the chain: the next submit uploads a new base and runs."""
    import gzip
    import io
    import tarfile

    add_kaggle(tmp_path)
    project = make_git_project(tmp_path / "t", {"train.py": SHOWS, "msg.txt": "first\n", "lib.py": "X = 1\n"})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=240)["state"] == "done"
    (base,) = [b["slug"] for b in kaggle.bodies("CreateDataset") if b["slug"].startswith("gr-c-")]
    files = kaggle.datasets[f"alice/{base}"]
    (key,) = [k for k in files if k.endswith(".gro")]
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(files[key]))) as src, \
            tarfile.open(fileobj=out, mode="w") as dst:
        for m in src:
            data = src.extractfile(m).read()
            if data == b"X = 1\n":
                data = b"X = 666\n"  # same name (its hash), other bytes
            m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
    files[key] = gzip.compress(out.getvalue())

    (project / "msg.txt").write_text("second\n")
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    failed = wait_state(short, {"done", "failed"}, timeout=240)
    assert failed["state"] == "failed"
    session = kaggle.sessions[f"alice/gr-{short}-a1"]
    text = session.stdout.read_text()
    assert "arrived with other content: refused" in text, text
    assert not (session.working / "gpu-router" / "job" / "code").exists()  # no code folder at all

    del kaggle.datasets[f"alice/{base}"]  # deleted on kaggle.com
    (project / "msg.txt").write_text("third\n")
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=240)["state"] == "done", run_gpu("logs", short).stdout
    assert (Path(sub["job"]["outputs_dir"]) / "msg.txt").read_text() == "third\n"
    new_base = kaggle.bodies("CreateDataset")[-1]["slug"]
    _, members = _code_set(kaggle, new_base)
    assert len(members) == 3  # every object again: train.py, msg.txt, lib.py
    assert any("is gone from Kaggle: a new base" in e["reason"]
               for e in gpu_json("status", short, "--verbose")["events"])


def test_a_job_failed_here_and_resumed_on_kaggle_starts_from_its_checkpoint(kaggle: FakeKaggle, home: Path,
                                                                           tmp_path: Path) -> None:
    """Attempt 1 ran on this machine, saved a checkpoint and failed; `gpu resume` places attempt
    2 on Kaggle (this machine is off now). Its checkpoint goes with it as a data set, and the
    kernel starts from it: a kernel only ever read the previous Kaggle session's output, so a
    job moved onto Kaggle started from nothing (and named a kernel that never ran as its input)."""
    short = failed_here(tmp_path / "r")  # Kaggle is added after: it would have taken the job
    add_kaggle(tmp_path)
    only_elsewhere(home)
    assert gpu_json("resume", short)["job"]["provider"] == "kg"
    done = wait_state(short, {"done", "failed"}, timeout=240)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", log
    assert "attempt 1 finds no checkpoint" in log and "attempt 2 finds the checkpoint of attempt 1" in log
    push = kaggle.bodies("SaveKernel")[-1]
    assert f"alice/gr-ck-{short}-a2" in push["datasetDataSources"] and not push.get("kernelDataSources")
