"""`gpu cost` and the dashboard header's spend: real jobs on a priced local target, and usage
rows written through the store's own methods (as the supervisor writes them) where a test
needs times in the past: grouping by target, day and job, the --since bounds, --json, the
errors, the piped table and the header's text."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from core.engine import spend
from core.errors import UserError
from core.jobs.states import State
from core.jobs.store import Store
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state, write_user_config

H = 3600.0
DAY = 86400.0
PRICED = """\
targets:
  local: {kind: local, price_per_hour: 3.6, gpus: [{name: T4, memory_gb: 16}]}
"""


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch):
    """Days are local dates: the tests that cut at midnight pin the zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.delenv("TZ")
    time.tzset()


def _job(store: Store, n: int, name: str, target: str, gpu: str, price: float, hours: float) -> str:
    """A job row as submit writes it: its plan names the target, the GPUs and the estimate."""
    jid = f"{n:02d}cafe00" + "0" * 24
    store.insert_job({"id": jid, "short_id": jid[:8], "name": name, "provider": target,
                      "project_dir": "/p", "outputs_dir": "/p/runs", "fingerprint": f"f{n}",
                      "request": {"script": "train.py", "hours": hours},
                      "plan": {"target": target, "gpu": gpu, "price_per_hour": price, "hours": hours,
                               "estimated_price": round(price * hours, 4)}},
                     reason="submitted", actor="test")
    return jid


def _attempt(store: Store, jid: str, attempt: int, target: str, price: float, start: float,
             end: float | None) -> None:
    store.usage_start(jid, attempt, target, price, at=start)
    if end is not None:
        store.usage_end(jid, attempt, at=end)


@pytest.fixture
def history(home: Path, utc) -> tuple[Store, float]:
    """Three jobs over the last days, at a fixed `now` (noon UTC):
    a: 4x A100 at $2/h on `lab`, 3 h from 22:00 two days ago (cut by midnight: 2 h + 1 h);
    b: moved from `kag` (free, 2x T4) after 1 h to `lab` where it still runs, for 2 h so far;
    c: ended 10 days ago on `lab` (outside 7 days)."""
    write_user_config("targets:\n  local: {kind: local}\n  lab: {kind: local, price_per_hour: 2.0}\n"
                      "  kag: {kind: local, hours_per_week: 30}\nbudget: {weekly: 40}\n")
    store = Store()
    now = datetime(2026, 5, 10, 12, 0).timestamp()
    a = _job(store, 1, "llama", "lab", "4x A100", 2.0, 4.0)
    _attempt(store, a, 1, "lab", 2.0, now - 2 * DAY + 10 * H, now - 2 * DAY + 13 * H)
    b = _job(store, 2, "sweep", "lab", "2x T4", 2.0, 5.0)
    _attempt(store, b, 1, "kag", 0.0, now - 3 * H, now - 2 * H)
    _attempt(store, b, 2, "lab", 2.0, now - 2 * H, None)
    c = _job(store, 3, "old", "lab", "1x A100", 2.0, 1.0)
    _attempt(store, c, 1, "lab", 2.0, now - 10 * DAY, now - 10 * DAY + H)
    return store, now


def test_by_target_counts_each_attempt_where_it_ran(history) -> None:
    store, now = history
    doc = spend.cost_report(store, since=now - 7 * DAY, by="target", now=now)
    rows = {r["key"]: r for r in doc["rows"]}
    assert set(rows) == {"lab", "kag"}  # job c ended before the period
    assert rows["lab"]["hours"] == pytest.approx(5.0)  # a's 3 h and b's 2 h so far
    assert rows["lab"]["cost"] == pytest.approx(10.0)
    assert rows["lab"]["gpu_hours"] == pytest.approx(3 * 4 + 2 * 2)
    assert rows["lab"]["jobs"] == 2 and rows["lab"]["running"] == 1
    assert rows["kag"] == {"key": "kag", "hours": pytest.approx(1.0), "gpu_hours": pytest.approx(2.0),
                           "cost": 0.0, "estimate": pytest.approx(10.0), "jobs": 1, "running": 0}
    # each job's estimate counts once, where its first attempt in the period ran
    assert rows["lab"]["estimate"] == pytest.approx(8.0)
    assert doc["total"] == {"hours": pytest.approx(6.0), "gpu_hours": pytest.approx(18.0),
                            "cost": pytest.approx(10.0), "estimate": pytest.approx(18.0), "jobs": 2}
    assert [r["key"] for r in doc["rows"]] == ["lab", "kag"]  # dearest first


