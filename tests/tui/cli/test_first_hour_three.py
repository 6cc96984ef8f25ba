"""Issue 41, "The first hour, round three": the traps a new user met, each as they met it
(the installed `gpu` command, the MCP client over stdio, the dashboard)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import REPO, copy_example, gpu_json, run_gpu, wait_state


# -- 11: MCP resources can be discovered ------------------------------------------------------

async def test_mcp_publishes_the_job_resource_template_before_any_job(home: Path) -> None:
    """An agent lists the resources of a fresh server: the address of a job is published as a
    template (resources/templates/list was "Method not found")."""
    from tests.tui.mcp.test_mcp import session

    async with session() as s:
        listed = await s.list_resource_templates()
        templates = {t.uri_template: t for t in listed.resource_templates}
        assert "gpu://jobs/{id}" in templates, templates
        assert templates["gpu://jobs/{id}"].mime_type == "application/json"
        assert (await s.list_resources()).resources == []  # no job yet: nothing to list by name


# -- 9: a new notify URL is not sent the backlog ----------------------------------------------

@pytest.mark.slow  # runs the supervisor: end to end
def test_a_notify_url_added_now_gets_only_what_happens_after(home: Path, tmp_path: Path) -> None:
    """A job ended before the person set up notifications; they add a URL and run `gpu notify
    test` while the supervisor runs: the URL gets the test message and the next job's end, never
    a message about the job that ended before it existed."""
    from tests.conftest import make_git_project, write_user_config
    from tests.engine.test_notify import Webhook

    project = make_git_project(tmp_path / "p", {"a.py": "print('ran', flush=True)\n"})
    before = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
    assert wait_state(before["short_id"], {"done", "failed"}, timeout=90)["state"] == "done"
    hook = Webhook()
    try:
        write_user_config(f"notify:\n  - {hook.url()}\n")
        assert run_gpu("notify", "test").returncode == 0
        after = gpu_json("submit", "a.py", "--name", "after", "--hours", "0.1", "--wait-s", "0",
                         cwd=project)["job"]
        assert wait_state(after["short_id"], {"done", "failed"}, timeout=90)["state"] == "done"
        deadline = time.monotonic() + 60
        while not any(after["short_id"] in m.get("title", "") for m in hook.messages):
            assert time.monotonic() < deadline, hook.messages
            time.sleep(0.2)
        time.sleep(1.0)  # anything else queued with it arrives too
        titles = [m.get("title", "") for m in hook.messages]
        assert not any(before["short_id"] in t for t in titles), titles
        assert len(titles) == 2 and "test" in titles[0], titles
    finally:
        hook.close()


# -- 7: small traps in fetching and shipping --------------------------------------------------

PREDICT = ("open('predict1.pdf', 'w').write('one')\n"
           "open('predict2.pdf', 'w').write('two')\n"
           "open('notes.txt', 'w').write('n')\n"
           "print('wrote', flush=True)\n")


@pytest.mark.slow  # runs the supervisor: end to end
def test_two_files_left_behind_are_both_named_and_a_glob_fetches_them(home: Path, tmp_path: Path) -> None:
    """The job wrote predict1.pdf and predict2.pdf beside the script: the note names both, and
    `gpu fetch ID 'predict*.pdf'` (a glob, as --output takes) brings both home."""
    from tests.conftest import make_git_project

    project = make_git_project(tmp_path / "p", {"a.py": PREDICT})
    job = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
    short = job["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=90)["state"] == "done"
    log = run_gpu("logs", short).stdout
    note = next(ln for ln in log.splitlines() if "stayed on the target" in ln)
    assert "predict1.pdf" in note and "predict2.pdf" in note and "notes.txt" in note, note

    proc = run_gpu("fetch", short, "predict*.pdf", cwd=project)
    assert proc.returncode == 0, proc.stderr
    runs = project / "runs" / short
    assert (runs / "predict1.pdf").read_text() == "one" and (runs / "predict2.pdf").read_text() == "two"
    assert not (runs / "notes.txt").exists()  # only what the glob matched
    nothing = run_gpu("fetch", short, "*.png", cwd=project)
    assert nothing.returncode != 0 and "*.png" in nothing.stderr


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_folder_given_as_data_is_not_called_left_out(home: Path, tmp_path: Path) -> None:
    """`--data mnist=mnist_data` of a git-ignored folder: it travels as data, so the submit does
    not list it as LEFT OUT (another ignored folder still is)."""
    from tests.conftest import make_git_project

    project = make_git_project(tmp_path / "p", {"a.py": "import gpu, os\nprint(sorted(os.listdir(gpu.data_dir())))\n"},
                               gitignore="mnist_data/\nscratch/\n")
    for folder in ("mnist_data", "scratch"):
        (project / folder).mkdir()
        (project / folder / "x.bin").write_bytes(b"x" * 10)
    proc = run_gpu("submit", "a.py", "--data", "mnist=mnist_data", "--hours", "0.1", "--wait-s", "0",
                   cwd=project)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "scratch/" in out  # still left out
    assert "mnist_data" not in out, out
    doc = gpu_json("submit", "a.py", "--name", "again", "--data", "mnist=mnist_data", "--hours", "0.1",
                   "--wait-s", "0", cwd=project)
    assert [row["path"] for row in doc["bundle"].get("left_out", [])] == ["scratch/"]
    ended = wait_state(doc["job"]["short_id"], {"done", "failed"}, timeout=90)
    assert ended["state"] == "done"
    assert "['mnist']" in run_gpu("logs", doc["job"]["short_id"]).stdout  # it did travel, as data



@pytest.mark.slow  # runs the supervisor: end to end
def test_a_cancelled_job_s_files_left_on_the_target_are_mentioned(home: Path, tmp_path: Path) -> None:
    """`gpu cancel` of a job that wrote files beside its script says they stayed on the target
    (and how to fetch them), as a done job's end does."""
    from tests.conftest import make_git_project

    slow = PREDICT + "import time\ntime.sleep(60)\n"
    project = make_git_project(tmp_path / "p", {"a.py": slow})
    short = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]["short_id"]
    wait_state(short, {"running"}, timeout=90)
    deadline = time.monotonic() + 60
    while "wrote" not in run_gpu("logs", short).stdout:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    proc = run_gpu("cancel", short)
    assert proc.returncode == 0, proc.stderr
    assert "cancelled" in proc.stdout
    assert "stayed on the target" in proc.stdout and f"gpu fetch {short}" in proc.stdout, proc.stdout


