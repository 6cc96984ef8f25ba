"""The `local` target: this machine, no account needed.

Each job gets a folder under the data dir holding its unpacked bundle, outputs, checkpoints
and log; each attempt gets a sub-folder with its spec, pid, phase and exit status, written by
`core/runtime/launch.py`, which runs the job detached. Everything the supervisor needs to
re-adopt a job after a crash is in those files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from core import paths
from core.errors import disk_full_guard
from core.packaging import requirements
from core.packaging import objects
from core.packaging.safe_extract import OutputCaps, safe_copy_tree
from core.providers.gpuprobe import forget_sandbox_verdict, local_gpus, sandbox_verdict
from core.runtime import ckptscan, diskspace, jobprocs, uvenv
from core.runtime import workdir as workdir_files
from core.runtime import files as runtime_files
from core.packaging import checkpoints
from core.jobs.store import Job
from core.providers.base import Poll, TargetInfo, exited_poll
from core.providers.spec import launch_spec, local_data

START_GRACE_S = 30.0


def base_python() -> str:
    """The machine's own Python (not gpu-router's venv), so job envs see its site packages."""
    return getattr(sys, "_base_executable", None) or sys.executable


def dependency_spec(job: Job, python: str) -> dict | None:
    """The launcher's `deps` for this job: the project's dependencies as pip reads them
    (core.packaging.requirements, from the bundle, as every target reads them), hashed with
    this machine's Python."""
    deps = requirements.bundle_dependencies(objects.manifest_file(job.bundle_hash),
                                            job.plan.get("workdir") or "", job.plan.get("extras") or ())
    return requirements.deps_spec(deps, python=python, version=sys.version,
                                  venvs_dir=str(paths.venvs_dir()), uv=requirements.home_uv())


async def _in_thread(fn: Any, /, *args: Any) -> Any:
    """`asyncio.to_thread`, with asyncio imported here: a submit, which only probes this
    target, then never imports it (~25 ms of a busy machine's start)."""
    import asyncio

    return await asyncio.to_thread(fn, *args)


def _withheld(items: list[dict]) -> dict[str, list[str]]:
    """Each local data set's files a job must not read (credentials, links, pipes: what the
    bundle's judge withholds), judged again now, as the set is read in place: the sandbox
    covers each of them (core/runtime/boundary.py)."""
    from core.packaging.local_data import list_data

    out: dict[str, list[str]] = {}
    for item in items:
        listing = list_data(Path(item["source"]), item["name"])
        if listing.withheld:
            out[item["source"]] = [w["path"] for w in listing.withheld]
    return out


