"""What the scheduler targets (slurm, pbs) share: resources, the batch script, the queue cache.

The batch script is bash and is generated, never templated from user text: every value in a
directive passed `SAFE_VALUE_RE` when the request or the user config was read (no spaces,
quotes or newlines, so nothing can add a line), and every value in a command is shell-quoted.

Checkpointing before the time limit: the scheduler (Slurm's `--signal=B:USR1@lead`, or a timer
in the script for PBS) sends USR1 to the batch shell; its trap touches the job's control file
(`gpu.should_checkpoint()` reads it) and forwards USR1 to the job's process group (the launcher
leads one in `--foreground` mode), and leaves a `time-signal` marker so that a job that saves
and exits 0 because time ran out is resumed, not recorded done. bash runs traps only between
commands, so the script waits on `sleep 1` in a loop rather than one long `wait`.
gpu-router's own checkpoint request uses USR2, which forwards the same way without the marker.

The newest checkpoint generation of each running job (`ckpt-gens/`, frozen by
`gpu.checkpoint_saved()`) rides on the one scheduler query a cycle makes (`Generations`), so
the mirror is poll-driven here as on ssh targets, with no extra process per job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import secrets
import time
from typing import Any, Awaitable, Callable

from core.config.schema import SAFE_VALUE_RE
from core.jobs.store import Job
from core.providers.base import Poll
from core.transport.base import check_name, quote, safe_name

TIME_MARGIN = 1.25
TIME_EXTRA_MIN = 5
QUEUE_TTL_S = 2.0
GENERATIONS_KEEP_S = 60.0  # a job folder not polled this long (its job ended) is asked no more


def resources(job: Job, options: dict) -> dict[str, Any]:
    """The request's scheduler resources over the target's defaults."""
    asked = job.plan.get("resources") or {}
    res = {
        "cpus": options.get("cpus"),
        "gpus": options.get("gpus_per_job"),
        "memory_gb": options.get("memory_gb"),
        "time_minutes": options.get("time_minutes"),
        "partition": options.get("partition"),
        "modules": list(options.get("modules") or []),
        "container": options.get("container"),
    }
    for key, value in asked.items():
        if key == "modules":
            res["modules"] = list(dict.fromkeys([*res["modules"], *value]))
        elif value is not None:
            res[key] = value
    if res["gpus"] is None:
        res["gpus"] = 1
    if asked.get("time_minutes") is None and job.plan.get("hours"):
        # an honest estimate plus a margin; a target's time_minutes caps nothing here
        res["time_minutes"] = max(1, math.ceil(float(job.plan["hours"]) * 60 * TIME_MARGIN) + TIME_EXTRA_MIN)
    for key in ("partition", "container"):
        if res[key] is not None and not SAFE_VALUE_RE.match(str(res[key])):
            raise ValueError(f"{key} {res[key]!r} is not allowed in a batch script")
    for mod in res["modules"]:
        if not SAFE_VALUE_RE.match(mod):
            raise ValueError(f"module {mod!r} is not allowed in a batch script")
    return res


def signal_lead_s(minutes: int | None, options: dict) -> int:
    """Seconds before the time limit at which the job is asked to checkpoint."""
    if options.get("signal_lead_s"):
        return int(options["signal_lead_s"])
    if not minutes:
        return 300
    total = minutes * 60
    lead = min(300, max(45, total // 10))
    return max(15, min(lead, total - 15))


def job_name(job: Job) -> str:
    """Names the job in the queue: gpu-<short id>-<attempt>-<name>, [A-Za-z0-9._-] only."""
    return check_name(safe_name(f"gpu-{job.short_id}-{job.attempt}-{job.name}", 64))


def script(job: Job, *, directives: list[str], adir: str, jdir: str, launcher_cmd: list[str],
           modules: list[str], container: str | None, options: dict, timer_s: int | None = None) -> str:
    """The batch script: directives, traps, modules, then the launcher in the foreground."""
    lines = ["#!/bin/bash", *directives,
             f"# gpu-router job {job.id} attempt {job.attempt} ({job.name}); generated, do not edit",
             f"A={quote(adir)}", f"CTL={quote(jdir + '/ctl')}", 'child=""',
             'forward() { : > "$CTL/checkpoint"; if [ -n "$child" ]; then '
             'kill -s USR1 -- "-$child" 2>/dev/null || kill -s USR1 "$child" 2>/dev/null; fi; true; }',
             'on_time() { : > "$A/time-signal"; echo "[gpu-router] time limit near: asking the job to checkpoint" >&2; forward; }',
             'on_request() { echo "[gpu-router] checkpoint requested" >&2; forward; }',
             "trap on_time USR1", "trap on_request USR2", 'cd "$A"']
    for key, value in (options.get("env") or {}).items():
        lines.append(f"export {key}={quote(value)}")
    if modules:
        lines.append("if ! command -v module >/dev/null 2>&1; then for f in /etc/profile.d/lmod.sh "
                     "/etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash; do "
                     '[ -f "$f" ] && . "$f" && break; done; fi')
        for mod in modules:
            lines.append(f"module load {quote(mod)} || {{ echo {quote('[gpu-router] module load ' + mod + ' failed')} >&2; exit 97; }}")
    cmd = launcher_cmd
    if container:
        runtime = options.get("container_runtime") or "apptainer"
        root = adir.split("/jobs/")[0]
        cmd = [runtime, "exec", "--nv", "--bind", root, container, *launcher_cmd]
    lines.append("timer=''")
    if timer_s is not None:  # no --signal in this scheduler: a timer in the script sends it
        lines.append(f"( sleep {int(timer_s)}; kill -s USR1 $$ ) & timer=$!")
    lines += [
        " ".join(quote(c) for c in cmd) + " &",
        "child=$!",
        'while kill -0 "$child" 2>/dev/null; do sleep 1; done',
        'wait "$child"; status=$?',
        '[ -n "$timer" ] && kill "$timer" 2>/dev/null',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


class QueueCache:
    """One scheduler query shared by every job of a target polled within `ttl` seconds.

    The supervisor polls each job in its own task, all at the same moment: the first caller
    starts the query and the rest await the same one, so N running jobs cost one `squeue`
    (or `qstat`) per cycle, not N."""

    def __init__(self, fetch: Callable[[], Awaitable[dict]], ttl: float = QUEUE_TTL_S) -> None:
        self.fetch = fetch
        self.ttl = ttl
        self.value: dict | None = None
        self.at = 0.0
        self.wall_at = 0.0
        self.calls = 0
        self._task: asyncio.Task | None = None
        self._loop = None

    async def get(self, fresh: bool = False) -> dict:
        """The last answer if younger than ttl (unless `fresh`), else one shared new query."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._task, self.value = loop, None, None
        if not fresh and self.value is not None and time.monotonic() - self.at < self.ttl:
            return self.value
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._refresh())
        return await asyncio.shield(self._task)

    async def _refresh(self) -> dict:
        self.calls += 1
        value = await self.fetch()
        self.value, self.at, self.wall_at = value, time.monotonic(), time.time()
        return value


