"""Why a job's dependencies could not be installed, in one line (issue 41, items 1, 3, 10).

A requirement the index cannot satisfy (`tinydep==0.0.1`) ends the job with the installer's own
reason ("tinydep==0.0.1: no such version on the index (uv)"), never with "exited with status
127" or "see the lines above", and without pip's second try (it would fail the same way after
a page of versions). torch's build fits the target (uv's --torch-backend: `cpu` without a GPU,
`auto` with one) and names the environment. The environment's id said when it is created is
the one the next job reuses.

Real uv (the `uv` package's binary), real pip, a loopback PEP 503 index (tests/pyindex.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.runtime import uvenv
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state
from tests.pyindex import PackageIndex


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ix = PackageIndex(tmp_path / "index")
    ix.add_wheel("tinyweb", "1.0", {"tinyweb/__init__.py": "V = '1.0'\n"}, requires=["tinydep"])
    ix.add_wheel("tinydep", "2.0", {"tinydep/__init__.py": "V = '2.0'\n"})
    ix.add_wheel("tinydep", "2.1", {"tinydep/__init__.py": "V = '2.1'\n"})
    monkeypatch.setenv("PIP_INDEX_URL", ix.url)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    yield ix
    ix.close()


def _uv_says(ix: PackageIndex, tmp_path: Path, lines: str) -> str:
    """What the real uv prints when it resolves `lines` against the loopback index, as the
    launcher runs it (uvenv.compile_cmd)."""
    import uv

    req = tmp_path / "r.txt"
    req.write_text(lines)
    cmd = uvenv.compile_cmd(uv.find_uv_bin(), sys.executable, str(tmp_path / "cache"), ["-r", str(req)],
                            str(tmp_path / "out.txt"))
    env = uvenv.environ({"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, {"PIP_INDEX_URL": ix.url})
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    return done.stdout + done.stderr


def test_uv_s_own_words_become_one_line_and_pip_is_not_asked_again(index: PackageIndex, tmp_path: Path) -> None:
    said = _uv_says(index, tmp_path, "tinydep==0.0.1\n")
    assert uvenv.uv_failure(said) == ("tinydep==0.0.1: no such version on the index (uv)", False)
    said = _uv_says(index, tmp_path, "nosuchthing\n")
    assert uvenv.uv_failure(said) == ("nosuchthing: no such package on the index (uv)", False)
    reason, pip_may_help = uvenv.uv_failure(_uv_says(index, tmp_path, "tinydep>=3\n"))
    assert reason.startswith("tinydep>=3: no such version on the index") and not pip_may_help
    # a set that needs a build (uv never builds beside the shared cache): pip's turn
    index.add_sdist("tinysdist", "1.0", {"tinysdist/__init__.py": "Y = 2\n"})
    assert uvenv.uv_failure(_uv_says(index, tmp_path, "tinysdist\n")) == (None, True)
    assert uvenv.uv_failure("error: uv crashed\n") == (None, True)
    assert uvenv.has_installed(sys.executable, "pytest: no such package on the index (uv)")
    assert not uvenv.has_installed(sys.executable, "nosuchthing: no such package on the index (uv)")


def test_pip_s_version_list_is_dropped(index: PackageIndex, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-input",
                           "--disable-pip-version-check", "--index-url", index.url, "tinydep==0.0.1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert uvenv.pip_failure(done.stdout + done.stderr) == "tinydep==0.0.1: no such version on the index (pip)"


def test_torch_s_build_fits_the_target() -> None:
    """No GPU: uv's CPU build of torch (PyPI's Linux torch is the CUDA one, gigabytes of
    nvidia-* wheels); a GPU: uv's `auto`; an index of the project's or the machine's own, a
    wheelhouse or a backend already set: left alone. The choice names the environment."""
    if sys.platform == "darwin":
        pytest.skip("macOS's torch has no CUDA build: no backend is chosen")
    deps = {"requirements": ["torch"], "options": []}
    cpu = uvenv.torch_backend(deps, {}, gpu=False)
    gpu = uvenv.torch_backend(deps, {}, gpu=True)
    assert (cpu, gpu) == ("cpu", "auto")
    cmd_cpu = uvenv.install_cmd("uv", "py", "cache", ["-r", "req.txt"], torch_backend=cpu)
    cmd_gpu = uvenv.install_cmd("uv", "py", "cache", ["-r", "req.txt"], torch_backend=gpu)
    assert cmd_cpu[cmd_cpu.index("--torch-backend") + 1] == "cpu"
    assert cmd_gpu[cmd_gpu.index("--torch-backend") + 1] == "auto"
    comp = uvenv.compile_cmd("uv", "py", "cache", ["-r", "req.txt"], "out", torch_backend=cpu)
    assert comp[comp.index("--torch-backend") + 1] == "cpu"
    assert "--torch-backend" not in uvenv.install_cmd("uv", "py", "cache", [])
    assert len({uvenv.with_backend("k" * 32, b) for b in ("cpu", "auto", None)}) == 3
    assert uvenv.torch_backend(deps, {"PIP_INDEX_URL": "http://127.0.0.1:1/simple/"}, gpu=False) is None
    assert uvenv.torch_backend({**deps, "options": ["--index-url http://127.0.0.1:1/"]}, {}, gpu=False) is None
    assert uvenv.torch_backend({**deps, "wheelhouse": "/w"}, {}, gpu=False) is None
    assert uvenv.torch_backend(deps, {"UV_TORCH_BACKEND": "cu121"}, gpu=False) is None
    assert uvenv.torch_backend({**deps, "torch_backend": "cu126"}, {}, gpu=False) == "cu126"
    # the uv installed with gpu-router takes the flag
    import uv

    help_text = subprocess.run([uv.find_uv_bin(), "pip", "install", "--help"], capture_output=True,
                               text=True, timeout=60).stdout
    assert "--torch-backend" in help_text


def test_the_launcher_and_the_target_say_the_install_s_step() -> None:
    assert uvenv.phase_detail("installing") == "installing dependencies"
    assert uvenv.phase_detail("installing: fetching 3 packages") == "installing dependencies: fetching 3 packages"


def test_status_json_reads_the_install_s_bytes_as_numbers() -> None:
    """`gpu status --json`'s install_progress: the figures of the reason the person reads."""
    reason = uvenv.phase_detail(f"installing: fetching {uvenv.count_text(12, 'package')}, "
                                f"{uvenv.progress_text(412_000_000, 1_234_567_890)}")
    assert reason == "installing dependencies: fetching 12 packages, 412.0 MB of 1.2 GB"
    assert uvenv.install_progress(reason) == {"packages": 12, "downloaded_bytes": 412_000_000,
                                              "total_bytes": 1_200_000_000, "fraction": 0.343}
    one = uvenv.phase_detail(f"installing: fetching {uvenv.count_text(1, 'package')}, {uvenv.progress_text(0, 999)}")
    assert one == "installing dependencies: fetching 1 package, 0 B of 999 B"
    assert uvenv.install_progress(one) == {"packages": 1, "downloaded_bytes": 0, "total_bytes": 999, "fraction": 0.0}
    for other in ("installing dependencies", "installing dependencies: fetching 3 packages", "queued: Resources",
                  "", None):
        assert uvenv.install_progress(other) is None


