"""Lightning's own logging, checkpoints and logs folder reach gpu-router with no change to the
script (issue 41, item 2): the pieces of gpu/lightning_hook.py and workdir.declared_by_job
here, quickly, with stand-ins for Lightning's classes; then a real Lightning script (torch's CPU
wheel, a tiny model, a few steps) through a real job on the local target, resumed once."""

from __future__ import annotations

import asyncio
import glob
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gpu
from core.engine.metricfile import parse_rows
from core.runtime import JOBSITE_DIR, RUNTIME_DIR, workdir
from gpu import lightning_hook
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state, write_user_config


@pytest.fixture
def job_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folders a job's `gpu` module writes to, as the launcher names them."""
    job = tmp_path / "job"
    for name in ("out", "ckpt", "code/w"):
        (job / name).mkdir(parents=True)
    monkeypatch.setenv("GPU_ROUTER_OUTPUT_DIR", str(job / "out"))
    monkeypatch.setenv("GPU_ROUTER_CHECKPOINT_DIR", str(job / "ckpt"))
    monkeypatch.setenv("GPU_ROUTER_METRICS_FILE", str(job / "metrics.jsonl"))
    monkeypatch.delenv("GPU_ROUTER_CHECKPOINT_GENERATIONS", raising=False)
    monkeypatch.setattr(lightning_hook, "_sources", {})
    monkeypatch.setattr(lightning_hook, "_state", {"resumed": False})
    return job


class _Base:
    """Lightning's `Logger` as the hook subclasses it: no arguments to __init__."""


def test_the_logger_writes_lightnings_values_at_lightnings_step(job_dirs: Path) -> None:
    """What Lightning hands every logger (a dict of floats and its step; train and val values
    at the same step in two calls; hyperparameters once) as gpu-router's rows."""
    logger = lightning_hook.logger_class(_Base)()
    logger.log_hyperparams({"lr": 0.1, "model": {"width": 4}})
    logger.log_metrics({"train_loss": 0.5, "epoch": 0.0}, step=0)
    logger.log_metrics({"train_loss": 0.25, "epoch": 0.0}, step=1)
    logger.log_metrics({"val_loss": 0.3, "epoch": 0.0}, step=1)
    logger.finalize("success")
    parsed = parse_rows((job_dirs / "metrics.jsonl").read_bytes())
    assert [(s, k, v) for s, k, v, _ in parsed.rows] == [
        (0, "train_loss", 0.5), (0, "epoch", 0.0), (1, "train_loss", 0.25), (1, "epoch", 0.0),
        (1, "val_loss", 0.3), (1, "epoch", 0.0)]
    assert parsed.config == {"lr": 0.1, "model.width": 4}
    assert parsed.final == {"train_loss": 0.25, "val_loss": 0.3, "epoch": 0.0}
    assert (logger.name, logger.version, logger.save_dir) == ("gpu-router", 0, None)


def test_the_logger_travels_to_ddp_spawn_processes(job_dirs: Path) -> None:
    """ddp_spawn pickles the trainer, its loggers included: gpu-router's is found by name in
    gpu.lightning_hook and starts a fresh run on the other side."""
    import pickle

    cls = lightning_hook.logger_class(_Base, "PickledLogger")
    assert lightning_hook.PickledLogger is cls
    logger = cls()
    logger.log_metrics({"train_loss": 0.5}, step=2)
    copy = pickle.loads(pickle.dumps(logger))
    copy.log_metrics({"train_loss": 0.25}, step=3)
    parsed = parse_rows((job_dirs / "metrics.jsonl").read_bytes())
    assert [(s, k, v) for s, k, v, _ in parsed.rows] == [(2, "train_loss", 0.5), (3, "train_loss", 0.25)]


def test_only_rank_zero_logs(job_dirs: Path) -> None:
    logger = lightning_hook.logger_class(_Base)()
    logger._zero = lambda: False
    logger.log_metrics({"train_loss": 0.5}, step=0)
    logger.log_hyperparams({"lr": 0.1})
    assert not (job_dirs / "metrics.jsonl").exists()


