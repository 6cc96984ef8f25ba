"""The interface every target kind implements, and what its answers look like.

A provider turns a job into a running process somewhere and answers questions about it;
it never changes a job's state (the supervisor does, through the store).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from core.jobs.store import Job


# What a plan and `gpu targets` say of a target whose jobs run in a container: said here, on the
# providers' floor, so the probe (remoteprobe) and the policy (planning.as_run) share the words.
CONTAINER_NOTE = ("a job in a container runs without gpu-router's sandbox: a job there runs as your "
                  "account and can reach other jobs")


@dataclass
class TargetInfo:
    """What `probe` learns about a target."""

    name: str
    kind: str
    available: bool
    gpus: list[dict] = field(default_factory=list)  # [{"name": "T4", "memory_gb": 15.0}]
    why_unavailable: str | None = None
    max_jobs: int = 1
    # from the user config and the store's usage rows (filled in by core.engine.targets)
    price_per_hour: float = 0.0
    quota_hours_left: float | None = None
    credits_left: float | None = None
    session_limit_hours: float | None = None
    running: int = 0
    waiting: int = 0  # jobs placed here that wait for a slot (each will take one before a new job)
    # what a remote probe learned beyond GPUs (host, load, cpus, Slurm partitions, queue depth)
    details: dict = field(default_factory=dict)
    # other GPU set-ups a job may ask of this target, by name (Kaggle: "t4x2", "p100"); `gpus`
    # is the one it gets unless the request needs another
    offers: dict[str, list[dict]] = field(default_factory=dict)
    takes_secrets: bool = True  # False: a job that reads keychain secrets cannot run there
    # the price of each offer, where offers cost differently (Modal: per GPU type)
    offer_prices: dict[str, float] = field(default_factory=dict)
    # the most hours one job may ask of this target (a provider's own cap), and why
    max_hours: float | None = None
    max_hours_why: str = ""
    # a local target where no sandbox can be made: why (an agent's job there waits for a person)
    unsandboxed_why: str | None = None
    # the target answered, and is unavailable by its own account (a SkyPilot server with no
    # cloud enabled): not a failed probe, so none is remembered as one
    answered: bool = False

    def to_json(self) -> dict:
        doc = {"name": self.name, "kind": self.kind, "available": self.available,
               "why_unavailable": self.why_unavailable, "gpus": self.gpus, "gpu": self.gpu_label,
               "vram_gb": self.vram_gb, "price_per_hour": self.price_per_hour,
               "quota_hours_left": self.quota_hours_left, "credits_left": self.credits_left,
               "session_limit_hours": self.session_limit_hours, "max_jobs": self.max_jobs,
               "running": self.running, "waiting": self.waiting, "free_slots": self.free_slots}
        if self.kind == "local":
            doc["sandbox"] = {"ok": self.unsandboxed_why is None, "why": self.unsandboxed_why}
        if self.details:
            doc["details"] = self.details
        if self.offers:
            doc["offers"] = self.offers
        if self.offer_prices:
            doc["offer_prices"] = self.offer_prices
        if self.max_hours is not None:
            doc["max_hours"] = self.max_hours
        return doc

    @property
    def free_slots(self) -> int:
        """Jobs this target could start now: max_jobs less those running and those waiting."""
        return max(self.max_jobs - self.running - self.waiting, 0)

    @property
    def busy_text(self) -> str:
        """"1 of 1 in use" and, where jobs placed there have not started yet, that they hold
        the rest ("the slot is held by 1 job placed there first, about to start"), for the
        plan's reasons: "0 of 1 in use, 1 waiting" read as busy with nothing running."""
        n = self.waiting
        if not n:
            return f"{self.running} of {self.max_jobs} in use"
        jobs = f"{n} job{'s' * (n != 1)} placed there first, about to start"
        if not self.running:
            slots = "the slot is" if self.max_jobs == 1 else f"{min(n, self.max_jobs)} of {self.max_jobs} slots are"
            return f"{slots} held by {jobs}"
        return f"{self.running} of {self.max_jobs} in use, the rest held by {jobs}"

    @property
    def gpu_label(self) -> str:
        if not self.gpus:
            return "cpu"
        names = sorted({g["name"] for g in self.gpus})
        return f"{len(self.gpus)}x {', '.join(names)}"

    @property
    def vram_gb(self) -> float:
        return max((g.get("memory_gb", 0) for g in self.gpus), default=0.0)