def test_by_day_cuts_an_attempt_at_midnight(history) -> None:
    store, now = history
    doc = spend.cost_report(store, since=now - 7 * DAY, by="day", now=now)
    days = {r["key"]: (r["hours"], r["cost"]) for r in doc["rows"]}
    assert days == {"2026-05-08": (pytest.approx(2.0), pytest.approx(4.0)),
                    "2026-05-09": (pytest.approx(1.0), pytest.approx(2.0)),
                    "2026-05-10": (pytest.approx(3.0), pytest.approx(4.0))}
    assert [r["key"] for r in doc["rows"]] == sorted(days)


def test_by_job_names_each_job_and_its_targets(history) -> None:
    store, now = history
    rows = {r["key"]: r for r in spend.cost_report(store, since=now - 7 * DAY, by="job", now=now)["rows"]}
    assert set(rows) == {"01cafe00", "02cafe00"}
    assert rows["02cafe00"]["name"] == "sweep" and rows["02cafe00"]["target"] == "kag, lab"
    assert rows["02cafe00"]["hours"] == pytest.approx(3.0) and rows["02cafe00"]["cost"] == pytest.approx(4.0)
    assert rows["01cafe00"]["estimate"] == pytest.approx(8.0) and rows["01cafe00"]["cost"] == pytest.approx(6.0)


def test_since_clips_attempts_to_the_period(history) -> None:
    store, now = history
    doc = spend.cost_report(store, since=now - 2.5 * H, by="target", now=now)
    rows = {r["key"]: r for r in doc["rows"]}
    assert rows["kag"]["hours"] == pytest.approx(0.5)  # only its half hour after --since
    assert rows["lab"]["hours"] == pytest.approx(2.0) and rows["lab"]["jobs"] == 1
    assert doc["total"]["jobs"] == 1
    eleven = spend.cost_report(store, since=now - 11 * DAY, by="job", now=now)
    assert {r["name"] for r in eleven["rows"]} == {"llama", "sweep", "old"}


def test_quota_and_budget(history) -> None:
    store, now = history
    doc = spend.cost_report(store, since=now - DAY, now=now)
    assert [q["target"] for q in doc["quota"]] == ["kag"]
    assert doc["quota"][0]["allowed_hours"] == 30.0 and doc["quota"][0]["reported"] is None
    assert doc["budget"]["weekly"] == 40.0 and doc["budget"]["per_job"] is None


def test_since_forms_and_errors() -> None:
    now = 1_800_000_000.0
    assert spend.parse_since("24h", now) == now - 24 * H
    assert spend.parse_since("7d", now) == now - 7 * DAY
    assert spend.parse_since("2w", now) == now - 14 * DAY
    assert spend.parse_since("2026-05-01T09:00+00:00", now) == datetime.fromisoformat(
        "2026-05-01T09:00+00:00").timestamp()
    for bad in ("3x", "yesterday", "", "7 days", "-2d"):
        with pytest.raises(UserError) as err:
            spend.parse_since(bad, now)
        assert "24h, 7d, 2w" in (err.value.fix or "")
    with pytest.raises(UserError, match="in the future"):
        spend.parse_since("2099-01-01", now)
    with pytest.raises(UserError, match="not a grouping"):
        spend.cost_report(Store(), since=now, by="week")


@pytest.mark.slow
def test_a_real_job_on_a_priced_target(home: Path, tmp_path: Path) -> None:
    """A job the supervisor ran: its hours, GPU hours and cost come from its usage row."""
    write_user_config(PRICED + "budget: {weekly: 20}\n")
    project = make_git_project(tmp_path / "p", {"work.py": "import time\ntime.sleep(1.5)\nprint('ok')\n"})
    sub = gpu_json("submit", "work.py", "--name", "priced-" + "n" * 40, "--hours", "0.05",
                   "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=120)["state"] == "done"

    doc = gpu_json("cost", "--since", "1h")
    [row] = doc["rows"]
    assert row["key"] == "local" and row["jobs"] == 1 and row["running"] == 0
    assert 1.0 / H < row["hours"] < 60 / H  # it slept 1.5 s: well under a minute
    assert row["cost"] == pytest.approx(row["hours"] * 3.6, abs=1e-3)
    assert row["gpu_hours"] == pytest.approx(row["hours"], abs=1e-4)  # one T4
    assert row["estimate"] == pytest.approx(0.05 * 3.6)
    assert doc["budget"]["weekly"] == 20.0
    assert doc["budget"]["week_spend"] == pytest.approx(row["cost"], abs=1e-3)

    by_job = gpu_json("cost", "--by", "job")
    assert [r["key"] for r in by_job["rows"]] == [short]

    # piped (no terminal): each row stays whole, long name included, whatever COLUMNS says not
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = run_gpu("cost", "--by", "job", env=env).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith(short))
    assert "priced-" + "n" * 40 in line and "$0.18" in line  # the estimate: 0.05 h at $3.6
    assert line.split()[-1] == "<$0.01" and line.split()[-3] == "<0.01"  # seconds cost cents' parts
    assert "budget: $" in out and "of $20.00 spent in the last 7 days" in out

    assert gpu_json("cost", "--since", "2000-01-01")["total"]["jobs"] == 1  # an ISO date


