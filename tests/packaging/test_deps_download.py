"""How much a job's environment downloads, said in the plan, and how much of it has come, said
while it installs (issue 41, item 3).

`gpu plan` of a project whose environment is not cached names the bytes to download (exact: the
sizes the index lists for the files of the resolved set, PEP 691/700) and the biggest files; once
the environment is built, the plan says it is cached. While the target downloads, `gpu status`
says "installing dependencies: fetching 2 packages, X MB of Y MB" with Y the same total.

Real uv (the `uv` package's binary), a loopback index that answers PEP 691's JSON with sizes
(tests/pyindex.py, as PyPI does), served slowly for the progress test; nothing off the machine.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from core.runtime import uvenv
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state
from tests.pyindex import PackageIndex

BIG = 3_000_000  # random bytes in the big wheel (as UTF-8 text, stored: the wheel is about 4.5 MB)


def _index(root: Path, pace: int | None = None) -> PackageIndex:
    ix = PackageIndex(root, json=True, pace=pace)
    ix.add_wheel("tinyapp", "1.0", {"tinyapp/__init__.py": "import tinybig\nV = '1.0'\n"}, requires=["tinybig"])
    ix.add_wheel("tinybig", "2.0", {"tinybig/__init__.py": "V = '2.0'\n",
                                     "tinybig/blob.bin": os.urandom(BIG).decode("latin-1")})
    return ix


def _sizes(ix: PackageIndex) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in ix.files.iterdir() if p.name.endswith(".whl")}


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ix = _index(tmp_path / "index")
    monkeypatch.setenv("PIP_INDEX_URL", ix.url)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    yield ix
    ix.close()


def test_the_lock_names_each_packages_file_and_its_size() -> None:
    text = '''lock-version = "1.0"
[[packages]]
name = "torch"
version = "2.5.1"
wheels = [
    { url = "https://x/torch-2.5.1-cp311-none-macosx_11_0_arm64.whl", size = 60, hashes = { sha256 = "a" } },
    { url = "https://x/torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl", size = 864000000, hashes = { sha256 = "b" } },
    { url = "https://x/torch-2.5.1-py3-none-any.whl", size = 5, hashes = { sha256 = "c" } },
]

[[packages]]
name = "tinysdist"
version = "1.0"
sdist = { url = "https://x/tinysdist-1.0.tar.gz", hashes = { sha256 = "d" } }
'''
    files = uvenv.lock_files(text)
    assert files == [
        {"name": "torch", "file": "torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl",
         "url": "https://x/torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl", "size": 864000000},
        {"name": "tinysdist", "file": "tinysdist-1.0.tar.gz", "url": "https://x/tinysdist-1.0.tar.gz", "size": None}]
    info = {"state": "not cached", **uvenv.to_download(files, None)}
    assert info["bytes"] == 864000000 and info["unknown"] == 1
    assert uvenv.download_text(info) == ("environment: not cached, about 864.0 MB to download (torch 864.0 MB), "
                                         "1 more of unknown size")
    assert uvenv.download_text({"state": "cached"}) == "environment: cached"
    assert uvenv.download_text({"state": "unknown"}) == "environment: download size unknown (not looked up at submit)"


@pytest.mark.slow
def test_the_plan_says_what_the_environment_downloads_then_that_it_is_cached(home: Path, tmp_path: Path,
                                                                            index: PackageIndex) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": "import tinyapp\nprint('ok', tinyapp.V)\n",
                                                "requirements.txt": "tinyapp\n"})
    sizes = _sizes(index)
    big, small = sizes["tinybig-2.0-py3-none-any.whl"], sizes["tinyapp-1.0-py3-none-any.whl"]
    env = gpu_json("plan", "train.py", "--hours", "0.1", cwd=project)["plan"]["environment"]
    assert env["state"] == "not cached"
    assert env["bytes"] == big + small
    assert [(f["name"], f["size"]) for f in env["files"]] == [("tinybig", big), ("tinyapp", small)]
    assert env["text"] == (f"environment: not cached, about {uvenv.human_bytes(big + small)} to download "
                           f"(tinybig {uvenv.human_bytes(big)}, tinyapp {uvenv.human_bytes(small)})")
    shown = run_gpu("plan", "train.py", "--hours", "0.1", cwd=project).stdout
    assert f"about {uvenv.human_bytes(big + small)} to download" in shown, shown

    sub = gpu_json("submit", "train.py", "--wait-s", "0", "--hours", "0.1", cwd=project)
    end = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=180)
    assert end["state"] == "done", run_gpu("logs", sub["job"]["short_id"]).stdout
    again = gpu_json("plan", "train.py", "--hours", "0.1", cwd=project)["plan"]["environment"]
    assert again == {"state": "cached", "text": "environment: cached"}


@pytest.mark.slow
def test_status_shows_the_bytes_downloaded_of_the_total_while_installing(home: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ix = _index(tmp_path / "slow-index", pace=400_000)  # the big wheel takes about 8 s to come
    monkeypatch.setenv("PIP_INDEX_URL", ix.url)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    try:
        project = make_git_project(tmp_path / "p", {"train.py": "import tinyapp\nprint('ok', tinyapp.V)\n",
                                                    "requirements.txt": "tinyapp\n"})
        total = sum(_sizes(ix).values())
        sub = gpu_json("submit", "train.py", "--wait-s", "0", "--hours", "0.1", cwd=project)
        short = sub["job"]["short_id"]
        seen: list[str] = []
        numbers: list[dict] = []  # status --json's install_progress beside each such reason
        deadline = time.monotonic() + 180
        doc: dict = {}
        while time.monotonic() < deadline:  # every reason the job shows, until it ends
            doc = gpu_json("status", short)
            if doc.get("reason") and doc["reason"] not in seen:
                seen.append(doc["reason"])
            if doc.get("install_progress"):
                numbers.append(doc["install_progress"])
            if doc["state"] in ("done", "failed", "cancelled"):
                break
            time.sleep(0.1)
        assert doc["state"] == "done", (seen, run_gpu("logs", short).stdout)
        progress = [r for r in seen if r.startswith("installing dependencies: fetching 2 packages, ")]
        of_total = re.compile(r"installing dependencies: fetching 2 packages, (\d+(?:\.\d)? [KM]?B) of "
                              + re.escape(uvenv.human_bytes(total)) + "$")
        assert progress and all(of_total.match(r) for r in progress), seen
        # an agent reads the same figures as numbers: the total as the index sized it (to the
        # tenth of the unit the reason shows), never more than that downloaded
        assert numbers and all(n["packages"] == 2 and abs(n["total_bytes"] - total) <= total * 0.05
                               and 0 <= n["downloaded_bytes"] <= n["total_bytes"]
                               and n["fraction"] == round(n["downloaded_bytes"] / n["total_bytes"], 3)
                               for n in numbers), numbers
    finally:
        ix.close()


def test_the_cache_shows_a_wheel_once_uv_has_it(tmp_path: Path) -> None:
    """uv's own layout: a wheel it downloaded is `wheels-vN/index/HASH/NAME/VERSION-TAGS.http`."""
    import subprocess

    import uv

    ix = _index(tmp_path / "index")
    try:
        cache = tmp_path / "cache"
        item = {"name": "tinybig", "file": "tinybig-2.0-py3-none-any.whl", "size": 1}
        assert not uvenv.in_cache(str(cache), item)
        subprocess.run([uv.find_uv_bin(), "venv", "-q", "--no-config", str(tmp_path / "env")], check=True)
        subprocess.run([uv.find_uv_bin(), "pip", "install", "-q", "--no-config", "--cache-dir", str(cache),
                        "--index-url", ix.url, "--python", str(tmp_path / "env" / "bin" / "python"), "tinybig"],
                       check=True, env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
        assert uvenv.in_cache(str(cache), item)
        assert uvenv.fetched_bytes(str(cache), [item]) == 1
    finally:
        ix.close()


def test_the_sizes_an_html_index_leaves_out_are_asked_with_head(tmp_path: Path) -> None:
    """PEP 503's pages carry no sizes: the check at submit asks each file's Content-Length."""
    import uv

    from core.packaging.depcheck import check_at_submit
    from tests.packaging.test_deps_reasons import _deps

    ix = PackageIndex(tmp_path / "index")  # HTML pages only
    ix.add_wheel("tinyapp", "1.0", {"tinyapp/__init__.py": "V = 1\n"}, requires=["tinydep"])
    ix.add_wheel("tinydep", "2.0", {"tinydep/__init__.py": "V = 2\n" * 100})
    try:
        venvs = tmp_path / "root" / "venvs"
        venvs.mkdir(parents=True)
        seen: dict = {}
        env = {"PATH": os.environ["PATH"], "PIP_INDEX_URL": ix.url}
        assert check_at_submit(_deps(tmp_path, "tinyapp\n"), python=sys.executable, version=sys.version,
                               venvs_dir=str(venvs), uv=uv.find_uv_bin(), environ=env, seen=seen) == "ok"
        sizes = _sizes(ix)
        assert seen["state"] == "not cached" and seen["unknown"] == 0
        assert seen["bytes"] == sizes["tinyapp-1.0-py3-none-any.whl"] + sizes["tinydep-2.0-py3-none-any.whl"]
        again: dict = {}  # the day's mark: said again without the index
        asked = len(ix.requests)
        assert check_at_submit(_deps(tmp_path, "tinyapp\n"), python=sys.executable, version=sys.version,
                               venvs_dir=str(venvs), uv=uv.find_uv_bin(), environ=env, seen=again) == "checked"
        assert again == seen and len(ix.requests) == asked
    finally:
        ix.close()


def test_a_host_s_download_is_sized_for_its_python_and_platform(tmp_path: Path) -> None:
    """A host (ssh, Slurm, PBS) gets the size of what its installer will fetch: the set resolved
    here for the host's Python version and glibc platform, as its last probe told (hostpy's
    answer), never this machine's wheels; kept for a day, so the next plan asks nothing."""
    import uv

    from core.packaging.depcheck import size_on_host
    from tests.packaging.test_deps_reasons import _deps

    ix = PackageIndex(tmp_path / "index", json=True)
    ix.add_wheel("tinyapp", "1.0", {"tinyapp/__init__.py": "import tinynative\n"}, requires=["tinynative"])
    ix.add_wheel("tinynative", "1.0", {"n.py": "x" * 1000}, tag="cp311-cp311-manylinux_2_17_x86_64")
    ix.add_wheel("tinynative", "1.0", {"n.py": "y" * 90_000}, tag="cp312-cp312-manylinux_2_28_aarch64")
    try:
        sizes = _sizes(ix)
        app = sizes["tinyapp-1.0-py3-none-any.whl"]
        env = {"PATH": os.environ["PATH"], "PIP_INDEX_URL": ix.url}
        deps = _deps(tmp_path, "tinyapp\n")
        marks = str(tmp_path / "marks")

        def sized(tags: dict | None) -> dict:
            return size_on_host(deps, tags=tags, gpu=False, uv=uv.find_uv_bin(), host="box", marks_dir=marks,
                                environ=env)

        x86 = sized({"python_version": "3.11", "platforms": ["manylinux_2_35_x86_64", "linux_x86_64"]})
        arm = sized({"python_version": "3.12", "platforms": ["manylinux_2_31_aarch64", "linux_aarch64"]})
        assert x86["state"] == arm["state"] == "host"
        assert x86["bytes"] == app + sizes["tinynative-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"]
        assert arm["bytes"] == app + sizes["tinynative-1.0-cp312-cp312-manylinux_2_28_aarch64.whl"]
        assert uvenv.download_text(arm) == (
            f"environment: about {uvenv.human_bytes(arm['bytes'])} to download on box unless it built this "
            f"environment before (tinynative {uvenv.human_bytes(arm['bytes'] - app)}, "
            f"tinyapp {uvenv.human_bytes(app)})")
        asked = len(ix.requests)
        assert sized({"python_version": "3.11", "platforms": ["manylinux_2_35_x86_64"]}) == x86
        assert len(ix.requests) == asked  # the day's mark answered

        # a glibc too old for any wheel uv can name, a platform uv has no name for, no answer yet
        old = sized({"python_version": "3.11", "platforms": ["manylinux_2_5_x86_64"]})
        musl = sized({"python_version": "3.11", "platforms": ["musllinux_1_2_x86_64"]})
        assert old["state"] == musl["state"] == "unknown"
        never = sized(None)
        assert never == {"state": "unknown", "why": "box's Python not seen yet (known once a job has run there)"}
        assert uvenv.download_text(never) == ("environment: download size unknown (box's Python not seen yet "
                                              "(known once a job has run there))")
        # this machine's index lacks the pin: the host's may have it, so no refusal, no size
        missing = size_on_host(_deps(tmp_path, "tinyapp==9.9\n"), tags={"python_version": "3.11",
                               "platforms": ["manylinux_2_35_x86_64"]}, gpu=False, uv=uv.find_uv_bin(),
                               host="box", marks_dir=marks, environ=env)
        assert missing["state"] == "unknown" and "tinyapp" in missing["why"], missing
    finally:
        ix.close()


@pytest.mark.slow
def test_the_plan_for_an_ssh_host_sizes_its_environment_once_its_python_is_known(
        sshd, home: Path, tmp_path: Path, index: PackageIndex) -> None:
    import json

    from tests.conftest import write_user_config

    python = getattr(sys, "_base_executable", None) or sys.executable
    o = sshd.target_options(tmp_path / "remote", python)
    write_user_config(json.dumps({"targets": {"box": {"kind": "ssh", **o, "env": {"PIP_INDEX_URL": index.url}}}}))
    project = make_git_project(tmp_path / "p", {"train.py": "import tinyapp\nprint('ok', tinyapp.V)\n",
                                                "requirements.txt": "tinyapp\n"})
    first = gpu_json("plan", "train.py", "--provider", "box", "--hours", "0.1", cwd=project)["plan"]["environment"]
    assert first["text"] == ("environment: download size unknown (box's Python not seen yet "
                             "(known once a job has run there))"), first
    sub = gpu_json("submit", "train.py", "--provider", "box", "--wait-s", "0", "--hours", "0.1", cwd=project)
    end = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=240)
    assert end["state"] == "done", run_gpu("logs", sub["job"]["short_id"]).stdout
    total = sum(_sizes(index).values())
    after = gpu_json("plan", "train.py", "--provider", "box", "--hours", "0.1", cwd=project)["plan"]["environment"]
    assert after["state"] == "host" and after["bytes"] == total, after
    shown = run_gpu("plan", "train.py", "--provider", "box", "--hours", "0.1", cwd=project).stdout
    assert f"about {uvenv.human_bytes(total)} to download on box unless it built this environment before" in shown
