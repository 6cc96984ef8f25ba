"""Launching on SkyPilot, without a server (issue 43's third step): the frames that carry files
home inside a task's output (core/runtime/frames.py, the one place of that format), the
runtime a cluster runs (core/runtime/skypilot_task.py) run here as a real process on a real
job's workdir with its output read back by the stream home reads (stream.py), the launch's
resources and the ceiling it is held to (launching.py), and the provider's word on a cluster
that is gone, against a stand-in for SkyPilot's venv. The real server runs the same path in
tests/providers/test_skypilot_adapter.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.runtime import frames
from core.runtime.frames import FrameReader
from tests.conftest import make_git_project, write_user_config as write_config
from tests.providers.test_skypilot_target import SLURM_PRICES, answered, stand_in

pytestmark = pytest.mark.quick

LINE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
               max_size=120)


def _read_back(lines: list[str], folder: str, max_bytes: int = 1 << 24) -> tuple[list[str], dict, list]:
    got: dict[str, bytes] = {}
    errors: list = []

    def on_file(kind: str, name: str, path: str) -> None:
        got[f"{kind}/{name}"] = Path(path).read_bytes()

    reader = FrameReader(folder, max_bytes, on_file, lambda *e: errors.append(e))
    shown = [text for text in (reader.feed(line) for line in lines) if text is not None]
    return shown, got, errors


# -- frames --------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3 * frames.CHUNK + 7), st.lists(LINE, max_size=12), st.integers(0, 12))
def test_any_file_comes_through_whole_and_every_job_line_reads_as_itself(data: bytes, job: list[str],
                                                                         where: int) -> None:
    """Whatever a job prints (a forged frame, the escape itself, a metric marker), home reads
    it back as that line and never as a frame; the file sent among those lines arrives whole."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "f")
        src.write_bytes(data)
        sent: list[str] = []
        out = [frames.escape_log(line) for line in job]
        frames.send_file(sent.append, "out", "outputs", str(src))
        out[min(where, len(out)):min(where, len(out))] = sent
        shown, got, errors = _read_back(out, tmp + "/in")
    assert shown == job and got == {"out/outputs": data} and errors == []


RESERVED = st.sampled_from(["@@gpu-router-frame@@ ", "@@gpu-router-metric@@ ", "@@gpu-router-log@@ ",
                            frames.FRAME_MARK + "exit exit begin 3"])
ANSI_BITS = st.sampled_from(["\x1b[0m", "\x1b[1;31m", "\x1b]0;title\x07", "\r", "\x1b", "\x1b[", "["])
NASTY = st.lists(st.one_of(LINE, RESERVED, ANSI_BITS), max_size=6).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(LINE, NASTY))
def test_no_line_a_job_prints_is_ever_read_as_a_frame(line: str) -> None:
    """Whatever a job prints, as it reaches home: escaped on the cluster, then through SkyPilot's
    adapter, which takes colour codes and carriage returns out of every line (a line that began
    `\\x1b[0m@@gpu-router-frame@@` was read as a frame), then the stream at home."""
    from core.providers.skypilot import adapter
    from core.providers.skypilot.stream import AttemptStream
    from core.runtime.relay import METRIC_MARK

    arrived = adapter.plain(frames.escape_log(line))
    with tempfile.TemporaryDirectory() as tmp:
        shown, got, errors = _read_back([arrived], tmp)
        stream = AttemptStream(Path(tmp, "job"), 1, 1 << 20, task="gr-1-a1")
        stream.line(f"(gr-1-a1, pid=7) {arrived}")
        stream.store()
        rows = Path(tmp, "job", "metrics.jsonl")
        assert not rows.exists() or rows.read_text() == ""
    assert shown == [adapter.plain(line)] and got == {} and errors == []
    assert not arrived.startswith((frames.FRAME_MARK, METRIC_MARK))


