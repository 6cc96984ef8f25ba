"""The `slurm` target: a cluster's login node, over SSH, or this machine (`local: true`).

Each attempt is one batch job: the bundle, data and runtime are uploaded into the cache on
the login node (shared with the compute nodes, as home folders are), and an sbatch script
generated from the request and the target (`core.providers.batch`) runs launch.py in the
foreground on the compute node. It asks for `--gpus`/`--gres=gpu:TYPE:N`, `--cpus-per-task`,
`--mem`, `--time` (the hours estimate plus a margin, or `time_minutes`), `--partition`,
`--account`, loads `modules`, optionally runs in a `container`, and carries
`--signal=B:USR1@<lead>` so `gpu.should_checkpoint()` turns true before the time limit.
The job's name is `gpu-<short id>-<attempt>-<name>`, which is also how a restarted supervisor
finds a job it submitted but never recorded (no second sbatch for the same attempt).

Status comes from ONE `squeue` per cycle for all of the target's jobs (`QueueCache`), then
`scontrol show job` (and `sacct` where accounting exists) for a job squeue no longer lists,
then the attempt's exit.json. States map onto the router's:

    PENDING, CONFIGURING, REQUEUED...  -> provisioning, queued, with the queue reason ("queued: Resources")
    RUNNING, COMPLETING, SUSPENDED     -> running
    COMPLETED                          -> exited with the job's status (exit.json)
    FAILED, OUT_OF_MEMORY, BOOT_FAIL   -> exited non-zero
    TIMEOUT, PREEMPTED, NODE_FAIL      -> session_ended: the supervisor resumes the job from its
                                          checkpoint (a new attempt), it did not fail
    CANCELLED                          -> exited (cancelled)

A job that saved and exited 0 after the time-limit signal also counts as a session that ended.
Slurm keeps a submitted job's environment in its state folder, so secrets are refused unless
the target says `pass_secrets: true` (they then reach sbatch's environment through stdin, never
a file we write or a command line).
"""

from __future__ import annotations


from core.jobs.store import Job
from core.transport.base import Transport, TransportError, quote
from core.providers.base import Poll, TargetInfo, exited_poll
from core.providers.batch import SchedulerProvider, job_name, signal_lead_s

PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
           "SPECIAL_EXIT", "STAGE_OUT", "SIGNALING"}
RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING"}
FAILED = {"FAILED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED"}
ENDED = {"TIMEOUT": "the time limit was reached", "PREEMPTED": "preempted by the scheduler",
         "NODE_FAIL": "its node failed"}
NOT_FOUND = "gone"


def map_state(state: str, reason: str, exit_doc: dict | None, time_signal: bool,
              exit_code: int | None = None) -> Poll:
    """One Slurm job state (and what the attempt folder says) as a Poll."""
    state = state.split()[0].rstrip("+") if state else ""
    if state in PENDING:
        why = reason if reason and reason not in ("None", "(null)") else "waiting"
        return Poll("provisioning", detail=f"queued: {why}", queued=True)
    if state in RUNNING:
        return Poll("running", detail=state.lower() if state != "RUNNING" else "")
    if state in ENDED:
        return Poll("session_ended", detail=f"slurm {state}: {ENDED[state]}")
    code = exit_doc.get("code") if exit_doc else exit_code
    if state == "COMPLETED":
        if time_signal and (code in (0, None)):
            return Poll("session_ended", detail="saved its checkpoint and stopped before the time limit")
        if exit_doc:
            return exited_poll(exit_doc)
        return Poll("exited", exit_code=0 if code is None else code)
    if state in FAILED:
        if code in (0, None):
            code = 1
        detail = {"OUT_OF_MEMORY": "out of memory (raise memory_gb)", "BOOT_FAIL": "its node failed to boot",
                  "DEADLINE": "missed its deadline"}.get(state, (exit_doc or {}).get("error") or f"slurm {state}")
        return Poll("exited", exit_code=code, detail=detail)
    if state == "CANCELLED":
        return Poll("exited", exit_code=code if code not in (0,) else None, detail="cancelled in Slurm")
    return Poll("running", detail=f"slurm state {state}")


