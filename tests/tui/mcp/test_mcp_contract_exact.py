"""The agent's contract, exactly (issue 38, its MCP items), over `gpu mcp` with the official
`mcp` client, as an agent calls it:

- `gpu_submit` returns once the job is placed or needs approval (`wait_s` is that wait), not
  when it ends; the outcome within a grace is `compute_job start`'s. `gpu submit --json` too.
- a declared artifact the job never wrote is named where the agent looks: the start result,
  the `artifacts` action, the status of a wait.
- after a failure, guidance's next call reads the log, from where the traceback starts.
- `compute_job` takes the seed's resource fields (gpu, vram_gb, gpus, cpus, memory_gb,
  time_minutes, partition, modules, container, env, data) with gpu.yaml's and the CLI's checks.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import gpu_json, make_git_project
from tests.tui.mcp.test_mcp import call, fails, session
from tests.providers.test_modal import modal_fake  # noqa: F401  (a fixture)

ENDED = ("done", "failed", "cancelled", "denied")
GRACE = 120  # a wait long enough for every job here to end: what the old gpu_submit waited out
LONG = ("import time\n"
        "print('started', flush=True)\n"
        "time.sleep(20)\n"
        "print('finished', flush=True)\n")
# a failure whose traceback starts far above the log's last 100 lines and 64 KiB
DEEP = ("import sys\n"
        "for i in range(3000):\n"
        "    print(f'step {i:05d} of the warm-up, loss is going down nicely', flush=True)\n"
        "def ping(n):\n"
        "    if n == 0:\n"
        "        raise ValueError('the learning rate is not a number')\n"
        "    return pong(n - 1)\n"
        "def pong(n):\n"
        "    return ping(n - 1)\n"
        "ping(150)\n")  # frames that alternate are never folded into "repeated N more times"
SAY = ("import os, gpu\n"
       "print('greeting:', os.environ['GREETING'], flush=True)\n"
       "print('data:', open(os.path.join(gpu.data_dir(), 'corpus', 'words.txt')).read().strip(), flush=True)\n")


@pytest.mark.slow
async def test_gpu_submit_returns_once_the_job_is_placed_and_the_job_ends_later(
        home: Path, tmp_path: Path) -> None:
    p = make_git_project(tmp_path / "long", {"long.py": LONG})
    async with session() as s:
        sub = await call(s, "gpu_submit", project_dir=str(p), script="long.py", hours=0.1,
                         wait_s=GRACE)
        assert set(sub) == {"job", "guidance", "submitted", "bundle"}
        job = sub["job"]
        short = job["short_id"]
        # placed (the supervisor took it), and returned long before its end
        assert job["state"] not in ("queued", "routing", *ENDED), job
        assert "log_tail" not in job and "exit_code" not in job
        assert sub["guidance"]["next_call"] == {"tool": "gpu_wait", "arguments": {"job": short, "until": "end"}}

        # `gpu submit --json` keeps the same contract: it returns once placed
        cli = gpu_json("submit", "long.py", "--hours", "0.1", "--wait-s", str(GRACE), "--name", "cli",
                       cwd=p)
        assert set(cli) == {"job", "guidance", "submitted", "bundle"}
        assert cli["job"]["state"] not in ENDED, cli["job"]

        ended = await call(s, "gpu_wait", job=short, until="end", timeout_s=300)
        assert ended["state"] == "done" and ended["wait"]["from"] == job["state"], ended
        assert ended["wait"]["changed"] is True
        await call(s, "gpu_cancel", job=cli["job"]["short_id"])


@pytest.mark.slow
async def test_a_declared_artifact_never_written_is_named_where_the_agent_looks(
        home: Path, tmp_path: Path) -> None:
    p = make_git_project(tmp_path / "nothing", {"quiet.py": "print('wrote nothing', flush=True)\n"})
    async with session() as s:
        ok = await call(s, "compute_job", action="start", command="python quiet.py", cwd=str(p),
                        hours=0.1, artifacts=["out/model.pt"], wait_s=GRACE)
        job = ok["job"]
        short = job["short_id"]
        assert job["state"] == "done", job
        assert job["missing_artifacts"] == ["out/model.pt"], job

        arts = await call(s, "compute_job", action="artifacts", job=short)
        assert arts["missing_artifacts"] == ["out/model.pt"], arts
        assert "out/model.pt" in arts["note"] and "not written" in arts["note"]
        assert "out/model.pt" not in {f["path"] for f in arts["files"]}

        waited = await call(s, "compute_job", action="wait", job=short, timeout_s=0)
        assert waited["missing_artifacts"] == ["out/model.pt"], waited
        assert (await call(s, "gpu_status", job=short))["missing_artifacts"] == ["out/model.pt"]

        # a job that wrote what it declared is told nothing of the kind
        writes = make_git_project(tmp_path / "writes", {"w.py": (
            "import os\nos.makedirs('out', exist_ok=True)\nopen('out/model.pt', 'w').write('w')\n")})
        good = await call(s, "compute_job", action="start", command="python w.py", cwd=str(writes),
                          hours=0.1, artifacts=["out/model.pt"], wait_s=GRACE)
        assert good["job"]["state"] == "done" and "missing_artifacts" not in good["job"], good["job"]
        arts = await call(s, "compute_job", action="artifacts", job=good["job"]["short_id"])
        assert "missing_artifacts" not in arts and "out/model.pt" in {f["path"] for f in arts["files"]}


@pytest.mark.slow
async def test_a_failed_job_s_next_call_reads_its_log_from_the_traceback(
        home: Path, tmp_path: Path) -> None:
    p = make_git_project(tmp_path / "deep", {"deep.py": DEEP})
    async with session() as s:
        ok = await call(s, "compute_job", action="start", command="python deep.py", cwd=str(p),
                        hours=0.1, wait_s=GRACE)
        job = ok["job"]
        short = job["short_id"]
        assert job["state"] == "failed", job
        nxt = ok["guidance"]["next_call"]
        assert nxt["tool"] == "compute_job", nxt
        args = nxt["arguments"]
        assert args["action"] == "logs" and args["job"] == short and args["offset"] > 0, args
        assert ok["guidance"]["follow"].startswith('compute_job(action="logs"')

        read = await call(s, nxt["tool"], **args)
        log = read["log"]
        assert read["more"] is False  # one read reaches the log's end
        assert "Traceback (most recent call last):" in log, log[:500]
        assert "ValueError: the learning rate is not a number" in log
        assert log.count("in ping") + log.count("in pong") >= 150  # the whole traceback
        assert log.count("of the warm-up") <= 10  # not the warm-up before it
        # the default tail would not have reached the traceback's start
        tail = await call(s, "compute_job", action="logs", job=short)
        assert "Traceback (most recent call last):" not in tail["log"]

        # the gpu_* tools say the same in their own words
        for doc in (await call(s, "gpu_status", job=short),
                    await call(s, "gpu_wait", job=short, timeout_s=0)):
            g = doc["guidance"]["next_call"]
            assert g == {"tool": "gpu_logs", "arguments": {"job": short, "offset": args["offset"],
                                                           "max_bytes": args["max_bytes"]}}, g
        assert "Traceback (most recent call last):" in (await call(s, "gpu_logs", **g["arguments"]))["log"]
        # a job that ended well still points at its artifacts
        fine = make_git_project(tmp_path / "fine", {"ok.py": "print('ok')\n"})
        done = await call(s, "compute_job", action="start", command="python ok.py", cwd=str(fine),
                          hours=0.1, wait_s=GRACE)
        assert done["job"]["state"] == "done"
        assert done["guidance"]["next_call"]["arguments"] == {"action": "artifacts",
                                                              "job": done["job"]["short_id"]}


@pytest.mark.slow
async def test_compute_job_takes_the_seed_s_resource_fields(home: Path, tmp_path: Path) -> None:
    p = make_git_project(tmp_path / "say", {"say.py": SAY, "corpus/words.txt": "alpha beta\n"})
    fields = {"cpus": 2, "memory_gb": 4, "time_minutes": 30, "partition": "gpu",
              "modules": ["cuda/12.1"], "container": "images/torch.sif", "gpus": 1}
    common = {"command": "python say.py", "cwd": str(p), "hours": 0.1,
              "env": {"GREETING": "hello-from-env"}, "data": ["corpus=corpus"]}
    async with session() as s:
        plan = await call(s, "compute_job", action="plan", **common, **fields)
        assert plan["plan"]["env"] == {"GREETING": "hello-from-env"}, plan["plan"]
        assert plan["plan"]["resources"] == fields, plan["plan"]
        assert list(plan["plan"]["data"]) == ["corpus"], plan["plan"]["data"]
        # the same arguments give the same digest; the job sees its env and its data
        ok = await call(s, "compute_job", action="start", **common, **fields,
                        digest=plan["digest"], wait_s=GRACE)
        assert ok["digest"] == plan["digest"] and ok["job"]["state"] == "done", ok["job"]
        assert "greeting: hello-from-env" in ok["job"]["log_tail"]
        assert "data: alpha beta" in ok["job"]["log_tail"]

        # gpu and vram_gb reach the router: this machine has no H100, and says so
        text = await fails(s, "compute_job", action="plan", command="python say.py", cwd=str(p),
                           hours=0.1, gpu="H100", vram_gb=80)
        assert "unknown argument" not in text and "H100" in text, text

        # refusals name the argument and the fix, as gpu.yaml's and the CLI's do
        text = await fails(s, "compute_job", action="start", command="python say.py", cwd=str(p),
                           hours=0.1, env={"HF_TOKEN": "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"})
        assert "compute_job argument env" in text and "gpu secrets set" in text, text
        text = await fails(s, "compute_job", action="plan", command="python say.py", cwd=str(p),
                           hours=0.1, env={"GPU_ROUTER_OUTPUT_DIR": "/tmp"})
        assert "compute_job argument env" in text and "fix:" in text, text
        text = await fails(s, "compute_job", action="plan", command="python say.py", cwd=str(p),
                           hours=0.1, data=["gone=no/such/folder"])
        assert "compute_job argument data" in text and "does not exist" in text, text
        text = await fails(s, "compute_job", action="plan", command="python say.py", cwd=str(p),
                           hours=0.1, memory_gb=-1)
        assert "compute_job argument memory_gb" in text and "fix:" in text, text
        text = await fails(s, "compute_job", action="plan", command="python say.py", cwd=str(p),
                           hours=0.1, partition="gpu; rm -rf /")
        assert "compute_job argument partition" in text and "fix:" in text, text


@pytest.mark.slow
async def test_a_gpu_this_machine_lacks_goes_to_modal_with_that_exact_type(
        modal_fake, home: Path, tmp_path: Path) -> None:
    """Seed 003: "needs a GPU the machine lacks" is Modal with `gpu` set to the exact type,
    through compute_job's own argument (no gpu.yaml written into the project)."""
    import os

    from tests.providers.test_modal import add_modal  # noqa: E402

    add_modal()
    p = make_git_project(tmp_path / "big", {"big.py": "print('on the big GPU', flush=True)\n"})
    async with session(extra_env=dict(os.environ)) as s:
        plan = await call(s, "compute_job", action="plan", command="python big.py", cwd=str(p),
                          hours=0.1, gpu="A100")
        assert plan["plan"]["target"] == "md" and "A100" in plan["plan"]["gpu"], plan["plan"]
        ok = await call(s, "compute_job", action="start", command="python big.py", cwd=str(p),
                        hours=0.1, gpu="A100", digest=plan["digest"], wait_s=GRACE)
        assert ok["job"]["provider"] == "md" and ok["job"]["state"] == "done", ok["job"]
        assert "on the big GPU" in ok["job"]["log_tail"]
    assert not (p / "gpu.yaml").exists()