def test_a_failure_in_gpu_routers_part_never_reaches_lightning(job_dirs: Path,
                                                               capfd: pytest.CaptureFixture) -> None:
    logger = lightning_hook.logger_class(_Base)()

    def broken() -> bool:
        raise ImportError("no module named lightning.pytorch.utilities.rank_zero")

    logger._zero = broken
    logger.log_metrics({"train_loss": 0.5}, step=0)
    logger.log_metrics({"train_loss": 0.4}, step=1)
    err = capfd.readouterr().err
    assert err.count("[gpu] Lightning metrics not recorded by gpu-router: ImportError: no module named") == 1, err
    assert lightning_hook._saved(object(), "/nonexistent/epoch=0.ckpt") is None


def test_a_save_is_kept_as_a_checkpoint_and_top_k_removals_follow(job_dirs: Path) -> None:
    """ModelCheckpoint saves epoch=0, then epoch=1 and removes epoch=0: the checkpoint folder
    holds what Lightning keeps, marked complete each time, and the newest is the resume point."""
    saved = job_dirs / "code" / "w" / "lightning_logs" / "version_0" / "checkpoints"
    saved.mkdir(parents=True)
    first, second = saved / "epoch=0-step=4.ckpt", saved / "epoch=1-step=8.ckpt"
    first.write_bytes(b"zero")
    kept = lightning_hook.keep_checkpoint(str(first))
    assert kept == job_dirs / "ckpt" / "lightning" / "epoch=0-step=4.ckpt"
    assert kept.read_bytes() == b"zero" and os.path.samefile(kept, first)  # a link: no copy made
    second.write_bytes(b"one")
    lightning_hook.keep_checkpoint(str(second))
    first.unlink()
    assert lightning_hook.forget_checkpoint(str(first)) is True
    folder = job_dirs / "ckpt" / "lightning"
    assert sorted(os.listdir(folder)) == ["epoch=1-step=8.ckpt", "latest.json"]
    marker = json.loads((job_dirs / "ckpt" / gpu.COMPLETE_MARKER).read_text())
    assert marker["generation"] == 3 and sorted(marker["files"]) == ["lightning/epoch=1-step=8.ckpt",
                                                                    "lightning/latest.json"]
    assert lightning_hook.latest_checkpoint() == folder / "epoch=1-step=8.ckpt"
    # scratch saves (the tuner's) and what is not a local file are not checkpoints
    scratch = saved / ".lr_find_0a1b.ckpt"
    scratch.write_bytes(b"x")
    assert lightning_hook.keep_checkpoint(str(scratch)) is None
    assert lightning_hook.keep_checkpoint("s3://bucket/epoch=2.ckpt") is None
    assert lightning_hook.forget_checkpoint(str(saved / "never-kept.ckpt")) is False


def test_a_first_save_of_a_resumed_attempt_replaces_the_restored_one(job_dirs: Path) -> None:
    folder = job_dirs / "ckpt" / "lightning"
    folder.mkdir()
    (folder / "epoch=1-step=8.ckpt").write_bytes(b"restored")
    (folder / "latest.json").write_text(json.dumps({"file": "epoch=1-step=8.ckpt"}))
    new = job_dirs / "code" / "w" / "epoch=2-step=12.ckpt"
    new.write_bytes(b"new")
    lightning_hook.keep_checkpoint(str(new))
    assert sorted(os.listdir(folder)) == ["epoch=2-step=12.ckpt", "latest.json"]


def _fit(self, model, train_dataloaders=None, val_dataloaders=None, datamodule=None,  # noqa: ANN001
         ckpt_path=None, weights_only=None):
    """Lightning's Trainer.fit signature (2.6)."""


