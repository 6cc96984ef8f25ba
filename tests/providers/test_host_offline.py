"""Dependencies on an ssh or Slurm host that cannot reach a package index (`offline`): the
requirements are resolved on this machine into a wheelhouse for the host's Python (probed on
the host), shipped once through the host's content cache, and installed with `--no-index`.

The host is this machine behind the real sshd fixture, or the session's real Slurm; the
packages come from a loopback PEP 503 index (tests/pyindex.py) that only this machine's pip is
pointed at. The target's `env` points the host's pip at a dead index, so nothing but the
wheelhouse can install them there.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state, write_user_config
from tests.pyindex import PackageIndex

PYTHON = getattr(sys, "_base_executable", None) or sys.executable

USES = '''
import tinypure, tinysdist, gpu
(gpu.output_dir() / "got.txt").write_text(f"{tinypure.X} {tinysdist.Y}")
print("imported", tinypure.X, tinysdist.Y, flush=True)
'''
# tinypure and tinysdist come only from the test's index; pytest is on the host already (the
# Python running these tests), and the test's index does not have it: were it not left out of
# the wheelhouse, resolving it here would fail
REQUIREMENTS = "tinypure==1.0\npytest\n"


def dead_index() -> str:
    """An index URL on a loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple/"


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """tinypure (a wheel) needs tinysdist (source only, pure Python); nativeonly has only a
    Windows wheel: nothing a Linux host can install, and no source to build."""
    ix = PackageIndex(tmp_path / "index")
    ix.add_wheel("tinypure", "1.0", {"tinypure/__init__.py": "X = 1\n"}, requires=["tinysdist"])
    ix.add_sdist("tinysdist", "1.0", {"tinysdist/__init__.py": "Y = 2\n"})
    ix.add_wheel("nativeonly", "1.0", {"nativeonly/__init__.py": ""}, tag="cp312-cp312-win_amd64")
    monkeypatch.setenv("PIP_INDEX_URL", ix.url)  # this machine's pip (the supervisor's) reads it
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # and no index this machine's pip config names
    yield ix
    ix.close()


def ssh_target(sshd, tmp_path: Path, **extra) -> Path:
    root = tmp_path / "remote"
    o = sshd.target_options(root, PYTHON)
    entry = {"kind": "ssh", **o, "max_jobs": 2, "env": {"PIP_INDEX_URL": dead_index()}, **extra}
    write_user_config(json.dumps({"targets": {"box": entry}}))  # JSON is YAML
    return root


def events(short: str) -> list[str]:
    return [e["reason"] for e in gpu_json("status", short, "--verbose")["events"]]


def run_project(project: Path, *extra: str) -> tuple[str, dict]:
    sub = gpu_json("submit", "train.py", "--provider", "box", "--hours", "0.1", "--wait-s", "0", *extra,
                   cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=240)
    return short, {**done, "outputs_dir": sub["job"]["outputs_dir"]}


def check_installed_from_the_wheelhouse(short: str, done: dict) -> None:
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", log + json.dumps(done)
    assert (Path(done["outputs_dir"]) / "got.txt").read_text() == "1 2"
    assert "imported 1 2" in log


@pytest.mark.slow
def test_ssh_offline_true_installs_from_a_wheelhouse_shipped_once(sshd, index: PackageIndex, home: Path,
                                                                   tmp_path: Path) -> None:
    root = ssh_target(sshd, tmp_path, offline=True)
    project = make_git_project(tmp_path / "p", {"train.py": USES, "requirements.txt": REQUIREMENTS})
    short, done = run_project(project)
    check_installed_from_the_wheelhouse(short, done)
    said = events(short)
    assert any("offline: true: installing from a wheelhouse" in e for e in said), said
    assert any("wheelhouse ready" in e for e in said), said
    assert any("uploaded to box" in e for e in said), said
    ready = list((root / "wheelhouse").glob("*.ready"))
    assert len(ready) == 1
    shipped = sorted(p.name for p in (root / "wheelhouse" / ready[0].name[:-len(".ready")]).iterdir())
    assert [n.split("-")[0] for n in shipped] == ["tinypure", "tinysdist"], shipped  # pytest stayed home
    first = gpu_json("status", short, "--verbose")["handle"]

    # the same dependencies again: the wheelhouse is on the host, nothing goes up; the venv is
    # removed first, so the second job installs again, from the host's copy
    for venv in (root / "venvs").iterdir():
        if venv.is_dir():
            shutil.rmtree(venv)
    short2, done2 = run_project(project, "--env", "RUN=2")
    check_installed_from_the_wheelhouse(short2, done2)
    said2 = events(short2)
    assert any("is on box already: nothing uploaded" in e for e in said2), said2
    assert any("wheelhouse" in e and "is cached" in e for e in said2), said2  # not built again here
    second = gpu_json("status", short2, "--verbose")["handle"]
    assert first["wheelhouse_bytes"] > 0 and second["wheelhouse_bytes"] == 0
    assert second["uploaded_bytes"] < 4096 < first["uploaded_bytes"]
    assert len(list((root / "wheelhouse").glob("*.ready"))) == 1
    assert "creating environment" in run_gpu("logs", short2).stdout  # installed again, from the host's copy