# -- 8: wording that misleads ------------------------------------------------------------------

@pytest.mark.slow  # runs the supervisor: end to end
def test_jobs_active_with_none_active_says_how_many_there_are(home: Path, tmp_path: Path) -> None:
    from tests.conftest import make_git_project

    project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n"})
    short = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=90)["state"] == "done"
    out = run_gpu("jobs", "--active").stdout
    assert "no jobs yet" not in out.lower(), out
    assert "no active jobs (1 in all: gpu jobs)" in out, out


def test_a_slot_held_by_a_starting_job_is_said_so_not_0_in_use(home: Path, tmp_path: Path) -> None:
    """The first job is placed on local and not started yet (the supervisor is held off here):
    the second's plan says the slot is held by a job about to start, not "0 of 1 in use"."""
    import fcntl
    import os

    from core import paths
    from tests.conftest import make_git_project

    project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n"})
    import subprocess

    stand_in = subprocess.Popen(["sleep", "120"])  # the "supervisor" a submit wakes (signals)
    fd = os.open(paths.daemon_lock_file(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as if a supervisor ran, busy elsewhere
        os.write(fd, str(stand_in.pid).encode())
        gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
        plan = gpu_json("plan", "a.py", "--hours", "0.1", cwd=project)
    finally:
        os.ftruncate(fd, 0)
        os.close(fd)
        stand_in.kill()
        stand_in.wait()
    reasons = " ".join(plan.get("plan", plan).get("reasons", []))
    assert "0 of 1 in use" not in reasons, reasons
    assert "local is busy (the slot is held by 1 job placed there first, about to start)" in reasons, reasons


def test_an_unresolvable_ssh_address_says_so_and_the_fix_is_about_the_target(home: Path, tmp_path: Path) -> None:
    from tests.conftest import make_git_project, write_user_config

    write_user_config("targets:\n  box: {kind: ssh, host: nosuchhost.invalid, user: me}\n")
    project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n"})
    proc = run_gpu("submit", "a.py", "--provider", "box", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert proc.returncode != 0
    assert "does not resolve" in proc.stderr, proc.stderr
    fix = proc.stderr.split("fix:", 1)[1]
    assert "--gpu" not in fix and "address" in fix and "gpu targets probe box" in fix, fix


@pytest.mark.slow  # runs the supervisor: end to end
def test_an_ended_sweep_has_an_elapsed_time_and_its_row_names_it_by_its_id(home: Path, tmp_path: Path) -> None:
    """A sweep ends: `gpu jobs` gives its row a time, not "-" (its points ran)."""
    from tests.conftest import make_git_project

    project = make_git_project(tmp_path / "p", {"a.py": "import time\ntime.sleep(1.5)\n"})
    doc = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", "--sweep", "N=1,2", cwd=project)
    group = doc["group"]["short_id"]
    for job in doc["jobs"]:
        assert wait_state(job["short_id"], {"done", "failed"}, timeout=90)["state"] == "done"
    rows = _table(run_gpu("jobs", env={"COLUMNS": "200"}).stdout)
    assert group in rows, rows  # the sweep's row names it by its own id
    assert rows[group]["STATE"] == "2 done" and rows[group]["ELAPSED"] not in ("", "-"), rows[group]


def _table(text: str) -> dict[str, dict[str, str]]:
    """`gpu jobs` as {id: {column: cell}}, cut at the header's column starts."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = lines[0]
    import re

    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
    out = {}
    for ln in lines[1:]:
        cells = [ln[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
        out[cells[0]] = dict(zip(names, cells))
    return out


async def test_the_dashboard_names_a_folded_sweep_by_its_own_id(home: Path) -> None:
    """The CLI names a sweep by its group's short id; the dashboard's folded row showed one of
    its points' ids instead."""
    from tests.engine.test_sweep import _demo_dash
    from tui.dash.demo import SWEEP_GROUP, SWEEP_POINTS, _id
    from tui.dash.widgets import JobsTable

    points = [_id(n) for n, _ in SWEEP_POINTS]
    async with _demo_dash((200, 50)) as (app, pilot):
        row = app.query_one(JobsTable).row_text(points[0])
        assert "▸3× lr-sweep" in row
        assert row.split()[0] == SWEEP_GROUP[:8], row
        assert not any(p[:8] in row for p in points), row


# -- 6: the docs command works after the README's install ---------------------------------------

def test_the_readme_s_docs_command_installs_what_it_runs_and_its_site_is_ignored() -> None:
    """After the README's install (`pip install .`), the docs command it gives failed with "No
    module named mkdocs" (mkdocs was only in the test extra), and built into an untracked site/."""
    import re
    import subprocess
    import tomllib

    readme = (REPO / "README.md").read_text()
    para = readme.split("## Where to read on", 1)[1].split("\n\n", 2)[1]
    commands = re.findall(r"`([^`]*mkdocs build[^`]*)`", para)
    assert commands, para
    extra = re.search(r"pip install (?:-e )?'\.\[(\w+)\]'", commands[0])
    assert extra, f"the README's docs command installs nothing before it builds: {commands[0]}"
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0] for d in deps[extra.group(1)]}
    assert {"mkdocs", "mkdocs-material"} <= wanted, wanted
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "site/index.html"])
    assert ignored.returncode == 0, "site/ (mkdocs build's output) is not in .gitignore"
    dev = (REPO / "docs" / "development.md").read_text()
    assert f"pip install -e '.[{extra.group(1)}]'" in dev


