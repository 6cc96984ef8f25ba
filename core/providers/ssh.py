"""The `ssh` target: a workstation or GPU box reached over SSH, with no scheduler.

The job runs detached on the host, exactly as on the local target: launch.py (uploaded into the
cache once per content hash, with the `gpu` module) forks, starts its own session (what
`setsid nohup` does, SIGHUP ignored) and closes the SSH channel, so the job survives the
connection, the supervisor and this laptop going to sleep. It is run as the whole command of
the channel, in the foreground until it detaches, because the job's secret values travel to it
on stdin (`--secrets-stdin`): inside the encrypted channel, never on the host's disk and never
on a command line where `ps` would show them. The attempt's spec path (job id and attempt) is
its tag, checked with `ps` when a restarted supervisor re-adopts it.

Exit status, pid and phase are files in the attempt folder on the host, so `poll` is a short
look at them, and the looks at every job on the host go as one command (lookbatch.py); a
dropped connection makes it answer "unreachable" and the supervisor carries on once the host
answers again. `cancel` runs the launcher's kill routine on the host (`launch.py --kill`),
which ends every process the job started, also those that left its process group.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

from core.jobs.store import Job
from core.transport.base import Transport, TransportError, quote
from core.providers.base import Poll, TargetInfo, exited_poll
from core.providers.lookbatch import LookBatch
from core.providers.remote import PGID_OF, START_GRACE_S, RemoteProvider
from core.runtime import uvenv

_PID = "sed -n 's/.*\"pid\": *\\([0-9][0-9]*\\).*/\\1/p'"
# where an attempt stands, from the files in its folder ($1); `poll` runs it batched (lookbatch.py)
LOOK = f"""A=$1
g=; for f in "$A"/../../ckpt-gens/[0-9]*; do [ -d "$f" ] && g=${{f##*/}}; done; echo "gen $g"
if [ -s "$A/exit.json" ]; then echo exit; cat "$A/exit.json"; return 0; fi
if [ ! -s "$A/pid" ]; then echo nopid; return 0; fi
pid=$({_PID} "$A/pid")
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo alive; cat "$A/phase" 2>/dev/null; echo; return 0; fi
if [ -s "$A/exit.json" ]; then echo exit; cat "$A/exit.json"; return 0; fi
echo dead"""


class SSHProvider(RemoteProvider):
    kind = "ssh"

    def __init__(self, name: str, transport: Transport, **kw) -> None:
        super().__init__(name, transport, **kw)

    async def probe_fresh(self) -> TargetInfo:
        facts = await self.host_facts()
        details = {k: facts[k] for k in ("load", "cpus", "mem") if k in facts}
        if facts["gpus"]:
            details["gpus_free_gb"] = [g.get("free_gb") for g in facts["gpus"]]
        gpus = [{"name": g["name"], "memory_gb": g["memory_gb"]} for g in facts["gpus"]]
        return self._info(True, gpus=gpus, details=details)

    async def launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        self._loop = asyncio.get_running_loop()
        started = time.monotonic()
        prep = await self.prepare_attempt(job, env_secrets)
        launcher = f"{prep['runtime']}/launch.py"
        # the launcher reads the secrets, then detaches (fork + setsid) and closes the channel
        await self.transport.run(
            self._host_env()  # the target's env (a pip mirror, a proxy) for the launcher and pip
            + f"exec {quote(prep['python'])} {quote(launcher)} --secrets-stdin {quote(prep['spec'])}",
            input=json.dumps(env_secrets).encode(), check=f"starting job {job.short_id} on {self.name}")
        return {"attempt": job.attempt, "attempt_dir": prep["adir"], "launched_at": time.time(),
                "uploaded_bytes": prep["sent"] + len(json.dumps(env_secrets)),
                "checkpoint_bytes": prep.get("checkpoint_bytes", 0),
                "launch_s": round(time.monotonic() - started, 3), "launch_steps": prep["steps"], "notes": prep["notes"],
                "wheelhouse_bytes": prep["wheelhouse_bytes"]}

    async def poll(self, job: Job) -> Poll:
        self._loop = asyncio.get_running_loop()
        try:
            await self.remote()
            out = await self._looks().ask(self._adir(job))
        except TransportError as exc:
            return Poll("unreachable", detail=str(exc).splitlines()[0])
        except ValueError as exc:  # a garbled answer: ask again next time
            return Poll("unreachable", detail=f"unexpected answer from {self.name}: {exc}")
        return self._poll_answer(job, out)

    def _looks(self) -> LookBatch:
        """Every live job's poll on this host in one command."""
        async def run(script: str):
            return await self.transport.run(script, timeout=60)
        return self.gathered("look", lambda: LookBatch(run, LOOK))

    def _poll_answer(self, job: Job, out: str) -> Poll:
        first, _, body = out.partition("\n")
        if first.startswith("gen "):  # the newest frozen checkpoint generation (ckpt-gens/)
            gen = first[4:].strip()
            poll = self._state_answer(job, body)
            return dataclasses.replace(poll, checkpoint=int(gen)) if gen.isdigit() else poll
        return self._state_answer(job, out)

    def _state_answer(self, job: Job, out: str) -> Poll:
        head, _, rest = out.partition("\n")
        if head == "exit":
            try:
                doc = json.loads(rest)
            except ValueError:
                doc = {"code": None, "error": "exit.json could not be read"}
            return exited_poll(doc)
        if head == "alive":
            return Poll("running") if rest.strip() == "running" else \
                Poll("provisioning", detail=uvenv.phase_detail(rest))
        if head == "nopid":
            if time.time() - job.handle.get("launched_at", 0) > START_GRACE_S:
                return Poll("lost", detail=f"the launcher never started on {self.name}")
            return Poll("provisioning", detail="starting")
        if head == "dead":
            return Poll("lost", vanished=True, detail=f"the launcher on {self.name} is gone and left no "
                        "exit record: the session ended")
        return Poll("unreachable", detail=f"unexpected answer from {self.name}: {out[:100]!r}")

    def is_ours(self, job: Job) -> bool:
        """Is the recorded pid on the host still this attempt's launcher? Called from a worker
        thread by the supervisor: the check runs on the supervisor's loop and connection."""
        if self._loop is None or not self._loop.is_running():
            return True
        fut = asyncio.run_coroutine_threadsafe(self._is_ours(job), self._loop)
        try:
            return fut.result(timeout=60)
        except Exception:  # noqa: BLE001 - unsure is not "someone else's": keep watching it
            return True

    async def _is_ours(self, job: Job) -> bool:
        adir = self._adir(job)
        r = await self.transport.run(
            f'A={quote(adir)}; pid=$({_PID} "$A/pid" 2>/dev/null); '
            f'[ -n "$pid" ] && ps -o args= -p "$pid" 2>/dev/null; true', timeout=60)
        return not r.out.strip() or f"{adir}/spec.json" in r.out

    async def _signal(self, job: Job, sig: str) -> None:
        await self.remote()
        await self.transport.run(
            f'A={quote(self._adir(job))}; pg=$({PGID_OF} "$A/pid" 2>/dev/null); '
            f'if [ -n "$pg" ]; then kill -s {sig} -- "-$pg" 2>/dev/null; fi; true', timeout=60)

    async def cancel(self, job: Job, force: bool = False) -> None:
        await self.kill_attempt(job, force)

    async def request_checkpoint(self, job: Job) -> None:
        await self.remote()
        await self.transport.run(f": > {quote(self.job_dir(job) + '/ctl/checkpoint')}", timeout=60)
        await self._signal(job, "USR1")
