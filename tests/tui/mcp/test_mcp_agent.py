"""The agent's side of `gpu mcp` (issue 24), through the official MCP client over stdio where the
point is MCP: compute_job's `cwd` under the projects root (a property over the one check, and
the refusals an agent meets), a declared artifact the job did not write and a job that tracked
no metric (in the MCP status, `gpu status`, its --json and job.json), the money hold on a priced
ssh target (a real sshd), the read-only accounts tool, and the smoke cap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.config.projectsroot import resolve_cwd
from core.errors import UserError
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state, write_user_config
from tests.props import examples
from tests.providers.test_accounts import accounts, fakes  # noqa: F401 - fixtures: every provider's fake, keys added
from tests.tui.mcp.test_mcp import call, fails, session
from tests.engine.test_queue_timeout import _ssh_line

# -- the one check: any name resolves inside the root, or is refused ------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A projects root with folders, a file, links that stay inside and links that lead out."""
    base = tmp_path_factory.mktemp("cwdprop")
    root, outside = base / "root", base / "outside"
    (root / "a" / "b").mkdir(parents=True)
    (outside / "x").mkdir(parents=True)
    (root / "a" / "f").write_text("a file, not a folder")
    (root / "in").symlink_to(root / "a")          # inside: fine
    (root / "out").symlink_to(outside)            # out of the root
    (root / "up").symlink_to("..")                # the root's parent
    (root / "a" / "back").symlink_to("../..")     # out, by a relative link
    (root / "loop").symlink_to("loop")            # a link to itself
    return root


SEGMENTS = ["a", "b", "f", "in", "out", "up", "back", "loop", "x", "nope", "..", ".", "", "~"]


@settings(max_examples=examples(400), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=5),
       absolute=st.sampled_from(["", "root", "/"]))
def test_any_cwd_resolves_inside_the_root_or_is_refused(tree: Path, parts: list[str], absolute: str) -> None:
    root = tree.resolve()
    name = "/".join(parts)
    if absolute == "root":
        name = f"{root}/{name}"
    elif absolute == "/":
        name = "/" + name
    expanded = os.path.expanduser(name) if name.startswith("~") else name
    full = expanded if os.path.isabs(expanded) else os.path.join(root, expanded)
    real = os.path.realpath(full)  # the oracle: another way to follow the links
    want = (".." not in Path(expanded).parts and os.path.isdir(real) and real != str(root)
            and os.path.commonpath([real, str(root)]) == str(root))
    try:
        got = resolve_cwd(root, name)
    except UserError as exc:
        assert not want, f"{name!r} refused ({exc.message()}) though {real} is a folder in the root"
        return
    assert want, f"{name!r} accepted as {got}"
    assert got.is_dir() and got != root and got.is_relative_to(root) and str(got) == real


# -- over MCP: the names an agent passes ----------------------------------------------------


TRAIN = """
import os, time
with open("model.pt", "w") as f:
    f.write("weights")
print("trained")
"""
TRAIN_TRACKED = """
import gpu
with open("model.pt", "w") as f:
    f.write("weights")
gpu.log(step=1, loss=0.5)
print("trained")
"""