def test_a_forged_or_broken_frame_brings_no_file(tmp_path: Path) -> None:
    src = tmp_path / "f"
    src.write_bytes(b"x" * 100_000)
    good: list[str] = []
    frames.send_file(good.append, "ckpt", "0000000001", str(src))
    flipped = [*good[:-1], good[-1][:-1] + ("0" if good[-1][-1] != "0" else "1")]  # its hash, one digit off
    short = [good[0], *good[2:]]  # a chunk lost
    longer = [good[0], *good[1:-1], good[1], good[-1]]  # a chunk more than announced
    for lines in (flipped, short, longer):
        shown, got, errors = _read_back(lines, str(tmp_path / "in"))
        assert shown == [] and got == {} and len(errors) == 1, errors
    shown, got, errors = _read_back(good, str(tmp_path / "in"), max_bytes=1000)
    assert got == {} and "over the 1000 byte cap" in errors[0][2]
    assert not list((tmp_path / "in").glob("*.part"))  # nothing half written is left
    with pytest.raises(ValueError):
        frames.send_file(good.append, "ckpt", "../x", str(src))


def test_frames_a_job_forges_by_the_thousand_hold_one_file_a_kind_at_most(tmp_path: Path) -> None:
    """A frame is the job's to forge (it can write to the stream another way than its log):
    home takes only the names the runtime sends, one file of a kind at a time, and keeps a few
    of the errors, so a flood of beginnings never fills home's disk, its open files or memory."""
    mark = frames.FRAME_MARK
    flood = [f"{mark}ckpt {g:010d} begin 1000000" for g in range(1000)]
    flood += [f"{mark}out outputs-{i} begin 10" for i in range(100)]  # not a name the runtime sends
    flood += [f"{mark}exit ../../x begin 10", f"{mark}live ckpt begin {1 << 40}"] * 100
    folder = tmp_path / "in"
    reader = FrameReader(str(folder), 1 << 20, lambda *a: None, lambda *a: None)
    for line in flood:
        assert reader.feed(line) is None
    assert len(reader.open) == 1 and len(list(folder.glob("*.part"))) == 1
    from core.providers.skypilot.stream import MAX_ERRORS, AttemptStream

    stream = AttemptStream(tmp_path / "job", 1, 1000, task="gr-1-a1")
    for i in range(500):
        stream.line(f"(gr-1-a1, pid=7) {mark}exit record begin {10 ** 9}")
    assert len(stream.errors) == MAX_ERRORS


# -- the cluster's runtime, run here on a real job's workdir ----------------------------------------

JOB = r'''
import json, os, time
import gpu
print("@@gpu-router-frame@@ exit record begin 3", flush=True)   # a forged frame: shown, never a file
print("@@gpu-router-metric@@ {\"step\": 99, \"loss\": 0}", flush=True)  # nor a metric row
ck = gpu.checkpoint_dir() / "state.json"
for step in range(3):
    ck.write_text(json.dumps({"step": step}))
    gpu.checkpoint_saved()
    gpu.log(step=step, loss=1.0 / (step + 1))
    time.sleep(0.3)
    print(f"step {step}", flush=True)
(gpu.output_dir() / "result.txt").write_text("done\n")
os.symlink("/etc/passwd", gpu.output_dir() / "passwd")   # a link out: never comes home
'''


@pytest.fixture
def sky_job(home: Path, tmp_path: Path):
    """A job planned on a skypilot target (a stand-in venv answers the probe and `down`)."""
    from core.config.request import build_request
    from core.engine.service import submit
    from core.jobs.store import Store

    answers = {**answered(), "down": {"ok": True, "result": {}},
               "status": {"ok": True, "result": {"clusters": []}}}
    venv = stand_in(tmp_path, answers)
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}}}\n")
    project = make_git_project(tmp_path / "proj", {"train.py": JOB})
    req = build_request(project, {"script": "train.py", "hours": 0.1, "gpu": "FAKE", "wait_s": 0})
    job = submit(req, store=Store(), start_supervisor=False).job
    job.attempt = 1  # as the supervisor starts its first attempt
    return job


