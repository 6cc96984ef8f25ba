"""The slurm target against a real one-node Slurm (munge, slurmctld, slurmd, two fake GPUs).

The cluster is the session's `slurm` fixture (tests/services.SlurmCluster, started from the
recipe in ../shared/recipes/slurm). Most tests use the target as on a login node (`local:
true`); one goes through the real sshd to the same cluster. The unit tests at the bottom check
the state mapping and parsers on recorded output and need no cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import (copy_example, gpu_json, make_git_project, run_gpu, wait_state,
                            write_user_config)

PYTHON = getattr(__import__("sys"), "_base_executable", None) or __import__("sys").executable


@pytest.fixture
def lab(slurm, home: Path, tmp_path: Path):
    """A `lab` slurm target on this machine (the login node) for this test's world."""
    root = tmp_path / "remote"
    write_user_config(
        "# the test's own targets\n"
        "targets:\n"
        f"  lab: {{kind: slurm, local: true, root: {root}, python: {PYTHON}, max_jobs: 4,\n"
        f"        env: {{SLURM_CONF: {slurm.conf}}}}}\n")
    yield root
    from tests.conftest import _stop_world

    _stop_world(home)
    import pwd
    import os

    slurm.run("scancel", "-u", pwd.getpwuid(os.getuid()).pw_name)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and slurm.run("squeue", "-h").stdout.strip():
        time.sleep(0.3)


def slurm_id(short: str) -> str:
    return gpu_json("status", short, "--verbose")["handle"]["slurm_job_id"]


def events(short: str) -> list[dict]:
    return gpu_json("status", short, "--verbose")["events"]


@pytest.mark.slow
def test_queued_then_running_then_done_and_the_outputs_come_home(slurm, lab: Path, tmp_path: Path) -> None:
    listed = {t["name"]: t for t in gpu_json("targets")["targets"]}
    assert listed["lab"]["available"] is True and listed["lab"]["gpu"] == "2x fake"
    # both GPUs taken by someone else's job: ours must wait in the queue
    blocker = slurm.run("sbatch", "--parsable", "--gpus=2", "-o", "/dev/null", "--wrap", "sleep 120")
    assert blocker.returncode == 0, blocker.stderr
    blocker_id = blocker.stdout.strip()
    project = copy_example(tmp_path / "quickstart")
    sub = gpu_json("submit", "--provider", "lab", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        doc = gpu_json("status", short)
        # slurmctld gives a pending job its reason on its next scheduling pass: until then
        # squeue says None, shown as "queued: waiting"
        if doc["reason"].startswith("queued:") and doc["reason"] != "queued: waiting":
            break
        time.sleep(0.3)
    else:
        pytest.fail(f"the job never showed as queued with slurm's reason: {doc}")
    assert doc["state"] == "provisioning"
    assert slurm.job_state(slurm_id(short)) == "PENDING"
    assert doc["reason"] in ("queued: Resources", "queued: Priority"), doc["reason"]
    slurm.run("scancel", blocker_id)
    done = wait_state(short, {"done", "failed"}, timeout=180)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    assert [e["to"] for e in events(short) if e["to"]] == ["queued", "routing", "provisioning", "running", "done"]
    assert slurm.job_state(slurm_id(short)) == "COMPLETED"
    out = Path(sub["job"]["outputs_dir"])
    assert json.loads((out / "result.json").read_text())["steps"] == 60
    assert (out / "job.log").read_text().count("done: w=") == 1
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 60
    script = next((lab / "jobs").glob("*/attempts/1/job.sbatch")).read_text()
    for line in ("#SBATCH --gpus=1", "#SBATCH --time=13", "#SBATCH --signal=B:USR1@", "#SBATCH --no-requeue",
                 f"#SBATCH --job-name=gpu-{short}-1-quickstart"):
        assert line in script, line


@pytest.mark.slow
def test_resources_from_gpu_yaml_reach_slurm_and_args_stay_inert(slurm, lab: Path, tmp_path: Path) -> None:
    marker = Path(f"/tmp/pwned-{uuid.uuid4().hex[:10]}")
    project = make_git_project(tmp_path / "p", {
        "gpu.yaml": "script: env.py\ncpus: 2\ngpus: 2\nmemory_gb: 1.5\ntime_minutes: 3\npartition: debug\n",
        "env.py": "import json, os, sys\nprint('ARGV', json.dumps(sys.argv[1:]))\n"
                  "for k in ('CUDA_VISIBLE_DEVICES', 'SLURM_CPUS_PER_TASK', 'SLURM_MEM_PER_NODE', "
                  "'SLURM_JOB_PARTITION'):\n    print(k, os.environ.get(k))\n",
    })
    args = [f"'; touch {marker}; echo '", f"$(touch {marker})"]
    sub = gpu_json("submit", "--provider", "lab", "--hours", "0.1", "--wait-s", "10", "--", *args, cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=120)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", log
    assert "CUDA_VISIBLE_DEVICES 0,1" in log
    assert "SLURM_CPUS_PER_TASK 2" in log and "SLURM_MEM_PER_NODE 1536" in log
    assert "SLURM_JOB_PARTITION debug" in log
    assert json.loads(next(ln for ln in log.splitlines() if ln.startswith("ARGV "))[5:]) == args
    assert not marker.exists()
    assert gpu_json("status", short, "--verbose")["plan"]["resources"] == {
        "cpus": 2, "gpus": 2, "memory_gb": 1.5, "time_minutes": 3, "partition": "debug"}
    script = next((lab / "jobs").glob("*/attempts/1/job.sbatch")).read_text()
    assert "#SBATCH --time=3\n" in script and "#SBATCH --mem=1536M" in script


@pytest.mark.slow
def test_a_module_that_does_not_load_fails_the_job_and_says_so(slurm, lab: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": "print('never')\n",
                                                "gpu.yaml": "modules: [cuda/12.1]\ngpus: 0\n"})
    sub = gpu_json("submit", "a.py", "--provider", "lab", "--hours", "0.1", "--wait-s", "10", cwd=project)
    done = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert done["state"] == "failed" and done["exit_code"] == 97
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert "module load cuda/12.1 failed" in log and "never" not in log


