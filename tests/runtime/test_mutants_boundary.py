"""The sandbox plan of one attempt, asked directly (issue 40: `plan_for`'s mutants had no quick
test; only the slow real jobs of tests/runtime/test_sandbox.py called it).

`plan_for` turns the attempt spec the local target wrote into what bwrap_argv binds: read-only
(the job's code, its runtime, data and control folders, its Python and venv, a wheelhouse),
read-only at a place of its own (local data, bound at the path the job was given from where it
really lies), writable (its working folder, out/, ckpt/, the checkpoint generations, its metrics
file, a home and tmp of its own), hidden, covered (what the bundle's judge withheld in a data
folder, and for a root-started job what only root may read) and the network. Each test writes a
spec into a temporary job folder and compares the whole plan, and the files it made, with what
the rule says. Also the two path helpers the hiding loop rests on, `_outermost` and `_under_any`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.runtime import boundary


def _spec(tmp_path: Path, *, sandbox: dict | None = None, env: dict | None = None, **more) -> dict:
    """An attempt spec laid out as the local target writes it: HOME/jobs/JOB/{job.log,code,...}."""
    job_dir = tmp_path / "gr-home" / "jobs" / "j-7"
    attempt = job_dir / "attempts" / "2"
    attempt.mkdir(parents=True)
    (job_dir / "code").mkdir()
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    return {"sandbox": sandbox if sandbox is not None else {}, "env": env or {},
            "log": str(job_dir / "job.log"), "runtime_dir": str(runtime), "workdir": str(job_dir / "code"),
            "attempt_dir": str(attempt), "job_id": "j-7", "attempt": 2, **more}


@pytest.fixture
def covered(monkeypatch: pytest.MonkeyPatch) -> list:
    """rootonly.paths recorded: the cache file it was asked with, and one path it covers."""
    asked: list = []

    def paths(cache_file=None):
        asked.append(cache_file)
        return ["/etc/shadow"]

    monkeypatch.setattr(boundary.rootonly, "paths", paths)
    return asked


def test_the_plan_of_a_bare_attempt(tmp_path: Path, covered: list) -> None:
    spec = _spec(tmp_path)
    job_dir = tmp_path / "gr-home" / "jobs" / "j-7"
    plan = boundary.plan_for(spec, "")
    assert plan == {
        "ro": [str(job_dir / "code"), str(tmp_path / "runtime"), *boundary.python_roots("", "")],
        "ro_at": [], "rw": [str(job_dir / "code"), str(job_dir / "home"), str(job_dir / "tmp")],
        "hide": [], "cover": ["/etc/shadow"],
        "home": str(job_dir / "home"), "tmpdir": str(job_dir / "tmp"), "workdir": str(job_dir / "code"),
        "mark": str(job_dir / "attempts" / "2" / "sandbox-mark"), "network": True,
        "devices": boundary.gpu_devices(),
    }
    assert covered == [str(tmp_path / "gr-home" / "cache" / "root-only.json")]
    assert (job_dir / "home").is_dir() and (job_dir / "tmp").is_dir()
    assert (job_dir / "attempts" / "2" / "sandbox-mark").read_text() == "j-7:2\n"


def test_the_plan_of_an_attempt_with_every_part(tmp_path: Path, covered: list) -> None:
    job_dir = tmp_path / "gr-home" / "jobs" / "j-7"
    real_data = tmp_path / "disk" / "imagenet"
    (real_data / ".aws").mkdir(parents=True)
    link = tmp_path / "datasets"
    link.symlink_to(tmp_path / "disk")  # the path as given passes through a link of its own
    given = str(link / "imagenet")
    data_dir, control = tmp_path / "bundle-data", tmp_path / "control"
    out, ckpt, gens = job_dir / "out", job_dir / "ckpt", job_dir / "ckpt-gens"
    metrics = job_dir / "metrics.jsonl"
    venv, wheels = tmp_path / "venvs" / "abc", tmp_path / "wheels"
    base = tmp_path / "base" / "bin" / "python3.11"
    env = {"GPU_ROUTER_METRICS_FILE": str(metrics), "GPU_ROUTER_DATA_DIR": str(data_dir),
           "GPU_ROUTER_CONTROL_DIR": str(control), "GPU_ROUTER_OUTPUT_DIR": str(out),
           "GPU_ROUTER_CHECKPOINT_DIR": str(ckpt), "GPU_ROUTER_CHECKPOINT_GENERATIONS": str(gens)}
    sandbox = {"data": [given], "withheld": {given: [".aws", ".env"]}, "hide": ["/opt/gr", "/etc/gr"],
               "network": False}
    spec = _spec(tmp_path, sandbox=sandbox, env=env, base_python=str(base),
                 deps={"venvs_dir": str(tmp_path / "venvs"), "hash": "abc", "wheelhouse": str(wheels)})
    python = str(tmp_path / "py" / "bin" / "python")
    plan = boundary.plan_for(spec, python)
    assert plan == {
        "ro": [str(job_dir / "code"), str(tmp_path / "runtime"), str(data_dir), str(control),
               *boundary.python_roots(python, str(base)), str(venv), str(wheels)],
        "ro_at": [(str(real_data), given)],
        "rw": [str(job_dir / "code"), str(out), str(ckpt), str(gens), str(metrics),
               str(job_dir / "home"), str(job_dir / "tmp")],
        "hide": ["/opt/gr", "/etc/gr"],
        "cover": [given + "/.aws", given + "/.env", "/etc/shadow"],
        "home": str(job_dir / "home"), "tmpdir": str(job_dir / "tmp"), "workdir": str(job_dir / "code"),
        "mark": str(job_dir / "attempts" / "2" / "sandbox-mark"), "network": False,
        "devices": boundary.gpu_devices(),
    }
    assert str(tmp_path / "base") in plan["ro"] and str(tmp_path / "py") in plan["ro"]  # both Pythons
    # a file and a folder are bound only where they exist: plan_for makes them
    assert metrics.is_file() and metrics.read_bytes() == b""
    assert gens.is_dir()


def test_an_existing_metrics_file_is_kept_as_it_is(tmp_path: Path, covered: list) -> None:
    metrics = tmp_path / "gr-home" / "jobs" / "j-7" / "metrics.jsonl"
    spec = _spec(tmp_path, env={"GPU_ROUTER_METRICS_FILE": str(metrics)})
    metrics.write_text('{"loss": 1}\n')
    plan = boundary.plan_for(spec, "")
    assert metrics.read_text() == '{"loss": 1}\n'
    assert str(metrics) in plan["rw"]


def test_a_uv_venv_is_bound_by_its_own_path(tmp_path: Path, covered: list) -> None:
    spec = _spec(tmp_path, deps={"venv": str(tmp_path / "uv-venv"), "venvs_dir": str(tmp_path / "venvs"),
                                 "hash": "abc"})
    plan = boundary.plan_for(spec, "")
    assert plan["ro"][-1] == str(tmp_path / "uv-venv")
    assert str(tmp_path / "venvs" / "abc") not in plan["ro"]


def test_a_data_folder_with_nothing_withheld_is_bound_and_nothing_covered(tmp_path: Path, covered: list) -> None:
    data = tmp_path / "data"
    data.mkdir()
    plan = boundary.plan_for(_spec(tmp_path, sandbox={"data": [str(data)], "withheld": None}), "")
    assert plan["ro_at"] == [(str(data), str(data))]
    assert plan["cover"] == ["/etc/shadow"]
    plan = boundary.plan_for(_spec(tmp_path / "b", sandbox={"data": [str(data)], "withheld": {"/x": ["y"]}}), "")
    assert plan["cover"] == ["/etc/shadow"]


def test_a_second_attempt_in_the_same_job_folder_plans_again(tmp_path: Path, covered: list) -> None:
    """The home, tmp and generations folders exist from the first attempt: planning again
    must not fail on them (a retry, a resume), and the mark says the new attempt."""
    gens = tmp_path / "gr-home" / "jobs" / "j-7" / "ckpt-gens"
    spec = _spec(tmp_path, env={"GPU_ROUTER_CHECKPOINT_GENERATIONS": str(gens)})
    first = boundary.plan_for(spec, "")
    again = boundary.plan_for({**spec, "attempt": 3}, "")
    assert again == first
    assert Path(first["mark"]).read_text() == "j-7:3\n"


# --- the path helpers of the hiding loop ------------------------------------------------------

def test_outermost_keeps_each_path_once_and_none_inside_another() -> None:
    assert boundary._outermost(["/a/b", "/a", "", "/a/", "/ab", "/a/b/../c", "/ab/"]) == ["/a", "/ab"]
    assert boundary._outermost(["/x/y", "/", "/z"]) == ["/"]
    assert boundary._outermost(["/dataX", "/data/y"]) == ["/data/y", "/dataX"]
    assert boundary._outermost(["/srv/b", "/srv/a/c", "/srv/a"]) == ["/srv/a", "/srv/b"]
    assert boundary._outermost([]) == []
    assert boundary._outermost(["/X", "/Y/z"]) == ["/X", "/Y/z"]  # only a trailing '/' is stripped


def test_under_any_follows_links_and_matches_whole_components(tmp_path: Path) -> None:
    link = tmp_path / "to-usr-lib"
    link.symlink_to("/usr/lib")
    assert boundary._under_any(str(link), ("/usr",)) is True
    assert boundary._under_any("/usr", ("/usr",)) is True
    assert boundary._under_any("/usr/lib", ("/opt", "/usr")) is True
    assert boundary._under_any("/usrlocal", ("/usr",)) is False
    assert boundary._under_any(str(tmp_path), ("/usr", "/opt")) is False
    assert boundary._under_any("/anything", ("/",)) is True
    assert boundary._under_any("/opt/x", ("/opt/",)) is True
    assert boundary._under_any("/opt/y", ("/optX",)) is False  # only a trailing '/' is stripped


# --- bwrap_argv's root branch and the covered folder's name, job_environ ----------------------

def _plain_plan(tmp_path: Path) -> dict:
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    return {"workdir": str(work), "rw": [str(work)]}


def test_a_job_root_started_runs_as_nobody_and_anyone_else_s_as_itself(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    head = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "gpu-router-job"]
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    argv = boundary.bwrap_argv("bwrap", _plain_plan(tmp_path), ["true"])
    assert argv[:len(head) + 4] == head + ["--uid", "65534", "--gid", "65534"]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    argv = boundary.bwrap_argv("bwrap", _plain_plan(tmp_path), ["true"])
    assert argv[:len(head)] == head and "--uid" not in argv and "--gid" not in argv
    assert argv[-4:] == ["--chdir", str(tmp_path / "w"), "--", "true"]


def test_a_covered_folder_is_named_without_its_trailing_slash_whatever_its_name(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "keysX").mkdir(parents=True)
    plan = {**_plain_plan(tmp_path), "ro": [str(data)], "cover": [str(data / "keysX") + "/"]}
    argv = boundary.bwrap_argv("bwrap", plan, ["true"])
    at = argv.index("--remount-ro")
    assert argv[at - 2:at + 2] == ["--tmpfs", str(data / "keysX"), "--remount-ro", str(data / "keysX")]


def test_disable_userns_and_the_mark_are_passed_when_asked(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    mark.write_text("j:1\n")
    plan = {**_plain_plan(tmp_path), "mark": str(mark)}
    argv = boundary.bwrap_argv("bwrap", plan, ["true"], {"disable_userns": True})
    assert "--disable-userns" in argv
    assert argv[argv.index(str(mark)) - 1:argv.index(str(mark)) + 2] == ["--ro-bind", str(mark), boundary.SANDBOX_MARK]
    assert "--disable-userns" not in boundary.bwrap_argv("bwrap", plan, ["true"], {"disable_userns": False})
    assert boundary.SANDBOX_MARK not in boundary.bwrap_argv("bwrap", _plain_plan(tmp_path), ["true"])


def test_the_job_environment_is_the_allowed_machine_variables_then_its_own() -> None:
    machine = {"PATH": "/usr/bin", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0", "SSH_AUTH_SOCK": "/s",
               "DBUS_SESSION_BUS_ADDRESS": "unix:x", "HF_TOKEN": "hf_x", "HOME": "/root", "EDITOR": "vi"}
    assert boundary.job_environ(machine, {"HOME": "/job/home", "HF_TOKEN": "declared", "X": "1"}) == {
        "PATH": "/usr/bin", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0", "HOME": "/job/home",
        "HF_TOKEN": "declared", "X": "1"}
    assert boundary.job_environ({}, {}) == {}
