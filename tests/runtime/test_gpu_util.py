"""GPU utilisation sampled beside the job (core/runtime/gpuutil.py) and the `gpu_util_below`
kill rule it feeds.

A machine without a GPU has no nvidia-smi, so a stand-in executable of that name goes first on
PATH: it answers the queries gpu-router makes exactly as the real tool prints them with
`--format=csv,noheader,nounits` (comma and space between fields, one line per GPU), from a file
the test writes, and fails or hangs when the test says so. The jobs are real: submitted with
the installed `gpu` to the local target, or run by the launcher as a batch script runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from core.engine.metricfile import parse_rows
from core.runtime import gpuutil
from tests.conftest import (assert_stopped_by_rule, gpu_json, lay_out_attempt, make_git_project, run_gpu,
                            wait_state, write_user_config)

FORMAT = "--format=csv,noheader,nounits"
STAND_IN = r'''#!{python}
"""nvidia-smi as gpu-router asks it: each query answered from the rows in gpus.csv beside it."""
import os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
mode = open(os.path.join(here, "mode")).read().strip()
with open(os.path.join(here, "calls"), "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\n")
if mode == "hang":
    open(os.path.join(here, "hung.pid"), "w").write(str(os.getpid()))
    time.sleep(120)
if mode == "fail":
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
          "Make sure that the latest NVIDIA driver is installed and running.")
    sys.exit(9)
rows = [line.split(", ") for line in open(os.path.join(here, "gpus.csv")).read().splitlines()]
query, fmt = (sys.argv[1:] + ["", ""])[:2]
if fmt != "{fmt}":
    sys.exit(2)
if query == "--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total":
    out = [", ".join(r) for r in rows]
elif query == "--query-gpu=index,name,memory.total":  # what the local target's probe asks
    out = [f"{{r[0]}}, NVIDIA H100 80GB HBM3, {{r[4]}}" for r in rows]
elif query == "--query-gpu=index,name,memory.total,memory.free":
    out = [f"{{r[0]}}, NVIDIA H100 80GB HBM3, {{r[4]}}, {{int(r[4]) - int(r[3])}}" for r in rows]
else:
    print(f"Field '{{query}}' is not a valid field to query.", file=sys.stderr)
    sys.exit(2)
sys.stdout.write("".join(line + "\n" for line in out))
'''

TWO_GPUS = ("0, GPU-1f7e8c2a-0b44-7a1d-93e1-5c2d6a7b8e90, {a}, 40960, 81559\n"
            "1, GPU-9a3b0d5e-77c1-4e2f-a8b6-0c1d2e3f4a5b, {b}, 1024, 81559\n")


def stand_in(where: Path, rows: str, mode: str = "answer") -> Path:
    """A folder holding the stand-in `nvidia-smi`, its rows and its mode."""
    where.mkdir(parents=True, exist_ok=True)
    exe = where / "nvidia-smi"
    exe.write_text(STAND_IN.format(python=sys.executable, fmt=FORMAT))
    exe.chmod(0o755)
    (where / "gpus.csv").write_text(rows)
    (where / "mode").write_text(mode)
    return where


def util_rows(metrics_text: str) -> list[dict]:
    return [json.loads(line) for line in metrics_text.splitlines()
            if '"gpu/util"' in line or '"gpu/mem_gb"' in line]


# -- the sampler's reading of nvidia-smi ---------------------------------------------------------

def test_the_answer_is_read_and_cuda_visible_devices_picks_the_job_s_gpus(tmp_path: Path) -> None:
    bin_dir = stand_in(tmp_path / "bin", "0, GPU-aaaa1111-0000-0000-0000-000000000000, 3, 1024, 81559\n"
                                         "1, GPU-bbbb2222-0000-0000-0000-000000000000, 90, 40960, 81559\n"
                                         "2, GPU-bbbb3333-0000-0000-0000-000000000000, [N/A], 2048, 81559\n")
    answer = subprocess.run([str(bin_dir / "nvidia-smi"), *gpuutil.QUERY], capture_output=True,
                            text=True, timeout=30, check=True).stdout
    gpus = gpuutil.parse(answer + "garbage line\n\n")
    assert [(g.index, g.util, g.mem_used_mib) for g in gpus] == [(0, 3.0, 1024.0), (1, 90.0, 40960.0),
                                                                 (2, None, 2048.0)]

    def picked(cuda_visible: str | None) -> list[int]:
        return [g.index for g in gpuutil.visible(gpus, cuda_visible)]

    assert picked(None) == [0, 1, 2]  # unset: every GPU
    assert picked("1") == [1] and picked("1,0") == [1, 0] and picked(" 2 ") == [2]
    assert picked("GPU-bbbb2222-0000-0000-0000-000000000000") == [1]  # by UUID
    assert picked("GPU-aaaa") == [0]  # a unique prefix is enough, as for CUDA
    assert picked("GPU-bbbb") == []  # an ambiguous one names none
    assert picked("0,7,1") == [0]  # cut at the first entry that names no GPU
    assert picked("") == [] and picked("-1") == [] and picked("MIG-1234") == []
    assert picked("1,1") == [1]

    one = gpuutil.row(gpuutil.visible(gpus, "1"), ts=1000.0)
    assert one == {"ts": 1000.0, "gpu/util": 90.0, "gpu/mem_gb": 40.0}
    both = gpuutil.row(gpuutil.visible(gpus, "0,2"), ts=1000.0)
    assert both == {"ts": 1000.0, "gpu/util": 3.0, "gpu/mem_gb": 3.0}  # [N/A] is no figure, mem sums
    assert gpuutil.row(gpus, keys=("gpu/mem_gb",), ts=1.0) == {"ts": 1.0, "gpu/mem_gb": 43.0}
    parsed = parse_rows(json.dumps(one).encode() + b"\n")  # the store's own parser takes it
    assert sorted(parsed.rows) == [(None, "gpu/mem_gb", 40.0, 1000.0), (None, "gpu/util", 90.0, 1000.0)]


# -- the launcher, run as a batch script runs it --------------------------------------------------

def _launch(tmp_path: Path, job: str, path: str, interval: float = 0.2,
            env: dict | None = None) -> tuple[str, dict, str]:
    """Run one attempt of `job` in the foreground with this PATH; (log, exit.json, metrics)."""
    runtime, jdir, adir = lay_out_attempt(tmp_path, job)
    # a job id of its own: the launcher names the job's cgroup after it (gpu-router-<id>-<attempt>),
    # one per machine, and another test (another xdist worker) may run a job at the same time
    spec = {"job_id": f"j{uuid.uuid4().hex[:12]}", "attempt": 1, "tag": str(adir / "spec.json"), "attempt_dir": str(adir),
            "workdir": str(jdir), "log": str(jdir / "job.log"), "runtime_dir": str(runtime),
            "base_python": sys.executable, "command": ["{python}", "job.py"], "deps": None,
            "util_interval_s": interval,
            "env": {"GPU_ROUTER_METRICS_FILE": str(jdir / "metrics.jsonl"),
                    "GPU_ROUTER_OUTPUT_DIR": str(jdir / "out"), **(env or {})}}
    (adir / "spec.json").write_text(json.dumps(spec))
    base = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    subprocess.run([sys.executable, str(runtime / "launch.py"), "--foreground", str(adir / "spec.json")],
                   env={**base, "PATH": path}, capture_output=True, timeout=60, cwd=tmp_path)
    metrics = jdir / "metrics.jsonl"
    return ((jdir / "job.log").read_text(), json.loads((adir / "exit.json").read_text()),
            metrics.read_text() if metrics.exists() else "")


def _sleeper(seconds: float) -> str:
    return (f"import time, gpu\nfor i in range({int(seconds * 10)}):\n"
            f"    gpu.log(step=i, loss=1.0 / (i + 1))\n    time.sleep(0.1)\nprint('job finished', flush=True)\n")


def _own_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("[gpu-router] GPU utilisation")]


def test_the_launcher_writes_utilisation_rows_while_the_job_runs(tmp_path: Path) -> None:
    bin_dir = stand_in(tmp_path / "bin", TWO_GPUS.format(a=3, b=90))
    log, done, metrics = _launch(tmp_path, _sleeper(1.5), f"{bin_dir}{os.pathsep}/nonexistent",
                                 env={"CUDA_VISIBLE_DEVICES": "1"})
    assert done["code"] == 0 and "job finished" in log
    rows = util_rows(metrics)
    assert len(rows) >= 2, metrics  # one a look, 0.2 s apart, over 1.5 s
    assert {r["gpu/util"] for r in rows} == {90.0} and {r["gpu/mem_gb"] for r in rows} == {1.0}
    assert all("step" not in r for r in rows)  # the job's steps are its own
    assert _own_lines(log) == []  # nothing went wrong: nothing to say
    calls = (bin_dir / "calls").read_text().splitlines()
    assert calls and set(calls) == {" ".join(gpuutil.QUERY)}


# a hung nvidia-smi is given up after the sampler's real 5 s timeout: that case is the full run's
@pytest.mark.parametrize("mode", ["missing", "fail", pytest.param("hang", marks=pytest.mark.slow)])
def test_without_a_working_nvidia_smi_the_job_runs_as_before(tmp_path: Path, mode: str) -> None:
    """No rows, one printable line in the job's log (none when there is no nvidia-smi at all),
    and a hung call killed (5 s bound)."""
    if mode == "missing":
        path = str(tmp_path / "empty")  # the launcher adds only the job's Python's folder
        if shutil.which("nvidia-smi", path=os.path.dirname(sys.executable)):
            pytest.skip("this Python's folder holds a real nvidia-smi")
    else:
        path = str(stand_in(tmp_path / "bin", TWO_GPUS.format(a=3, b=3), mode))
    seconds = 6.5 if mode == "hang" else 1.5  # a hung call is given up after CALL_TIMEOUT_S
    log, done, metrics = _launch(tmp_path, _sleeper(seconds), path)
    assert done["code"] == 0 and done["error"] is None and "job finished" in log, log
    assert util_rows(metrics) == []
    assert len(parse_rows(metrics.encode()).rows) == int(seconds * 10)  # the job's own rows, all
    said = _own_lines(log)
    if mode == "missing":  # a host without NVIDIA GPUs: the usual CPU job, nothing to say
        assert said == [], log
        return
    assert len(said) == 1, log
    assert {"fail": "exited with status 9 (NVIDIA-SMI has failed",
            "hang": "did not answer in 5 s"}[mode] in said[0]
    if mode != "hang":
        assert "gpu_util_below" in said[0] or "not sampled" in said[0]
    if mode == "hang":
        pid = int((tmp_path / "bin" / "hung.pid").read_text())
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    if mode != "missing":
        assert len((tmp_path / "bin" / "calls").read_text().splitlines()) == 1  # it stopped asking


OWN_UTIL_JOB = """
import time, gpu
gpu.log(step=0, loss=1.0)
time.sleep(1.0)
for i in range(1, 25):
    gpu.log(step=i, loss=1.0 / (i + 1), **{"gpu/util": 55.0})
    time.sleep(0.1)