def test_cli_errors_and_help(home: Path) -> None:
    bad = run_gpu("cost", "--since", "3x")
    assert bad.returncode == 2
    assert "--since '3x' is neither a span nor a date" in bad.stderr and "24h, 7d, 2w" in bad.stderr
    as_json = run_gpu("cost", "--since", "tomorrow", "--json")
    assert as_json.returncode == 2 and '"fix"' in as_json.stdout
    helped = run_gpu("cost", "--help")
    assert helped.returncode == 0 and "--by {target,day,job}" in helped.stdout
    empty = run_gpu("cost")
    assert empty.returncode == 0 and "no job ran in this period" in empty.stdout


def _dash(store: Store):
    from tui.dash.app import DashApp

    return DashApp(store=store, live=False, bell=False)


async def test_header_shows_this_weeks_spend_against_the_budget(home: Path) -> None:
    write_user_config(PRICED + "budget: {weekly: 20}\n")
    store = Store()
    jid = _job(store, 1, "llama", "local", "1x T4", 3.6, 1.0)
    now = time.time()
    _attempt(store, jid, 1, "local", 3.6, now - 2 * H, now - H)  # $3.60 within the week
    old = _job(store, 2, "old", "local", "1x T4", 3.6, 1.0)
    _attempt(store, old, 1, "local", 3.6, now - 9 * DAY, now - 8 * DAY)  # outside it
    app = _dash(store)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause(0.2)
        assert "$3.60 of $20.00 this week" in app.sub_title
        assert "over budget" not in app.sub_title
        _attempt(store, jid, 2, "local", 3.6, now - H, now)  # five more hours' worth of dollars
        store.conn.execute("UPDATE usage SET price_per_hour = 18.0 WHERE attempt = 2")
        store.conn.commit()
        app.load_targets()  # the header's figure is read with the targets
        await app.workers.wait_for_complete()
        await pilot.pause(0.2)
        assert "$21.60 of $20.00 this week (over budget)" in app.sub_title


async def test_header_without_a_budget(home: Path) -> None:
    write_user_config(PRICED)
    store = Store()
    app = _dash(store)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause(0.2)
        assert "this week" not in app.sub_title  # no budget, nothing spent: nothing to say
    jid = _job(store, 1, "llama", "local", "1x T4", 3.6, 1.0)
    _attempt(store, jid, 1, "local", 3.6, time.time() - H, None)  # running: counts up to now
    app = _dash(store)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause(0.2)
        assert "$3.60 this week" in app.sub_title


def test_kaggle_quota_counts_ours_and_shows_kaggles_own(home: Path) -> None:
    """A Kaggle target's free hours: 30 a week unless set, what our attempts used, and the
    count Kaggle gave at the last probe (remembered by the provider itself; no call here)."""
    from core.config.user import load
    from core.providers import registry

    write_user_config("targets:\n  local: {kind: local}\n  kag: {kind: kaggle}\n")
    store = Store()
    jid = _job(store, 1, "nb", "kag", "2x T4", 0.0, 2.0)
    _attempt(store, jid, 1, "kag", 0.0, time.time() - 3 * H, time.time() - H)
    # its attempt ended: so does the job. A queued one is live, and `gpu cost` below would start a
    # supervisor for it, which outlived the test (it took its lock after the teardown looked)
    store.transition(jid, State.CANCELLED, "ended", actor="test")
    doc = spend.cost_report(store, since=time.time() - 7 * DAY)
    [quota] = doc["quota"]
    assert quota["target"] == "kag" and quota["allowed_hours"] == 30.0
    assert quota["used_hours"] == pytest.approx(2.0, abs=1e-3) and quota["reported"] is None

    provider = registry.build(load())["kag"]
    info = provider._info(True)
    info.details = {"user": "ada", "quota": {"used_hours": 4.5, "allowed_hours": 30.0,
                                             "left_hours": 25.5, "resets_at": "2026-05-16T00:00:00"}}
    provider._store_probe(info)  # what its probe writes after asking Kaggle
    [quota] = spend.cost_report(store, since=time.time() - 7 * DAY)["quota"]
    assert quota["reported"]["used_hours"] == 4.5 and quota["reported"]["resets_at"] == "2026-05-16T00:00:00"
    assert quota["used_hours"] == pytest.approx(2.0, abs=1e-3)  # ours stays ours
    out = run_gpu("cost").stdout
    assert "quota kag: 2.00 of 30 free hours used" in out and "Kaggle counted 4.5 of 30 h" in out
