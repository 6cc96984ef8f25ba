"""Dependencies installed with uv (core/runtime/uvenv.py): one cache per host, environments
named by the packages they hold and shared by every project that resolves to them, `gpu gc`
freeing the ones no running job holds, and pip where uv is not to be had.

Real jobs on the local target (inside its bubblewrap sandbox where this machine makes one),
real uv, packages from a loopback PEP 503 index (tests/pyindex.py) that counts what it serves.
"""

from __future__ import annotations

import os
import subprocess
import stat
import time
from pathlib import Path

import pytest

from core.runtime import uvenv
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state
from tests.pyindex import PackageIndex

JOB = "import tinyweb, tinydep\nprint('versions', tinyweb.V, tinydep.V, flush=True)\n"
WAITS = ("import os, time, tinyweb\nprint('holding', flush=True)\n"
         "while not os.path.exists('go'):\n    time.sleep(0.1)\n")
BLOB = "B = " + repr("x" * 200_000) + "\n"  # a package file big enough to see in bytes freed


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ix = PackageIndex(tmp_path / "index")
    ix.add_wheel("tinyweb", "1.0", {"tinyweb/__init__.py": "V = '1.0'\n", "tinyweb/blob.py": BLOB},
                 requires=["tinydep"])
    ix.add_wheel("tinydep", "2.0", {"tinydep/__init__.py": "V = '2.0'\n"})
    monkeypatch.setenv("PIP_INDEX_URL", ix.url)  # the launcher's pip, and uv spelled its way
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    yield ix
    ix.close()


def _run(project: Path, script: str = "train.py", env: dict | None = None) -> tuple[dict, str]:
    sub = gpu_json("submit", script, "--wait-s", "0", "--hours", "0.1", cwd=project, env=env)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=180)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", log
    return sub["job"], log


def _venvs(home: Path) -> list[Path]:
    return sorted(p for p in (home / "venvs").iterdir() if p.is_dir())


@pytest.mark.slow
def test_two_projects_with_the_same_packages_share_one_environment_from_the_cache(
        home: Path, tmp_path: Path, index: PackageIndex) -> None:
    first = make_git_project(tmp_path / "one", {"train.py": JOB, "requirements.txt": "tinyweb\n"})
    # written differently, resolving to the very same packages
    second = make_git_project(tmp_path / "two", {"train.py": JOB,
                                                 "requirements.txt": "# ours\ntinydep>=2\ntinyweb==1.0\n"})
    _, log1 = _run(first)
    assert "versions 1.0 2.0" in log1 and "with uv" in log1 and "linked from the cache" in log1
    fetched = index.downloads()  # uv may ask twice for a file (its metadata, then the wheel)
    assert set(fetched) == {"/files/tinydep-2.0-py3-none-any.whl", "/files/tinyweb-1.0-py3-none-any.whl"}

    _, log2 = _run(second)
    assert "versions 1.0 2.0" in log2
    assert "sharing environment" in log2, log2
    assert index.downloads() == fetched  # no package fetched again
    [venv] = _venvs(home)  # one environment for both projects
    pointers = sorted((home / "venvs").glob("*.to"))
    assert len(pointers) == 2 and {p.read_text() for p in pointers} == {venv.name}

    # its files are the cache's, linked, not copies; the cache is the host's, not a job's
    [blob] = venv.glob("lib/python*/site-packages/tinyweb/blob.py")
    assert os.stat(blob).st_nlink > 1
    cache = home / "uv-cache"
    same = [p for p in cache.rglob("blob.py") if os.stat(p).st_ino == os.stat(blob).st_ino]
    assert same, "the environment's file is not the cache's"
    assert not list((home / "jobs").rglob("uv-cache"))

    # the same project again: straight to its environment, nothing resolved or fetched
    before = len(index.requests)
    _, log3 = _run(first)
    assert "reusing environment" in log3 and len(index.requests) == before


def _age(venv: Path, days: float = 2) -> None:
    then = time.time() - days * 86400
    for p in (venv / ".ready", venv):
        os.utime(p, (then, then))