# -- 4: nested progress bars are folded as a terminal leaves them --------------------------------

NESTED = """import sys, time
from tqdm import tqdm

for epoch in tqdm(range(3), desc="Epoch", position=0, mininterval=0):
    for batch in tqdm(range(50), desc="Validation DataLoader 0", position=1, leave=False, mininterval=0):
        time.sleep(0.002)
print("training done", flush=True)
"""


@pytest.mark.slow  # runs the supervisor: end to end
async def test_nested_tqdm_bars_show_each_bar_s_final_state_once(home: Path, tmp_path: Path) -> None:
    """Lightning's validation bar (tqdm at position 1, leave=False, under the epoch bar) came
    to `gpu logs` as a line per step ("Validation DataLoader 0: 16%", "17%", ...)."""
    from tests.conftest import make_git_project

    project = make_git_project(tmp_path / "p", {"train.py": NESTED})
    short = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=120)["state"] == "done"
    lines = run_gpu("logs", short).stdout.splitlines()
    validation = [ln for ln in lines if "Validation DataLoader 0" in ln]
    epochs = [ln for ln in lines if ln.startswith("Epoch")]
    assert len(validation) <= 3, validation[:10]  # not a line per step (150 steps)
    assert epochs == [next(ln for ln in epochs if "3/3" in ln)], epochs  # the epoch bar once, as it ended
    assert "100%" in epochs[0]
    assert "training done" in lines
    # the dashboard's log pane, on the same job
    from tests.tui.dash.test_dash import _settle
    from tui.dash.app import DashApp
    from tui.dash.widgets import LogTail

    app = DashApp(live=False, bell=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot, 0.5)
        shown = list(app.query_one(LogTail).lines)
    assert any("training done" in ln for ln in shown), shown
    assert sum("Validation DataLoader 0" in ln for ln in shown) <= 3, shown
    assert sum(ln.startswith("Epoch") for ln in shown) == 1, shown


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_job_that_went_provisioning_to_done_has_an_elapsed_time(home: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A quick job ends before any poll sees it run (the supervisor looks every 6 s here):
    `gpu jobs` gave it ELAPSED "-"."""
    from tests.conftest import make_git_project

    monkeypatch.setenv("GPU_ROUTER_TICK_S", "6")
    project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n"})
    short = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=90)["state"] == "done"
    moves = [(e.get("from"), e.get("to")) for e in gpu_json("status", short)["events"] if e.get("to")]
    row = _table(run_gpu("jobs", env={"COLUMNS": "200"}).stdout)[short]
    # most runs go provisioning -> done (the case that showed "-"); one that saw it running must
    # show its time as well: never skipped, asserted either way
    assert row["ELAPSED"] not in ("", "-"), (row, moves)
