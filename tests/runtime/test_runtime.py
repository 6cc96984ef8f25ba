"""The `gpu` module a job imports, the launcher's masking, and metric ingestion."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
import urllib.parse
from pathlib import Path

from core.runtime import GPU_MODULE_DIR
from core.runtime.launch import MASK, Masker
from core.engine.metricfile import parse_metrics
from tests.conftest import lay_out_attempt


def _run_job_code(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(GPU_MODULE_DIR.parent), **env})


def test_runtime_dirs_metrics_and_checkpoint_signal(tmp_path: Path) -> None:
    env = {"GPU_ROUTER_OUTPUT_DIR": str(tmp_path / "out"), "GPU_ROUTER_DATA_DIR": str(tmp_path / "data"),
           "GPU_ROUTER_CHECKPOINT_DIR": str(tmp_path / "ck"), "GPU_ROUTER_CONTROL_DIR": str(tmp_path / "ctl"),
           "GPU_ROUTER_METRICS_FILE": str(tmp_path / "m.jsonl"), "GPU_ROUTER_JOB_ID": "j1",
           "GPU_ROUTER_ATTEMPT": "2"}
    code = (
        "import gpu, os, signal\n"
        "print(gpu.job_id(), gpu.attempt(), gpu.output_dir(), gpu.checkpoint_dir(), gpu.data_dir())\n"
        "gpu.log(step=1, loss=0.5, acc=1, note='text', bad=float('nan'))\n"
        "print(gpu.should_checkpoint())\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        "print(gpu.should_checkpoint())\n")
    proc = _run_job_code(code, env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    assert lines[0].split() == ["j1", "2", str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "data")]
    assert lines[1:3] == ["False", "True"]
    row = json.loads((tmp_path / "m.jsonl").read_text())
    assert row["step"] == 1 and row["loss"] == 0.5 and row["acc"] == 1.0 and "note" not in row


def test_checkpoint_request_file_works_without_signals(tmp_path: Path) -> None:
    (tmp_path / "ctl").mkdir()
    (tmp_path / "ctl" / "checkpoint").touch()
    proc = _run_job_code("import gpu; print(gpu.should_checkpoint())",
                         {"GPU_ROUTER_CONTROL_DIR": str(tmp_path / "ctl")})
    assert proc.stdout.strip() == "True"


def test_outside_gpu_router_the_module_still_works(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", "import gpu; gpu.log(step=0, loss=1); print(gpu.job_id())"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          env={k: v for k, v in os.environ.items() if not k.startswith("GPU_ROUTER")}
                          | {"PYTHONPATH": str(GPU_MODULE_DIR.parent)})
    assert proc.returncode == 0 and proc.stdout.strip() == "None"
    assert (tmp_path / "outputs" / "metrics.jsonl").exists()


def test_masker_hides_every_form_even_split_across_reads() -> None:
    secret = "s3cr3t-VALUE/with+chars"
    m = Masker([secret])
    text = (f"raw {secret} b64 {base64.b64encode(secret.encode()).decode()} "
            f"url {urllib.parse.quote(secret, safe='')} end\n").encode()
    out = b"".join(m.feed(text[i:i + 3]) for i in range(0, len(text), 3)) + m.flush()
    assert secret.encode() not in out
    assert base64.b64encode(secret.encode()) not in out
    assert urllib.parse.quote(secret, safe="").encode() not in out
    assert out.count(MASK.encode()) == 3 and out.endswith(b" end\n")


def test_parse_metrics_skips_garbage() -> None:
    data = b'{"step":1,"ts":5,"loss":0.5}\nnot json\n[1,2]\n{"step":2,"loss":"nan","acc":true,"x":2}\n'
    rows, last = parse_metrics(data)
    assert rows == [(1, "loss", 0.5, 5.0), (2, "x", 2.0, rows[-1][3])]
    assert last["loss"] == 0.5 and last["x"] == 2 and last["_step"] == 2


def test_import_gpu_works_in_a_plain_python_outside_gpu_router(tmp_path: Path) -> None:
    """An adapted script runs as `python train.py` on the laptop: the installed `gpu` module
    answers with folders under the current directory (docs/in-the-job.md)."""
    (tmp_path / "train.py").write_text(
        "import gpu, json\n"
        "(gpu.output_dir() / 'model.txt').write_text('weights')\n"
        "gpu.log(step=1, loss=0.5)\n"
        "print(json.dumps({'out': str(gpu.output_dir()), 'data': str(gpu.data_dir()),\n"
        "                  'ckpt': str(gpu.checkpoint_dir()), 'job': gpu.job_id(),\n"
        "                  'attempt': gpu.attempt(), 'should': gpu.should_checkpoint(),\n"
        "                  'file': gpu.__file__}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_ROUTER_") and k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["out"], doc["data"], doc["ckpt"]) == ("outputs", "data", "checkpoints")
    assert (doc["job"], doc["attempt"], doc["should"]) == (None, 1, False)
    assert not doc["file"].startswith(str(tmp_path))  # the installed module, not a local copy
    assert (tmp_path / "outputs" / "model.txt").read_text() == "weights"
    row = json.loads((tmp_path / "outputs" / "metrics.jsonl").read_text())
    assert row["step"] == 1 and row["loss"] == 0.5


# -- the launcher's one log filter, run as on a target ------------------------------------------

TOKEN = "tok-3xAmPle/VALUE+with=chars"
LEAKY_JOB = r'''
import base64, os, sys, time, urllib.parse
import gpu
v = os.environ["MY_TOKEN"]
b = v.encode()
print("raw", v)
print("basic Authorization: Basic", base64.b64encode(b"ada:" + b).decode())
print("url", urllib.parse.quote(v, safe="").replace("%2F", "/").replace("%2B", "%2b"))
print("hex", b.hex(), b.hex().upper())
print("bidi", v[:5] + "\u202e" + v[5:], "esc", v[:3] + "\x1b[0m" + v[3:], "nul", v[:9] + "\x00" + v[9:])
sys.stdout.write("split " + v[:7]); sys.stdout.flush(); time.sleep(1.2)
sys.stdout.write(v[7:] + " joined\n"); sys.stdout.flush()
print("err", v, file=sys.stderr)
gpu.log(step=1, loss=0.5, **{"k_" + b.hex(): 1.0})
raise SystemExit("failing with " + v)
'''


def _launcher(tmp_path: Path, job: str, requirements: list[str] | None) -> tuple[str, dict, str]:
    """Run the launcher as a batch script would (--foreground), with one secret on stdin."""
    runtime, jdir, adir = lay_out_attempt(tmp_path, job)
    deps = {"hash": "h" * 32, "requirements": requirements, "file": None,
            "venvs_dir": str(tmp_path / "venvs")} if requirements else None
    # a job id of its own: the launcher names the job's cgroup after it (gpu-router-<id>-<attempt>),
    # one per machine, and another test (another xdist worker) may run a job at the same time
    spec = {"job_id": f"j{uuid.uuid4().hex[:12]}", "attempt": 1, "tag": str(adir / "spec.json"), "attempt_dir": str(adir),
            "workdir": str(jdir), "log": str(jdir / "job.log"), "runtime_dir": str(runtime),
            "base_python": sys.executable, "command": ["{python}", "job.py"], "deps": deps,
            "secret_env": ["MY_TOKEN"],
            "env": {"GPU_ROUTER_METRICS_FILE": str(jdir / "metrics.jsonl"),
                    "GPU_ROUTER_OUTPUT_DIR": str(jdir / "out")}}
    (adir / "spec.json").write_text(json.dumps(spec))
    subprocess.run([sys.executable, str(runtime / "launch.py"), "--secrets-stdin", "--foreground",
                    str(adir / "spec.json")], input=json.dumps({"MY_TOKEN": TOKEN}).encode(),
                   capture_output=True, timeout=120, cwd=tmp_path)
    metrics = jdir / "metrics.jsonl"
    return ((jdir / "job.log").read_text(), json.loads((adir / "exit.json").read_text()),
            metrics.read_text() if metrics.exists() else "")


def _spellings(value: str) -> list[str]:
    b = value.encode()
    return [value, b.hex(), b.hex().upper(), base64.b64encode(b).decode(),
            urllib.parse.quote(value, safe=""), urllib.parse.quote(value, safe="/").replace("%2B", "%2b"),
            base64.b64encode(b"ada:" + b).decode()[8:-4]]


def test_the_launcher_masks_every_line_it_writes(tmp_path: Path) -> None:
    log, exit_doc, metrics = _launcher(tmp_path, LEAKY_JOB, None)
    for form in _spellings(TOKEN):
        assert form not in log and form not in metrics and form not in json.dumps(exit_doc), form
    from core.runtime.textsafe import printable

    assert printable(log) == log  # stored as a terminal shows it: nothing left to re-join
    assert TOKEN not in printable(log).replace("\n", "")
    for shown in ("raw [secret]", "url [secret]", "hex [secret] [secret]", "split [secret] joined",
                  "err [secret]", "failing with [secret]", "Authorization: Basic YWRhOn"):
        assert shown in log, shown
    assert "[gpu] a metric was dropped" in log
    assert json.loads(metrics)["loss"] == 0.5


def test_pip_output_goes_through_the_same_filter(tmp_path: Path) -> None:
    """A requirements line with ${MY_TOKEN}: pip expands it and prints the value."""
    log, exit_doc, _ = _launcher(tmp_path, "print('never runs')\n", ["${MY_TOKEN}"])
    assert exit_doc["code"] != 0 and exit_doc["error"].startswith("installing dependencies failed: ")
    assert "Invalid requirement: '[secret]'" in log and "Invalid requirement: '[secret]'" in exit_doc["error"]
    for form in _spellings(TOKEN):
        assert form not in log, form
