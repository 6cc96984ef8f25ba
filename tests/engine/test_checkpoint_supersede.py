"""A copy of a checkpoint home runs as its own task (core/engine/ckptcopy.py): the job's step
does not wait for it, a newer generation supersedes a copy not yet half way (its partial files
gone), a copy past half way lands before the newer one is asked for, and a job that leaves its
target stops the copy still coming from there. The copies come off a real local job folder
(real generations frozen by gpu.checkpoint_saved()); only the pace of the stream is the
test's, through the progress the transport reports."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from core.engine.supervisor import Supervisor
from core.jobs.store import Store
from core.packaging import checkpoints
from core.providers.local import LocalProvider
from tests.stubs import StubJob as _Job, eventually
from tests.runtime.test_checkpoint_generations import _saved

SIZE = 400_000


class Paced:
    """The local target, its checkpoint copy streamed in ten steps the test lets through one
    by one (`go`), reporting its progress as a streaming transport does."""

    def __init__(self) -> None:
        self.inner = LocalProvider()
        self.name, self.caps = self.inner.name, self.inner.caps
        self.go = asyncio.Semaphore(0)
        self.started: list[str | None] = []
        self.cancelled = 0

    async def checkpoint_scan(self, job):
        return await self.inner.checkpoint_scan(job)

    async def checkpoint_pack(self, job, rels, archive, generation=None, progress=None):
        self.started.append(generation)
        try:
            expected = SIZE
            for k in range(1, 11):
                await self.go.acquire()
                if progress is not None:
                    progress(expected * k // 10)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return await self.inner.checkpoint_pack(job, rels, archive, generation)


def _save(ckpt: Path, step: int) -> int:
    (ckpt / "model.bin").write_bytes(bytes([step]) * SIZE)
    (ckpt / "state.json").write_text(json.dumps({"step": step}))
    return _saved(ckpt)


def _world(job_id: str) -> tuple[_Job, Paced, Path, Supervisor]:
    """A job, its paced local target with an empty checkpoint folder, and a supervisor."""
    job, target = _Job(job_id), Paced()
    ckpt = target.inner.job_dir(job) / "ckpt"
    ckpt.mkdir(parents=True)
    return job, target, ckpt, Supervisor(store=Store(), providers={"local": target})


def _leftovers(job_id: str) -> list[str]:
    """Partial archives and staging folders beside home's checkpoint."""
    where = checkpoints.home_dir(job_id).parent
    return sorted(p.name for p in where.iterdir() if p.name.startswith(".ckpt-new-")
                  or (p.name.startswith(".ckpt-") and p.name.endswith(".tar.gz"))) if where.exists() else []


