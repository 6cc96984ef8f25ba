"""A newcomer's first hour: an unadapted training script, as people write them, loses no work.

The script uses argparse, reads a git-ignored data/ folder if it is there, sits beside a .env,
and writes outputs/model.pkl and outputs/metrics.json next to itself (not gpu.output_dir()).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state

pytestmark = pytest.mark.slow

TRAIN = '''
import argparse, json, os, pickle, random

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--out", default="outputs")
a = p.parse_args()
rows = []
if os.path.exists("data/train.csv"):
    rows = [line.split(",") for line in open("data/train.csv").read().split()]
random.seed(0)
w = 0.0
for epoch in range(a.epochs):
    w += 0.5
    print(f"epoch {epoch} w={w}", flush=True)
os.makedirs(a.out, exist_ok=True)
with open(os.path.join(a.out, "model.pkl"), "wb") as f:
    pickle.dump({"w": w, "rows": len(rows)}, f)
with open(os.path.join(a.out, "metrics.json"), "w") as f:
    json.dump({"w": w}, f)
print("saved", flush=True)
'''


def _project(tmp_path: Path, gpu_yaml: str | None) -> Path:
    files = {"train.py": TRAIN}
    if gpu_yaml is not None:
        files["gpu.yaml"] = gpu_yaml
    project = make_git_project(tmp_path / "sk", files, gitignore="data/\n.env\noutputs/\n")
    (project / "data").mkdir()
    (project / "data" / "train.csv").write_text("1,2\n3,4\n")
    (project / ".env").write_text("API_KEY=abc123\n")
    return project


def test_declared_outputs_come_home_unchanged_script(home: Path, tmp_path: Path) -> None:
    project = _project(tmp_path, "script: train.py\nhours: 0.1\noutputs: [outputs/]\n")
    sub = gpu_json("submit", "--wait-s", "0", "--", "--epochs", "4", cwd=project)
    assert ".env" not in json.dumps(sub["bundle"].get("list", []))
    done = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert done["state"] == "done", run_gpu("logs", sub["job"]["short_id"]).stdout
    runs = project / "runs" / sub["job"]["short_id"]
    model = pickle.loads((runs / "outputs" / "model.pkl").read_bytes())
    assert model["w"] == 2.0 and model["rows"] == 0  # data/ is git-ignored: it did not ship
    assert json.loads((runs / "outputs" / "metrics.json").read_text()) == {"w": 2.0}
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert "2 declared files brought into the output folder" in log
    assert "stayed on the target" not in log


def test_undeclared_outputs_are_named_in_the_log_status_and_next_submit(home: Path, tmp_path: Path) -> None:
    project = _project(tmp_path, None)
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=120)["state"] == "done"
    # the script reads data/train.csv, which git ignores: the hint names it, and only it
    assert "train.py refers to data/, which did not ship (ignored by git)" in sub["bundle"]["hint"]
    assert "--data data=data" in sub["bundle"]["hint"] and ".env" not in sub["bundle"]["hint"]
    log = run_gpu("logs", short).stdout.rstrip().splitlines()
    assert "2 files the job wrote stayed on the target (2 under outputs/)" in log[-1]
    assert "`outputs: [outputs/]` in gpu.yaml" in log[-1] and "gpu.output_dir()" in log[-1]
    assert f"`gpu fetch {short} outputs/` brings them home now" in log[-1]
    assert not (project / "runs" / short / "outputs").exists()
    status = gpu_json("status", short, "--verbose")
    assert any("stayed on the target" in e["reason"] for e in status["events"])
    assert "stayed on the target" in run_gpu("status", short).stdout
    # the next submit says so (this one, with no hours, is held: it never runs nor ends)
    again = gpu_json("submit", "train.py", "--wait-s", "0", "--env", "RUN=2", cwd=project)
    assert f"the last run of this project ({short}) left work behind" in again["guidance"]["note"]
    # ... and they come home on demand, where a declared output would have landed
    fetched = gpu_json("fetch", short, "outputs/", cwd=project)
    assert (fetched["files"], fetched["missing"], fetched["refused"]) == (2, [], [])
    model = pickle.loads((project / "runs" / short / "outputs" / "model.pkl").read_bytes())
    assert model == {"w": 1.5, "rows": 0}
    # once fetched, the note is history: neither the next submit nor the status repeats it
    after = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", "--env", "RUN=4", cwd=project)
    assert "left work behind" not in after["guidance"].get("note", ""), after["guidance"]
    reasons = [e["reason"] for e in gpu_json("status", short, "--verbose")["events"]]
    assert reasons[-1] == f"fetched 2 files (outputs) home into {project / 'runs' / short}", reasons
    # declaring it on the command line brings it home
    third = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", "--output", "outputs/",
                     "--env", "RUN=3", cwd=project)["job"]
    assert wait_state(third["short_id"], {"done", "failed"}, timeout=120)["state"] == "done"
    assert (project / "runs" / third["short_id"] / "outputs" / "model.pkl").exists()


@pytest.mark.parametrize("bad", ["/etc", "../up", "~/x", "a/../../b"])
def test_outputs_must_stay_inside_the_job_folder(home: Path, tmp_path: Path, bad: str) -> None:
    project = _project(tmp_path, None)
    proc = run_gpu("submit", "train.py", "--hours", "0.1", "--output", bad, "--json", cwd=project)
    assert proc.returncode == 2 and "argument --output" in proc.stderr