def parse_squeue(text: str) -> dict[str, tuple[str, str]]:
    """`squeue -h -o %i|%T|%r` rows: {job id: (state, reason)}."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) >= 2 and parts[0]:
            out[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return out


def parse_scontrol(text: str) -> tuple[str, str, int | None] | None:
    """`scontrol -o show job ID`: (state, reason, exit code), or None for an unknown job."""
    fields = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    if "JobState" not in fields:
        return None
    code = None
    if ":" in fields.get("ExitCode", ""):
        try:
            code = int(fields["ExitCode"].split(":")[0])
        except ValueError:
            pass
    return fields["JobState"], fields.get("Reason", ""), code


def parse_sinfo(text: str) -> list[dict]:
    """`sinfo -h -o %P|%a|%G|%D|%t|%c|%m|%l` rows, one per partition (merged)."""
    parts: dict[str, dict] = {}
    for line in text.splitlines():
        cols = line.strip().split("|")
        if len(cols) < 8:
            continue
        name = cols[0].rstrip("*")
        p = parts.setdefault(name, {"name": name, "default": cols[0].endswith("*"), "up": cols[1] == "up",
                                    "gres": [], "nodes": 0, "states": [], "cpus": cols[5],
                                    "memory_mb": cols[6], "time_limit": cols[7]})
        if cols[2] not in ("(null)", "") and cols[2] not in p["gres"]:
            p["gres"].append(cols[2])
        try:
            p["nodes"] += int(cols[3])
        except ValueError:
            pass
        p["states"].append(cols[4])
    for p in parts.values():
        p["gpus"] = gres_gpus(p["gres"])
    return list(parts.values())


def gres_gpus(gres: list[str]) -> list[dict]:
    """GPU types and counts per node from gres strings like gpu:a100:4(S:0-1),gpu:2."""
    out = []
    for g in gres:
        for item in g.split(","):
            item = item.split("(")[0]
            bits = item.split(":")
            if bits[0] != "gpu":
                continue
            gtype, count = "gpu", 1
            if len(bits) == 2:
                count = _int(bits[1], 1)
            elif len(bits) >= 3:
                gtype, count = bits[1], _int(bits[2], 1)
            out.append({"type": gtype, "count": count})
    return out


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default


class SlurmProvider(SchedulerProvider):
    kind = "slurm"
    scheduler = "Slurm"
    id_key = "slurm_job_id"
    script_name = "job.sbatch"
    stores_env = "stores a submitted job's environment in its state folder"
    cancel_stat = "scancel"

    def __init__(self, name: str, transport: Transport, **kw) -> None:
        super().__init__(name, transport, **kw)
        self.stats = {"squeue": 0, "scontrol": 0, "sbatch": 0, "scancel": 0}

    async def _fetch_queue(self) -> dict:
        self.stats["squeue"] += 1
        command, mark, dirs = self.gens.wrap(
            self._env() + "squeue -h -t all -u \"$(id -un)\" -o '%i|%T|%r'")
        r = await self.transport.run(command, timeout=60)
        out = self.gens.read(r.out, mark, dirs)
        if r.code != 0:
            raise TransportError(f"squeue failed: {(r.err or out).strip()[:300]}")
        return parse_squeue(out)

    # -- probe ------------------------------------------------------------------------------

    async def probe_fresh(self) -> TargetInfo:
        r = await self.transport.run(
            self._env() + "sinfo -h -o '%P|%a|%G|%D|%t|%c|%m|%l'; echo '--'; "
            "squeue -h -t PENDING -o '%P' 2>/dev/null", timeout=60)
        if r.code != 0 and "--" not in r.out:
            return self._info(False, f"sinfo failed: {(r.err or r.out).strip()[:300]}")
        sinfo, _, pending = r.out.partition("--\n")
        partitions = parse_sinfo(sinfo)
        depth: dict[str, int] = {}
        for line in pending.split():
            for p in line.split(","):
                depth[p] = depth.get(p, 0) + 1
        for p in partitions:
            p["queued"] = depth.get(p["name"], 0)
        wanted = self.options.get("partition")
        chosen = next((p for p in partitions if p["name"] == wanted), None) if wanted else \
            next((p for p in partitions if p["default"]), partitions[0] if partitions else None)
        details = {"partitions": partitions, "partition": chosen["name"] if chosen else None}
        if chosen is None:
            why = f"partition {wanted!r} does not exist" if wanted else "no partitions"
            return self._info(False, why, details=details)
        gpus = [{"name": g["type"], "memory_gb": 0.0} for g in chosen["gpus"] for _ in range(g["count"])]
        if not chosen["up"]:
            return self._info(False, f"partition {chosen['name']} is down", gpus, details)
        return self._info(True, gpus=gpus, details=details)

    # -- launch -----------------------------------------------------------------------------

    def _gpu_type(self, res: dict, job: Job) -> str | None:
        asked = job.request.get("gpu")
        if not asked:
            return None
        cached = self._cached_probe()
        for p in (cached.details.get("partitions", []) if cached else []):
            for g in p.get("gpus", []):
                if asked.lower() in g["type"].lower():
                    return g["type"]
        return asked if all(c.isalnum() or c in "._-" for c in asked) else None

    def directives(self, job: Job, res: dict) -> list[str]:
        d = [f"#SBATCH --job-name={job_name(job)}", "#SBATCH --no-requeue", "#SBATCH --open-mode=append",
             f"#SBATCH --signal=B:USR1@{signal_lead_s(res.get('time_minutes'), self.options)}"]
        if res.get("time_minutes"):
            d.append(f"#SBATCH --time={int(res['time_minutes'])}")
        if res.get("partition"):
            d.append(f"#SBATCH --partition={res['partition']}")
        if self.options.get("account"):
            d.append(f"#SBATCH --account={self.options['account']}")
        if res.get("cpus"):
            d.append(f"#SBATCH --cpus-per-task={int(res['cpus'])}")
        if res.get("memory_gb"):
            d.append(f"#SBATCH --mem={max(1, int(float(res['memory_gb']) * 1024))}M")
        gpus = int(res.get("gpus") or 0)
        gtype = self._gpu_type(res, job)
        if gpus and gtype:
            d.append(f"#SBATCH --gres=gpu:{gtype}:{gpus}")
        elif gpus:
            d.append(f"#SBATCH --gpus={gpus}")
        return d

    async def submit(self, job: Job, prep: dict, secrets_in: str, secrets_input: bytes | None) -> str:
        name = job_name(job)
        # a job of this name is this attempt, submitted by a supervisor that died before it
        # could record the id: adopt it rather than submit a second one
        self.stats["sbatch"] += 1
        r = await self.transport.run(
            self._env() + f"existing=$(squeue -h -t all -u \"$(id -un)\" -n {quote(name)} -o %i | head -n1); "
            f"if [ -n \"$existing\" ]; then echo \"$existing\"; exit 0; fi; {secrets_in}"
            f"cd {quote(prep['adir'])} && sbatch --parsable --output={quote(prep['jdir'] + '/job.log')} "
            f"--chdir={quote(prep['adir'])} {self.script_name}",
            input=secrets_input, check=f"sbatch on {self.name}", retry=False)
        slurm_id = r.out.strip().splitlines()[-1].split(";")[0].strip()
        if not slurm_id.isdigit() and not slurm_id.replace("_", "").isdigit():
            raise RuntimeError(f"sbatch on {self.name} answered {r.out.strip()[:200]!r}, not a job id")
        return slurm_id

    # -- status -----------------------------------------------------------------------------

    async def queue_poll(self, job: Job, sid: str) -> Poll:
        queue = await self.queue.get()
        if sid not in queue and self.queue.wall_at < job.handle.get("launched_at", 0) + 1:
            queue = await self.queue.get(fresh=True)  # submitted after that query: ask again, once
        if sid not in queue:
            # submitted after the last query, or aged out of squeue: ask about it alone
            found = await self._scontrol(sid)
            if found is None:
                return await self.from_files(job, sid)
            state, reason, code = found
        else:
            (state, reason), code = queue[sid], None
        base = state.split()[0].rstrip("+")
        if base in PENDING or base in RUNNING or base in ENDED:
            return map_state(state, reason, None, False)
        doc, marker = await self.attempt_files(job)
        if doc is None and code is None:  # it ended before the launcher ran: Slurm's own code
            found = await self._scontrol(sid)
            code = found[2] if found else None
        return map_state(state, reason, doc, marker, code)

    async def _scontrol(self, sid: str) -> tuple[str, str, int | None] | None:
        self.stats["scontrol"] += 1
        r = await self.transport.run(self._env() + f"scontrol -o show job {quote(sid)} 2>&1", timeout=60)
        found = parse_scontrol(r.out) if r.code == 0 else None
        if found is None and "Invalid job id" not in r.out and r.code != 0:
            raise TransportError(f"scontrol failed: {r.out.strip()[:300]}")
        if found is None:
            r = await self.transport.run(
                self._env() + f"sacct -n -P -X -j {quote(sid)} -o State,ExitCode 2>/dev/null | head -n1",
                timeout=60)
            line = r.out.strip()
            if r.code == 0 and "|" in line:
                state, _, ec = line.partition("|")
                return state, "", _int(ec.split(":")[0], 0)
        return found

    # -- control ----------------------------------------------------------------------------

    def cancel_command(self, sid: str, force: bool) -> str:
        return ("scancel --signal=KILL --full " if force else "scancel ") + quote(sid)

    async def signal_checkpoint(self, job: Job) -> None:
        sid = job.handle.get("slurm_job_id")
        if sid:  # the batch shell's USR2 trap forwards USR1 to the job
            await self.transport.run(self._env() + f"scancel --batch --signal=USR2 {quote(sid)}", timeout=60)