def test_a_newer_generation_supersedes_a_copy_not_half_way_and_waits_for_one_past_it(home: Path) -> None:
    job, target, ckpt, sup = _world("cd" * 16)

    async def scenario() -> None:
        g1 = _save(ckpt, 1)
        await sup._mirror_new_generation(job, target, g1)  # returns at once: the copy is a task
        await eventually(lambda: target.started, "the first copy starts")
        assert job.id in sup._copies and not sup._copies[job.id].task.done()
        await sup._mirror(job, target)  # the step's periodic look skips while a copy is in flight
        assert len(target.started) == 1
        for _ in range(2):  # 20% of it came
            target.go.release()
        await eventually(lambda: sup._copies[job.id].progress.moved >= SIZE * 2 // 10, "20% of the copy")

        g2 = _save(ckpt, 2)  # a newer save: the copy not half way gives way to it
        await sup._mirror_new_generation(job, target, g2)
        assert target.cancelled == 1
        await eventually(lambda: len(target.started) == 2, "the newer copy starts")
        # the superseded copy's partial archive and staging are gone: only the new copy's are there
        assert len([n for n in _leftovers(job.id) if n.endswith(".tar.gz")]) == 1, _leftovers(job.id)
        assert len([n for n in _leftovers(job.id) if n.startswith(".ckpt-new-")]) == 1, _leftovers(job.id)
        for _ in range(6):  # 60% of the second
            target.go.release()
        await eventually(lambda: sup._copies[job.id].progress.moved >= SIZE * 6 // 10, "60% of the second copy")

        g3 = _save(ckpt, 3)  # past half way: it lands, the newer is asked for by the next poll
        await sup._mirror_new_generation(job, target, g3)
        assert target.cancelled == 1 and len(target.started) == 2
        for _ in range(4):
            target.go.release()
        await eventually(lambda: job.id not in sup._copies, "the second copy lands")
        assert checkpoints.summary(job.id)["generation"] == g2
        assert json.loads((checkpoints.home_dir(job.id) / "state.json").read_text()) == {"step": 2}

        await sup._mirror_new_generation(job, target, g3)  # the next poll still shows g3
        for _ in range(10):
            target.go.release()
        await eventually(lambda: job.id not in sup._copies, "the third copy lands")
        assert checkpoints.summary(job.id)["generation"] == g3
        assert (checkpoints.home_dir(job.id) / "model.bin").read_bytes() == bytes([3]) * SIZE
        assert _leftovers(job.id) == []

    asyncio.run(scenario())


def test_a_job_leaving_its_target_stops_the_copy_still_coming_from_there(home: Path) -> None:
    job, target, ckpt, sup = _world("ef" * 16)

    async def scenario() -> None:
        first = _save(ckpt, 1)
        target.go.release()
        for _ in range(9):
            target.go.release()
        await sup._mirror_new_generation(job, target, first)
        await eventually(lambda: job.id not in sup._copies, "the first copy lands")
        await sup._mirror_new_generation(job, target, _save(ckpt, 2))
        for _ in range(8):  # 80%: past half way, but the job moves
            target.go.release()
        await eventually(lambda: sup._copies[job.id].progress.moved >= SIZE * 8 // 10, "80% of the copy")
        await sup._stop_copy(job.id)
        assert target.cancelled == 1 and job.id not in sup._copies
        assert checkpoints.summary(job.id)["generation"] == first  # home keeps what it had
        assert json.loads((checkpoints.home_dir(job.id) / "state.json").read_text()) == {"step": 1}
        assert _leftovers(job.id) == []

    asyncio.run(scenario())


def test_a_job_saving_faster_than_a_copy_travels_still_gets_one_home(home: Path) -> None:
    """Each save comes before the copy in flight has moved a byte (a busy host: its listing and
    its stream start slowly). The copy that took the place of one that gave way gives way to no
    other: it lands, and the next poll's newest comes after it. Before, every new generation
    superseded the copy in flight and none came home while the job saved."""
    job, target, ckpt, sup = _world("ab" * 16)

    async def scenario() -> None:
        await sup._mirror_new_generation(job, target, _save(ckpt, 1))
        await eventually(lambda: len(target.started) == 1, "the first copy starts")
        g2 = _save(ckpt, 2)  # before a byte of the first came: it gives way
        await sup._mirror_new_generation(job, target, g2)
        assert target.cancelled == 1
        await eventually(lambda: len(target.started) == 2, "the second copy starts")
        for step in (3, 4):  # save after save (g2 still among the few kept), each before a byte came
            await sup._mirror_new_generation(job, target, _save(ckpt, step))
            assert target.cancelled == 1 and len(target.started) == 2, (step, target.started)
        for _ in range(10):
            target.go.release()
        await eventually(lambda: job.id not in sup._copies, "the second copy lands")
        assert checkpoints.summary(job.id)["generation"] == g2
        assert json.loads((checkpoints.home_dir(job.id) / "state.json").read_text()) == {"step": 2}

        newest = _save(ckpt, 5)  # the next poll asks for the newest; this copy may give way once again
        await sup._mirror_new_generation(job, target, newest)
        await eventually(lambda: len(target.started) == 3, "the copy of the newest starts")
        assert not sup._copies[job.id].replaced
        for _ in range(10):
            target.go.release()
        await eventually(lambda: job.id not in sup._copies, "the newest lands")
        assert checkpoints.summary(job.id)["generation"] == newest
        assert _leftovers(job.id) == []

    asyncio.run(scenario())