"""


def test_the_job_s_own_gpu_util_wins_over_the_sample(tmp_path: Path) -> None:
    bin_dir = stand_in(tmp_path / "bin", TWO_GPUS.format(a=3, b=3))
    log, done, metrics = _launch(tmp_path, OWN_UTIL_JOB, f"{bin_dir}{os.pathsep}/nonexistent")
    assert done["code"] == 0
    lines = metrics.splitlines()
    first_own = next(i for i, line in enumerate(lines) if '"gpu/util":55' in line)
    sampled_after = [json.loads(line) for line in lines[first_own:] if '"gpu/mem_gb"' in line]
    # the sampler reads the file just before each write: at most its next row can have gone
    # out before it saw the job's figure; every row after that carries memory only
    assert len(sampled_after) >= 3, metrics
    assert all("gpu/util" not in r for r in sampled_after[1:]), metrics
    assert all(r["gpu/mem_gb"] == 41.0 for r in sampled_after)  # memory is still sampled
    assert any("gpu/util" in json.loads(line) and '"gpu/mem_gb"' in line
               for line in lines[:first_own]), metrics  # before the job's figure, the sample's
    values = [v for _, k, v, _ in parse_rows(metrics.encode()).rows if k == "gpu/util"]
    assert values.count(55.0) == 24 and values.count(3.0) <= len(values) - 24


# -- the kill rule, through the installed `gpu` -----------------------------------------------

TRAIN_JOB = """
import sys, time
import gpu