@dataclass
class Poll:
    """Where a launched attempt stands.

    phase: "provisioning" (starting, installing), "running", "exited" (with exit_code),
    "lost" (gone without an exit status), "cancelled" (stopped on the target's own side), "session_ended" (the target ended it: a time
    limit, preemption; it resumes from its checkpoint), "unreachable" (cannot ask now).
    queued: a "provisioning" attempt that waits in the target's own queue (Slurm PENDING, PBS Q,
    Kaggle QUEUED), not one that installs or starts: the supervisor's `queue_timeout_s` counts it.
    vanished: a "lost" attempt whose launcher is gone from a host that answers (a reboot, an OOM
    kill, a kill -9) and left no exit record: the session ended, not the script; it resumes.
    checkpoint: the newest generation `gpu.checkpoint_saved()` froze on the target (ckpt-gens/),
    seen by the same look (None where the target does not say): a newer one than home has is
    brought home at once, not on the mirror's clock.
    started_at: when the attempt's spending began, where the target says and it was before the
    poll that first sees it run (a SkyPilot cluster bills from its launch): its usage counts
    from then.
    """

    phase: str
    exit_code: int | None = None
    detail: str = ""
    queued: bool = False
    vanished: bool = False
    checkpoint: int | None = None
    started_at: float | None = None  # where the target bills from before a poll saw it run (a cluster's launch)

    def __post_init__(self) -> None:
        # an exit record is the job's to write (its folder on a host, its stream): whatever it
        # holds, the supervisor gets a number or None and a bounded text, never a crash a tick
        code = exit_code_of(self.exit_code)
        if code is None and self.exit_code is not None:
            self.detail = "; ".join(t for t in (f"its exit record's code is not a number "
                                                 f"({str(self.exit_code)[:40]!r})", str(self.detail)) if t)
        self.exit_code = code
        self.detail = (self.detail if isinstance(self.detail, str) else str(self.detail))[:MAX_DETAIL]


MAX_DETAIL = 2000  # characters of a poll's detail: it goes into events and messages


def exit_code_of(value: object) -> int | None:
    """An exit record's code as the supervisor may use it: an int an exit status can be (a
    negative one is the signal that killed it), else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not -256 < value < 256:
        return None
    return value


def exited_poll(doc: object) -> Poll:
    """The Poll an exit record (the launcher's exit.json, read from wherever the target keeps
    it) stands for: checked here, whatever the job wrote into it."""
    doc = doc if isinstance(doc, dict) else {}
    poll = Poll("exited", exit_code=doc.get("code"), detail=doc.get("error") or "")  # checked there
    if poll.exit_code is not None and poll.exit_code < 0 and not poll.detail:
        poll.detail = f"killed by signal {-poll.exit_code}"
    return poll


class Provider(Protocol):
    name: str
    kind: str

    async def probe(self) -> TargetInfo: ...

    async def launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        """Prepare and start the job's next attempt; return the handle to store."""

    async def poll(self, job: Job) -> Poll: ...

    async def read_metrics(self, job: Job, offset: int) -> tuple[bytes, int]:
        """New bytes of the job's metrics stream from `offset`, and the new offset."""

    async def cancel(self, job: Job, force: bool = False) -> None: ...

    async def request_checkpoint(self, job: Job) -> None: ...

    async def fetch_outputs(self, job: Job, dest: Path) -> list[str]:
        """Bring outputs home into `dest`; return notes about anything left behind."""

    def log_path(self, job: Job) -> Path:
        """The local file that holds (or mirrors) the job's log."""

    # Optional: `async sync_log(job)` mirrors a remote log into jobs/<id>/job.log;
    # `probe_now()` answers `probe` synchronously when that is cheap; `is_ours(job)` checks
    # that a re-adopted process is really this job's; `enabled` and `max_jobs` attributes.