def _run_cluster(job, tmp_path: Path) -> list[str]:
    """The staged workdir run as SkyPilot runs it (`python3 task.py` in the synced folder, the
    cluster's own HOME), its output prefixed as SkyPilot prefixes a named task's lines."""
    from core.packaging.safe_extract import OutputCaps
    from core.providers.skypilot import launching

    work, size = launching.stage(job, OutputCaps())
    assert size > 0 and {p.name for p in work.iterdir()} == {"runtime.tar.gz", "manifest.gz", "objects.gz", "task.py"}
    cluster = tmp_path / "cluster"
    cluster.mkdir(exist_ok=True)
    synced = cluster / "sky_workdir"
    subprocess.run(["rm", "-rf", str(synced), str(cluster / "gpu-router")], check=True)
    subprocess.run(["cp", "-r", str(work), str(synced)], check=True)
    env = {"HOME": str(cluster), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    done = subprocess.run(launching.RUN.split(), cwd=synced, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    name = launching.task_name(job)
    return ["├── Waiting for task resources on 1 node.",
            *(f"({name}, pid=4242) {line}" for line in done.stdout.splitlines()), "✓ Job finished (status: SUCCEEDED)."]


async def test_the_clusters_runtime_sends_the_log_rows_checkpoints_outputs_and_exit(sky_job, tmp_path: Path) -> None:
    from core.providers.registry import build
    from core.runtime import ckptscan

    lines = _run_cluster(sky_job, tmp_path)
    provider = build()["sky"]
    stream = provider._stream(sky_job)
    for line in lines:
        stream.line(line)
    stream.end(0)
    stream.store()
    log = (stream.local_dir / "job.log").read_text()
    assert "step 2" in log and "@@gpu-router-frame@@ exit record begin 3" in log
    assert '@@gpu-router-metric@@ {"step": 99, "loss": 0}' in log  # the job's own text, shown
    assert stream.sky_lines[-1] == "✓ Job finished (status: SUCCEEDED)."
    rows = (stream.local_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [0, 1, 2]
    assert stream.errors == [] and stream.exit_doc()["code"] == 0
    # the newest generation, with its files' times as its marker says: listed as a host's folder
    assert stream.newest_generation() == 3
    scan = ckptscan.scan(str(stream.folder / "ckpt"))
    assert scan["generation_dir"] == "0000000003"
    assert json.loads((stream.folder / "ckpt-gens" / "0000000003" / "state.json").read_text()) == {"step": 2}
    assert (await provider.checkpoint_scan(sky_job))["generation_dir"] == "0000000003"
    assert "[gpu-router] attempt 1: exited with status 0" in log
    # outputs: the regular file home, the link out never packed
    with tarfile.open(stream.folder / "outputs.tar.gz") as tar:
        assert tar.getnames() == ["result.txt"]
    dest = tmp_path / "home-runs"
    dest.mkdir()
    notes = await provider.fetch_outputs(sky_job, dest)
    assert (dest / "result.txt").read_text() == "done\n" and not (dest / "passwd").exists()
    assert (dest / "job.log").is_file() and (dest / "metrics.jsonl").is_file(), notes
    await provider.close()


def test_a_follower_started_again_reads_past_what_came_and_keeps_the_log_whole(sky_job, tmp_path: Path) -> None:
    """Each store appends what came since the last (a day's log was rewritten every tick). A
    supervisor restarted reads the stream from its beginning: the generation already here is
    not written again, and the lines the attempt's files hold are read past, the joined files
    made whole where a store was cut off between its appends."""
    from core.providers.registry import build

    lines = _run_cluster(sky_job, tmp_path)
    cut = next(i for i, line in enumerate(lines) if "step 1" in line)  # the first follow broke here
    first = build()["sky"]._stream(sky_job)
    for line in lines[:cut]:
        first.line(line)
    first.store()
    files = [first.local_dir / name for name in ("job.log", "metrics.jsonl")]
    early = [f.read_bytes() for f in files]
    inodes = [f.stat().st_ino for f in files]
    for line in lines[cut:]:
        first.line(line)
    first.store()
    whole = [f.read_bytes() for f in files]
    # appended, never rewritten: a `tail -f` of job.log goes on following it
    assert [f.stat().st_ino for f in files] == inodes and all(w.startswith(e) for w, e in zip(whole, early))
    gen = first.folder / "ckpt-gens" / "0000000003" / "state.json"
    before = gen.stat().st_mtime_ns, gen.stat().st_ino
    shutil.rmtree(first.local_dir / "mirror")
    for f, body in zip(files, early):
        f.write_bytes(body)
    (first.local_dir / "mirror").mkdir()
    (first.local_dir / "mirror" / "1.log").write_bytes(early[0])  # stored, then cut off before the
    (first.local_dir / "mirror" / "1.metrics").write_bytes(early[1])  # joined files had them all
    files[0].write_bytes(early[0][: len(early[0]) // 2])
    again = build()["sky"]._stream(sky_job)
    for line in lines:
        again.line(line)
    again.store()
    assert (gen.stat().st_mtime_ns, gen.stat().st_ino) == before
    assert [f.read_bytes() for f in files] == whole  # every line once, in order
    assert whole[0].decode().count("step 2") == 1 and whole[1].count(b'"step":2,') == 1


# -- the launch's resources and its ceiling ---------------------------------------------------------


def _job(offer: str, bound: dict):
    from types import SimpleNamespace

    return SimpleNamespace(plan={"offer": offer, "skypilot": bound}, short_id="1a2b3c4d", attempt=1)


def test_the_launch_asks_for_the_plans_gpus_under_its_ceiling_on_its_one_cloud() -> None:
    from core.providers.skypilot import catalog, launching

    fake = catalog.offers(SLURM_PRICES)["FAKE"]
    res = launching.resources(_job("FAKE:2", catalog.binding(fake, 2)))
    assert res == {"accelerators": "FAKE:2", "max_hourly_cost": pytest.approx(4.4), "use_spot": False,
                   "infra": "slurm"}  # the cloud only: a Slurm row's region is a partition
    two_clouds = {"max_hourly_cost": 2.0, "use_spot": True, "candidates": [
        {"cloud": "aws", "region": "us-east-1", "instance_type": "g5", "count": 1, "price": 3.0, "spot_price": 1.5},
        {"cloud": "runpod", "region": "CA", "instance_type": "1x", "count": 1, "price": 1.8, "spot_price": None}]}
    res = launching.resources(_job("A10G", two_clouds))
    assert res == {"accelerators": "A10G:1", "max_hourly_cost": 2.0, "use_spot": True}  # SkyPilot picks under it
    assert launching.resources(_job("A10G", two_clouds), clouds=["aws"])["infra"] == "aws"  # the target's one cloud
    with pytest.raises(ValueError) as err:
        launching.resources(_job("FAKE", {}))
    assert "binds no SkyPilot price ceiling" in str(err.value)


def test_a_price_that_rose_past_the_approved_ceiling_is_never_launched() -> None:
    from core.providers.skypilot import catalog, launching

    bound = catalog.binding(catalog.offers(SLURM_PRICES)["FAKE"])
    job = _job("FAKE", bound)
    assert launching.over_ceiling(job, SLURM_PRICES) is None
    # the 2-GPU machine's 4.0 an hour serves one GPU only at its whole price: not under 2.20
    dearer = json.loads(json.dumps(SLURM_PRICES).replace('"price": 2.0', '"price": 2.5'))
    assert launching.over_ceiling(job, dearer) == "FAKE x1 costs $2.50/h now, over the $2.20/h its plan was approved for"
    gone = {**SLURM_PRICES, "gpus": {}}
    assert launching.over_ceiling(job, gone) == "no enabled cloud lists FAKE now"
    assert launching.over_ceiling(_job("FAKE:4", catalog.binding(catalog.offers(SLURM_PRICES)["FAKE"], 4)),
                                  SLURM_PRICES) == "no enabled cloud offers 4 FAKE per machine now"


def test_a_launch_held_to_one_cloud_is_judged_by_that_clouds_price() -> None:
    """Slurm's price rose past the ceiling while another cloud lists the GPU cheaply: the
    launch, held to slurm (its plan's one cloud), would run there at the higher price (Slurm
    ignores max_hourly_cost), so it is refused; the cheap cloud's row does not excuse it."""
    from core.providers.skypilot import catalog, launching

    job = _job("FAKE", catalog.binding(catalog.offers(SLURM_PRICES)["FAKE"]))
    dearer = json.loads(json.dumps(SLURM_PRICES).replace('"price": 2.0', '"price": 2.5'))
    cheap = {"cloud": "aws", "instance_type": "p9", "accelerator_name": "FAKE", "accelerator_count": 1,
             "cpu_count": 8, "device_memory": 0.0, "memory": 64.0, "price": 1.0, "spot_price": None,
             "region": "us-east-1"}
    dearer["gpus"]["FAKE"] = [*dearer["gpus"]["FAKE"], cheap]
    assert launching.resources(job)["infra"] == "slurm"
    assert launching.over_ceiling(job, dearer) is None  # any cloud: aws's would do
    assert launching.over_ceiling(job, dearer, "slurm") == \
        "FAKE x1 costs $2.50/h now, over the $2.20/h its plan was approved for"
    assert launching.over_ceiling(job, dearer, "lambda") == "lambda does not list FAKE now"


# -- where an attempt stands ---------------------------------------------------------------------------


async def test_a_cluster_skypilot_no_longer_lists_is_a_session_that_ended(sky_job) -> None:
    """No exit record and no cluster: the session ended (the job resumes from home's
    checkpoint), once the stream has ended; a cluster still on its way right after its launch
    is not called lost."""
    import time

    from core.providers.registry import build

    provider = build()["sky"]
    sky_job.handle = {"cluster": "gr-1a2b3c4d-a1", "sky_job_id": 1, "launched_at": time.time()}
    stream = provider._stream(sky_job)
    poll = await provider._ask(sky_job, stream)  # just launched, the stream still open
    assert poll.phase == "running" and poll.detail == "SkyPilot does not show cluster gr-1a2b3c4d-a1 yet"
    stream.end(broken="the cluster went away")
    poll = await provider._ask(sky_job, stream)  # asked again at once: the stream has ended
    assert poll.phase == "lost" and poll.vanished
    assert poll.detail.startswith("SkyPilot's cluster gr-1a2b3c4d-a1 is gone and the job sent no exit record: "
                                  "the session ended (preempted")
    assert "went down by itself 10 min after the task ended" in poll.detail and "autodown_minutes" in poll.detail
    await provider.close()


# -- a launch after a restart -------------------------------------------------------------------------

SEQUENCED = '''#!{python}
# a stand-in for SkyPilot's venv python whose cluster is INIT for the first two looks, then UP;
# its queue shows the attempt's task from the third look on where TASK is set; each op is logged
import json, os, sys
state, task = {state!r}, {task!r}
def count(op):
    path = state + "." + op
    n = int(open(path).read()) if os.path.exists(path) else 0
    open(path, "w").write(str(n + 1))
    return n
for raw in sys.stdin:
    req = json.loads(raw)
    op = req["op"]
    n = count(op)
    with open(state + ".ops", "a") as f:
        f.write(op + "\\n")
    if op == "status":
        doc = {{"ok": True, "result": {{"clusters": [{{"name": req["args"]["clusters"][0],
               "status": "INIT" if n < 2 else "UP", "launched_at": 1000}}]}}}}
    elif op == "queue" and n < 2:
        doc = {{"ok": False, "error": {{"type": "ClusterNotUpError", "message": "not up yet"}}}}
    elif op == "queue":
        jobs = [{{"job_id": 1, "name": task, "status": "RUNNING"}}] if task else []
        doc = {{"ok": True, "result": {{"cluster": "c", "jobs": jobs}}}}
    else:
        doc = {{"ok": False, "error": {{"type": "ValueError", "message": "not in this test: " + op}}}}
    sys.stdout.write(json.dumps({{"id": req["id"], **doc}}) + "\\n")
    sys.stdout.flush()
'''


@pytest.mark.parametrize("task_there", [True, False])
async def test_a_launch_after_a_restart_waits_for_the_one_under_way_and_never_runs_the_job_twice(
        sky_job, tmp_path: Path, monkeypatch, task_there: bool) -> None:
    """A supervisor that died in a launch left SkyPilot carrying it on: the attempt's cluster
    still starting is waited for, and once it shows the task, that task is followed, never
    launched again; a cluster that stands UP without it was left by a launch that died, and
    the launch goes on (here to today's prices, which this stand-in refuses)."""
    from core.providers.registry import build
    from core.providers.skypilot import launching, target
    from core.providers.skypilot.client import SkyPilotError

    venv = tmp_path / "seq-venv"
    (venv / "bin").mkdir(parents=True)
    state = str(tmp_path / "seq")
    (venv / "bin" / "python").write_text(SEQUENCED.format(python=sys.executable, state=state,
                                                          task=launching.task_name(sky_job) if task_there else ""))
    (venv / "bin" / "python").chmod(0o755)
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}}}\n")
    monkeypatch.setattr(target, "ADOPT_POLL_S", 0.05)
    monkeypatch.setattr(target, "ADOPT_SETTLE_S", 0.3)
    provider = build()["sky"]
    try:
        if task_there:
            handle = await provider.launch(sky_job, {})
            assert handle["adopted"] and handle["sky_job_id"] == 1 and handle["billed_from"] == 1000
            assert handle["cluster"] == launching.cluster_name(sky_job)
        else:
            with pytest.raises(SkyPilotError) as err:
                await provider.launch(sky_job, {})
            assert err.value.op == "prices"
    finally:
        await provider.close()
    ops = Path(state + ".ops").read_text().split()
    assert "launch" not in ops and ops[:2] == ["status", "queue"]
    assert ops.count("status") >= 3  # it waited through the INIT looks
    assert ("prices" in ops) is (not task_there)


async def test_a_launch_that_cannot_learn_whether_its_cluster_runs_the_task_does_not_launch(
        sky_job, tmp_path: Path) -> None:
    """SkyPilot could not answer whether the attempt's cluster exists (its API server away):
    that once read as "no cluster" and launched, which after a restart mid-launch ran the job a
    second time on the same cluster. Now the launch stops and says how to go on."""
    from core.providers.registry import build

    venv = stand_in(tmp_path, {**answered(), "status": {"ok": False, "error": {
        "type": "ApiServerConnectionError", "message": "could not reach the API server"}}})
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}}}\n")
    provider = build()["sky"]
    try:
        with pytest.raises(RuntimeError) as err:
            await provider.launch(sky_job, {})
    finally:
        await provider.close()
    assert "could not reach the API server" in str(err.value) and "never runs twice" in str(err.value)
    assert f"gpu resume {sky_job.short_id}" in str(err.value)