# -- the two rules on their own: where a failure's read starts, which artifacts are missing ----


def _log(home: Path, text: bytes) -> SimpleNamespace:
    """A job whose job.log holds `text`, where the engine keeps it."""
    job = SimpleNamespace(id="f" * 32, short_id="ffffffff")
    folder = home / "jobs" / job.id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.log").write_bytes(text)
    return job


def _read(job: SimpleNamespace) -> bytes:
    from core.engine.guidance import _failure_read
    from core.engine.jobfiles import log_path

    where = _failure_read(job)
    return log_path(job).read_bytes()[where["offset"]:where["offset"] + where["max_bytes"]]


def test_a_failure_s_read_starts_at_the_first_traceback_of_its_chain_in_its_last_attempt(home: Path) -> None:
    from core.engine.guidance import _failure_read
    from core.engine.jobfiles import log_path

    chained = (b"[gpu-router] attempt 1: running python a.py\n" + b"warm-up\n" * 50
               + b"Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'lr'\n\n"
               b"During handling of the above exception, another exception occurred:\n\n"
               b"Traceback (most recent call last):\n  File \"a.py\", line 3\nValueError: bad lr\n"
               b"[gpu-router] attempt 1: exited with status 1\n")
    job = _log(home, chained)
    read = _read(job)
    assert read.count(b"Traceback") == 2 and b"KeyError: 'lr'" in read and read.endswith(b"status 1\n")
    assert read.count(b"warm-up") == 5  # a few lines of what came before, not the whole log
    assert log_path(job).stat().st_size > _failure_read(job)["offset"] > 0

    # an earlier attempt's traceback is not this attempt's error: its last lines are
    retried = (chained + b"[gpu-router] attempt 2: running python a.py\n" + b"going on\n" * 60
               + b"Killed\n[gpu-router] attempt 2: exited with status 137\n")
    read = _read(_log(home, retried))
    assert b"Traceback" not in read and b"Killed" in read and read.count(b"going on") < 60

    # a log over a read's most: the read starts at a whole line inside it and reaches the end
    big = b"x" * 200 + b"\n" + b"line of a long log\n" * 70_000 + b"RuntimeError: out of memory\n"
    job = _log(home, big)
    where = _failure_read(job)
    assert where["max_bytes"] <= 1 << 20 and _read(job).endswith(b"out of memory\n")
    assert big[where["offset"] - 1:where["offset"]] == b"\n"

    (log_path(job)).unlink()
    assert _failure_read(job) == {}  # no log: the plain read


def test_missing_artifacts_are_the_status_rule_also_before_the_supervisor_recorded_it(
        home: Path, tmp_path: Path) -> None:
    from core.engine.reports import missing_artifacts
    from core.jobs.states import State

    out = tmp_path / "runs" / "j1"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "train.log").write_text("x")

    def job(state: State, **fields) -> SimpleNamespace:
        return SimpleNamespace(**{"state": state, "handle": {}, "exit_code": 0, "started_at": 1.0,
                                  "outputs_dir": str(out),
                                  "request": {"outputs": ["out/model.pt", "logs/"]}, **fields})

    # ended, the supervisor's reading not written yet: the same rule, asked now
    assert missing_artifacts(job(State.DONE)) == ["out/model.pt"]
    # its reading, once written, is what counts
    assert missing_artifacts(job(State.DONE, handle={"ended": {}})) == []
    assert missing_artifacts(job(State.FAILED, handle={"ended": {"missing_artifacts": ["a"]}})) == ["a"]
    # live, or ended before it ran (denied, cancelled while held): nothing is missing yet
    assert missing_artifacts(job(State.RUNNING)) == []
    assert missing_artifacts(job(State.DENIED, exit_code=None, started_at=None)) == []