class LocalProvider:
    kind = "local"
    # read_metrics reads the job's own jobs/<id>/metrics.jsonl, which every attempt at home
    # appends to (core/engine/jobsteps.py: metrics_offset_for)
    metrics_at_home = True

    def __init__(self, name: str = "local", max_jobs: int = 1, python: str | None = None,
                 gpus: list[dict] | None = None, caps: OutputCaps | None = None,
                 network: bool = True) -> None:
        self.name = name
        self.max_jobs = max_jobs
        self.python = python or base_python()
        self.declared_gpus = gpus  # from the user config; else probed
        self.caps = caps or OutputCaps()  # the same caps as every remote target
        self.network = network  # `network: false` in the target's options: no job gets any
        self._pids: dict[Path, dict] = {}
        self._running: set[Path] = set()

    # -- paths ------------------------------------------------------------------------------

    @staticmethod
    def job_dir(job: Job) -> Path:
        return paths.jobs_dir() / job.id

    def log_path(self, job: Job) -> Path:
        return self.job_dir(job) / "job.log"

    def metrics_path(self, job: Job) -> Path:
        return self.job_dir(job) / "metrics.jsonl"

    def attempt_dir(self, job: Job, attempt: int | None = None) -> Path:
        return self.job_dir(job) / "attempts" / str(attempt or job.attempt)

    # -- the interface ----------------------------------------------------------------------

    async def probe(self) -> TargetInfo:
        return self.probe_now()

    def forget_probe(self) -> None:
        """`gpu targets probe local`: the sandbox is tried again, not remembered."""
        forget_sandbox_verdict()

    def probe_now(self) -> TargetInfo:
        gpus = self.declared_gpus
        if gpus is None:
            gpus = [{"name": g.name, "memory_gb": g.memory_gb} for g in local_gpus()]
        sandbox = sandbox_verdict()  # remembered a few minutes; the launch asks afresh
        return TargetInfo(name=self.name, kind=self.kind, available=True, gpus=gpus,
                          max_jobs=self.max_jobs, unsandboxed_why=None if sandbox["ok"] else sandbox["why"])

    async def launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        return await _in_thread(self._launch, job, env_secrets)

    def _launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        with disk_full_guard(self.job_dir(job)):
            return self._prepare_and_start(job, env_secrets)

    def _prepare_and_start(self, job: Job, env_secrets: dict[str, str]) -> dict:
        jdir = self.job_dir(job)
        code = jdir / "code"
        if not (jdir / ".code-ready").exists():
            shutil.rmtree(code, ignore_errors=True)
            donor = job.handle.get("code_from")  # an ended job's folder, taken over if untouched
            reuse = paths.jobs_dir() / donor / "code" if donor and donor != job.id else None
            objects.materialize(job.bundle_hash, code, reuse)
            (jdir / ".code-ready").touch()
        runtime = jdir / "runtime"
        if not (runtime / "gpu" / "__init__.py").exists():
            for src, rel in runtime_files():
                (runtime / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, runtime / rel)
        dirs = {name: jdir / name for name in ("out", "ckpt", "ckpt-gens", "ctl", "data")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        (dirs["ctl"] / "checkpoint").unlink(missing_ok=True)
        if job.handle.get("restore_checkpoint") and not (self.attempt_dir(job) / "started").exists():
            checkpoints.restore_local(job.id, dirs["ckpt"], env_secrets)  # moved here: from the home copy
        for item in local_data(job):
            link = dirs["data"] / item["name"]
            if not link.is_symlink():
                link.symlink_to(item["source"])  # local data is read in place, not copied
        workdir = code / job.plan.get("workdir", "")
        attempt = job.attempt
        adir = self.attempt_dir(job, attempt)
        adir.mkdir(parents=True, exist_ok=True)
        spec = launch_spec(job, job_dir=str(jdir), attempt_dir=str(adir), workdir=str(workdir),
                           runtime_dir=str(runtime), python=self.python,
                           deps=dependency_spec(job, self.python), env_secrets=env_secrets,
                           frozen_checkpoints=True)
        spec["sandbox"] = self.sandbox_request(job)
        spec_path = adir / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        env = {**os.environ, **env_secrets}  # secret values travel in memory, never on disk
        proc = subprocess.Popen([self.python, str(runtime / "launch.py"), str(spec_path)],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        _, err = proc.communicate(timeout=60)  # the launcher forks and returns at once
        if proc.returncode != 0:
            raise RuntimeError(f"the launcher failed: {err.decode(errors='replace').strip()[-500:]}")
        return {"attempt": attempt, "attempt_dir": str(adir), "launched_at": time.time()}

    def sandbox_request(self, job: Job) -> dict:
        """What the launcher's sandbox (core/runtime/boundary.py) hides and lets through for
        this job: gpu-router's home and config and the person's home are hidden wherever they
        lie; local data sets are read in place, so their sources show (read-only); the network
        is off where the request or this target says `network: false`. Where no sandbox can be
        made, only a person's job, or one a person approved with that reason, runs without."""
        from core.packaging.buildbox import hidden  # one list for the job and its builds

        hide = hidden()
        items = local_data(job)
        data = [item["source"] for item in items]
        network = bool(job.request.get("network", True)) and self.network
        held_for_it = any(h.get("rule") == "sandbox" for h in job.plan.get("holds") or [])
        trusted = job.plan.get("submitted_by") == "person" or held_for_it
        return {"hide": hide, "data": data, "withheld": _withheld(items), "network": network,
                "fallback": "warn" if trusted else "refuse"}

    async def poll(self, job: Job) -> Poll:
        # a few stats and small reads of local files: cheaper inline than via a thread
        return self._poll(job)

    def _pid(self, adir: Path) -> dict | None:
        """The launcher's pid record, read once per attempt (it never changes)."""
        doc = self._pids.get(adir)
        if doc is None:
            doc = _read_json(adir / "pid")
            if doc is not None:
                self._pids[adir] = doc
        return doc

    def _poll(self, job: Job) -> Poll:
        adir = Path(job.handle.get("attempt_dir") or self.attempt_dir(job))
        exit_doc = _read_json(adir / "exit.json")
        if exit_doc is not None:
            self._pids.pop(adir, None)
            self._running.discard(adir)
            return exited_poll(exit_doc)
        pid = self._pid(adir)
        if pid is None:
            launched = job.handle.get("launched_at", 0)
            if time.time() - launched > START_GRACE_S:
                return Poll("lost", detail="the launcher never started")
            return Poll("provisioning", detail="starting")
        if jobprocs.exists(pid["pid"]):
            if adir in self._running:
                return Poll("running", checkpoint=_newest_generation(self.job_dir(job)))
            phase = (adir / "phase").read_text().strip() if (adir / "phase").exists() else "installing"
            if phase == "running":
                self._running.add(adir)
                return Poll("running", checkpoint=_newest_generation(self.job_dir(job)))
            return Poll("provisioning", detail=uvenv.phase_detail(phase))
        exit_doc = _read_json(adir / "exit.json")  # it may have ended between the two reads
        if exit_doc is not None:
            return exited_poll(exit_doc)
        if diskspace.is_low(self.job_dir(job)):  # it could not even write its exit status
            return Poll("lost", detail=diskspace.disk_full_text(self.job_dir(job)))
        return Poll("lost", vanished=True, detail=f"the launcher on {self.name} is gone and left no "
                    "exit record: the session ended")

    def is_ours(self, job: Job) -> bool:
        """Is the recorded pid still our launcher for this attempt (not a reused pid)?"""
        adir = Path(job.handle.get("attempt_dir") or self.attempt_dir(job))
        pid = _read_json(adir / "pid")
        if pid is None or not jobprocs.exists(pid["pid"]):
            return False
        args = jobprocs.process_args(pid["pid"])
        return args is not None and (args == "" or pid["tag"] in args)

    async def read_metrics(self, job: Job, offset: int) -> tuple[bytes, int]:
        path = self.metrics_path(job)
        try:
            if path.stat().st_size == offset:
                return b"", offset  # the common case: nothing new, one stat
        except FileNotFoundError:
            return b"", offset
        return await _in_thread(_read_from, path, offset)

    async def cancel(self, job: Job, force: bool = False) -> None:
        """Every process of the attempt, however it detached: the launcher's own kill routine
        (the one `launch.py --kill` runs on remote hosts), called in-process here."""
        adir = Path(job.handle.get("attempt_dir") or self.attempt_dir(job))
        await _in_thread(jobprocs.kill_attempt, str(adir), force, str(self.log_path(job)))

    async def request_checkpoint(self, job: Job) -> None:
        ctl = self.job_dir(job) / "ctl"
        ctl.mkdir(parents=True, exist_ok=True)
        (ctl / "checkpoint").touch()
        self._signal(job, signal.SIGUSR1)

    def _signal(self, job: Job, sig: int) -> None:
        adir = Path(job.handle.get("attempt_dir") or self.attempt_dir(job))
        pid = self._pid(adir)
        if pid is not None:
            jobprocs.signal_group(pid, sig)  # not once the launcher is gone: its group may be reused

    async def read_exit(self, job: Job) -> dict | None:
        """The attempt's exit record (exit.json), as the launcher wrote it."""
        adir = Path(job.handle.get("attempt_dir") or self.attempt_dir(job))
        return await _in_thread(_read_json, adir / "exit.json")

    async def fetch_outputs(self, job: Job, dest: Path) -> list[str]:
        return await _in_thread(self._fetch_outputs, job, dest)

    def _fetch_outputs(self, job: Job, dest: Path) -> list[str]:
        """out/ and the log and metrics, by the same rules and caps as a remote archive: the job
        owned these files, so no link is followed (out/ itself included) and nothing unbounded
        is copied."""
        jdir = self.job_dir(job)
        record = jobprocs.read_record(job.handle.get("attempt_dir") or str(self.attempt_dir(job)))
        if record and record.get("cgroup"):  # its launcher was killed before it could
            jobprocs.cgroup_remove(record["cgroup"])
        notes = safe_copy_tree(jdir / "out", dest, caps=self.caps)
        notes += safe_copy_tree(jdir, dest, caps=self.caps, only=("job.log", "metrics.jsonl"))
        return notes


    async def checkpoint_scan(self, job: Job) -> dict:
        """The job's ckpt/ listed with hashes, by the same code a remote host runs."""
        return await _in_thread(ckptscan.scan, str(self.job_dir(job) / "ckpt"), self.caps.max_bytes)

    async def checkpoint_pack(self, job: Job, rels: list[str], archive: Path, generation: str | None = None,
                              progress: Any = None) -> dict:
        return await _in_thread(ckptscan.pack, str(self.job_dir(job) / "ckpt"), str(archive), rels,
                                       generation)

    async def fetch_paths(self, job: Job, rels: list[str], archive: Path, caps: OutputCaps) -> dict:
        """`gpu fetch`: the named paths of the job's working folder, packed by the same code
        as on a remote host, so home unpacks both by one set of rules."""
        jdir = self.job_dir(job)
        if not jdir.is_dir():
            return {"gone": True}
        inner = f"code/{job.plan.get('workdir') or ''}".rstrip("/")
        return await _in_thread(workdir_files.pack, str(jdir), inner, rels, str(archive),
                                       caps.max_bytes, caps.max_files)


def _newest_generation(jdir: Path) -> int | None:
    """The newest checkpoint generation frozen in the job's ckpt-gens/ (names only)."""
    try:
        names = [n for n in os.listdir(jdir / "ckpt-gens") if n.isdigit()]
    except OSError:
        return None
    return int(max(names)) if names else None


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_from(path: Path, offset: int) -> tuple[bytes, int]:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < offset:  # truncated: start again from the top
                offset = 0
            if size == offset:
                return b"", offset
            f.seek(offset)
            data = f.read(min(size - offset, 8 << 20))
    except FileNotFoundError:
        return b"", offset
    cut = data.rfind(b"\n") + 1  # only whole lines; the rest waits for its newline
    return data[:cut], offset + cut
