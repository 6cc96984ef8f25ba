"""A target that stops answering: the job waits out the target's grace, then its session is lost."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from core.providers.base import Poll
from core.jobs.states import State
from core.jobs.store import Store
from core.engine.supervisor import Supervisor


class SilentHost:
    """A provider whose host never answers (what poll says when SSH cannot connect)."""

    kind = "ssh"
    max_jobs = 1
    enabled = True

    def __init__(self, grace: float) -> None:
        self.name = "box"
        self.unreachable_grace_s = grace

    async def poll(self, job):
        return Poll("unreachable", detail="connection refused")

    async def read_metrics(self, job, offset):
        return b"", offset


def _running_job(store: Store, request: dict | None = None) -> str:
    jid = "ab" * 16
    store.insert_job({"id": jid, "short_id": jid[:8], "name": "t", "provider": "box",
                      "project_dir": "/p", "outputs_dir": "/p/runs/x", "fingerprint": "f",
                      "request": request or {"script": "a.py"}, "plan": {"hours": 1}},
                     reason="t", actor="t")
    for st in (State.ROUTING, State.PROVISIONING, State.RUNNING):
        store.transition(jid, st, "t", handle={"launched_at": time.time()}, attempt=1)
    return jid


def test_a_silent_host_is_waited_for_then_called_lost(home: Path) -> None:
    store = Store()
    jid = _running_job(store)
    sup = Supervisor(store=store, providers={"box": SilentHost(grace=0.5)})
    sup.verified.add(jid)
    asyncio.run(sup.step(store.get(jid)))
    job = store.get(jid)
    assert job.state == State.RUNNING and "unreachable" in job.reason and "retrying" in job.reason
    time.sleep(0.6)
    asyncio.run(sup.step(store.get(jid)))
    job = store.get(jid)
    assert job.state == State.MIGRATING and "session lost" in job.reason
    # no checkpoint came home and its request does not allow a restart from the top: it ends,
    # saying how to allow it
    asyncio.run(sup.step(store.get(jid)))
    job = store.get(jid)
    assert job.state == State.FAILED and job.attempt == 1, job.reason
    assert "no complete checkpoint came home" in job.reason and "restart: allow" in job.reason


def test_a_lost_job_with_nowhere_to_go_waits_in_migrating(home: Path) -> None:
    """Pinned to the lost target, a job that may restart waits for a target, saying why."""
    store = Store()
    jid = _running_job(store, {"project_dir": str(home), "script": "a.py", "provider": "box",
                               "restart": "allow"})
    sup = Supervisor(store=store, providers={"box": SilentHost(grace=0.01)})
    sup.verified.add(jid)
    asyncio.run(sup.step(store.get(jid)))
    time.sleep(0.05)
    asyncio.run(sup.step(store.get(jid)))
    assert store.get(jid).state == State.MIGRATING
    asyncio.run(sup.step(store.get(jid)))
    job = store.get(jid)
    assert job.state == State.MIGRATING and job.attempt == 1, job.reason
    assert "waiting for a target that fits" in job.reason and "box" in job.reason
