"""The pbs target against recorded PBS output (PBS cannot run here: see tests/data/pbs/README.md).

`tests/data/pbs/bin` holds stand-ins for qsub, qstat and qdel that record their arguments and
answer with the recorded output a test puts in place. The first test drives a job through the
installed `gpu` and the real supervisor (upload cache, batch script, queue reason, running,
done, walltime -> session ended -> a new attempt); the rest check the parsers and the mapping.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import copy_example, gpu_json, wait_state, write_user_config

DATA = Path(__file__).resolve().parents[1] / "data" / "pbs"
PYTHON = getattr(__import__("sys"), "_base_executable", None) or __import__("sys").executable


@pytest.fixture
def fake_pbs(tmp_path: Path, home: Path) -> Path:
    d = tmp_path / "pbs"
    d.mkdir()
    shutil.copy(DATA / "qstat_Q.txt", d / "qstat_Q.out")
    shutil.copy(DATA / "qstat_queued.json", d / "qstat.out")
    import os

    write_user_config(
        "targets:\n"
        f"  cluster: {{kind: pbs, local: true, root: {tmp_path / 'remote'}, python: {PYTHON},\n"
        f"            partition: gpu, account: lab42, cpus: 4, memory_gb: 8,\n"
        f"            env: {{PATH: '{DATA / 'bin'}:{os.environ['PATH']}', FAKE_PBS_DIR: '{d}'}}}}\n")
    return d


def record(d: Path, name: str) -> None:
    shutil.copy(DATA / name, d / "qstat.out")


def wait_reason(short: str, text: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = gpu_json("status", short)
        if text in doc["reason"]:
            return doc
        time.sleep(0.2)
    raise AssertionError(f"reason never showed {text!r}: {doc}")


@pytest.mark.slow
def test_a_job_through_qsub_qstat_and_the_supervisor(fake_pbs: Path, tmp_path: Path) -> None:
    listed = {t["name"]: t for t in gpu_json("targets")["targets"]}
    assert listed["cluster"]["available"] is True and listed["cluster"]["kind"] == "pbs"
    project = copy_example(tmp_path / "quickstart")
    sub = gpu_json("submit", "--provider", "cluster", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    doc = wait_reason(short, "queued: Not Running: Insufficient amount of resource: ngpus")
    assert doc["state"] == "provisioning"
    verbose = gpu_json("status", short, "--verbose")
    assert verbose["handle"]["pbs_job_id"] == "4242.pbs01"
    script = (fake_pbs / "script.1").read_text()
    for line in ("#PBS -l walltime=00:13:00", "#PBS -q gpu", "#PBS -A lab42", "#PBS -r n",
                 "#PBS -l select=1:ncpus=4:ngpus=1:mem=8192mb", "launch.py --foreground",
                 "kill -s USR1 $$"):  # no --signal in PBS: the script's own timer asks for the checkpoint
        assert line in script, line
    assert "-o " in (fake_pbs / "qsub.log").read_text()
    record(fake_pbs, "qstat_running.json")
    wait_state(short, {"running"}, timeout=30)
    record(fake_pbs, "qstat_walltime.json")
    doc = wait_state(short, {"provisioning"}, timeout=30)  # the session ended; a new attempt started
    assert doc["attempt"] == 2
    changes = [(e["from"], e["to"], e["reason"]) for e in gpu_json("status", short, "--verbose")["events"] if e["to"]]
    assert any(b == "migrating" and "walltime" in r for _, b, r in changes)
    assert (fake_pbs / "count").read_text().strip() == "2"  # qsub ran again for attempt 2
    # attempt 2 (4243.pbs01) finishes
    (fake_pbs / "qstat.out").write_text((DATA / "qstat_finished.json").read_text().replace("4242.pbs01", "4243.pbs01"))
    done = wait_state(short, {"done", "failed"}, timeout=30)
    assert done["state"] == "done" and done["exit_code"] == 0
    qstat_calls = (fake_pbs / "qstat.log").read_text().splitlines()
    assert all(c.startswith("-x -f -F json") for c in qstat_calls if c != "-Q")


@pytest.mark.slow
def test_cancel_goes_through_qdel(fake_pbs: Path, tmp_path: Path) -> None:
    project = copy_example(tmp_path / "quickstart")
    sub = gpu_json("submit", "--provider", "cluster", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    record(fake_pbs, "qstat_running.json")
    wait_state(short, {"running"}, timeout=30)
    import subprocess

    from tests.conftest import gpu_exe

    cancel = subprocess.Popen([gpu_exe(), "cancel", short, "--json"], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not (fake_pbs / "qdel.log").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (fake_pbs / "qdel.log").read_text().splitlines()[0] == "4242.pbs01"
    record(fake_pbs, "qstat_failed.json")  # 4242 ended (status 3) after the qdel
    out, _ = cancel.communicate(timeout=30)
    assert json.loads(out)["job"]["state"] == "cancelled"


@pytest.mark.slow
def test_a_job_pbs_forgets_with_no_exit_record_resumes_as_a_session_that_ended(fake_pbs: Path, tmp_path: Path) -> None:
    """PBS purges a running job from its history (a server restart, a lost node) and the
    attempt recorded no exit: the session ended, not the script. The job is not failed: its
    leftovers are qdel'ed and it runs again as the next attempt (restart: allow here, since the
    stand-in PBS never runs the script and so nothing was checkpointed)."""
    project = copy_example(tmp_path / "quickstart")
    (project / "gpu.yaml").write_text((project / "gpu.yaml").read_text() + "restart: allow\n")
    sub = gpu_json("submit", "--provider", "cluster", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    record(fake_pbs, "qstat_running.json")
    wait_state(short, {"running"}, timeout=30)
    forgotten = json.loads((DATA / "qstat_running.json").read_text())
    forgotten["Jobs"] = {}
    (fake_pbs / "qstat.out").write_text(json.dumps(forgotten))
    deadline = time.monotonic() + 120  # PBS's answer is trusted only 30 s after the submit
    while True:
        doc = gpu_json("status", short, "--verbose")
        if doc["attempt"] == 2:
            break
        assert doc["state"] not in ("failed", "done", "cancelled"), doc["reason"]
        assert time.monotonic() < deadline, doc["reason"]
        time.sleep(0.5)
    moved = [e for e in doc["events"] if e["to"] == "migrating"]
    assert moved and moved[0]["reason"].startswith("PBS no longer knows job 4242.pbs01 and it recorded "
                                                    "no exit status: the session ended"), moved
    # attempt 2 is recorded before its qsub runs, and the leftovers are stopped beside it: wait
    # for both to be seen (the CI run read the count between the two)
    deadline = time.monotonic() + 60
    while not ("4242.pbs01" in _read(fake_pbs / "qdel.log").split()
               and _read(fake_pbs / "count").strip() == "2"):
        assert time.monotonic() < deadline, (_read(fake_pbs / "qdel.log"), _read(fake_pbs / "count"))
        time.sleep(0.2)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_parsers_and_states_on_recorded_output() -> None:
    from core.providers.pbs import map_job, parse_qstat_json, parse_qstat_text

    q = parse_qstat_json((DATA / "qstat_queued.json").read_text())["4242.pbs01"]
    p = map_job(q, None, False)
    assert p.phase == "provisioning" and p.detail.startswith("queued: Not Running")
    assert map_job(parse_qstat_json((DATA / "qstat_running.json").read_text())["4242.pbs01"], None, False).phase == "running"
    f = map_job(parse_qstat_json((DATA / "qstat_finished.json").read_text())["4242.pbs01"], None, False)
    assert (f.phase, f.exit_code) == ("exited", 0)
    w = map_job(parse_qstat_json((DATA / "qstat_walltime.json").read_text())["4242.pbs01"], None, False)
    assert w.phase == "session_ended" and "walltime" in w.detail
    both = parse_qstat_json((DATA / "qstat_failed.json").read_text())
    assert map_job(both["4242.pbs01"], None, False).exit_code == 3
    sig = map_job(both["4243.pbs01"], None, False)
    assert sig.exit_code == -15 and "signal 15" in sig.detail
    assert map_job(both["4242.pbs01"], {"code": 3, "error": None}, False).exit_code == 3
    assert map_job({"job_state": "F", "Exit_status": 0}, {"code": 0}, True).phase == "session_ended"
    torque = parse_qstat_text((DATA / "qstat_torque.txt").read_text())
    assert torque["77.torque01"]["comment"].endswith("on any node")
    assert map_job(torque["77.torque01"], None, False).phase == "provisioning"
    assert map_job(torque["78.torque01"], None, False).exit_code == 0
    assert parse_qstat_json("qstat: Unknown Job Id 1.x") == {}


def test_one_qstat_per_cycle_for_many_jobs(tmp_path: Path, home: Path) -> None:
    """Twenty jobs polled at once (as the supervisor does) cost one qstat call."""
    import os

    from core.providers.pbs import PBSProvider
    from core.transport.local import LocalTransport

    d = tmp_path / "pbs"
    d.mkdir()
    jobs_doc = json.loads((DATA / "qstat_running.json").read_text())
    one = jobs_doc["Jobs"].pop("4242.pbs01")
    for i in range(20):
        jobs_doc["Jobs"][f"{5000 + i}.pbs01"] = one
    (d / "qstat.out").write_text(json.dumps(jobs_doc))
    t = LocalTransport("cluster", env={"PATH": f"{DATA / 'bin'}:{os.environ['PATH']}", "FAKE_PBS_DIR": str(d)})
    prov = PBSProvider("cluster", t, root=str(tmp_path / "remote"), python=PYTHON, options={"local": True})
    jobs = [SimpleNamespace(id=f"j{i}", attempt=1, handle={"pbs_job_id": f"{5000 + i}.pbs01",
                                                           "launched_at": time.time()}) for i in range(20)]

    async def cycles() -> list[str]:
        first = await asyncio.gather(*(prov.poll(j) for j in jobs))
        await asyncio.sleep(2.1)
        second = await asyncio.gather(*(prov.poll(j) for j in jobs))
        return [p.phase for p in first + second]

    phases = asyncio.run(cycles())
    assert phases == ["running"] * 40
    assert len((d / "qstat.log").read_text().splitlines()) == 2  # one per cycle, not one per job
