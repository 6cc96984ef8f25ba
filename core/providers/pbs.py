"""The `pbs` target: PBS Pro / OpenPBS (or Torque) through qsub, qstat and qdel.

It shares everything with the Slurm target (the upload cache, the job folder, the batch script
with its checkpoint trap, launch.py in the foreground) and differs only in the scheduler's
commands. PBS has no "signal me N seconds before the walltime", so the batch script starts a
timer that sends the same USR1 itself.

PBS cannot run on the machines this project is tested on (it is packaged neither in Debian nor
on PyPI): this target is tested against recorded qsub/qstat/qdel output in PBS Pro's documented
formats (`qstat -x -f -F json`, and the `key = value` text of `qstat -f` for Torque), replayed by
stand-in commands; it has not run against a live PBS server. See docs/targets/ssh-slurm-pbs.md.

States: Q, H, W, T, S, M -> provisioning (with the job's comment); R, E, B -> running; F/X
(finished, kept with -x) -> exited with Exit_status, where a walltime kill or a node failure is
a session that ended (resumed from the checkpoint) rather than a failure.
"""

from __future__ import annotations

import json

from core.jobs.store import Job
from core.transport.base import Transport, TransportError, quote
from core.providers.base import Poll, TargetInfo, exited_poll
from core.providers.batch import SchedulerProvider, job_name

WALLTIME_CODES = {-29, -11}  # JOB_EXEC_KILL_WALLTIME (PBS Pro), Torque's walltime kill
NODE_FAIL_CODES = {-3, -8}   # JOB_EXEC_RETRY, JOB_EXEC_NODE_FAIL style codes: run it again


def parse_qstat_json(text: str) -> dict[str, dict]:
    """`qstat -x -f -F json ID...`: {job id: attributes}."""
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    jobs = doc.get("Jobs") if isinstance(doc, dict) else None
    return {str(k): v for k, v in (jobs or {}).items() if isinstance(v, dict)}


def parse_qstat_text(text: str) -> dict[str, dict]:
    """`qstat -f ID...` (Torque, older PBS): blocks of `Job Id: X` then `key = value` lines,
    long values continued on tab-indented lines."""
    jobs: dict[str, dict] = {}
    current: dict | None = None
    last = None
    for raw in text.splitlines():
        if raw.startswith("Job Id:"):
            current = jobs.setdefault(raw.split(":", 1)[1].strip(), {})
            last = None
        elif current is not None and " = " in raw and not raw.startswith("\t"):
            key, _, value = raw.strip().partition(" = ")
            current[key] = value
            last = key
        elif current is not None and last and raw.startswith("\t"):
            current[last] += raw.strip()
    return jobs


def map_job(attrs: dict, exit_doc: dict | None, time_signal: bool) -> Poll:
    state = str(attrs.get("job_state", "")).upper()
    comment = str(attrs.get("comment", ""))
    if state in ("Q", "H", "W", "T", "S", "M", "U"):
        why = {"Q": "queued", "H": "held", "W": "waiting for its start time", "T": "moving",
               "S": "suspended", "M": "moved", "U": "suspended"}[state]
        # suspended (S, U) is not waiting to start: it ran and will go on
        return Poll("provisioning", detail=f"queued: {comment or why}", queued=state not in ("S", "U"))
    if state in ("R", "E", "B"):
        return Poll("running")
    if state in ("F", "X", "C"):  # finished (PBS Pro keeps it with -x; Torque says C)
        code = attrs.get("Exit_status", attrs.get("exit_status"))
        try:
            code = int(code) if code is not None else None
        except (TypeError, ValueError):
            code = None
        low = comment.lower()
        if code in WALLTIME_CODES or "walltime" in low:
            return Poll("session_ended", detail=f"pbs: the walltime was reached ({comment or code})")
        if code in NODE_FAIL_CODES or ("node" in low and ("fail" in low or "down" in low)):
            return Poll("session_ended", detail=f"pbs: its node failed ({comment or code})")
        if time_signal and (exit_doc or {}).get("code", code) == 0:
            return Poll("session_ended", detail="saved its checkpoint and stopped before the walltime")
        if exit_doc is not None:
            return exited_poll(exit_doc)
        if code is not None and code >= 256:  # PBS Pro: killed by signal (code - 256)
            return Poll("exited", exit_code=-(code - 256),
                        detail=f"killed by signal {code - 256}" + (f" ({comment})" if comment else ""))
        return Poll("exited", exit_code=code, detail=comment)
    return Poll("running", detail=f"pbs state {state or '?'}")