@pytest.mark.slow
def test_ssh_offline_auto_with_the_index_unreachable_picks_the_wheelhouse(sshd, index: PackageIndex, home: Path,
                                                                           tmp_path: Path) -> None:
    root = ssh_target(sshd, tmp_path)  # offline: auto, the default
    project = make_git_project(tmp_path / "p", {"train.py": USES, "requirements.txt": REQUIREMENTS})
    short, done = run_project(project)
    check_installed_from_the_wheelhouse(short, done)
    said = events(short)
    port = json.loads((tmp_path / "user-config.yaml").read_text())["targets"]["box"]["env"]["PIP_INDEX_URL"]
    hostport = port.split("//")[1].split("/")[0]
    assert any(f"offline: auto: the package index {hostport} does not answer from box" in e
               and "installing from a wheelhouse built here" in e for e in said), said
    assert len(list((root / "wheelhouse").glob("*.ready"))) == 1


@pytest.mark.slow
def test_ssh_offline_auto_with_the_index_reachable_uses_pip_there(sshd, index: PackageIndex, home: Path,
                                                                   tmp_path: Path) -> None:
    """The host reaches the index its env names: pip installs from it, no wheelhouse is made."""
    root = tmp_path / "remote"
    o = sshd.target_options(root, PYTHON)
    write_user_config(json.dumps({"targets": {"box": {"kind": "ssh", **o, "env": {"PIP_INDEX_URL": index.url}}}}))
    project = make_git_project(tmp_path / "p", {"train.py": USES, "requirements.txt": "tinypure==1.0\n"})
    short, done = run_project(project)
    check_installed_from_the_wheelhouse(short, done)
    said = events(short)
    assert any("offline: auto: the package index 127.0.0.1:" in e and "answers from box" in e for e in said), said
    assert not (root / "wheelhouse").exists() or not list((root / "wheelhouse").glob("*.ready"))


@pytest.mark.slow
def test_ssh_unbuildable_package_is_named_with_nothing_uploaded(sshd, index: PackageIndex, home: Path,
                                                                tmp_path: Path) -> None:
    root = ssh_target(sshd, tmp_path, offline=True)
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n", "requirements.txt": "nativeonly\n"})
    started = time.monotonic()
    sub = gpu_json("submit", "train.py", "--provider", "box", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert time.monotonic() - started < 60  # submit returns; the build runs in provisioning
    short = sub["job"]["short_id"]
    failed = wait_state(short, {"done", "failed"}, timeout=240)
    assert failed["state"] == "failed", failed
    assert "nativeonly" in failed["reason"] and "no wheel for cp" in failed["reason"], failed["reason"]
    assert "pin a version of nativeonly" in failed["reason"] and "offline: false" in failed["reason"]
    sent = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    assert sent == [], sent  # nothing went up: no bundle, runtime, wheelhouse or job folder


@pytest.mark.slow
def test_slurm_offline_true_installs_from_a_wheelhouse_shipped_once(slurm, index: PackageIndex, home: Path,
                                                                     tmp_path: Path) -> None:
    root = tmp_path / "remote"
    write_user_config(json.dumps({"targets": {"box": {
        "kind": "slurm", "local": True, "root": str(root), "python": PYTHON, "max_jobs": 2, "offline": True,
        "env": {"SLURM_CONF": str(slurm.conf), "PIP_INDEX_URL": dead_index()}}}}))
    project = make_git_project(tmp_path / "p", {"train.py": USES, "requirements.txt": REQUIREMENTS})
    try:
        short, done = run_project(project)
        check_installed_from_the_wheelhouse(short, done)
        said = events(short)
        assert any("uploaded to box" in e for e in said), said
        first = gpu_json("status", short, "--verbose")["handle"]
        assert first["wheelhouse_bytes"] > 0
        short2, done2 = run_project(project, "--env", "RUN=2")
        check_installed_from_the_wheelhouse(short2, done2)
        assert any("is on box already: nothing uploaded" in e for e in events(short2))
        assert gpu_json("status", short2, "--verbose")["handle"]["wheelhouse_bytes"] == 0
        assert len(list((root / "wheelhouse").glob("*.ready"))) == 1
    finally:
        import pwd

        slurm.run("scancel", "-u", pwd.getpwuid(os.getuid()).pw_name)


# -- no host needed ------------------------------------------------------------------------


def test_the_host_probe_names_tags_this_python_accepts() -> None:
    """hostpy's tags, run here, are ones pip's own tag logic accepts for this interpreter."""
    from packaging.tags import sys_tags

    from core.runtime import hostpy

    doc = hostpy.tags()
    accepted = {(t.interpreter, t.abi, t.platform) for t in sys_tags()}
    interp = f"{doc['implementation']}{doc['python_version'].replace('.', '')}"
    for plat in doc["platforms"]:
        assert (interp, doc["abi"], plat) in accepted, (plat, sorted(accepted)[:5])
    import importlib.metadata as md

    assert hostpy.packages().get("pytest") == md.version("pytest")


def test_offline_option_is_checked() -> None:
    from core.config import targetopts
    from core.errors import UserError

    base = {"host": "h"}
    for ok in ("auto", True, False):
        targetopts.validate("box", "ssh", {**base, "offline": ok}, "cfg")
    with pytest.raises(UserError, match="offline must be auto, true or false"):
        targetopts.validate("box", "slurm", {**base, "offline": "sometimes"}, "cfg")
    targetopts.validate("box", "ssh", {**base, "env": {"PIP_INDEX_URL": "https://mirror.example/simple"}}, "cfg")
