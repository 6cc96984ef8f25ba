"""A job waiting for a free slot moves to a target that can start it now (issue 38, part 3).

Reported: after `gpu targets add ssh box ...`, an agent's job and a sweep point went on "waiting
for a free slot on local (1 of 1 in use)" for minutes while `gpu plan` said "box can start it
now". Real OpenSSH servers on loopback (the `sshd` fixture), the installed `gpu` as a user runs
it, the real supervisor and the local target's sandbox; local's queue_timeout_s is its default
(600 s), far past every wait here, so only the slot move can move a job in time.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import (gpu_exe, gpu_json, make_git_project, run_gpu, run_in_terminal, wait_state,
                            write_user_config)
from tests.services import without_bwrap

slow = pytest.mark.slow  # the end-to-end tests; the choice of jobs to look at is quick
PYTHON = getattr(__import__("sys"), "_base_executable", None) or __import__("sys").executable
QUICK = "import gpu\n(gpu.output_dir() / 'where.txt').write_text('ran')\nprint('ran', flush=True)\n"
LONG = "import time\nprint('holding the slot', flush=True)\ntime.sleep(300)\n"
MOVED = "local is busy (1 of 1 in use) and box has a free slot: routed again to box"
NOTE = "moved from local (1 of 1 in use) to box: box has a free slot"


def add_box(sshd, tmp_path: Path, max_jobs: int = 1) -> dict:
    """`gpu targets add ssh box ...` as a user types it."""
    o = sshd.target_options(tmp_path / "remote", PYTHON)
    return gpu_json("targets", "add", "ssh", "box", "--host", o["host"], "--port", str(o["port"]),
                    "--user", o["user"], "--key", o["key"], "--known-hosts", o["known_hosts"],
                    "--root", o["root"], "--python", o["python"], "--max-jobs", str(max_jobs))


def ssh_line(sshd, tmp_path: Path) -> str:
    o = sshd.target_options(tmp_path / "remote", PYTHON)
    return (f"  box: {{kind: ssh, host: {o['host']}, port: {o['port']}, user: {o['user']}, key: {o['key']},\n"
            f"        known_hosts: {o['known_hosts']}, root: {o['root']}, python: {o['python']}, max_jobs: 1}}\n")


def submit(project: Path, script: str, name: str, *extra: str) -> dict:
    return gpu_json("submit", script, "--hours", "0.1", "--name", name, *extra, "--wait-s", "10",
                    cwd=project)["job"]


def status(short: str) -> dict:
    return gpu_json("status", short, "--verbose")


def reasons(short: str) -> list[str]:
    return [e["reason"] for e in status(short)["events"]]


def until_waiting(short: str, timeout: float = 60) -> dict:
    """The job placed on local and saying it waits for its slot there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = status(short)
        if doc["reason"].startswith("waiting for a free slot on local (1 of 1 in use)"):
            assert doc["state"] == "routing" and doc["provider"] == "local", doc
            return doc
        time.sleep(0.2)
    raise AssertionError(f"job {short} never waited for local's slot: {status(short)}")


def holding_local(tmp_path: Path) -> tuple[Path, dict]:
    """A project, and a long job of it running on local, the one slot there."""
    project = make_git_project(tmp_path / "p", {"long.py": LONG, "q.py": QUICK})
    a = submit(project, "long.py", "a")
    assert a["provider"] == "local", a
    wait_state(a["short_id"], {"running"}, timeout=60)
    return project, a


@slow
def test_a_waiting_job_starts_on_a_target_added_with_a_free_slot(sshd, home: Path, tmp_path: Path) -> None:
    write_user_config("targets:\n  local: {kind: local, max_jobs: 1}\n")
    project, a = holding_local(tmp_path)
    b = submit(project, "q.py", "b")
    assert b["provider"] == "local" and b["state"] == "routing", b
    until_waiting(b["short_id"])

    added = add_box(sshd, tmp_path)
    assert added["probe"]["available"] is True, added
    done = wait_state(b["short_id"], {"done", "failed", "cancelled", "awaiting_approval"}, timeout=90)
    doc = status(b["short_id"])
    assert done["state"] == "done" and doc["provider"] == "box", (doc["state"], doc["reason"], reasons(b["short_id"]))
    said = reasons(b["short_id"])
    assert MOVED in said, said
    assert said.index(MOVED) < next(i for i, r in enumerate(said) if r == "placed on box"), said
    assert doc["handle"]["queue_note"] == NOTE, doc["handle"]
    assert "local is busy (1 of 1 in use): box can start it now" in doc["plan"]["reasons"], doc["plan"]
    assert (Path(doc["outputs_dir"]) / "where.txt").read_text() == "ran"
    assert status(a["short_id"])["state"] == "running"  # the running job is not touched
    gpu_json("cancel", a["short_id"])
    wait_state(a["short_id"], {"cancelled"}, timeout=60)


