"""The SkyPilot adapter (issue 43, first step): gpu-router's client against a real SkyPilot API
server over a real one-node Slurm cluster (tests/skypilot_service.py, the recipe in
../shared/recipes/skypilot), and the client's protocol handling against a stand-in adapter that
replays answers recorded from that server.

The server tests are slow (the setup takes about a minute on two cores, a launch one to two)
and share one server and one Slurm cluster per session, on one xdist worker; the protocol tests
need no server and run in the quick loop.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core.errors import UserError
from core.providers.skypilot import venv as skyvenv
from core.providers.skypilot.client import (AdapterBroken, AdapterTimeout, SkyPilotClient,
                                            SkyPilotError)
from tests.providers.conftest import server_test

# -- against the real server ------------------------------------------------------------------


@pytest.fixture
async def sky(skypilot_server) -> SkyPilotClient:
    client = await SkyPilotClient.start(skypilot_server.python, env=skypilot_server.env)
    try:
        yield client
    finally:
        await client.close()


@server_test
async def test_check_lists_slurm_enabled_and_says_why_the_others_are_not(sky) -> None:
    version = await sky.request("version", timeout=300)
    assert version["skypilot"] == skyvenv.SKYPILOT_VERSION
    assert version["server"]["status"] == "healthy"
    check = await sky.request("check", timeout=600)
    assert check["enabled"] == {"slurm": ["compute"]}
    # allowed_clouds: [slurm] keeps every other cloud unprobed; the check says so, per cloud
    assert "aws" in check["disabled"] and "allowed_clouds" in check["disabled"]["aws"]
    assert "slurm" not in check["disabled"]


@server_test
async def test_prices_read_slurm_pricing_per_gpu_type(sky, skypilot_server) -> None:
    from tests.skypilot_service import PRICING

    prices = await sky.request("prices", timeout=600)
    assert prices["clouds"] == ["slurm"] and prices["errors"] == {}
    assert prices["slurm_pricing"] == PRICING
    offers = {row["accelerator_count"]: row for row in prices["gpus"]["FAKE"]}
    # the node has two `fake` GPUs at 2.0 an hour each (slurm.pricing.accelerators.fake)
    assert sorted(offers) == [1, 2]
    assert offers[1]["price"] == 2.0 and offers[2]["price"] == 4.0
    assert offers[1]["cloud"] == "slurm" and offers[1]["cpu_count"] == 4


@server_test
async def test_launch_runs_the_workdir_streams_logs_and_down_ends_the_allocation(
        sky, skypilot_server, tmp_path: Path) -> None:
    work = tmp_path / "task"
    work.mkdir()
    (work / "hello.sh").write_text('echo "read: $(cat data.txt)"\necho "gpus: $CUDA_VISIBLE_DEVICES"\n')
    (work / "data.txt").write_text("workdir-data-42\n")
    provision: list[str] = []
    t = time.monotonic()
    launched = await sky.request("launch", {
        "cluster": "gr-t1", "workdir": str(work), "setup": "echo setup-ran", "run": "bash hello.sh",
        "resources": {"infra": "slurm/spike", "cpus": 1, "accelerators": "fake:1", "max_hourly_cost": 5.0},
    }, timeout=1200, on_line=provision.append)
    print(f"launch took {time.monotonic() - t:.0f} s")
    assert launched["cluster"] == "gr-t1" and launched["job_id"] == 1
    assert any("Job submitted" in line for line in provision), provision
    assert [a for a in skypilot_server.allocations() if "gr-t1" in a and "RUNNING" in a]

    lines: list[str] = []
    logs = await sky.request("logs", {"cluster": "gr-t1", "job_id": 1, "follow": True}, timeout=600,
                             on_line=lines.append)
    assert logs["exit_code"] == 0
    text = "\n".join(lines)
    assert "setup-ran" in text and "read: workdir-data-42" in text  # the workdir was synced
    assert "gpus: 0" in text  # Slurm gave the job one of the node's fake GPUs

    status = await sky.request("status", {"clusters": ["gr-t1"]})
    assert [(c["name"], c["status"], c["cloud"]) for c in status["clusters"]] == [("gr-t1", "UP", "Slurm")]
    queue = await sky.request("queue", {"cluster": "gr-t1"})
    assert [(j["job_id"], j["status"]) for j in queue["jobs"]] == [(1, "SUCCEEDED")]

    t = time.monotonic()
    await sky.request("down", {"cluster": "gr-t1"}, timeout=900)
    print(f"down took {time.monotonic() - t:.0f} s")
    assert (await sky.request("status", {"clusters": ["gr-t1"]}))["clusters"] == []
    assert not [a for a in skypilot_server.allocations() if "gr-t1" in a]

    # the cost of the cluster's life at slurm.pricing's 2.0 an hour for its one GPU
    report = {r["name"]: r for r in (await sky.request("cost_report"))["clusters"]}
    row = report["gr-t1"]
    assert row["status"] is None and row["usage_intervals"][-1][1] is not None  # ended, not live
    assert row["duration_s"] > 0 and "fake" in str(row["accelerators"]) and str(row["cloud"]).lower() == "slurm"
    assert row["cost"] == pytest.approx(row["duration_s"] * 2.0 / 3600, rel=1e-6)


@server_test
async def test_skypilot_errors_come_back_as_named_exceptions(sky) -> None:
    with pytest.raises(SkyPilotError) as err:
        await sky.request("logs", {"cluster": "gr-nothing", "job_id": 1}, timeout=300)
    assert err.value.kind == "ClusterDoesNotExist"
    assert "gr-nothing" in str(err.value) and "does not exist" in str(err.value)


# -- the client's protocol, against recorded answers -------------------------------------------

# Answers recorded from the real server (the launch above, 2026-12-06), replayed by FAKE.
RECORDED = {
    "status": [{"ok": True, "result": {"clusters": [
        {"name": "c1", "status": "UP", "launched_at": 1796563835, "resources": "1x(gpus=fake:1, ...)",
         "autostop": -1, "to_down": False, "cloud": "Slurm", "region": "spike", "zone": None}]}}],
    "logs": [{"line": "├── Waiting for task resources on 1 node."},
             {"line": "(setup pid=15171) setting up"},
             {"line": "(task, pid=15276) workdir-data-42"},
             {"line": "✓ Job finished (status: SUCCEEDED)."},
             {"ok": True, "result": {"cluster": "c1", "job_id": 1, "exit_code": 0}}],
    "missing": [{"ok": False, "error": {"type": "ClusterDoesNotExist",
                                        "message": "Cluster 'nope' does not exist."}}],
}

# A stand-in adapter: for each request it writes the scripted lines for its op (with the
# request's id), or misbehaves as the op's name says.
FAKE = textwrap.dedent("""
    import json, sys, time
    recorded = json.loads(sys.argv[1])
    late = []
    for raw in sys.stdin:
        req = json.loads(raw)
        op, rid = req["op"], req["id"]
        if op == "garbage":
            sys.stdout.write("Traceback (most recent call last): oops\\n"); sys.stdout.flush()
        elif op == "die":
            sys.stderr.write("sky: fatal: the API server went away\\n"); sys.stderr.flush()
            sys.stdout.write(json.dumps({"id": rid, "line": "half way"}) + "\\n"); sys.stdout.flush()
            sys.exit(3)
        elif op == "hang":
            late.append(rid)  # answered only after the next request's answer
        else:
            for doc in recorded[op]:
                sys.stdout.write(json.dumps({"id": rid, **doc}) + "\\n")
            for old in late:
                sys.stdout.write(json.dumps({"id": old, "ok": True, "result": "too late"}) + "\\n")
            late = []
            sys.stdout.flush()
