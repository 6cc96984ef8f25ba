"""With many jobs, a tick steps a bounded number of the ones that simply run (every one in turn),
every job with something to do at once, and reads again only the rows that changed.

Real store, real Supervisor object; the jobs are rows (nothing is launched), so what is
checked is the choice of jobs each tick, not a target.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from core.engine import supervisor as sup_mod
from core.jobs.states import State
from core.jobs.store import Store
from core.engine.supervisor import Supervisor


def _rows(store: Store, n: int, state: State) -> list[str]:
    ids = []
    for i in range(n):
        job_id = f"{state.value[:4]}{i:028x}"
        store.insert_job({"id": job_id, "short_id": job_id[:2] + job_id[-6:], "name": "t", "project_dir": "/p",
                          "outputs_dir": "/p/runs", "fingerprint": job_id, "request": {}, "plan": {},
                          "bundle": {}, "handle": {}}, reason="test", actor="cli")
        with store.write() as db:  # placed directly in the state under test
            db.execute("UPDATE jobs SET state = ? WHERE id = ?", (state.value, job_id))
        ids.append(job_id)
    return ids


def test_running_jobs_take_turns_and_jobs_with_work_go_every_tick(home: Path) -> None:
    store = Store()
    budget = sup_mod.STEADY_PER_TICK
    running = _rows(store, budget * 2 + 10, State.RUNNING)
    busy = _rows(store, 3, State.PROVISIONING)
    cancel = running[-1]
    store.update(cancel, cancel_requested=1)
    sup = Supervisor(store=store, providers={})

    async def ticks() -> list[set[str]]:
        out = []
        for _ in range(3):
            jobs = await sup._live_jobs()
            out.append({j.id for j in sup._this_tick(jobs)})
        sup.db.close()
        return out

    chosen = asyncio.run(ticks())
    for picked in chosen:
        assert set(busy) <= picked and cancel in picked  # something to do: every tick
        assert len(picked - set(busy) - {cancel}) == budget  # the running ones: at most the budget
    steady = set(running) - {cancel}
    assert set().union(*chosen) >= steady  # every running job was looked at within 3 ticks
    first, second = (c & steady for c in chosen[:2])
    assert not first & second  # the ones seen longest ago go first


def test_the_live_set_follows_writes_without_a_full_read(home: Path) -> None:
    store = Store()
    a, b = _rows(store, 2, State.RUNNING)
    sup = Supervisor(store=store, providers={})

    async def live() -> set[str]:
        return {j.id for j in await sup._live_jobs()}

    async def story() -> list[set[str]]:
        seen = [await live()]
        store.transition(a, State.DONE, "finished")
        seen.append(await live())
        (c,) = _rows(store, 1, State.QUEUED)
        seen.append(await live())
        store.update(b, reason="still going")
        fresh = {j.id: j for j in await sup._live_jobs()}
        seen.append({b} if fresh[b].reason == "still going" else set())
        sup.db.close()
        return seen

    seen = asyncio.run(story())
    assert seen[0] == {a, b}
    assert seen[1] == {b}  # an ended job leaves
    assert len(seen[2]) == 2 and b in seen[2]  # a new one arrives
    assert seen[3] == {b}  # a changed row is the changed copy