async def test_compute_job_cwd_is_a_name_under_the_projects_root(home: Path, tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    make_git_project(projects / "yolo", {"train.py": TRAIN})
    make_git_project(tmp_path / "elsewhere", {"train.py": TRAIN})
    (projects / "escape").symlink_to(tmp_path / "elsewhere")
    (projects / "inner").symlink_to(projects / "yolo")  # a link that stays inside: fine
    line = "python train.py"
    async with session(cwd=projects) as s:
        plan = await call(s, "compute_job", action="plan", command=line, cwd="yolo", hours=0.1)
        assert plan["digest"] and plan["bundle"]["files"] >= 1
        same = await call(s, "compute_job", action="plan", command=line, cwd=str(projects / "yolo"),
                          hours=0.1)  # an absolute path inside the root is the same folder
        assert same["digest"] == plan["digest"]
        assert (await call(s, "compute_job", action="plan", command=line, cwd="inner",
                           hours=0.1))["digest"] == plan["digest"]
        for cwd, words in ((".", "projects root itself"), ("yolo/..", "'..'"),
                           ("../elsewhere", "'..'"), ("escape", "leads out of the projects root"),
                           (str(tmp_path / "elsewhere"), "is outside the projects root"),
                           ("nope", "there is no folder 'nope'")):
            text = await fails(s, "compute_job", action="start", command=line, cwd=cwd, hours=0.1)
            assert words in text and "compute_job argument cwd" in text, (cwd, text)
            assert "fix:" in text
    assert gpu_json("jobs")["jobs"] == []  # nothing refused ever became a job


async def test_a_project_root_that_is_a_repository_is_refused_with_its_subfolders(
        home: Path, tmp_path: Path) -> None:
    repo = make_git_project(tmp_path / "repo", {"sub/train.py": TRAIN})
    async with session(cwd=repo) as s:
        text = await fails(s, "compute_job", action="plan", command="python train.py", cwd="sub",
                           hours=0.1)
    assert "would ship whole" in text and "projects root itself" in text, text


async def test_projects_root_from_the_user_config(home: Path, tmp_path: Path) -> None:
    projects = tmp_path / "code"
    make_git_project(projects / "yolo", {"train.py": TRAIN})
    write_user_config(f"mcp:\n  projects_root: {projects}\n")
    async with session(cwd=tmp_path) as s:  # started elsewhere: the config's root wins
        plan = await call(s, "compute_job", action="plan", command="python train.py", cwd="yolo",
                          hours=0.1)
        assert plan["digest"]


# -- a declared artifact the job did not write; a job that tracked nothing -----------------


def _done(short: str) -> dict:
    doc = wait_state(short, {"done", "failed", "cancelled"}, timeout=180)
    assert doc["state"] == "done", doc
    return doc


@pytest.mark.slow  # runs the supervisor: end to end
async def test_a_missing_artifact_and_no_metrics_are_named_at_the_end(home: Path, tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    make_git_project(projects / "bare", {"train.py": TRAIN})
    make_git_project(projects / "tracked", {"train.py": TRAIN_TRACKED})
    async with session(cwd=projects) as s:
        bare = await call(s, "compute_job", action="start", command="python train.py", cwd="bare",
                          hours=0.1, artifacts=["model.pt", "results/never.json"])
        short = bare["job"]["short_id"]
        _done(short)
        status = await call(s, "gpu_status", job=short)
        twin = await call(s, "compute_job", action="start", command="python train.py", cwd="tracked",
                          hours=0.1, artifacts=["model.pt"])
        twin_short = twin["job"]["short_id"]
        _done(twin_short)
        twin_status = await call(s, "gpu_status", job=twin_short)
    # the MCP status, gpu status --json and job.json say the same
    job_json = json.loads((projects / "bare" / "runs" / short / "job.json").read_text())["job"]
    for doc in (status, gpu_json("status", short), job_json):
        assert doc["state"] == "done"
        assert doc["missing_artifacts"] == ["results/never.json"], doc
        assert doc["metrics_note"] == "no metrics were tracked", doc
    assert (projects / "bare" / "runs" / short / "model.pt").read_text() == "weights"
    reasons = [e["reason"] for e in gpu_json("status", short, "--verbose")["events"]]
    assert any(r.startswith("warning: declared artifact results/never.json not written") for r in reasons), reasons
    assert any(r.startswith("no metrics were tracked") for r in reasons), reasons
    text = run_gpu("status", short).stdout
    assert "results/never.json: declared, not written" in text and "no metrics were tracked" in text
    # the twin wrote what it declared and logged a metric: neither is said
    twin_json = json.loads((projects / "tracked" / "runs" / twin_short / "job.json").read_text())["job"]
    for doc in (twin_status, gpu_json("status", twin_short), twin_json):
        assert "missing_artifacts" not in doc and "metrics_note" not in doc, doc
    assert "not written" not in run_gpu("status", twin_short).stdout


# -- money: over approvals.agent_max_usd waits, even under an hour ----------------------------


async def test_an_agents_dear_job_on_a_priced_ssh_target_waits_with_its_price(
        sshd, home: Path, tmp_path: Path) -> None:
    write_user_config("targets:\n" + _ssh_line("box", sshd, tmp_path, ", price_per_hour: 12"))
    project = make_git_project(tmp_path / "proj", {"train.py": TRAIN})
    async with session() as s:
        cheap = await call(s, "gpu_plan", project_dir=str(project), script="train.py", provider="box", hours=0.25)
        assert cheap["plan"]["target"] == "box" and cheap["needs_approval"] is False, cheap
        dear = await call(s, "gpu_plan", project_dir=str(project), script="train.py", provider="box", hours=0.5)
        assert [h["rule"] for h in dear["plan"]["holds"]] == ["agent_money"], dear
        held = await call(s, "gpu_submit", project_dir=str(project), script="train.py", provider="box", hours=0.5)
    assert held["job"]["state"] == "awaiting_approval", held
    assert held["guidance"]["needs_approval"] is True
    tell = held["guidance"]["tell_user"]
    assert "$6.00" in tell and "$5.00 an agent may spend without you" in tell and "0.5 hours" in tell, tell
    assert f"gpu approve {held['job']['short_id']}" in tell


# -- provider accounts: read only ---------------------------------------------------------


async def test_the_accounts_tool_is_what_gpu_accounts_shows(accounts, keychain, home: Path) -> None:  # noqa: F811
    cli = gpu_json("accounts")
    async with session(extra_env=keychain.env) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert tools["gpu_accounts"].annotations.read_only_hint is True
        doc = await call(s, "gpu_accounts")
    by = {a["provider"]: a for a in doc["accounts"]}
    assert set(by) == {a["provider"] for a in cli["accounts"]} and len(by) == 5
    for a in cli["accounts"]:
        mine = by[a["provider"]]
        assert mine["state"] in ("fresh", "cached") and mine["account"] == a["account"], (mine, a)
        assert [o["gpu"] for o in mine["offers"]] == [o["gpu"] for o in a["offers"]]
        assert [i.get("id") for i in mine["instances"]] == [i.get("id") for i in a["instances"]]
    assert any(a["offers"] for a in doc["accounts"]) and any(a["instances"] for a in doc["accounts"])
    assert any((a["account"] or {}).get("balance") is not None for a in doc["accounts"]), doc
    text = json.dumps(doc)
    for key in accounts.keys.values():  # the keys stay in the keychain
        assert key not in text


# -- smoke: a time cap, and no hours needed --------------------------------------------------


SLOW = """
import time
print("smoke starts", flush=True)
time.sleep(300)
"""


@pytest.mark.slow  # runs the supervisor: end to end
async def test_an_agents_smoke_run_needs_no_hours_and_stops_at_its_cap(home: Path, tmp_path: Path) -> None:
    write_user_config("rules:\n  smoke_max_minutes: 0.05\n  checkpoint_grace_s: 0\n")
    project = make_git_project(tmp_path / "proj", {"train.py": SLOW})
    async with session() as s:
        plain = await call(s, "gpu_plan", project_dir=str(project), script="train.py")
        assert [h["rule"] for h in plain["plan"]["holds"]] == ["agent_hours"]  # no hours, no smoke: held
        sub = await call(s, "gpu_submit", project_dir=str(project), script="train.py", smoke=True)
    assert sub["job"]["state"] != "awaiting_approval" and sub["guidance"]["needs_approval"] is False, sub
    doc = wait_state(sub["job"]["short_id"], {"done", "failed", "cancelled"}, timeout=180)
    assert doc["state"] == "failed" and "smoke_max_minutes" in doc["reason"], doc
    assert "a smoke run is stopped after 0.05 minutes" in doc["reason"]