end = time.time() + float(sys.argv[1])
step, saved = 0, False
while time.time() < end:
    gpu.log(step=step, loss=1.0 / (step + 1))
    (gpu.output_dir() / "partial.txt").write_text(f"step {step}")
    if gpu.should_checkpoint() and not saved:
        (gpu.checkpoint_dir() / "state").write_text(str(step))
        gpu.checkpoint_saved()
        saved = True
        print("checkpoint saved", flush=True)
    step += 1
    time.sleep(0.2)
print("finished", flush=True)
"""
RULE = "rules:\n  checkpoint_grace_s: 2\n  kill_rules:\n    - gpu_util_below: {percent: 10, minutes: 0.05}\n"


@pytest.fixture
def sampled(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in first on the supervisor's PATH, sampled every 0.3 s."""
    bin_dir = stand_in(tmp_path / "bin", TWO_GPUS.format(a=3, b=90))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GPU_ROUTER_UTIL_INTERVAL_S", "0.3")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    write_user_config(RULE)
    return bin_dir


def _submit(tmp_path: Path, seconds: float, cuda_visible: str) -> str:
    project = make_git_project(tmp_path / "p", {
        "train.py": TRAIN_JOB, "gpu.yaml": f'env:\n  CUDA_VISIBLE_DEVICES: "{cuda_visible}"\n'})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "10", "--", str(seconds), cwd=project)
    return sub["job"]["short_id"]