@slow
def test_a_pinned_job_keeps_waiting_for_its_target_while_an_unpinned_one_moves(
        sshd, home: Path, tmp_path: Path) -> None:
    """Box comes with two slots: the unpinned job takes one, and the job pinned to local keeps
    waiting there with a slot free on box; it runs on local once local's slot frees."""
    write_user_config("targets:\n  local: {kind: local, max_jobs: 1}\n")
    project, a = holding_local(tmp_path)
    c = submit(project, "q.py", "c", "--provider", "local")
    d = submit(project, "q.py", "d")
    until_waiting(c["short_id"])
    until_waiting(d["short_id"])

    add_box(sshd, tmp_path, max_jobs=2)
    done = wait_state(d["short_id"], {"done", "failed", "cancelled", "awaiting_approval"}, timeout=90)
    assert done["state"] == "done" and done["provider"] == "box", (done, reasons(d["short_id"]))
    assert MOVED in reasons(d["short_id"]), reasons(d["short_id"])
    time.sleep(2)  # ten ticks with a slot free on box
    pinned = status(c["short_id"])
    assert pinned["state"] == "routing" and pinned["provider"] == "local", pinned
    assert pinned["reason"].startswith("waiting for a free slot on local"), pinned["reason"]
    assert not any("routed again" in r for r in reasons(c["short_id"])), reasons(c["short_id"])

    gpu_json("cancel", a["short_id"])
    done = wait_state(c["short_id"], {"done", "failed", "cancelled"}, timeout=90)
    assert done["state"] == "done" and done["provider"] == "local", done


@slow
def test_a_job_the_new_target_would_hold_keeps_waiting_and_runs_where_it_was(
        sshd, home: Path, tmp_path: Path) -> None:
    """Box has no bubblewrap: the rules hold agents' jobs there. The agent's waiting job, and a
    job a person approved for local (its plan would change), are not moved and not held: they
    keep waiting on local, their guidance says why in the hold's own words, and they run on
    local once its slot frees, never needing a person. Nothing ran on box."""
    bare = without_bwrap(sshd, tmp_path / "bare-bin")
    write_user_config("targets:\n  local: {kind: local, max_jobs: 1}\n")
    project, a = holding_local(tmp_path)
    b = submit(project, "q.py", "b")  # an agent's (no terminal), within the rules: not held
    assert b["state"] == "routing", b
    e = gpu_json("submit", "q.py", "--hours", "2", "--name", "e", "--wait-s", "10", cwd=project)["job"]
    assert e["state"] == "awaiting_approval", e  # an agent's 2 h: a person says yes, for local
    code, out = run_in_terminal([gpu_exe(), "approve", e["short_id"]], e["short_id"])
    assert code == 0, out
    until_waiting(b["short_id"])
    until_waiting(e["short_id"])

    added = add_box(bare, tmp_path, max_jobs=2)
    assert added["probe"]["details"]["sandbox"]["ok"] is False, added
    notes = {}
    deadline = time.monotonic() + 60
    while len(notes) < 2 and time.monotonic() < deadline:
        for job in (b, e):
            doc = status(job["short_id"])
            assert doc["state"] == "routing" and doc["provider"] == "local", (doc, reasons(job["short_id"]))
            if doc["guidance"].get("queue"):
                notes[job["short_id"]] = doc["guidance"]["queue"]
        time.sleep(0.2)
    assert len(notes) == 2, notes
    for job in (b, e):
        note = notes[job["short_id"]]
        assert note.startswith("box has a free slot but would need your approval there ("), note
        assert note.endswith("): it waits for local"), note
        assert "it was submitted by an agent and would run on box: " in note, note  # the rule's words
        assert "q.py" not in note, note  # never the command
    assert "its plan changed after it was approved (a person approved it for local" in notes[e["short_id"]]
    said = {job["short_id"]: reasons(job["short_id"]) for job in (b, e)}
    time.sleep(1.5)  # ten ticks with box free: no move, no hold, no words again
    for job in (b, e):
        doc = status(job["short_id"])
        assert doc["state"] == "routing" and doc["provider"] == "local", doc
        assert doc["reason"].startswith("waiting for a free slot on local"), doc["reason"]
        assert doc["guidance"]["needs_approval"] is False and doc["guidance"]["queue"] == notes[job["short_id"]]
        assert reasons(job["short_id"]) == said[job["short_id"]], reasons(job["short_id"])
        assert not any("routed again" in r for r in said[job["short_id"]]), said
        assert sum(r.startswith("held for approval") for r in said[job["short_id"]]) == (job is e), said  # e's 2 h

    gpu_json("cancel", a["short_id"])
    for job in (b, e):
        done = wait_state(job["short_id"], {"done", "failed", "cancelled", "awaiting_approval"}, timeout=120)
        events = status(job["short_id"])["events"]
        assert done["state"] == "done" and done["provider"] == "local", (done, [ev["reason"] for ev in events])
        held = [ev for ev in events if ev["to"] == "awaiting_approval"]
        assert len(held) == (1 if job is e else 0), events  # e's at submit, for its 2 h; none since
        assert not any("routed again" in ev["reason"] for ev in events), events
        assert "queue" not in status(job["short_id"])["guidance"]
    assert not (tmp_path / "remote" / "jobs").exists() or not any((tmp_path / "remote" / "jobs").iterdir())