def test_a_resumed_attempt_fits_from_the_restored_checkpoint(job_dirs: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capfd: pytest.CaptureFixture) -> None:
    folder = job_dirs / "ckpt" / "lightning"
    folder.mkdir()
    (folder / "epoch=1-step=8.ckpt").write_bytes(b"ck")
    (folder / "latest.json").write_text(json.dumps({"file": "epoch=1-step=8.ckpt"}))
    monkeypatch.setenv("GPU_ROUTER_ATTEMPT", "1")
    assert lightning_hook._resume_from(_fit, ("model", "data"), {}) is None  # a first attempt
    monkeypatch.setenv("GPU_ROUTER_ATTEMPT", "2")
    args, kwargs = lightning_hook._resume_from(_fit, ("model", "data"), {})
    assert args == ("model", "data") and kwargs == {"ckpt_path": str(folder / "epoch=1-step=8.ckpt")}
    assert "attempt 2: Lightning resumes from" in capfd.readouterr().err
    assert lightning_hook._resume_from(_fit, ("model", "data"), {}) is None  # a second fit: as given
    monkeypatch.setattr(lightning_hook, "_state", {"resumed": False})
    assert lightning_hook._resume_from(_fit, ("model",), {"ckpt_path": "mine.ckpt"}) is None  # the script chose


def test_the_logs_folder_named_by_the_job_is_brought_home(job_dirs: Path) -> None:
    """The hook names lightning_logs/ (inside the working folder); the launcher reads the list
    from out/, takes folders inside the working folder only, and removes the list."""
    work = job_dirs / "code" / "w"
    assert lightning_hook.declare_output(str(work / "lightning_logs")) is True
    assert lightning_hook.declare_output(str(work / "lightning_logs")) is False  # once
    listing = job_dirs / "out" / lightning_hook.DECLARED
    with open(listing, "a") as fh:
        fh.write(f"{job_dirs / 'elsewhere'}\n{work}/../../etc\nrelative/path\n{work}\n")
    assert workdir.declared_by_job(str(work), str(job_dirs / "out")) == ["lightning_logs/"]
    assert not listing.exists()
    (work / "lightning_logs" / "version_0").mkdir(parents=True)
    (work / "lightning_logs" / "version_0" / "metrics.csv").write_text("step,train_loss\n0,0.5\n")
    result = workdir.collect(str(work), str(job_dirs / "out"), ["lightning_logs/"], {})
    assert result["declared"] == 1 and result["stayed"] == 0
    assert (job_dirs / "out" / "lightning_logs" / "version_0" / "metrics.csv").read_text().startswith("step,")


def test_a_declared_list_that_is_a_link_is_not_read(job_dirs: Path) -> None:
    secret = job_dirs / "secret.txt"
    secret.write_text("/etc\n")
    (job_dirs / "out" / lightning_hook.DECLARED).symlink_to(secret)
    assert workdir.declared_by_job(str(job_dirs / "code" / "w"), str(job_dirs / "out")) == []


# -- the import hook, with a stand-in `pytorch_lightning` package ------------------------------

FAKE_PL = {
    "__init__.py": "from .trainer import Trainer\n",
    "trainer.py": '''
from .loggers import CSVLogger
class Trainer:
    is_global_zero = True
    def __init__(self, logger=True):
        self.loggers = [CSVLogger(".")] if logger else []
    def fit(self, model, train_dataloaders=None, ckpt_path=None):
        self.fitted_from = ckpt_path
    def save_checkpoint(self, filepath, weights_only=None, storage_options=None):
        open(filepath, "wb").write(b"state")
''',
    "loggers/__init__.py": "from .logger import Logger\nfrom .csv_logs import CSVLogger\n",
    "loggers/logger.py": "class Logger:\n    pass\n",
    "loggers/csv_logs.py": '''
import os
from .logger import Logger
class CSVLogger(Logger):
    def __init__(self, save_dir):
        self.root_dir = os.path.join(save_dir, "lightning_logs")
''',
    "plugins/__init__.py": "",
    "utilities/__init__.py": "",
    "utilities/rank_zero.py": "def rank_zero_only(fn):\n    return fn\nrank_zero_only.rank = 0\n",
    "plugins/io.py": "import os\nclass TorchCheckpointIO:\n    def remove_checkpoint(self, path):\n        os.remove(path)\n",
}