def _submit(project: Path, env: dict | None = None) -> tuple[str, dict]:
    sub = gpu_json("submit", "train.py", "--wait-s", "0", "--hours", "0.1", cwd=project, env=env)
    short = sub["job"]["short_id"]
    return short, wait_state(short, {"done", "failed"}, timeout=180)


def _deps(tmp_path: Path, text: str):
    from core.packaging.depfiles import ListingFiles  # noqa: F401
    from core.packaging.requirements import read_dependencies  # noqa: F401

    class Files:
        def read(self, rel: str) -> bytes | None:
            return text.encode() if rel == "requirements.txt" else None

        def files_under(self, rel: str) -> list[str]:
            return []

        def missing_reason(self, rel: str) -> str | None:
            return None

        def digest(self, rel: str) -> bytes:
            return b""

    return read_dependencies(Files())


def test_the_check_at_submit_asks_the_index_once_and_names_the_line(index: PackageIndex, tmp_path: Path) -> None:
    import uv

    from core.errors import UserError
    from core.packaging.depcheck import check_at_submit

    venvs = tmp_path / "root" / "venvs"
    venvs.mkdir(parents=True)
    env = {"PATH": os.environ["PATH"], "PIP_INDEX_URL": index.url}
    kw = {"python": sys.executable, "version": sys.version, "venvs_dir": str(venvs), "uv": uv.find_uv_bin(),
          "environ": env}
    good = _deps(tmp_path, "# ours\ntinyweb\n")
    assert check_at_submit(good, **kw) == "ok"
    asked = len(index.requests)
    assert check_at_submit(good, **kw) == "checked" and len(index.requests) == asked  # not asked again
    bad = _deps(tmp_path, "tinyweb\ntinydep==0.0.1  # pinned\n")
    with pytest.raises(UserError) as err:
        check_at_submit(bad, **kw)
    assert str(err.value).startswith("requirements.txt: tinydep==0.0.1: ")
    assert "tinydep==0.0.1: no such version on the index (uv)" in str(err.value)
    assert check_at_submit(bad, **{**kw, "environ": {**env, "GPU_ROUTER_DEPS_CHECK": "0"}}) == "skipped"
    # a package the index lacks but this Python has: pip takes that one (system site packages)
    assert check_at_submit(_deps(tmp_path, "pytest\n"), **kw) == "skipped"
    # an index that does not answer: the submit goes on, the launcher will say
    dead = {**env, "PIP_INDEX_URL": "http://127.0.0.1:9/simple/"}
    assert check_at_submit(bad, **{**kw, "environ": dead}) == "skipped"