@pytest.mark.slow
def test_cancel_reaches_scancel(slurm, lab: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"sleep.py": "import time\nprint('up', flush=True)\ntime.sleep(600)\n"})
    sub = gpu_json("submit", "sleep.py", "--provider", "lab", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=120)
    sid = slurm_id(short)
    assert slurm.job_state(sid) == "RUNNING"
    res = gpu_json("cancel", short, timeout=60)
    assert res["job"]["state"] == "cancelled"
    deadline = time.monotonic() + 30
    while slurm.job_state(sid) not in ("CANCELLED", "COMPLETED", "FAILED") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert slurm.job_state(sid) == "CANCELLED"


@pytest.mark.slow
def test_a_one_minute_limit_checkpoints_ends_the_session_and_resumes(slurm, lab: Path, tmp_path: Path) -> None:
    """Slurm's --signal reaches the job before the limit; TIMEOUT is a session that ended
    (migrating, then a new attempt on the same target), never `failed`. About 80 s."""
    project = make_git_project(tmp_path / "p", {
        "gpu.yaml": "script: limit.py\ntime_minutes: 1\ngpus: 0\n",
        "limit.py": (
            "import time\nimport gpu\n"
            "print('attempt', gpu.attempt(), flush=True)\n"
            "if gpu.attempt() > 1:\n"
            "    print('resumed from', (gpu.checkpoint_dir() / 'state').read_text(), flush=True)\n"
            "    (gpu.output_dir() / 'resumed.txt').write_text('ok')\n"
            "    raise SystemExit(0)\n"
            "said = False\n"
            "while True:  # ignores the request to stop: Slurm's time limit ends it\n"
            "    if gpu.should_checkpoint() and not said:\n"
            "        print('should_checkpoint() true', flush=True)\n"
            "        (gpu.checkpoint_dir() / 'state').write_text('step-7')\n"
            "        said = True\n"
            "    time.sleep(0.5)\n"),
    })
    sub = gpu_json("submit", "--provider", "lab", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    first = None
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        doc = gpu_json("status", short, "--verbose")
        first = first or doc["handle"].get("slurm_job_id")
        if doc["state"] in ("done", "failed", "cancelled"):
            break
        time.sleep(1)
    assert doc["state"] == "done", run_gpu("logs", short).stdout
    assert doc["attempt"] == 2
    assert slurm.job_state(first) == "TIMEOUT"
    changes = [(e["from"], e["to"], e["reason"]) for e in doc["events"] if e["to"]]
    assert ("running", "migrating") in [(a, b) for a, b, _ in changes]
    ended = next(r for a, b, r in changes if b == "migrating")
    assert "TIMEOUT" in ended and "session ended" in ended
    assert not any(b == "failed" for _, b, _ in changes)
    log = run_gpu("logs", short).stdout
    assert "should_checkpoint() true" in log and "resumed from step-7" in log
    assert (Path(sub["job"]["outputs_dir"]) / "resumed.txt").read_text() == "ok"


@pytest.mark.slow
def test_a_new_checkpoint_generation_comes_home_on_the_poll(slurm, lab: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The squeue each cycle already makes also names each running job's newest frozen
    generation: with the mirror's own clock set to an hour, both saves still come home while
    the job runs, each at the generation the job froze."""
    monkeypatch.setenv("GPU_ROUTER_CKPT_EVERY_S", "3600")
    project = make_git_project(tmp_path / "p", {
        "gpu.yaml": "script: saves.py\ngpus: 0\n",
        "saves.py": (
            "import time\nimport gpu\n"
            "for step in (1, 2):\n"
            "    (gpu.checkpoint_dir() / 'state').write_text(f'step-{step}')\n"
            "    gpu.checkpoint_saved()\n"
            "    print('saved', step, flush=True)\n"
            "    time.sleep(3)\n"
            "time.sleep(300)  # cancelled by the test\n"),
    })
    sub = gpu_json("submit", "--provider", "lab", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short, job_id = sub["job"]["short_id"], sub["job"]["id"]
    home_copy = Path(os.environ["GPU_ROUTER_HOME"]) / "jobs" / job_id / "ckpt-home" / "state"
    seen: dict[int, str] = {}
    deadline = time.monotonic() + 120
    from core.packaging import checkpoints

    while time.monotonic() < deadline and 2 not in seen:
        # the copy home runs beside the job's polls: read home's manifest, then the file, and
        # keep the pair only where the file is the one that manifest names (a swap may land
        # between the two reads)
        doc = gpu_json("status", short)
        held = checkpoints.manifest(job_id) or {}
        gen, want = held.get("generation"), (held.get("files") or {}).get("state", {}).get("sha256")
        if gen and doc["state"] == "running" and home_copy.exists():
            data = home_copy.read_bytes()
            if hashlib.sha256(data).hexdigest() == want:
                seen[gen] = data.decode()
        time.sleep(0.3)
    log = run_gpu("logs", short).stdout
    assert seen.get(2) == "step-2", (seen, log)
    assert seen.get(1, "step-1") == "step-1", seen  # generation 1 is step 1 if it was seen at all
    assert gpu_json("cancel", short)["job"]["state"] == "cancelled"


@pytest.mark.slow
def test_secrets_need_pass_secrets_then_reach_the_job(slurm, lab: Path, keychain, tmp_path: Path) -> None:
    from core.engine.approvals import approve
    from core.jobs.store import Store

    value = "tok-" + uuid.uuid4().hex
    assert run_gpu("secrets", "set", "API_TOKEN", input=value).returncode == 0
    project = make_git_project(tmp_path / "p", {"t.py": "import os\nprint('token', os.environ['API_TOKEN'])\n",
                                                "gpu.yaml": "gpus: 0\n"})

    def run_once() -> dict:
        sub = gpu_json("submit", "t.py", "--provider", "lab", "--hours", "0.1", "--secret", "API_TOKEN",
                       "--wait-s", "10", cwd=project)
        approve(Store(), sub["job"]["id"], digest=sub["job"]["digest"], actor="test")
        return wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)

    refused = run_once()
    assert refused["state"] == "failed" and "pass_secrets: true" in refused["reason"]
    cfg = Path(__import__("os").environ["GPU_ROUTER_CONFIG"])
    cfg.write_text(cfg.read_text().replace("max_jobs: 4,", "max_jobs: 4, pass_secrets: true,"))
    done = run_once()
    assert done["state"] == "done", run_gpu("logs", done["short_id"]).stdout
    log = run_gpu("logs", done["short_id"]).stdout
    assert "token [secret]" in log and value not in log
    for path in lab.rglob("*"):  # nothing gpu-router wrote on the cluster holds it
        if path.is_file() and not path.is_symlink():
            assert value.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_slurm_over_ssh_with_probe_of_partitions(slurm, sshd, home: Path, tmp_path: Path) -> None:
    o = sshd.target_options(tmp_path / "remote", PYTHON)
    added = gpu_json("targets", "add", "slurm", "hpc", "--host", o["host"], "--port", str(o["port"]),
                     "--user", o["user"], "--key", o["key"], "--known-hosts", o["known_hosts"],
                     "--root", o["root"], "--python", o["python"], "--partition", "debug",
                     "--env", f"SLURM_CONF={slurm.conf}")
    probe = added["probe"]
    assert probe["available"] is True and probe["gpu"] == "2x fake"
    part = probe["details"]["partitions"][0]
    assert part["name"] == "debug" and part["gpus"] == [{"type": "fake", "count": 2}] and "queued" in part
    human = run_gpu("targets", "add", "slurm", "hpc", "--host", o["host"], "--port", str(o["port"]),
                    "--user", o["user"], "--key", o["key"], "--known-hosts", o["known_hosts"],
                    "--root", o["root"], "--python", o["python"], "--partition", "debug",
                    "--env", f"SLURM_CONF={slurm.conf}").stdout
    assert "partition debug (used): up" in human and "2x fake per node" in human
    project = copy_example(tmp_path / "p")
    sub = gpu_json("submit", "--provider", "hpc", "--hours", "0.1", "--wait-s", "10", cwd=project)
    try:
        done = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=180)
        assert done["state"] == "done", run_gpu("logs", sub["job"]["short_id"]).stdout
        assert json.loads((Path(sub["job"]["outputs_dir"]) / "result.json").read_text())["steps"] == 60
    finally:
        import os
        import pwd

        slurm.run("scancel", "-u", pwd.getpwuid(os.getuid()).pw_name)


# -- no cluster needed: the mapping and the parsers, on recorded output --------------------


def test_state_mapping() -> None:
    from core.providers.slurm import map_state

    assert map_state("PENDING", "Resources", None, False).detail == "queued: Resources"
    assert map_state("PENDING", "None", None, False).phase == "provisioning"
    assert map_state("RUNNING", "None", None, False).phase == "running"
    assert map_state("COMPLETING", "", None, False).phase == "running"
    done = map_state("COMPLETED", "", {"code": 0}, False)
    assert (done.phase, done.exit_code) == ("exited", 0)
    failed = map_state("FAILED", "NonZeroExitCode", {"code": 3}, False)
    assert (failed.phase, failed.exit_code) == ("exited", 3)
    oom = map_state("OUT_OF_MEMORY", "", None, False)
    assert oom.phase == "exited" and oom.exit_code != 0 and "memory" in oom.detail
    for state in ("TIMEOUT", "PREEMPTED", "NODE_FAIL"):
        p = map_state(state, "", {"code": -15}, False)
        assert p.phase == "session_ended" and state in p.detail
    assert map_state("COMPLETED", "", {"code": 0}, True).phase == "session_ended"
    assert map_state("COMPLETED", "", {"code": 2}, True).exit_code == 2
    assert map_state("CANCELLED+", "", None, False).phase == "exited"


def test_parsers_on_recorded_output() -> None:
    from core.providers.slurm import parse_scontrol, parse_sinfo, parse_squeue

    assert parse_squeue("12|PENDING|Resources\n13|RUNNING|None\n14|COMPLETED|None\n") == {
        "12": ("PENDING", "Resources"), "13": ("RUNNING", "None"), "14": ("COMPLETED", "None")}
    rec = ("JobId=3 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 "
           "Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) "
           "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:00")
    assert parse_scontrol(rec) == ("FAILED", "NonZeroExitCode", 3)
    assert parse_scontrol("slurm_load_jobs error: Invalid job id specified") is None
    parts = parse_sinfo("gpu*|up|gpu:a100:4(S:0-1)|3|mix|64|512000|2-00:00:00\n"
                        "gpu*|up|gpu:a100:4(S:0-1)|1|idle|64|512000|2-00:00:00\n"
                        "cpu|down|(null)|10|down*|32|128000|infinite\n")
    assert parts[0]["name"] == "gpu" and parts[0]["default"] and parts[0]["nodes"] == 4
    assert parts[0]["gpus"] == [{"type": "a100", "count": 4}]
    assert parts[1]["up"] is False and parts[1]["gpus"] == []


def test_time_limits_and_signal_lead() -> None:
    from core.providers.batch import signal_lead_s

    assert signal_lead_s(1, {}) == 45
    assert signal_lead_s(13, {}) == 78
    assert signal_lead_s(600, {}) == 300
    assert signal_lead_s(1, {"signal_lead_s": 20}) == 20


def test_generations_ride_on_the_scheduler_query_and_cannot_be_faked(tmp_path: Path) -> None:
    """The listing follows a random mark: the scheduler's rows and exit status stay as they
    were, a job's folder with no generation is named none, the highest generation wins, and
    a line the scheduler printed that looks like the listing is the scheduler's."""
    import subprocess

    from core.providers.base import Poll
    from core.providers.batch import Generations

    (tmp_path / "a" / "ckpt-gens" / "0000000004").mkdir(parents=True)
    (tmp_path / "a" / "ckpt-gens" / "0000000012").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    gens = Generations()
    gens.want(str(tmp_path / "a"))
    gens.want(str(tmp_path / "b"))
    command, mark, dirs = gens.wrap("printf '7|RUNNING|None\\ngpu-router-gens-x\\n5\\n'; (exit 3)")
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert run.returncode == 3, run.stderr  # the scheduler command's own status
    assert gens.read(run.stdout, mark, dirs) == "7|RUNNING|None\ngpu-router-gens-x\n5\n"
    assert gens.attach(Poll("running"), str(tmp_path / "a")).checkpoint == 12
    assert gens.attach(Poll("running"), str(tmp_path / "b")).checkpoint is None