@slow
def test_a_slot_freeing_on_another_target_moves_the_waiting_job(sshd, home: Path, tmp_path: Path) -> None:
    """local and box hold a long job each; the next job waits on local. Box's job is cancelled:
    its slot frees, and the waiting job moves there and runs."""
    write_user_config("targets:\n  local: {kind: local, max_jobs: 1}\n" + ssh_line(sshd, tmp_path))
    project, a = holding_local(tmp_path)
    b = submit(project, "long.py", "b")
    assert b["provider"] == "box", b
    wait_state(b["short_id"], {"running"}, timeout=90)
    c = submit(project, "q.py", "c")
    assert c["provider"] == "local" and c["state"] == "routing", c  # both busy: local first
    until_waiting(c["short_id"])
    time.sleep(1)  # the supervisor looks, and with no target free leaves it waiting
    assert status(c["short_id"])["provider"] == "local"

    gpu_json("cancel", b["short_id"])
    done = wait_state(c["short_id"], {"done", "failed", "cancelled", "awaiting_approval"}, timeout=90)
    said = reasons(c["short_id"])
    assert done["state"] == "done" and done["provider"] == "box", (done, said)
    assert MOVED in said, said
    assert status(a["short_id"])["state"] == "running"
    gpu_json("cancel", a["short_id"])
    wait_state(a["short_id"], {"cancelled"}, timeout=60)


@slow
def test_a_sweeps_points_move_one_by_one_as_slots_free(sshd, home: Path, tmp_path: Path) -> None:
    """A sweep's two points wait on local; box comes with one slot: one point moves and runs
    there, the other waits until that slot frees again and then moves too, each judged and said
    on its own."""
    write_user_config("targets:\n  local: {kind: local, max_jobs: 1}\n")
    project, a = holding_local(tmp_path)
    doc = gpu_json("submit", "q.py", "--hours", "0.1", "--wait-s", "0", "--sweep", "N=1,2", cwd=project)
    points = [j["short_id"] for j in doc["jobs"]]
    assert doc["group"]["targets"] == {"local": 2} and doc["guidance"]["needs_approval"] is False, doc
    for short in points:
        until_waiting(short)

    add_box(sshd, tmp_path, max_jobs=1)
    for short in points:
        done = wait_state(short, {"done", "failed", "cancelled", "awaiting_approval"}, timeout=120)
        said = reasons(short)
        assert done["state"] == "done" and done["provider"] == "box", (done, said)
        assert MOVED in said, said
    moved, ended = {}, {}
    for short in points:
        events = status(short)["events"]
        moved[short] = next(e["ts"] for e in events if e["reason"] == MOVED)
        ended[short] = next(e["ts"] for e in events if e["to"] == "done")
    first, second = sorted(points, key=moved.get)
    assert moved[second] >= ended[first], (moved, ended)  # box has one slot: the second moved once it freed
    assert status(a["short_id"])["state"] == "running"
    gpu_json("cancel", a["short_id"])
    wait_state(a["short_id"], {"cancelled"}, timeout=60)


# -- the choice, quick: a real store, real routing over two targets of this machine -----------


def _submit_row(store, project: Path, name: str, **extra):
    from core.config.request import build_request
    from core.engine.service import submit

    req = build_request(project, {"script": "q.py", "hours": 0.1, "wait_s": 0, "name": name, **extra})
    return submit(req, actor="agent", interactive=False, store=store, start_supervisor=False).job