@pytest.mark.slow
def test_a_pin_the_index_cannot_satisfy_is_refused_at_submit(home: Path, tmp_path: Path,
                                                             index: PackageIndex) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": "import tinydep\n",
                                                "requirements.txt": "tinydep==0.0.1\n"})
    done = run_gpu("submit", "train.py", "--wait-s", "0", "--hours", "0.1", cwd=project)
    assert done.returncode == 2, done
    said = done.stderr + done.stdout
    assert "requirements.txt: tinydep==0.0.1" in said and "no such version on the index" in said, said
    assert not (home / "jobs").exists() or not list((home / "jobs").iterdir())  # no job took a slot


@pytest.mark.slow
def test_a_pin_the_index_cannot_satisfy_ends_the_job_with_that_line(home: Path, tmp_path: Path,
                                                                    index: PackageIndex) -> None:
    """Where the submit did not look (here: turned off), the job's end says it in one line."""
    project = make_git_project(tmp_path / "p", {"train.py": "import tinydep\n",
                                                "requirements.txt": "tinydep==0.0.1\n"})
    short, end = _submit(project, env={"GPU_ROUTER_DEPS_CHECK": "0"})
    log = run_gpu("logs", short).stdout
    assert end["state"] == "failed", log
    assert end["reason"] == ("installing dependencies failed: tinydep==0.0.1: no such version on the "
                             "index (uv)"), end
    assert "127" not in str(end.get("exit_code")) and "see the lines above" not in end["reason"]
    assert "trying pip" not in log, log
    shown = run_gpu("status", short).stdout
    assert "tinydep==0.0.1: no such version on the index" in shown and "127" not in shown


@pytest.mark.slow
def test_the_environment_id_said_at_creation_is_the_one_reused(home: Path, tmp_path: Path,
                                                                index: PackageIndex) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": "import tinyweb\nprint('ok', tinyweb.V)\n",
                                                "requirements.txt": "tinyweb\n"})
    short, end = _submit(project)
    log = run_gpu("logs", short).stdout
    assert end["state"] == "done", log
    [created] = re.findall(r"creating environment ([0-9a-f]{12})", log)
    # uv lists each installed package once (the link from the cache is quiet)
    assert len(re.findall(r"^\s*\+ tinyweb==1\.0", log, re.MULTILINE)) == 1, log
    short2, end2 = _submit(project)
    log2 = run_gpu("logs", short2).stdout
    assert end2["state"] == "done", log2
    [reused] = re.findall(r"reusing environment ([0-9a-f]{12})", log2)
    assert reused == created
    assert (home / "venvs" / created[:12]).parent.exists()
    assert any(p.name.startswith(created) for p in (home / "venvs").iterdir() if p.is_dir())


def test_logs_f_says_what_the_job_waits_for_before_its_first_line(tmp_path: Path, capsys) -> None:
    """`gpu logs -f` on a job that provisions (its log already holds the launcher's first lines)
    heads the output with `-- job ... is provisioning ...`, not after the first line."""
    from types import SimpleNamespace

    from core.jobs.states import State
    from tui.cli import jobs as cli_jobs

    log = tmp_path / "job.log"
    log.write_text("[gpu-router] process tracking: the marker\n[gpu-router] dependencies: resolving with uv\n")
    states = iter([State.PROVISIONING, State.PROVISIONING, State.DONE, State.DONE, State.DONE])

    def job_now() -> SimpleNamespace:
        state = next(states, State.DONE)
        return SimpleNamespace(id="j1", short_id="abc123", state=state,
                               reason="installing dependencies" if state == State.PROVISIONING else "exited with status 0")

    store = SimpleNamespace(get=lambda _id: job_now())
    assert cli_jobs._follow_log(store, job_now(), log, None) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("-- job abc123 is provisioning: installing dependencies"), out
    assert out[1] == "[gpu-router] process tracking: the marker", out
