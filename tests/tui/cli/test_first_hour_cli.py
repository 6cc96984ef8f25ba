"""The first hour at the command line (issue 25): what a person meets when they pipe output,
work from a subfolder, mistype a command, or add a cloud target with no network.

Each test runs the installed `gpu` command as a user would, on real files, a real git
repository and real SQLite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import gpu_json, make_git_project, run_gpu, write_user_config

LONG = "a-target-with-a-rather-long-name-for-a-lab-box"


@pytest.mark.slow  # runs the supervisor: end to end
def test_piped_tables_are_whole(home: Path) -> None:
    """`gpu targets | grep` and `gpu jobs | cat` get every column, however wide the rows."""
    write_user_config("targets:\n"
                      f"  {LONG}:\n"
                      "    kind: local\n"
                      "    gpus: [{name: NVIDIA-GeForce-RTX-4090-with-a-long-label, memory_gb: 24}]\n")
    proc = run_gpu("targets", env={"COLUMNS": ""})  # a pipe: no terminal, no COLUMNS
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    for col in ("TARGET", "KIND", "GPU", "VRAM", "STATUS", "QUOTA LEFT", "PRICE/H", "RUNNING"):
        assert col in header, header
    row = next((r for r in rows if LONG in r), "")
    assert row.split()[:4] == [LONG, "local", "1x", "NVIDIA-GeForce-RTX-4090-with-a-long-label"], row
    assert len(row.rstrip()) > 80  # laid out whole, not cut to 80 columns
    # the jobs table too: a long name and every column, piped into grep
    project = make_git_project(home.parent / "proj", {"run.py": "print('hi')\n"})
    name = "a-job-name-long-enough-to-push-the-row-past-eighty-columns"
    sub = gpu_json("submit", "run.py", "--name", name, "--hours", "0.1", "--wait-s", "0", cwd=project)
    proc = run_gpu("jobs", env={"COLUMNS": ""})
    header, *rows = proc.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "STATE", "TARGET", "ELAPSED", "HOURS", "LAST", "METRIC", "AGE"]
    assert rows[0].split()[:2] == [sub["job"]["short_id"], name], rows


def _submit_on_a_terminal(project: Path, *args: str, stdin_terminal: bool = True) -> dict:
    """`gpu submit ARGS | cat` typed at a terminal: stdin is a pty that is the process's
    controlling terminal (a login shell's), stdout and stderr are pipes. The job's record."""
    import os
    import pty
    import subprocess

    from tests.conftest import gpu_exe, take_controlling_terminal

    master, slave = pty.openpty()
    try:
        proc = subprocess.run([gpu_exe(), "submit", *args], cwd=project, capture_output=True, text=True,
                              stdin=slave if stdin_terminal else subprocess.DEVNULL, timeout=120,
                              start_new_session=True, preexec_fn=take_controlling_terminal
                              if stdin_terminal else None)
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return gpu_json("jobs", "--limit", "1")["jobs"][0]


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_person_piping_submit_s_output_is_a_person(home: Path, tmp_path: Path) -> None:
    """No --hours holds an agent's job, never a person's: stdout piped does not make an agent."""
    project = make_git_project(tmp_path / "proj", {"run.py": "print('hi')\n"})
    # each submit is its own request (RUN=n): the same request while the last is active would
    # return that job, and the assertions would read the first submit's actor
    job = _submit_on_a_terminal(project, "run.py", "--wait-s", "0", "--env", "RUN=1")
    assert job["state"] != "awaiting_approval", job
    status = gpu_json("status", job["short_id"])
    assert not status["events"][0]["actor"].startswith("agent"), status["events"][0]
    # the same with nothing on stdin (a script, an agent's subprocess) is held, and says why
    second = _submit_on_a_terminal(project, "run.py", "--wait-s", "0", "--env", "RUN=2", stdin_terminal=False)
    assert second["id"] != job["id"] and second["state"] == "awaiting_approval", second
    assert "no terminal on stdin" in gpu_json("status", second["short_id"])["events"][0]["actor"]
    # and --json at a terminal is machine output: an agent's
    third = _submit_on_a_terminal(project, "run.py", "--wait-s", "0", "--env", "RUN=3", "--json")
    assert third["id"] not in (job["id"], second["id"]) and third["state"] == "awaiting_approval", third


def test_gpu_yaml_at_the_repository_root_is_found_from_a_subfolder(home: Path, tmp_path: Path) -> None:
    """`gpu plan` in repo/src/ means the project whose gpu.yaml is at the root, as git would;
    a script named from the subfolder is the subfolder's."""
    project = make_git_project(tmp_path / "repo", {
        "gpu.yaml": "script: train.py\nhours: 0.1\n", "train.py": "print('root')\n",
        "src/other.py": "print('src')\n", "src/deep/notes.txt": "x\n"})
    plan = gpu_json("plan", cwd=project / "src" / "deep")
    assert plan["plan"]["command"] == ["train.py"], plan["plan"]
    plan = gpu_json("plan", "other.py", cwd=project / "src")
    assert plan["plan"]["command"] == ["src/other.py"], plan["plan"]
    # a gpu.yaml nearer than the root wins, as a nested repository's .git would
    (project / "src" / "gpu.yaml").write_text("script: other.py\nhours: 0.1\n")
    assert gpu_json("plan", cwd=project / "src" / "deep")["plan"]["command"] == ["other.py"]


def test_no_script_names_the_command_that_was_run(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "bare", {"run.py": "print(1)\n"})
    proc = run_gpu("plan", cwd=project / ".")
    assert proc.returncode == 2 and "gpu plan: no script to run" in proc.stderr, proc.stderr
    assert "gpu plan train.py" in proc.stderr and "gpu submit" not in proc.stderr, proc.stderr
    proc = run_gpu("submit", cwd=project)
    assert "gpu submit: no script to run" in proc.stderr, proc.stderr


def test_adding_a_kaggle_target_offline_says_what_failed_in_one_line(keychain, home: Path) -> None:
    """No network (here: a proxy that refuses): the target is saved, the failure is one line
    that says what to do, and its quota reads unknown, not unlimited."""
    offline = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
    proc = run_gpu("targets", "add", "kaggle", "kg", "--token-stdin",
                   input="KGAT_0123456789abcdef0123456789abcdef\n", env=offline)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 2, proc.stdout + proc.stderr
    saved, why = proc.stdout.strip().splitlines()
    assert saved.startswith("saved target kg (kaggle)"), proc.stdout
    assert "Kaggle could not be reached (the proxy did not let it through)" in why, why
    assert "gpu targets probe kg" in why
    for raw in ("HTTPSConnectionPool", "Max retries", "NewConnectionError", "Errno"):
        assert raw not in proc.stdout + proc.stderr, raw
    row = next(r for r in run_gpu("targets", env=offline).stdout.splitlines() if r.startswith("kg "))
    assert "unknown" in row and "unlimited" not in row, row


def test_a_mistyped_command_names_the_nearest_one(home: Path) -> None:
    proc = run_gpu("subit", "run.py")
    assert proc.returncode == 2 and "did you mean `gpu submit`?" in proc.stderr, proc.stderr
    proc = run_gpu("targets", "ad", "ssh")
    assert proc.returncode == 2 and "did you mean `gpu targets add`?" in proc.stderr, proc.stderr
    proc = run_gpu("xyzzy")  # nothing near: no guess
    assert proc.returncode == 2 and "did you mean" not in proc.stderr, proc.stderr


@pytest.mark.slow  # runs the supervisor: end to end
def test_logs_follow_without_an_id_follows_the_newest_job(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "proj", {"run.py": "print('first job')\n"})
    gpu_json("submit", "run.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    (project / "run.py").write_text("print('second job', flush=True)\n")
    second = gpu_json("submit", "run.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    proc = run_gpu("logs", "-f", cwd=project)  # returns once the job ends
    assert proc.returncode == 0, proc.stderr
    assert "second job" in proc.stdout and "first job" not in proc.stdout, proc.stdout
    assert f"job {second['job']['short_id']}" in proc.stderr, proc.stderr


def _big_project(tmp_path: Path, size: int) -> Path:
    """A project with a sparse file of `size` bytes (quick to make, read like any other)."""
    project = make_git_project(tmp_path / "big", {"train.py": "print('hi')\n"})
    with open(project / "weights.bin", "wb") as f:
        f.truncate(size)
    return project


def test_a_large_file_is_warned_about_before_it_is_packed(home: Path, tmp_path: Path) -> None:
    """The listing knows sizes: the "pass large files as data" warning comes before the first
    file is read for packing, while the person can still stop it."""
    from core.config.request import build_request
    from core.engine.service import prepare

    project = _big_project(tmp_path, 101 * 1024 * 1024)
    seen: list[tuple[str, str]] = []
    req = build_request(project, {"script": "train.py", "hours": 0.1})
    prepare(req, interactive=True, progress=lambda done, total, text: seen.append(("stage", text)),
            warn=lambda text: seen.append(("warn", text)))
    warned = next(i for i, (kind, text) in enumerate(seen) if kind == "warn" and "weights.bin" in text)
    first_read = next(i for i, (kind, text) in enumerate(seen) if text.startswith("bundling"))
    assert warned < first_read, seen
    assert "pass large files as data" in seen[warned][1]
    # the command line says it on stderr (here a pipe: no bar), stdout keeps the plan
    proc = run_gpu("plan", "train.py", "--hours", "0.1", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "warning: weights.bin is 106 MB: pass large files as data" in proc.stderr, proc.stderr


def test_packing_shows_progress_on_a_terminal_and_never_in_json(home: Path, tmp_path: Path) -> None:
    from tests.conftest import gpu_exe, pty_session

    project = make_git_project(tmp_path / "proj", {"train.py": "print('hi')\n",
                                                   **{f"src/m{i}.py": f"X = {i}\n" for i in range(250)}})
    status, out = pty_session([gpu_exe(), "plan", "train.py", "--hours", "0.1"], lambda _: None, cwd=project)
    assert status == 0, out
    assert b"bundling: 0/" in out and b"listing the files that ship" in out, out
    status, out = pty_session([gpu_exe(), "plan", "train.py", "--hours", "0.1", "--json"], lambda _: None,
                              cwd=project)
    assert status == 0 and b"bundling" not in out and b"listing the files" not in out, out
    assert json.loads(out.decode())["plan"]["command"] == ["train.py"]


def test_ctrl_c_while_packing_says_what_was_left_undone_and_keeps_no_half_bundle(home: Path,
                                                                                   tmp_path: Path) -> None:
    from tests.conftest import gpu_exe, pty_session

    project = _big_project(tmp_path, 40 * 1024 ** 3)  # 40 GB of zeros: packing takes a while
    state = {"sent": False}

    def react(out: bytes) -> bytes | None:
        if not state["sent"] and b"bundling: 0/" in out:
            state["sent"] = True
            return b"\x03"  # Ctrl-C, as typed: the terminal sends SIGINT
        return None

    status, out = pty_session([gpu_exe(), "submit", "train.py", "--hours", "0.1"], react, cwd=project,
                              timeout=300)
    text = out.decode(errors="replace")
    assert state["sent"] and status == 130, text
    assert ("error: interrupted while bundling: 0/2 files read: nothing was submitted and no partial "
            "bundle was kept") in text, text
    for kept in (home / "bundles", home / "objects"):
        assert not kept.exists() or not list(kept.rglob("*")), list(kept.rglob("*"))
    assert gpu_json("jobs")["jobs"] == []


def test_an_interrupt_anywhere_in_a_pack_leaves_no_half_archive(home: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ctrl-C above can land between the temp archive's creation and the code that would
    remove it (its name not yet known there): whatever this pack made is removed all the same."""
    from core import paths
    from core.packaging import bundle, filework

    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n"})
    real = filework._open_temp

    def made_then_interrupted(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(filework, "_open_temp", made_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        bundle.make_bundle(project)
    assert [p.name for p in paths.bundles_dir().iterdir()] == []
    assert [p.name for p in paths.objects_dir().rglob("*")] == []