async def test_the_cluster_goes_down_as_soon_as_the_exit_record_is_home(sky_job, tmp_path: Path) -> None:
    """Everything the task sends comes before its exit record: the poll that reads the record
    starts taking the cluster down, whatever the supervisor does next (a retry starts another
    attempt on a new cluster, and must not leave this one paying until autodown)."""
    from core.providers.registry import build

    venv = tmp_path / "seq-venv"
    (venv / "bin").mkdir(parents=True)
    state = str(tmp_path / "seq")
    (venv / "bin" / "python").write_text(SEQUENCED.format(python=sys.executable, state=state, task=""))
    (venv / "bin" / "python").chmod(0o755)
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}}}\n")
    provider = build()["sky"]
    sky_job.handle = {"cluster": "gr-1a2b3c4d-a1", "sky_job_id": 1, "launched_at": 1.0}
    stream = provider._stream(sky_job)
    stream.end(0)  # the stream has ended: no follower is started
    (stream.folder / "exit.json").write_text(json.dumps({"code": 3}))
    try:
        poll = await provider.poll(sky_job)
        assert poll.phase == "exited" and poll.exit_code == 3
        why = await provider._downs[(sky_job.id, sky_job.attempt)]
        assert why == "not in this test: down"  # this stand-in refuses it: asked at the poll
        assert await provider.poll(sky_job) == poll and len(provider._downs) == 1  # asked once
    finally:
        await provider.close()
    assert Path(state + ".ops").read_text().split() == ["down"]