@pytest.mark.slow
def test_gc_frees_an_environment_no_running_job_holds_and_keeps_one_that_runs(
        home: Path, tmp_path: Path, index: PackageIndex) -> None:
    index.add_wheel("tinyother", "1.0", {"tinyother/__init__.py": "", "tinyother/blob.py": BLOB})
    idle = make_git_project(tmp_path / "idle", {"train.py": "import tinyother\n",
                                                "requirements.txt": "tinyother\n"})
    busy = make_git_project(tmp_path / "busy", {"wait.py": WAITS, "requirements.txt": "tinyweb\n"})
    _run(idle)
    [idle_env] = _venvs(home)
    sub = gpu_json("submit", "wait.py", "--wait-s", "0", "--hours", "0.1", cwd=busy)
    deadline = time.monotonic() + 180
    while "holding" not in run_gpu("logs", sub["job"]["short_id"]).stdout:
        assert time.monotonic() < deadline, run_gpu("logs", sub["job"]["short_id"]).stdout
        time.sleep(0.3)
    [busy_env] = [v for v in _venvs(home) if v != idle_env]
    for v in (idle_env, busy_env):
        _age(v)

    dry = gpu_json("gc", "--all", "--dry-run")["locations"][0]
    assert idle_env.name in [e["key"] for e in dry["evict"]] and idle_env.exists()
    doc = gpu_json("gc", "--all")["locations"][0]
    gone = {e["key"]: e for e in doc["evict"]}
    assert idle_env.name in gone and busy_env.name not in gone
    assert not idle_env.exists() and busy_env.exists()
    assert doc["freed"] > 0
    # the running job's environment still works: let it end
    (home / "jobs" / sub["job"]["id"] / "code" / "go").write_text("")
    assert wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=60)["state"] == "done"

    # with no job left, the cache goes too, and what it held is counted once (hard links)
    _age(busy_env)
    why = {e["key"]: e["keep"] for e in _entries()}
    assert why["uv-cache"].startswith("used in the last")  # a launch may be about to rely on it
    for p in (home / "uv-cache.ready", home / "uv-cache"):
        then = time.time() - 2 * 86400
        os.utime(p, (then, then))
    cache_before = _du(home / "uv-cache")
    doc = gpu_json("gc", "--all")["locations"][0]
    kinds = {e["kind"] for e in doc["evict"]}
    assert {"venv", "uv-cache"} <= kinds, doc
    assert not (home / "uv-cache").exists() and not busy_env.exists()
    assert doc["freed"] >= cache_before * 0.9  # the blob is in it once, not once per link


def _entries() -> list[dict]:
    from core.engine import storage
    from core.jobs.store import Store

    return [e.to_json() for e in storage.home(Store(), None, everything=True, dry_run=True).entries]


def _du(path: Path) -> int:
    seen, total = set(), 0
    for p in path.rglob("*"):
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode) and st.st_ino not in seen:
            seen.add(st.st_ino)
            total += st.st_blocks * 512
    return total