def _running(store, job_id: str) -> None:
    """The job as if its attempt ran (a row: nothing is launched)."""
    with store.write() as db:
        db.execute("UPDATE jobs SET state = 'running' WHERE id = ?", (job_id,))


def _sup(store, names: dict[str, str]):
    from types import SimpleNamespace

    from core.engine.supervisor import Supervisor

    return Supervisor(store=store, providers={
        n: SimpleNamespace(name=n, kind=k, max_jobs=1, enabled=True) for n, k in names.items()})


def _a_busy_b_disabled(tmp_path: Path):
    """Two targets of this machine, one slot each: `a` taken by a running job (the hog), `b`
    disabled. Returns (store, project, hog)."""
    from core.jobs.store import Store

    write_user_config("targets:\n  local: {kind: local, enabled: false}\n  a: {kind: local}\n"
                      "  b: {kind: local, enabled: false}\n")
    project = make_git_project(tmp_path / "p", {"q.py": QUICK})
    store = Store()
    hog = _submit_row(store, project, "hog")
    _running(store, hog.id)
    return store, project, hog


def test_a_move_goes_where_a_slot_is_free_and_never_back(home: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Two targets of this machine, one slot each. A job placed on `a` while `b` was disabled
    moves once `b` is enabled (its config changed); it never moves back to `a` (left for a
    slot) even when `a` frees and `b` fills; a job whose own target has a slot stays."""
    import core.engine.daemon as daemon

    monkeypatch.setattr(daemon, "ensure_running", lambda *a, **k: None)
    store, project, hog = _a_busy_b_disabled(tmp_path)
    x = _submit_row(store, project, "x")
    assert x.provider == "a" and x.state.value == "routing"
    sup = _sup(store, {"a": "local", "b": "local"})
    try:
        assert sup._move_if_free(x.id, "a") == "stay"  # b is disabled: nowhere else
        write_user_config("targets:\n  local: {kind: local, enabled: false}\n  a: {kind: local}\n"
                          "  b: {kind: local}\n")
        assert sup._move_if_free(x.id, "a") == "moved"
        moved = store.get(x.id)
        assert moved.provider == "b" and moved.state.value == "routing", moved
        texts = [e.reason for e in store.events(x.id)]
        assert "a is busy (1 of 1 in use) and b has a free slot: routed again to b" in texts, texts
        assert moved.handle["slot_left"] == ["a"]
        assert moved.handle["queue_note"] == "moved from a (1 of 1 in use) to b: b has a free slot"
        assert "waiting_since" not in moved.handle

        # b fills, a frees: x does not go back to a
        other = _submit_row(store, project, "other", provider="b")
        _running(store, other.id)
        with store.write() as db:
            db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (hog.id,))
        assert sup._move_if_free(x.id, "b") == "stay"
        assert store.get(x.id).provider == "b"

        # a job on a target with a slot free stays there (the next tick starts it)
        y = _submit_row(store, project, "y")
        assert y.provider == "a"
        assert sup._move_if_free(y.id, "a") == "again"
        assert store.get(y.id).provider == "a"
    finally:
        sup.db.close()


def test_a_tick_looks_at_no_more_jobs_than_free_slots_and_not_at_pinned_ones(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three jobs wait on `a`; `b` has one slot free: one job is looked at a tick (the oldest
    unpinned one first), the one pinned to `a` never, and none again while nothing changed."""
    import core.engine.daemon as daemon

    monkeypatch.setattr(daemon, "ensure_running", lambda *a, **k: None)
    store, project, hog = _a_busy_b_disabled(tmp_path)
    pinned = _submit_row(store, project, "pinned", provider="a")
    first = _submit_row(store, project, "first")
    second = _submit_row(store, project, "second")
    sup = _sup(store, {"a": "local", "b": "local"})
    looked: list[str] = []

    def spawn(tasks, job, work):  # the look itself is the test above's: here only who is looked at
        work.close()
        sup._slot_moving.discard(job.id)
        looked.append(job.name)

    monkeypatch.setattr(sup, "_spawn", spawn)
    try:
        waiting = [store.get(j.id) for j in (pinned, first, second)]
        sup._move_waiting(set(), waiting, {"a": 1}, {"a": 3})
        assert looked == ["first"]
        sup._move_waiting(set(), waiting, {"a": 1}, {"a": 3})
        assert looked == ["first", "second"]  # first stayed (nothing changed since): the next one's turn
        sup._move_waiting(set(), waiting, {"a": 1}, {"a": 3})
        assert looked == ["first", "second"]  # nothing changed for either: no look
        sup._move_waiting(set(), waiting, {"a": 1, "b": 1}, {"a": 3})
        assert looked == ["first", "second"]  # b is full: nowhere to go
        sup._config_stamp = -1  # the config changed (a target added, say): look again
        sup._move_waiting(set(), waiting, {"a": 1}, {"a": 3})
        assert looked == ["first", "second", "first"]
    finally:
        sup.db.close()


def test_a_target_that_would_hold_the_job_is_passed_over_without_a_word_written(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`b` would hold an agent's job (no sandbox there): the job waiting on `a` is not moved and
    not held, no event is written, and its guidance says why, once; the look is not repeated
    until the free targets or the config change. `c` added without a hold: it moves there, `b`
    passed over. A job a person approved for `a` is never moved (its plan would change)."""
    import asyncio

    import core.engine.daemon as daemon
    from core.engine import guidance, reroute, targets

    monkeypatch.setattr(daemon, "ensure_running", lambda *a, **k: None)
    real = targets.for_request

    def for_request(req, store, cfg):
        infos = real(req, store, cfg)
        if "b" in infos:
            infos["b"].unsandboxed_why = "no sandbox on b"
        return infos

    monkeypatch.setattr(targets, "for_request", for_request)
    config = "targets:\n  local: {kind: local, enabled: false}\n  a: {kind: local}\n  b: {kind: local}\n"
    store, project, hog = _a_busy_b_disabled(tmp_path)
    x = _submit_row(store, project, "x")
    assert x.provider == "a" and x.state.value == "routing", x
    y = _submit_row(store, project, "y")
    with store.write() as db:  # as if a person approved y's plan for a
        db.execute("UPDATE jobs SET approved_digest = digest WHERE id = ?", (y.id,))
    write_user_config(config)  # b enabled: a free slot, but no sandbox there
    sup = _sup(store, {"a": "local", "b": "local", "c": "local"})
    ran: list[str] = []

    def spawn(tasks, job, work):
        ran.append(job.name)
        asyncio.run(work)

    monkeypatch.setattr(sup, "_spawn", spawn)
    try:
        before = [e.reason for e in store.events(x.id)]
        assert sup._move_if_free(x.id, "a") == "held"
        kept = store.get(x.id)
        assert kept.provider == "a" and kept.state.value == "routing" and kept.plan == x.plan, kept
        assert [e.reason for e in store.events(x.id)] == before  # no move, no hold, no word
        note = guidance.guidance(kept, True)["queue"]
        assert note.startswith("b has a free slot but would need your approval there (it was submitted by "
                               "an agent and would run on b without a sandbox"), note
        assert note.endswith("(no sandbox on b)): it waits for a"), note
        assert "q.py" not in note
        handle = dict(kept.handle)
        assert sup._move_if_free(x.id, "a") == "held" and store.get(x.id).handle == handle  # once

        approved = sup._move_if_free(y.id, "a")
        assert approved == "held" and store.get(y.id).provider == "a", store.get(y.id)
        assert "its plan changed after it was approved (a person approved it for a, and a move to b is " \
            "a new plan)" in guidance.guidance(store.get(y.id), True)["queue"]

        # the tick: looked at once while nothing changes, however long it waits
        sup._slot_looked.clear()
        waiting = [store.get(x.id)]
        sup._move_waiting(set(), waiting, {"a": 1}, {"a": 2})
        assert ran == ["x"] and store.get(x.id).provider == "a"
        monkeypatch.setattr(reroute, "RECHECK_S", 0.0)
        sup._move_waiting(set(), waiting, {"a": 1}, {"a": 2})
        assert ran == ["x"]  # b would still hold it: not looked at again

        # c comes: free, no hold; x moves there, b passed over with why
        write_user_config(config + "  c: {kind: local}\n")
        assert sup._move_if_free(x.id, "a") == "moved"
        moved = store.get(x.id)
        assert moved.provider == "c" and moved.state.value == "routing", moved
        assert "slot_held" not in moved.handle and moved.handle["queue_note"].endswith("to c: c has a free slot")
        assert "would need your approval there" in moved.plan["passed_over"].get("b", ""), moved.plan
        assert not any(e.dst == "awaiting_approval" for e in store.events(x.id))
        assert sup._move_if_free(y.id, "a") == "held"  # approved for a: c too would change its plan
        assert store.get(y.id).provider == "a"
    finally:
        sup.db.close()