FAKE_SCRIPT = '''
import os, json, pytorch_lightning as pl
t = pl.Trainer()
names = [type(lg).__name__ for lg in t.loggers]
t.fit("model")
t.save_checkpoint("one.ckpt")
t.loggers[-1].log_metrics({"train_loss": 0.5, "epoch": 0.0}, step=3)
print(json.dumps({"loggers": names, "from": t.fitted_from,
                  "none": [type(lg).__name__ for lg in pl.Trainer(logger=False).loggers]}))
'''


def test_the_import_hook_follows_pytorch_lightning(job_dirs: Path, tmp_path: Path) -> None:
    """A job's `import pytorch_lightning` (here a stand-in with Lightning's module layout):
    every Trainer gets gpu-router's logger after its own (none where logger=False), a save
    lands in the checkpoint folder, a resumed attempt fits from it, and lightning_logs is named."""
    site = tmp_path / "site"
    for rel, text in FAKE_PL.items():
        (site / "pytorch_lightning" / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / "pytorch_lightning" / rel).write_text(text)
    work = job_dirs / "code" / "w"
    (work / "train.py").write_text(FAKE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_ROUTER_")}
    env.update({k: v for k, v in os.environ.items() if k in ("GPU_ROUTER_OUTPUT_DIR", "GPU_ROUTER_CHECKPOINT_DIR",
                                                               "GPU_ROUTER_METRICS_FILE")})
    env["PYTHONPATH"] = os.pathsep.join([str(RUNTIME_DIR), str(JOBSITE_DIR), str(site)])

    def run(attempt: int) -> dict:
        proc = subprocess.run([sys.executable, "train.py"], cwd=work, capture_output=True, text=True,
                              timeout=60, env={**env, "GPU_ROUTER_ATTEMPT": str(attempt)})
        assert proc.returncode == 0 and "[gpu] Lightning is not followed" not in proc.stderr, proc.stderr
        return json.loads(proc.stdout.splitlines()[-1])

    first = run(1)
    assert first == {"loggers": ["CSVLogger", "PytorchLightningLogger"], "from": None, "none": []}
    kept = job_dirs / "ckpt" / "lightning" / "one.ckpt"
    assert kept.read_bytes() == b"state"
    rows = parse_rows((job_dirs / "metrics.jsonl").read_bytes()).rows
    assert [(s, k, v) for s, k, v, _ in rows] == [(3, "train_loss", 0.5), (3, "epoch", 0.0)]
    assert workdir.declared_by_job(str(work), str(job_dirs / "out")) == ["lightning_logs/"]
    assert run(2)["from"] == str(kept)


# -- a real Lightning script through a real job -----------------------------------------------

TORCH = "torch==2.13.0"
LIGHTNING = "lightning==2.6.6"

LIGHTNING_SCRIPT = '''\
import os, sys, time
import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self, lr=0.1, width=4):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(width, 1)

    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


torch.manual_seed(0)
x = torch.randn(32, 4)
data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)  # 4 steps an epoch
attempt = int(os.environ.get("GPU_ROUTER_ATTEMPT", "1"))
trainer = L.Trainer(max_epochs=2 if attempt == 1 else 4, log_every_n_steps=1,
                    enable_progress_bar=False, accelerator="cpu")
trainer.fit(Tiny(), data, data)
print(f"attempt {attempt} ended at step {trainer.global_step}", flush=True)
if attempt == 1:
    time.sleep(3)  # the last save's generation comes home on the next look
    sys.exit(75)  # listed in retry_on_exit_codes: the job is tried again, from its checkpoint
'''


def _torch_wheel() -> str:
    """The CPU wheel of torch the job installs from disk (never the CUDA build from PyPI)."""
    folders = os.environ.get("PIP_FIND_LINKS", "").split()
    found = [w for f in folders for w in glob.glob(os.path.join(f, "torch-2.13.0+cpu-*.whl"))]
    if not found:
        pytest.fail("no CPU wheel of torch 2.13.0 in PIP_FIND_LINKS: install step: pip download "
                    "torch==2.13.0 --no-deps --index-url https://download.pytorch.org/whl/cpu -d /opt/wheels "
                    "and export PIP_FIND_LINKS=/opt/wheels")
    return found[0]


@pytest.mark.slow
def test_a_lightning_script_unchanged_is_tracked_kept_and_resumed(home: Path, tmp_path: Path) -> None:
    """`self.log("train_loss", ...)` in a LightningModule, nothing of gpu-router in the script:
    the values reach `gpu metrics` at Lightning's steps with its hyperparameters as the config,
    the checkpoint ModelCheckpoint saved is home as a checkpoint, lightning_logs/ is home under
    runs/<id>/, and the retried attempt continues from the last Lightning checkpoint."""
    _torch_wheel()
    write_user_config("targets:\n  local: {kind: local, price_per_hour: 1.0}\n")
    project = make_git_project(tmp_path / "p", {
        "train.py": LIGHTNING_SCRIPT, "requirements.txt": f"{TORCH}\n{LIGHTNING}\n",
        "gpu.yaml": "retry_on_exit_codes: [75]\n"}, gitignore="lightning_logs/\n")
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=900)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", (done.get("reason"), log[-4000:])
    status = gpu_json("status", short, "--verbose")
    assert status["attempt"] == 2, status["reason"]
    assert "attempt 1 ended at step 8" in log, log[-4000:]
    assert "[gpu] Lightning is not followed" not in log and "not recorded by gpu-router" not in log

    # the retried attempt resumed from the checkpoint attempt 1 saved last (epoch 1, step 8)
    assert "attempt 2: Lightning resumes from " in log and "epoch=1-step=8.ckpt" in log, log[-4000:]
    assert "attempt 2 ended at step 16" in log, log[-4000:]

    metrics = gpu_json("metrics", short)["metrics"]
    steps = [p["step"] for p in metrics["train_loss"]["series"]]
    assert steps == list(range(16)), steps  # 0-7 from attempt 1, 8-15 from attempt 2
    assert [p["step"] for p in metrics["val_loss"]["series"]] == [3, 7, 11, 15]
    assert status["config"] == {"lr": 0.1, "width": 4}
    assert set(status["final"]) == {"train_loss", "val_loss", "epoch"} and status["final"]["epoch"] == 3.0

    runs = Path(status["outputs_dir"])
    assert runs == project / "runs" / short
    # both attempts' logs (the retry ran in the same working folder: Lightning's version_1)
    for version, first, last in (("version_0", 0, 7), ("version_1", 8, 15)):
        rows = (runs / "lightning_logs" / version / "metrics.csv").read_text().splitlines()
        assert rows[0].split(",")[:2] == ["epoch", "step"] and "train_loss" in rows[0], rows[0]
        logged = [int(r.split(",")[1]) for r in rows[1:]]
        assert min(logged) == first and max(logged) == last, (version, logged)
    assert [p.name for p in (runs / "lightning_logs" / "version_1" / "checkpoints").iterdir()] == ["epoch=3-step=16.ckpt"]
    kept = sorted(p.name for p in (runs / "checkpoint" / "lightning").iterdir())
    assert kept == ["epoch=3-step=16.ckpt", "latest.json"], kept
    assert "stayed on the target" not in log, log[-2000:]

    # the dashboard charts train_loss and shows the hyperparameters in the tracking pane
    from tests.runtime.test_tracking import _dashboard

    charts, detail = asyncio.run(_dashboard())
    drawn = html.unescape(" ".join(re.findall(r">([^<>]*)</text>", charts))).replace("\xa0", " ")
    assert "train_loss " in drawn and "val_loss " in drawn, drawn[:2000]
    assert "tracking" in detail and "lr=0.1" in detail and "width=4" in detail, detail[-3000:]