@pytest.mark.slow
def test_pip_installs_when_uv_is_turned_off(home: Path, tmp_path: Path, index: PackageIndex,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(uvenv.CHOICE_VAR, "pip")  # the supervisor, and so the launcher, see it
    project = make_git_project(tmp_path / "p", {"train.py": JOB, "requirements.txt": "tinyweb\n"})
    _, log = _run(project)
    assert "versions 1.0 2.0" in log and "with pip" in log and "with uv" not in log
    assert not (home / "uv-cache").exists()


@pytest.mark.slow
def test_a_package_that_needs_a_build_is_installed_by_pip_never_built_beside_the_shared_cache(
        home: Path, tmp_path: Path, index: PackageIndex) -> None:
    """uv's cache is lent to every project's environment, so no build code (an sdist's, which
    an agent may have written) runs while it is writable: uv refuses the set (--no-build) and
    pip installs it into this job's own environment."""
    index.add_sdist("tinysdist", "1.0", {"tinysdist/__init__.py": "Y = 2\n"})
    project = make_git_project(tmp_path / "p", {"train.py": "import tinysdist\nprint('built', tinysdist.Y)\n",
                                                "requirements.txt": "tinysdist\n"})
    _, log = _run(project)
    assert "built 2" in log and "trying pip" in log, log
    cache = home / "uv-cache"
    # the index's page for it may be cached; nothing of it was fetched or built under uv
    built = [p for p in cache.rglob("*") if "tinysdist" in p.name.lower()
             and not p.relative_to(cache).parts[0].startswith("simple")] if cache.exists() else []
    assert built == []


def test_uv_is_found_given_on_path_or_at_home_else_pip(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "uv"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    bare = {"PATH": str(tmp_path / "nothing"), "HOME": str(tmp_path / "home")}
    assert uvenv.find_uv(None, bare) is None  # no uv anywhere: pip
    assert uvenv.find_uv(str(fake), bare) == str(fake)
    assert uvenv.find_uv(None, {**bare, "PATH": str(fake.parent)}) == str(fake)
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    (local / "uv").write_bytes(fake.read_bytes())
    (local / "uv").chmod(0o755)
    assert uvenv.find_uv(None, bare) == str(local / "uv")
    assert uvenv.find_uv(str(fake), {**bare, uvenv.CHOICE_VAR: "pip"}) is None
    with pytest.raises(RuntimeError, match="no uv was found"):
        uvenv.find_uv(None, {"PATH": "", "HOME": str(tmp_path / "nohome"), uvenv.CHOICE_VAR: "uv"})


def test_lines_uv_reads_differently_stay_with_pip() -> None:
    assert uvenv.unfit({"requirements": ["torch"], "options": ["--index-url http://x/simple"]}) is None
    assert "pip's" in uvenv.unfit({"requirements": ["torch"], "options": ["--pre"]})
    assert "editable" in uvenv.unfit({"requirements": ["-e git+https://h/r.git#egg=r"]})
    for line in ("r @ git+https://h/r.git", "r @ GIT+ssh://git@h/r.git@v1", "hg+https://h/r#egg=r",
                 "r @ svn+https://h/r", "r @ bzr+lp:r"):
        assert "version-control" in uvenv.unfit({"requirements": ["torch", line]}), line
    assert uvenv.unfit({"requirements": ["gitpython", "git-lfs==1.0", "r @ https://h/r-1.0.tar.gz"]}) is None


@pytest.mark.slow
def test_a_job_s_git_never_runs_while_the_shared_cache_is_writable(home: Path, tmp_path: Path,
                                                                    index: PackageIndex) -> None:
    """A version-control requirement makes uv run git; a job whose PATH names its own `git`
    would then write into the cache every project's environment links to. Such lines go to
    pip, which installs into the job's own environment only."""
    cache = home / "uv-cache"
    fake_git = f"#!/bin/sh\necho poisoned > {cache}/POISON\necho fake git ran >&2\nexit 1\n"
    project = make_git_project(tmp_path / "p", {
        "train.py": "print('ran')\n", "bin/git": fake_git,
        "requirements.txt": "tinyweb\ntinyvcs @ git+https://127.0.0.1:9/none.git\n",
        "gpu.yaml": "env: {PATH: 'bin:/usr/bin:/bin'}\n"})
    (project / "bin" / "git").chmod(0o755)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    sub = gpu_json("submit", "train.py", "--wait-s", "0", "--hours", "0.1", cwd=project)
    done = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=180)
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert done["state"] == "failed" and "with pip" in log, log  # no git server: pip fails
    assert not (cache / "POISON").exists(), "the job's git wrote into the shared uv cache"


def test_pip_index_settings_reach_uv_and_nothing_moves_its_cache() -> None:
    env = uvenv.environ({"PATH": "/bin"}, {"PIP_INDEX_URL": "http://i/simple", "PIP_FIND_LINKS": "/a /b",
                                           "UV_CACHE_DIR": "/elsewhere", "UV_INDEX_STRATEGY": "first-index",
                                           "HOME": "/root"})
    assert env["UV_INDEX_URL"] == "http://i/simple" and env["UV_FIND_LINKS"] == "/a,/b"
    assert "UV_CACHE_DIR" not in env and env["UV_INDEX_STRATEGY"] == "first-index"
    assert env["UV_PYTHON_DOWNLOADS"] == "never" and "HOME" not in env


def test_an_environment_is_named_by_its_packages_not_their_order() -> None:
    a = uvenv.resolved_key("py", [], ["b==1", "a==2"])
    assert a == uvenv.resolved_key("py", [], ["a==2", "b==1"])
    assert a != uvenv.resolved_key("py", [], ["a==2", "b==2"])
    assert a != uvenv.resolved_key("py2", [], ["a==2", "b==1"])
    assert a != uvenv.resolved_key("py", ["--index-url http://other/simple"], ["a==2", "b==1"])