@pytest.mark.slow  # a real job under the supervisor (the quick loop leaves it out)
def test_an_idle_gpu_stops_the_job_by_the_kill_rule(sampled: Path, tmp_path: Path) -> None:
    short = _submit(tmp_path, 60, "0")  # GPU 0 says 3%
    assert_stopped_by_rule(short, "gpu_util_below (10% for 0.05 min)",
                           "GPU utilisation stayed below 10% for 0.05 min")
    util = gpu_json("metrics", short)["metrics"]["gpu/util"]
    assert util["min"] == util["max"] == 3.0 and util["points"] >= 2
    assert "checkpoint saved" in run_gpu("logs", short).stdout


@pytest.mark.slow  # a real job under the supervisor (the quick loop leaves it out)
def test_a_busy_gpu_runs_to_the_end_with_its_utilisation_in_the_metrics(sampled: Path, tmp_path: Path) -> None:
    short = _submit(tmp_path, 7, "1")  # GPU 1 says 90%; GPU 0's 3% is not the job's
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=60)
    assert done["state"] == "done", done
    metrics = gpu_json("metrics", short)["metrics"]
    util, mem = metrics["gpu/util"], metrics["gpu/mem_gb"]
    assert util["min"] == util["max"] == 90.0 and util["points"] >= 5, util
    assert mem["last"] == 1.0 and metrics["loss"]["points"] >= 20
    series = gpu_json("metrics", short, "--key", "gpu/util")["metrics"]["gpu/util"]["series"]
    assert series[-1]["ts"] - series[0]["ts"] > 3  # it covered the rule's window, which did not fire
    events = gpu_json("status", short, "--verbose")["events"]
    assert not any("kill rule" in e["reason"] for e in events)


@pytest.mark.slow  # a real job under the supervisor (the quick loop leaves it out)
def test_a_rule_with_no_utilisation_source_says_so_once(sampled: Path, tmp_path: Path) -> None:
    (sampled / "mode").write_text("fail")
    short = _submit(tmp_path, 7, "0")
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=60)
    assert done["state"] == "done", done  # the rule cannot fire: no figure
    events = gpu_json("status", short, "--verbose")["events"]
    notes = [e["reason"] for e in events if "has had no gpu/util figure" in e["reason"]]
    assert len(notes) == 1, events
    assert "no working nvidia-smi" in notes[0] and "cannot fire" in notes[0]
    assert "gpu/util" not in gpu_json("metrics", short)["metrics"]
    assert "GPU utilisation: nvidia-smi exited with status 9" in run_gpu("logs", short).stdout


def test_the_samples_never_take_the_job_s_headline_metric() -> None:
    from tui.dash.widgets import last_metric_text

    assert last_metric_text({"gpu/util": 3.0, "gpu/mem_gb": 1.0, "val/acc": 0.9}) == "val/acc=0.9"
    assert last_metric_text({"gpu/util": 3.0, "gpu/mem_gb": 1.0}) == "gpu/mem_gb=1"


def test_an_nvidia_smi_on_the_job_s_own_path_is_never_run(tmp_path: Path) -> None:
    """The sampler runs outside the job's sandbox: a job that puts its own folder first on its
    PATH must not have its `nvidia-smi` run there (it would run as the person)."""
    bin_dir = stand_in(tmp_path / "jobbin", TWO_GPUS.format(a=3, b=90))
    log, done, metrics = _launch(tmp_path, _sleeper(1.5), str(tmp_path / "empty"),
                                 env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"})
    assert done["code"] == 0 and "job finished" in log, log
    assert util_rows(metrics) == []
    assert not (bin_dir / "calls").exists(), "the job's own nvidia-smi was run by the sampler"