def walltime(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


class PBSProvider(SchedulerProvider):
    kind = "pbs"
    scheduler = "PBS"
    id_key = "pbs_job_id"
    script_name = "job.pbs"
    stores_env = "stores a submitted job's environment on its server"
    timer = True
    cancel_stat = "qdel"

    def __init__(self, name: str, transport: Transport, **kw) -> None:
        super().__init__(name, transport, **kw)
        self.stats = {"qstat": 0, "qsub": 0, "qdel": 0}
        self._wanted: set[str] = set()
        self._asked: set[str] = set()

    async def _fetch_queue(self) -> dict:
        ids = sorted(self._wanted)
        self._asked = set(ids)
        if not ids:
            return {}
        self.stats["qstat"] += 1
        torque = self.options.get("pbs_flavor") == "torque"
        cmd = "qstat -f " if torque else "qstat -x -f -F json "
        command, mark, dirs = self.gens.wrap(self._env() + cmd + " ".join(quote(i) for i in ids) + " 2>&1")
        r = await self.transport.run(command, timeout=60)
        out = self.gens.read(r.out, mark, dirs)
        jobs = parse_qstat_text(out) if torque else parse_qstat_json(out)
        if r.code != 0 and not jobs and "Unknown Job Id" not in out:
            raise TransportError(f"qstat failed: {out.strip()[:300]}")
        return jobs

    async def probe_fresh(self) -> TargetInfo:
        r = await self.transport.run(self._env() + "qstat -Q 2>&1", timeout=60)
        if r.code != 0:
            return self._info(False, f"qstat -Q failed: {r.out.strip()[:300]}")
        facts = {"queues": r.out.strip().splitlines()[2:] if r.out.count("\n") > 2 else []}
        return self._info(True, details=facts)

    def directives(self, job: Job, res: dict) -> list[str]:
        name = "g" + job_name(job)[4:19]  # PBS names: short, starting with a letter
        d = [f"#PBS -N {name}", "#PBS -r n", "#PBS -j oe"]
        if res.get("time_minutes"):
            d.append(f"#PBS -l walltime={walltime(int(res['time_minutes']))}")
        if res.get("partition"):
            d.append(f"#PBS -q {res['partition']}")
        if self.options.get("account"):
            d.append(f"#PBS -A {self.options['account']}")
        cpus, gpus = int(res.get("cpus") or 1), int(res.get("gpus") or 0)
        if self.options.get("pbs_flavor") == "torque":
            spec = f"nodes=1:ppn={cpus}" + (f":gpus={gpus}" if gpus else "")
            d.append(f"#PBS -l {spec}")
            if res.get("memory_gb"):
                d.append(f"#PBS -l mem={max(1, int(float(res['memory_gb']) * 1024))}mb")
        else:
            spec = f"select=1:ncpus={cpus}" + (f":ngpus={gpus}" if gpus else "")
            if res.get("memory_gb"):
                spec += f":mem={max(1, int(float(res['memory_gb']) * 1024))}mb"
            d.append(f"#PBS -l {spec}")
        return d

    async def submit(self, job: Job, prep: dict, secrets_in: str, secrets_input: bytes | None) -> str:
        self.stats["qsub"] += 1
        r = await self.transport.run(
            self._env() + secrets_in + f"cd {quote(prep['adir'])} && qsub "
            + ("-V " if secrets_in else "") + f"-o {quote(prep['jdir'] + '/job.log')} {self.script_name}",
            input=secrets_input, check=f"qsub on {self.name}", retry=False)
        pbs_id = r.out.strip().splitlines()[-1].strip() if r.out.strip() else ""
        if not pbs_id or " " in pbs_id:
            raise RuntimeError(f"qsub on {self.name} answered {r.out.strip()[:200]!r}, not a job id")
        self._wanted.add(pbs_id)
        return pbs_id

    async def queue_poll(self, job: Job, sid: str) -> Poll:
        self._wanted.add(sid)
        jobs = await self.queue.get()
        if sid not in jobs and sid not in self._asked:  # new since that query: ask again, once
            jobs = await self.queue.get(fresh=True)
        attrs = jobs.get(sid)
        if attrs is None:  # purged from the server's history: what the attempt recorded
            return await self.from_files(job, sid)
        state = str(attrs.get("job_state", "")).upper()
        if state in ("F", "X", "C"):
            self._wanted.discard(sid)
            doc, marker = await self.attempt_files(job)
            return map_job(attrs, doc, marker)
        return map_job(attrs, None, False)

    def cancel_command(self, sid: str, force: bool) -> str:
        # as for Slurm: the scheduler, then the launcher's kill routine for what left the job
        return ("qdel -W force " if force else "qdel ") + quote(sid)