""")


@pytest.fixture
async def fake(tmp_path: Path) -> SkyPilotClient:
    script = tmp_path / "fake_adapter.py"
    script.write_text(FAKE)
    # the recorded answers travel as the script's argument
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-u", str(script), json.dumps(RECORDED), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, limit=1 << 20)
    client = SkyPilotClient(proc)
    try:
        yield client
    finally:
        await client.close(grace=5)


async def test_recorded_answers_give_results_lines_in_order_and_named_errors(fake) -> None:
    status = await fake.request("status", timeout=30)
    assert status["clusters"][0]["name"] == "c1" and status["clusters"][0]["status"] == "UP"
    lines: list[str] = []
    logs = await fake.request("logs", {"cluster": "c1", "job_id": 1}, timeout=30, on_line=lines.append)
    assert logs["exit_code"] == 0
    assert lines == ["├── Waiting for task resources on 1 node.", "(setup pid=15171) setting up",
                     "(task, pid=15276) workdir-data-42", "✓ Job finished (status: SUCCEEDED)."]
    with pytest.raises(SkyPilotError) as err:
        await fake.request("missing", timeout=30)
    assert err.value.kind == "ClusterDoesNotExist" and err.value.op == "missing"
    assert str(err.value) == "SkyPilot missing: Cluster 'nope' does not exist. (ClusterDoesNotExist)"


async def test_a_malformed_line_breaks_the_client_with_the_line_in_the_message(fake) -> None:
    with pytest.raises(AdapterBroken) as err:
        await fake.request("garbage", timeout=30)
    assert "not the protocol" in str(err.value) and "Traceback (most recent call last): oops" in str(err.value)
    # a child that broke the protocol once is not asked again, and is gone
    with pytest.raises(AdapterBroken):
        await fake.request("status", timeout=30)
    assert await asyncio.wait_for(fake.proc.wait(), 10) is not None


async def test_the_adapter_dying_mid_request_fails_it_with_the_exit_status_and_stderr(fake) -> None:
    lines: list[str] = []
    with pytest.raises(AdapterBroken) as err:
        await fake.request("die", timeout=30, on_line=lines.append)
    assert lines == ["half way"]
    assert "exit status 3" in str(err.value) and "the API server went away" in str(err.value)
    with pytest.raises(AdapterBroken):
        await fake.request("status", timeout=30)


async def test_a_request_with_no_answer_times_out_and_its_late_answer_is_dropped(fake) -> None:
    with pytest.raises(AdapterTimeout) as err:
        await fake.request("hang", timeout=0.5)
    assert str(err.value) == "SkyPilot hang: no answer in 0.5 s"
    # the next request gets its own answer, not the one that came too late (written after it)
    status = await fake.request("status", timeout=30)
    assert status["clusters"][0]["name"] == "c1"
    assert fake.pending == {}


async def test_the_real_adapter_answers_every_request_even_without_skypilot(tmp_path: Path) -> None:
    """adapter.py run with a python that has no SkyPilot (gpu-router's own): every request
    still gets one answer on stdout, and a failure is an answer with a plain message that
    names its kind; stdin closed, it ends cleanly."""
    client = await SkyPilotClient.start(sys.executable, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    try:
        with pytest.raises(SkyPilotError) as err:
            await client.request("frobnicate", timeout=60)
        assert err.value.kind == "ValueError" and "unknown operation 'frobnicate'" in str(err.value)
        with pytest.raises(SkyPilotError) as err:
            await client.request("version", timeout=60)
        assert err.value.kind == "ModuleNotFoundError" and "'sky'" in str(err.value)
        with pytest.raises(SkyPilotError) as err:
            await client.request("launch", {"cluster": "c", "resources": {"gpus_please": 8}}, timeout=60)
        assert "unknown resource keys: gpus_please" in str(err.value)
    finally:
        await client.close()
    assert client.proc.returncode == 0


def test_a_named_venv_is_used_as_it_is_never_installed_into(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        skyvenv.ensure(tmp_path / "theirs", named=True)
    assert "has no python" in str(err.value) and "skypilot[slurm]==0.14.1" in str(err.value)
    assert not (tmp_path / "theirs").exists()


def test_what_the_sdk_returns_becomes_json_the_client_can_read() -> None:
    """The SDK answers with enums (ClusterStatus.UP), named tuples (InstanceTypeInfo) and
    pydantic models (StatusResponse); the adapter sends their values, not their reprs."""
    import collections
    import enum

    from core.providers.skypilot.adapter import jsonable

    class ClusterStatus(enum.Enum):
        UP = "UP"

    Info = collections.namedtuple("Info", "accelerator_name price region")

    class Model:
        model_fields = {"name": None, "status": None}

        def __init__(self) -> None:
            self.name, self.status = "c1", ClusterStatus.UP

        def model_dump(self) -> dict:  # present on a pydantic model; the adapter reads the fields
            raise AssertionError("not called")

    doc = jsonable({"gpus": {"FAKE": [Info("FAKE", 2.0, "debug*")]}, "clusters": [Model()],
                    "status": ClusterStatus.UP, "pair": (1, None), "other": object})
    assert json.loads(json.dumps(doc)) == {
        "gpus": {"FAKE": [{"accelerator_name": "FAKE", "price": 2.0, "region": "debug*"}]},
        "clusters": [{"name": "c1", "status": "UP"}], "status": "UP", "pair": [1, None],
        "other": "<class 'object'>"}


@server_test
def test_targets_add_skypilot_reads_the_real_servers_clouds_and_slurm_prices(
        skypilot_server, home: Path, tmp_path: Path) -> None:
    """`gpu targets add skypilot` against the real server: Slurm enabled, every other cloud left
    out by allowed_clouds, and the `fake` GPU at slurm.pricing's 2.0 an hour, in `gpu targets`
    and in a plan, which binds the ceiling (2.20) and the Slurm machines under it."""
    from tests.conftest import run_gpu

    env = [f"--env={k}={v}" for k, v in skypilot_server.env.items() if k not in ("PATH", "LANG", "TMPDIR")]
    done = run_gpu("targets", "add", "skypilot", "sky", "--venv", str(skypilot_server.venv), *env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "enabled slurm" in done.stdout and "FAKE: from $2.00/h per GPU on slurm, up to 2 per job" in done.stdout
    assert "aws" in done.stdout and "allowed_clouds" in done.stdout
    listed = json.loads(run_gpu("targets", "--json", timeout=300).stdout)["targets"]
    sky = next(t for t in listed if t["name"] == "sky")
    assert sky["available"] is True and sky["offer_prices"] == {"FAKE": 2.0}
    assert sky["details"]["gpu_count_max"] == {"FAKE": 2} and sky["details"]["count_prices"] == {"FAKE": {"1": 2.0, "2": 4.0}}
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    plan = run_gpu("plan", "train.py", "--gpu", "FAKE:2", "--json", cwd=project, timeout=300)
    assert plan.returncode == 0, plan.stderr
    doc = json.loads(plan.stdout)["plan"]
    assert doc["target"] == "sky" and doc["price_per_hour"] == 4.0 and doc["offer"] == "FAKE:2"
    assert doc["skypilot"]["max_hourly_cost"] == pytest.approx(4.4)
    assert [(c["cloud"], c["count"]) for c in doc["skypilot"]["candidates"]] == [("slurm", 2)]