# -- a follow that breaks -------------------------------------------------------------------------------

BREAKING = '''#!{python}
# a stand-in for SkyPilot's venv python whose `logs` streams LINES; the first adapter dies half
# way through them (as one does when its API server goes away), the next sends them all
import json, os, sys
lines = json.load(open({lines!r}))
runs = {state!r} + ".runs"
first = not os.path.exists(runs)
open(runs, "a").write("run\\n")
for raw in sys.stdin:
    req = json.loads(raw)
    if req["op"] != "logs":
        sys.stdout.write(json.dumps({{"id": req["id"], "ok": False, "error": {{"type": "X", "message": req["op"]}}}}) + "\\n")
        continue
    for i, line in enumerate(lines):
        if first and i == len(lines) // 2:
            sys.stdout.flush()
            os._exit(1)
        sys.stdout.write(json.dumps({{"id": req["id"], "line": line}}) + "\\n")
    sys.stdout.write(json.dumps({{"id": req["id"], "ok": True, "result": {{"exit_code": 0}}}}) + "\\n")
    sys.stdout.flush()
'''


async def test_a_follow_that_broke_is_begun_again_and_brings_each_line_once(sky_job, tmp_path: Path,
                                                                            monkeypatch) -> None:
    """The adapter died half way through the task's output (its API server went away): the
    stream was marked ended for good, the outputs and exit record never came, and a follower
    begun again (a restart, a cancelled one) appended every line a second time. Now a broken
    follow is begun again from the start, a while later, and reads past what came."""
    import asyncio

    from core.providers.registry import build
    from core.providers.skypilot import target

    lines = _run_cluster(sky_job, tmp_path)
    (tmp_path / "lines.json").write_text(json.dumps(lines))
    venv = tmp_path / "brk-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(BREAKING.format(python=sys.executable, lines=str(tmp_path / "lines.json"),
                                                         state=str(tmp_path / "brk")))
    (venv / "bin" / "python").chmod(0o755)
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}}}\n")
    monkeypatch.setattr(target, "REFOLLOW_S", 0.1)
    provider = build()["sky"]
    sky_job.handle = {"cluster": "gr-1a2b3c4d-a1", "sky_job_id": 1, "launched_at": 1.0}
    try:
        deadline = asyncio.get_running_loop().time() + 120  # a bound, not a timing: two adapters start
        while asyncio.get_running_loop().time() < deadline:
            stream = provider._follow(sky_job)
            await asyncio.sleep(0.05)
            stream.store()
            if stream.ended:
                break
        assert stream.ended and stream.follows == 2 and stream.exit_code == 0  # it broke once, then ended
        assert (tmp_path / "brk.runs").read_text().count("run") == 2
    finally:
        await provider.close()
    log = (stream.local_dir / "job.log").read_text()
    assert log.count("step 1\n") == 1 and log.count("[gpu-router] attempt 1: exited with status 0") == 1
    rows = (stream.local_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [0, 1, 2]
    assert stream.exit_doc()["code"] == 0 and (stream.folder / "outputs.tar.gz").is_file()
