"""Dependencies on a Kaggle kernel without internet: the project's requirements are resolved on
this machine into a wheelhouse for Kaggle's image, shipped once as a private data set, and
installed with `--no-index`. The fake Kaggle runs offline kernels with no network at all (their
own network namespace), and the packages come from a loopback PEP 503 index the test serves.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state
from tests.fake_kaggle import FakeKaggle
from tests.pyindex import PackageIndex
from tests.providers.test_kaggle import add_kaggle, kaggle  # noqa: F401 - the fake Kaggle fixture, on port 80

pytestmark = pytest.mark.slow

USES = '''
import tinypure, tinysdist, gpu
(gpu.output_dir() / "got.txt").write_text(f"{tinypure.X} {tinysdist.Y}")
print("imported", tinypure.X, tinysdist.Y, flush=True)
'''


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """tinypure (a wheel) needs tinysdist (source only, pure Python); nativeonly has only a
    Windows wheel: nothing Kaggle's Linux can install, and no source to build."""
    ix = PackageIndex(tmp_path / "index")
    ix.add_wheel("tinypure", "1.0", {"tinypure/__init__.py": "X = 1\n"}, requires=["tinysdist"])
    ix.add_sdist("tinysdist", "1.0", {"tinysdist/__init__.py": "Y = 2\n"})
    ix.add_wheel("nativeonly", "1.0", {"nativeonly/__init__.py": ""}, tag="cp312-cp312-win_amd64")
    monkeypatch.setenv("PIP_INDEX_URL", ix.url)  # the supervisor's pip reads it (as a user's pip config)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # and no index this machine's pip config names
    yield ix
    ix.close()


def _set_target(home: Path, **options) -> None:
    cfg = Path(home).parent / "user-config.yaml"
    doc = yaml.safe_load(cfg.read_text())
    doc["targets"]["kg"].update(options)
    cfg.write_text(yaml.safe_dump(doc))


def _events(short: str) -> list[str]:
    return [e["reason"] for e in gpu_json("status", short, "--verbose")["events"]]


def test_an_offline_kernel_reaches_nothing(kaggle: FakeKaggle, home: Path, tmp_path: Path) -> None:
    """The fake's offline kernel cannot reach even the fake Kaggle on 127.0.0.1:80."""
    add_kaggle(tmp_path)
    probe = ("import socket\ns = socket.socket()\ns.settimeout(3)\n"
             "print('reach', s.connect_ex(('127.0.0.1', 80)), flush=True)\n")
    project = make_git_project(tmp_path / "net", {"train.py": probe})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=120)["state"] == "done"
    log = run_gpu("logs", short).stdout
    assert "reach 0" not in log and "reach " in log, log


def test_requirements_install_offline_from_a_wheelhouse_shipped_once(kaggle: FakeKaggle, index: PackageIndex,
                                                                    home: Path, tmp_path: Path) -> None:
    add_kaggle(tmp_path)
    project = make_git_project(tmp_path / "p", {"train.py": USES, "requirements.txt": "tinypure==1.0\n"})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=300)
    assert done["state"] == "done", run_gpu("logs", short).stdout + json.dumps(done)
    assert (Path(sub["job"]["outputs_dir"]) / "got.txt").read_text() == "1 2"
    pushes = [b for b in kaggle.bodies("SaveKernel") if b["slug"].endswith(f"gr-{short}-a1")]
    assert pushes[-1]["enableInternet"] is False
    wheel_sets = [b["slug"] for b in kaggle.bodies("CreateDataset") if b["slug"].startswith("gr-wh-")]
    assert len(wheel_sets) == 1 and f"alice/{wheel_sets[0]}" in pushes[-1]["datasetDataSources"]
    assert any("wheelhouse ready" in e for e in _events(short))
    # the image was listed once, by a CPU kernel without internet
    probes = [b for b in kaggle.bodies("SaveKernel") if b["slug"] == "alice/gr-image-probe"]
    assert len(probes) == 1 and probes[0]["enableGpu"] is False and probes[0]["enableInternet"] is False

    # the same dependencies again: no new wheelhouse goes up, the image is not listed again
    before = (len(kaggle.bodies("CreateDataset")), len(kaggle.bodies("PUT")))
    again = gpu_json("submit", "train.py", "--hours", "0.1", "--env", "RUN=2", "--wait-s", "0", cwd=project)
    short2 = again["job"]["short_id"]
    assert wait_state(short2, {"done", "failed"}, timeout=300)["state"] == "done", run_gpu("logs", short2).stdout
    assert (len(kaggle.bodies("CreateDataset")), len(kaggle.bodies("PUT"))) == before  # nothing went up
    assert len([b for b in kaggle.bodies("SaveKernel") if b["slug"] == "alice/gr-image-probe"]) == 1
    assert any("already on Kaggle: nothing uploaded" in e for e in _events(short2))


def test_refused_internet_falls_back_to_the_wheelhouse(kaggle: FakeKaggle, index: PackageIndex, home: Path,
                                                        tmp_path: Path) -> None:
    add_kaggle(tmp_path)
    _set_target(home, internet=True)  # the account is not phone-verified: Kaggle refuses it
    project = make_git_project(tmp_path / "p", {"train.py": USES, "requirements.txt": "tinypure\n"})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=300)
    assert done["state"] == "done", run_gpu("logs", short).stdout + json.dumps(done)
    pushes = [b for b in kaggle.bodies("SaveKernel") if b["slug"].endswith(f"gr-{short}-a1")]
    assert [p["enableInternet"] for p in pushes] == [True, False]
    assert any("Kaggle refused internet" in e and "phone-verified" in e for e in _events(short))


def test_granted_internet_installs_from_the_index(kaggle: FakeKaggle, index: PackageIndex, home: Path,
                                                  tmp_path: Path) -> None:
    kaggle.phone_verified = True
    add_kaggle(tmp_path)
    _set_target(home, internet=True)
    project = make_git_project(tmp_path / "p", {"train.py": USES, "requirements.txt": "tinypure\n"})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=300)
    assert done["state"] == "done", run_gpu("logs", short).stdout + json.dumps(done)
    (push,) = [b for b in kaggle.bodies("SaveKernel") if b["slug"].endswith(f"gr-{short}-a1")]
    assert push["enableInternet"] is True
    assert not any(b["slug"].startswith("gr-wh-") for b in kaggle.bodies("CreateDataset"))


def test_a_package_with_no_wheel_is_named_before_any_upload(kaggle: FakeKaggle, index: PackageIndex, home: Path,
                                                            tmp_path: Path) -> None:
    add_kaggle(tmp_path)
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n", "requirements.txt": "nativeonly\n"})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    failed = wait_state(short, {"done", "failed"}, timeout=300)
    assert failed["state"] == "failed"
    assert "nativeonly" in failed["reason"] and "no wheel for cp312" in failed["reason"]
    assert "pin a version of nativeonly" in failed["reason"]
    assert kaggle.bodies("PUT") == [] and kaggle.bodies("CreateDataset") == []  # nothing went up
    assert not any(b["slug"].endswith(f"gr-{short}-a1") for b in kaggle.bodies("SaveKernel"))