class Generations:
    """The newest checkpoint generation of each job folder a poll asked about, answered by the
    scheduler query itself: `wrap` appends to that command one shell loop that names, for each
    folder, the highest `ckpt-gens/<n>` (after a random mark the jobs cannot know, so nothing
    they write can pass for the scheduler's rows or for a generation), keeping the command's
    exit status; `read` takes the listing off the output. A job asked about now is answered by
    the next query (a cycle later at most)."""

    def __init__(self) -> None:
        self.wanted: dict[str, float] = {}  # job folder -> when a poll last asked
        self.newest: dict[str, int] = {}

    def want(self, job_dir: str) -> None:
        self.wanted[job_dir] = time.monotonic()

    def wrap(self, command: str) -> tuple[str, str, list[str]]:
        """(the command with the listing after it, its mark, the folders listed in order)."""
        now = time.monotonic()
        self.wanted = {d: t for d, t in self.wanted.items() if now - t < GENERATIONS_KEEP_S}
        dirs = sorted(self.wanted)
        mark = "gpu-router-gens-" + secrets.token_hex(16)
        if not dirs:
            return command, mark, dirs
        listing = (f"for d in {' '.join(quote(d) for d in dirs)}; do g=; "
                   'for f in "$d"/ckpt-gens/[0-9]*; do [ -d "$f" ] && g=${f##*/}; done; '
                   'printf \'%s\\n\' "$g"; done')
        return f"{command}\ns=$?; printf '\\n%s\\n' {mark}; {listing}; exit $s", mark, dirs

    def read(self, out: str, mark: str, dirs: list[str]) -> str:
        """The scheduler's own output; the generations listed after `mark` are kept."""
        head, found, tail = out.partition(f"\n{mark}\n")
        if not found:
            return out
        for d, line in zip(dirs, tail.splitlines()):
            if line.strip().isdigit():
                self.newest[d] = int(line.strip())
            else:
                self.newest.pop(d, None)
        return head

    def on_poll(self, provider: Any, job: Any, poll: Poll) -> Poll:
        """A scheduler target's poll with the job's newest generation: the job's folder is
        listed by the next query (a cycle later at most); a host never reached has no folder."""
        if provider._remote is None:
            return poll
        self.want(provider.job_dir(job))
        return self.attach(poll, provider.job_dir(job))

    def attach(self, poll: Poll, job_dir: str) -> Poll:
        """The poll with the newest generation the last query saw in `job_dir`, if any."""
        gen = self.newest.get(job_dir)
        return dataclasses.replace(poll, checkpoint=gen) if gen is not None else poll
