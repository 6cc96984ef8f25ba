"""Metrics from the scripts people already have: wandb (the stand-in and the real package) and
openscience_track, through real jobs on the local target, and the pieces underneath."""

from __future__ import annotations

import argparse
import asyncio
import html
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.engine.metricfile import parse_rows
from core.runtime import JOBSITE_DIR, RUNTIME_DIR, SHIMS_DIR
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state, write_user_config

RUNTIME = str(RUNTIME_DIR)
PRICE = 3.6  # dollars per hour of the test's local target: cost = 3.6 x hours

WANDB_SCRIPT = '''\
import wandb

run = wandb.init(project="demo", config={"lr": 0.01, "epochs": 3, "model": {"depth": 4}})
wandb.config.update({"batch_size": 32})
for step in range(20):
    wandb.log({"train/loss": 1.0 / (step + 1), "val": {"acc": step / 20}}, step=step)
run.summary["best_acc"] = 0.95
wandb.finish()
print("wandb from", wandb.__file__, flush=True)
'''

EXPECTED_CONFIG = {"lr": 0.01, "epochs": 3, "model.depth": 4, "batch_size": 32}
EXPECTED_FINAL = {"train/loss": 1.0 / 20, "val/acc": 19 / 20, "best_acc": 0.95}


def _bare_python(tmp_path: Path) -> str:
    """A Python with nothing installed (a venv without system site packages): no wandb."""
    venv = tmp_path / "bare-python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('wandb'))"],
                           capture_output=True, text=True, timeout=60,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert probe.stdout.strip() == "None", probe.stdout + probe.stderr
    return str(python)


def _target(python: str | None = None) -> None:
    extra = f", python: {python}" if python else ""
    write_user_config(f"targets:\n  local: {{kind: local, price_per_hour: {PRICE}{extra}}}\n")


def _run_job(project: Path, script: str = "train.py") -> tuple[str, dict]:
    sub = gpu_json("submit", script, "--hours", "0.5", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=240)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    return short, done


def _check_tracked_job(short: str, log_mark: str) -> dict:
    """The wandb script's curves, config, final numbers and estimate in every place."""
    log = run_gpu("logs", short).stdout
    assert log_mark in log, log

    metrics = gpu_json("metrics", short)["metrics"]
    loss = metrics["train/loss"]["series"]
    assert [p["step"] for p in loss] == list(range(20))
    assert [p["value"] for p in loss] == [1.0 / (s + 1) for s in range(20)]
    assert [p["value"] for p in metrics["val/acc"]["series"]] == [s / 20 for s in range(20)]

    status = gpu_json("status", short)
    assert status["config"] == EXPECTED_CONFIG
    assert status["final"] == pytest.approx(EXPECTED_FINAL)
    assert status["estimate"] == {"hours": 0.5, "cost": round(0.5 * PRICE, 4)}
    actual = status["actual"]
    assert 0 < actual["hours"] < 0.5
    assert actual["cost"] == pytest.approx(actual["hours"] * PRICE, abs=1e-3)

    text = run_gpu("status", short).stdout
    assert "took " in text and "h of 0.5 h estimated, cost $" in text and "of $1.80" in text
    assert "best_acc=0.95" in text and "lr=0.01" in text and "model.depth=4" in text
    assert "train/loss" in text  # the metrics table

    doc = json.loads((Path(status["outputs_dir"]) / "job.json").read_text())
    assert doc["job"]["config"] == EXPECTED_CONFIG
    assert doc["job"]["final"] == pytest.approx(EXPECTED_FINAL)
    assert doc["job"]["estimate"] == status["estimate"]
    assert doc["job"]["actual"]["hours"] > 0
    assert doc["metrics"]["train/loss"]["points"] == 20
    return status


@pytest.mark.slow
def test_unchanged_wandb_script_without_wandb_installed(home: Path, tmp_path: Path) -> None:
    """No wandb in the job's environment: gpu-router's stand-in answers `import wandb`."""
    _target(_bare_python(tmp_path))
    project = make_git_project(tmp_path / "p", {"train.py": WANDB_SCRIPT})
    short, _ = _run_job(project)
    _check_tracked_job(short, f"wandb from {os.sep}")
    assert "shims/wandb/__init__.py" in run_gpu("logs", short).stdout
    charts, detail = asyncio.run(_dashboard())
    # train/loss and val/acc, charted: each chart's title names its metric, its last value and
    # the range its curve spans (tui/dash/axes.chart_title)
    drawn = html.unescape(" ".join(re.findall(r">([^<>]*)</text>", charts))).replace("\xa0", " ")
    assert "train/loss " in drawn and "val/acc " in drawn, drawn[:2000]
    assert "tracking" in detail and "best_acc=0.95" in detail and "model.depth=4" in detail


async def _dashboard() -> tuple[str, str]:
    """The dashboard as a person sees it: the selected job's charts, then its detail screen."""
    from tui.dash.app import DashApp

    app = DashApp(live=False, bell=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.5)
        charts = html.unescape(app.export_screenshot())
        await pilot.press("enter")
        await pilot.pause(0.5)
        detail = html.unescape(app.export_screenshot())
    return charts, detail


@pytest.mark.slow
def test_unchanged_wandb_script_with_the_real_wandb(home: Path, tmp_path: Path) -> None:
    """The real package in the job's environment (requirements.txt lists it; the venv reuses
    the installed copy): it runs offline, no account, and gpu-router gets every value."""
    if importlib.util.find_spec("wandb") is None:
        pytest.fail("the real wandb package is not installed here: run the README's test "
                    "command (pip install -e '.[test]'), which installs it")
    _target()
    project = make_git_project(tmp_path / "p", {"train.py": WANDB_SCRIPT, "requirements.txt": "wandb\n"},
                               gitignore="wandb/\n")
    short, done = _run_job(project)
    status = _check_tracked_job(short, "wandb from ")
    log = run_gpu("logs", short).stdout
    assert "site-packages/wandb/__init__.py" in log and "shims" not in log
    # offline: its run folder came home with the outputs, ready for `wandb sync`
    runs = list((Path(status["outputs_dir"]) / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("run-*.wandb")), list(Path(status["outputs_dir"]).rglob("*"))


OST_SCRIPT = '''\
from pathlib import Path
import openscience_track as ost

ost.init(project="demo", config={"lr": 0.1, "layers": [64, 64], "optimizer": "adam"})
for i in range(5):
    ost.log({"loss": 1.0 / (i + 1), "lr": 0.1})
ost.summary(best=0.5)
Path("model.bin").write_bytes(b"weights")
print("artifact at", ost.artifact("model.bin", "models/model.bin"))
ost.finish()
'''


@pytest.mark.slow
def test_openscience_track_in_a_job(home: Path, tmp_path: Path) -> None:
    _target()
    project = make_git_project(tmp_path / "p", {"train.py": OST_SCRIPT}, gitignore="model.bin\n")
    short, done = _run_job(project)
    metrics = gpu_json("metrics", short)["metrics"]
    assert [(p["step"], p["value"]) for p in metrics["loss"]["series"]] == [(i, 1.0 / (i + 1)) for i in range(5)]
    status = gpu_json("status", short)
    assert status["config"] == {"lr": 0.1, "layers": [64, 64], "optimizer": "adam"}
    assert status["final"] == pytest.approx({"loss": 0.2, "lr": 0.1, "best": 0.5})
    out = Path(status["outputs_dir"])
    assert (out / "models" / "model.bin").read_bytes() == b"weights"
    assert json.loads((out / "job.json").read_text())["job"]["final"]["best"] == 0.5


def _plain_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_ROUTER_", "WANDB_"))}
    return {**env, "PYTHONPATH": RUNTIME, **extra}


def test_openscience_track_outside_gpu_router(tmp_path: Path) -> None:
    """As the `gpu` module does outside a job: ./outputs/metrics.jsonl and ./outputs/."""
    (tmp_path / "train.py").write_text(OST_SCRIPT)
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=_plain_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "outputs" / "models" / "model.bin").read_bytes() == b"weights"
    parsed = parse_rows((tmp_path / "outputs" / "metrics.jsonl").read_bytes())
    assert [(s, v) for s, k, v, _ in parsed.rows if k == "loss"] == [(i, 1.0 / (i + 1)) for i in range(5)]
    assert parsed.config["optimizer"] == "adam" and parsed.final["best"] == 0.5


# -- the stand-in, in this process (loaded under its own name: the real wandb may be here) ------


def _shim():
    spec = importlib.util.spec_from_file_location("gpu_router_wandb_standin",
                                                  SHIMS_DIR / "wandb" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def wandb(metrics: "_Metrics"):
    """A fresh copy of the stand-in; its run is finished before the metrics file goes away
    (else its exit hook would write the final numbers into ./outputs of wherever pytest runs)."""
    module = _shim()
    yield module
    module.finish()


class _Metrics:
    """The metrics file the stand-in writes, read back the way the supervisor reads it."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0
        self.saved = os.environ.get("GPU_ROUTER_METRICS_FILE")
        os.environ["GPU_ROUTER_METRICS_FILE"] = str(path)

    def new(self):
        data = self.path.read_bytes() if self.path.exists() else b""
        chunk, self.offset = data[self.offset:], len(data)
        return parse_rows(chunk)

    def close(self) -> None:
        if self.saved is None:
            os.environ.pop("GPU_ROUTER_METRICS_FILE", None)
        else:
            os.environ["GPU_ROUTER_METRICS_FILE"] = self.saved


@pytest.fixture
def metrics(tmp_path: Path):
    m = _Metrics(tmp_path / "metrics.jsonl")
    yield m
    m.close()


def _points(parsed) -> list[tuple[int | None, str, float]]:
    return [(s, k, v) for s, k, v, _ in parsed.rows]


def test_stand_in_flattens_nested_dicts_with_a_slash(metrics: _Metrics, wandb) -> None:
    run = wandb.init(project="p")
    wandb.log({"train": {"loss": 0.5, "inner": {"x": 1}}, "top": 2})
    assert _points(metrics.new()) == [(0, "train/loss", 0.5), (0, "train/inner/x", 1.0), (0, "top", 2.0)]
    run.finish()


def test_stand_in_steps_move_as_wandbs_do(metrics: _Metrics, wandb, capfd: pytest.CaptureFixture) -> None:
    run = wandb.init()
    wandb.log({"a": 1})                     # step 0, then 1
    wandb.log({"b": 2}, commit=False)       # adds to step 1
    wandb.log({"c": 3})                     # step 1, then 2
    wandb.log({"d": 4}, step=7)             # step 7, stays 7
    wandb.log({"e": 5})                     # step 7, then 8
    wandb.log({"f": 6}, step=3)             # lower than 8: ignored, as wandb does
    wandb.log({"g": 7}, step=9, commit=True)  # step 9, then 10
    assert run.step == 10
    assert _points(metrics.new()) == [(0, "a", 1.0), (1, "b", 2.0), (1, "c", 3.0), (7, "d", 4.0),
                                      (7, "e", 5.0), (9, "g", 7.0)]
    assert "log at step 3 ignored" in capfd.readouterr().err
    run.finish()


def test_stand_in_skips_what_is_not_a_number(metrics: _Metrics, wandb) -> None:
    run = wandb.init()
    wandb.log({"text": "1.5", "none": None, "list": [1, 2], "image": wandb.Image("x.png"),
               "table": wandb.Table(columns=["a"]), "nan": float("nan"), "inf": math.inf,
               "flag": True, "count": 3, "np": np.float32(0.25), "np_int": np.int64(7),
               "chart": wandb.plot.line(None, "x", "y")})
    assert _points(metrics.new()) == [(0, "flag", 1.0), (0, "count", 3.0), (0, "np", 0.25), (0, "np_int", 7.0)]
    with pytest.raises(TypeError):
        wandb.log({1: 2.0})  # wandb's own rule: keys are text
    with pytest.raises(TypeError):
        wandb.log([("a", 1)])
    run.finish()


def test_stand_in_drops_names_outside_the_rule(metrics: _Metrics, wandb, capfd: pytest.CaptureFixture) -> None:
    run = wandb.init()
    wandb.log({"fine/name-1.x": 1, "has space": 2, "x" * 65: 3, "esc\x1b]52;c;aGk=\x07": 4})
    assert _points(metrics.new()) == [(0, "fine/name-1.x", 1.0)]
    err = capfd.readouterr().err
    assert "dropped: names are 1 to 64 characters" in err and "\x1b" not in err
    run.finish()


def test_stand_in_config_summary_and_final_numbers(metrics: _Metrics, wandb) -> None:
    args = argparse.Namespace(lr=0.1, path=Path("/data/x"), layers=[8, 8])
    with wandb.init(project="p", config=args) as run:
        assert run.config.lr == 0.1 and wandb.config["layers"] == [8, 8]
        wandb.config.update({"opt": {"name": "adam", "beta": 0.9}})
        wandb.config.epochs = 3
        for i in range(3):
            run.log({"loss": 3 - i})
        wandb.summary["best"] = 9
        assert run.summary["loss"] == 1 and run.summary["best"] == 9
    assert wandb.run is None
    parsed = metrics.new()
    assert parsed.config == {"lr": 0.1, "path": "/data/x", "layers": [8, 8], "opt.name": "adam",
                             "opt.beta": 0.9, "epochs": 3}
    assert parsed.final == {"loss": 1.0, "best": 9.0}
    with pytest.raises(RuntimeError, match="wandb.init"):
        wandb.config.lr
    with pytest.raises(AttributeError, match="requirements.txt"):
        wandb.Api


def test_stand_in_drops_values_that_hold_a_secret(metrics: _Metrics, capfd: pytest.CaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch, wandb) -> None:
    token = "tok-3xAmPle/VALUE+with=chars"
    monkeypatch.setenv("MY_TOKEN", token)
    monkeypatch.setenv("GPU_ROUTER_SECRET_ENV", "MY_TOKEN")
    run = wandb.init(config={"url": f"https://x:{token}@h", "lr": 0.1})
    run.summary["ok"] = 1
    parsed = metrics.new()
    assert parsed.config == {"lr": 0.1} and parsed.final == {"ok": 1.0}
    assert token not in metrics.path.read_text()
    assert "a config value was dropped" in capfd.readouterr().err
    run.finish()


NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-",
                min_size=1, max_size=64)
FINITE = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=examples(150), deadline=None)
@given(data=st.dictionaries(NAMES, FINITE, max_size=20), step=st.none() | st.integers(0, 2 ** 40))
def test_any_dict_of_finite_floats_arrives_intact(tmp_path_factory: pytest.TempPathFactory, data: dict,
                                                  step: int | None) -> None:
    """Logged through the stand-in, read by the supervisor's parser: the same names, values
    and step (names "step" and "ts" included: grouped metrics are never the row's fields)."""
    m = _Metrics(tmp_path_factory.mktemp("prop") / "m.jsonl")
    try:
        wandb = _shim()
        run = wandb.init()
        run.log(data, step=step)
        run.finish()
        parsed = m.new()
        points = _points(parsed)
        assert {k: v for _, k, v in points} == data and len(points) == len(data)
        assert {s for s, _, _ in points} <= {0 if step is None else step}
        assert parsed.final == data  # no summary set by hand: each metric's last value
    finally:
        m.close()


# -- the job's sitecustomize ----------------------------------------------------------------------


def test_sitecustomize_puts_the_stand_in_last_and_runs_the_one_it_hides(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import sys\nsys.hidden_sitecustomize_ran = True\n")
    code = ("import sys, wandb; print(sys.path[-1]); print(getattr(sys, 'hidden_sitecustomize_ran', False));"
            "print(getattr(wandb, 'GPU_ROUTER_SHIM', False) or 'real')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=_plain_env(PYTHONPATH=os.pathsep.join([RUNTIME, str(JOBSITE_DIR), str(other)])))
    assert proc.returncode == 0, proc.stderr
    last, hidden, which = proc.stdout.split()
    assert last == str(SHIMS_DIR) and hidden == "True"
    real = importlib.util.find_spec("wandb") is not None
    assert which == ("real" if real else "True")  # the real package wins wherever it is installed


def test_runtime_archive_holds_the_tracking_files() -> None:
    """Every target gets the same runtime folder: the stand-in, sitecustomize, openscience_track."""
    from core.runtime import files

    shipped = {rel for _, rel in files()}
    assert {"shims/wandb/__init__.py", "jobsite/sitecustomize.py", "openscience_track/__init__.py",
            "gpu/tracking.py", "gpu/wandb_hook.py", "gpu/__init__.py", "launch.py"} <= shipped


def test_parse_rows_applies_the_stored_value_rules() -> None:
    data = b"\n".join([
        b'{"ts":1,"config":{"lr":0.1,"bad key":1,"t":"' + b"x" * 300 + b'","l":[1,"a",[2],{"b":1}],'
        b'"o":{"nested":1},"n":null,"f":true,"big":1e999}}',
        b'{"ts":2,"step":3,"metrics":{"step":5,"ts":6,"loss":0.5,"s":"1"},"flat":1}',
        b'{"ts":3,"summary":{"acc":0.9,"txt":"no","bad name!":1}}',
        b'{"ts":4,"config":{"lr":0.2}}',
        b'{"ts":5,"step":4,"config":7}',
    ])
    parsed = parse_rows(data)
    assert parsed.config == {"lr": 0.2, "t": "x" * 256, "l": [1, "a"], "n": None, "f": True}
    assert parsed.final == {"acc": 0.9}
    assert [(s, k, v) for s, k, v, _ in parsed.rows] == [(3, "flat", 1.0), (3, "step", 5.0), (3, "ts", 6.0),
                                                         (3, "loss", 0.5), (4, "config", 7.0)]


def test_store_merges_config_and_final_with_a_cap(home: Path) -> None:
    from core.jobs import store as store_mod
    from core.jobs.records import MAX_CONFIG_KEYS

    s = store_mod.Store()
    s.conn.execute("INSERT INTO jobs (id, short_id, name, state, created_at, updated_at, project_dir, "
                   "outputs_dir, fingerprint, request_json) VALUES ('j', 'j', 'n', 'running', 0, 0, '/', '/', 'f', '{}')")
    s.add_metrics("j", [], 0, {}, config={"a": 1}, final={"x": 1.0})
    s.add_metrics("j", [], 0, {}, config={"a": 2, "b": "t"}, final={"y": 2.0})
    job = s.get("j")
    assert job.config == {"a": 2, "b": "t"} and job.final == {"x": 1.0, "y": 2.0}
    s.add_metrics("j", [], 0, {}, config={f"k{i}": i for i in range(2000)})
    assert len(s.get("j").config) == MAX_CONFIG_KEYS


@pytest.mark.slow
def test_wandb_stand_in_on_an_ssh_target(sshd, home: Path, tmp_path: Path) -> None:
    """The runtime archive carries the stand-in and the sitecustomize to a remote host, and the
    launcher puts them on the job's path there too (the host's Python has no wandb)."""
    o = sshd.target_options(tmp_path / "remote", _bare_python(tmp_path))
    gpu_json("targets", "add", "ssh", "box", "--host", o["host"], "--port", str(o["port"]),
             "--user", o["user"], "--key", o["key"], "--known-hosts", o["known_hosts"],
             "--root", o["root"], "--python", o["python"], "--price-per-hour", str(PRICE))
    project = make_git_project(tmp_path / "p", {"train.py": WANDB_SCRIPT})
    sub = gpu_json("submit", "train.py", "--provider", "box", "--hours", "0.5", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=240)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    _check_tracked_job(short, "shims/wandb/__init__.py")


REAL_WANDB_SCRIPT = '''\
import numpy as np
import wandb

with wandb.init(project="demo", config={"lr": 0.5}) as run:
    run.log({"a": np.float32(0.5), "hist": wandb.Histogram([1, 2, 3]), "text": "x"})
    run.log({"b": 2}, commit=False)
    run.log({"c": 3})
wandb.init(project="again")  # never finished: its final numbers are written at exit
wandb.log({"d": 4}, step=5)
wandb.summary.update({"best": 1})
'''


def test_the_real_wandb_is_followed_in_the_job_process(tmp_path: Path) -> None:
    """Through the job's sitecustomize, as the launcher sets it up (no gpu-router job needed):
    a context-managed run, commit=False, media skipped, and a run that is never finished."""
    if importlib.util.find_spec("wandb") is None:
        pytest.fail("the real wandb package is not installed here: run the README's test "
                    "command (pip install -e '.[test]'), which installs it")
    (tmp_path / "job.py").write_text(REAL_WANDB_SCRIPT)
    env = _plain_env(PYTHONPATH=os.pathsep.join([RUNTIME, str(JOBSITE_DIR)]),
                     GPU_ROUTER_METRICS_FILE=str(tmp_path / "m.jsonl"),
                     GPU_ROUTER_OUTPUT_DIR=str(tmp_path / "out"),
                     WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(tmp_path / "out"))
    proc = subprocess.run([sys.executable, "job.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "not recorded by gpu-router" not in proc.stderr and "not followed" not in proc.stderr
    parsed = parse_rows((tmp_path / "m.jsonl").read_bytes())
    assert _points(parsed) == [(0, "a", 0.5), (1, "b", 2.0), (1, "c", 3.0), (5, "d", 4.0)]
    assert parsed.config == {"lr": 0.5}
    assert parsed.final == {"a": 0.5, "b": 2.0, "c": 3.0, "d": 4.0, "best": 1.0}
    assert list((tmp_path / "out" / "wandb").glob("offline-run-*"))


SHOWN_FIGURES_SCRIPT = '''\
import matplotlib.pyplot as plt

for epoch in range(2):
    plt.figure()
    plt.plot([0, 1, 2], [epoch, 1, 0])
    plt.show()  # no screen on a target: saved, then closed (not saved again next epoch)
fig, (a, b) = plt.subplots(1, 2)
plt.figure()
plt.show()
plt.show()  # nothing open: nothing saved
'''


def test_plt_show_with_no_screen_saves_the_figures_into_the_outputs(tmp_path: Path) -> None:
    """Through the job's sitecustomize, as the launcher sets it up: each plt.show() under a
    backend with no window saves what is open into output_dir()/figures and says so."""
    if importlib.util.find_spec("matplotlib") is None:
        pytest.fail("matplotlib is not installed here: run the README's test command "
                    "(pip install -e '.[test]'), which installs it")
    (tmp_path / "job.py").write_text(SHOWN_FIGURES_SCRIPT)
    env = _plain_env(PYTHONPATH=os.pathsep.join([RUNTIME, str(JOBSITE_DIR)]),
                     GPU_ROUTER_OUTPUT_DIR=str(tmp_path / "out"), MPLCONFIGDIR=str(tmp_path / "mpl"))
    env.pop("DISPLAY", None)
    env.pop("MPLBACKEND", None)
    proc = subprocess.run([sys.executable, "job.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    saved = sorted(p.name for p in (tmp_path / "out" / "figures").iterdir())
    assert saved == ["figure-001.png", "figure-002.png", "figure-003.png", "figure-004.png"], saved
    for name in saved:
        assert (tmp_path / "out" / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    said = [line for line in proc.stderr.splitlines() if "plt.show() has no screen here" in line]
    assert len(said) == 3, proc.stderr
    assert "saved 2 figures" in said[-1] and "plt.savefig(gpu.output_dir() / 'loss.png')" in said[-1]


def test_a_metrics_line_nested_past_the_parser_s_depth_is_skipped_and_the_rest_kept() -> None:
    deep = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    parsed = parse_rows(b'{"step": 1, "loss": 0.5}\n' + deep + b'\n{"step": 2, "loss": 0.25}\n')
    assert [(s, k, v) for s, k, v, _ in parsed.rows] == [(1, "loss", 0.5), (2, "loss", 0.25)]


def test_a_job_s_metric_names_are_capped_known_names_first() -> None:
    from core.engine.metricfile import MAX_KEYS, cap_keys

    lines = [json.dumps({"step": i, f"k{i}": 1.0, "loss": 0.1}) for i in range(MAX_KEYS + 50)]
    parsed = parse_rows("\n".join(lines).encode())
    dropped = cap_keys(parsed, {"loss"})
    names = {k for _, k, _, _ in parsed.rows}
    assert len(names) == MAX_KEYS and "loss" in names and dropped == 51
    assert sum(1 for _, k, _, _ in parsed.rows if k == "loss") == MAX_KEYS + 50  # a known name is never dropped
    assert set(parsed.last) - {"_step"} <= names


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_job_writing_a_row_too_deep_to_parse_still_ends_and_comes_home(home: Path, tmp_path: Path) -> None:
    script = ("import json, os, gpu\n"
              "gpu.log(step=0, loss=1.0)\n"
              "with open(os.environ['GPU_ROUTER_METRICS_FILE'], 'a') as f:\n"
              "    f.write('{\"a\":' + '[' * 100000 + ']' * 100000 + '}\\n')\n"
              "gpu.log(step=1, loss=0.5)\n"
              "print('wrote', flush=True)\n")
    project = make_git_project(tmp_path / "p", {"deep.py": script})
    sub = gpu_json("submit", "deep.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    doc = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert doc["state"] == "done", run_gpu("logs", sub["job"]["short_id"]).stdout
    series = gpu_json("metrics", sub["job"]["short_id"])["metrics"]["loss"]["series"]
    assert [p["step"] for p in series] == [0, 1]
