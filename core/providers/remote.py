"""What every target on another machine shares, whatever starts the job there (ssh, slurm, pbs).

The layout on the host, under the target's `root` (default `~/.gpu-router`, so it never
collides with the local target's folders):

    root/bundles/<hash>.tar.gz  (+ <hash>.ready)   each bundle, uploaded once per content hash
    root/data/<hash>            (+ <hash>.ready)   each data set, once per content hash
    root/runtime/<hash>/        (+ <hash>.ready)   launch.py and the `gpu` module
    root/venvs/<dep hash>/                         dependency envs, made by launch.py
    root/jobs/<job id>/{code,out,ckpt,ctl,data}/   one job; job.log, metrics.jsonl
    root/jobs/<job id>/attempts/<n>/               spec.json, pid, phase, exit.json

A cache entry counts only once its `.ready` marker exists, and the marker is written last (after
the upload's size was checked and it was moved into place), so an upload cut off halfway is
never taken as complete: the next launch uploads it again.

Logs are mirrored into the local `jobs/<id>/job.log` (`sync_log`), metrics are read from the
remote file by offset, and outputs come home as one archive unpacked by `core.packaging.safe_extract`.
A transport that cannot reach the host makes `poll` answer "unreachable": the supervisor waits
and retries; it never fails a job because a link dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
from abc import ABC, abstractmethod
import io
import json
import os
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, TypeVar

from core import paths
from core.runtime import RUNTIME_DIR as runtime_dir_path
from core.runtime import files as runtime_files
from core.packaging.local_data import DataListing, list_data
from core.packaging.safe_extract import OutputCaps, safe_extract
from core.packaging import checkpoints, requirements
from core.jobs.store import Job
from core.providers.spec import launch_spec, local_data
from core.transport.base import HostKeyError, Transport, TransportError, Unreachable, quote, remote_path_expr
from core.transport.local import LocalTransport
from core.providers.base import TargetInfo
from core.providers.lookbatch import Gather

G = TypeVar("G")
LOG_CHUNK = 4 << 20
METRICS_CHUNK = 8 << 20
PROBE_TTL_S = 30.0
PGID_OF = "sed -n 's/.*\"pgid\": *\\([0-9][0-9]*\\).*/\\1/p'"  # the pgid from a pid file
START_GRACE_S = 60.0
PRESENT_TTL_S = 300.0  # under core.engine.storage.MIN_AGE_S: gc never frees what we remember


def runtime_archive() -> tuple[str, bytes]:
    """The runtime (launcher, text filter, `gpu` module, the tracking modules and the job's
    sitecustomize: `core.runtime.files()`) as one small tar.gz, and a hash of it."""
    files = runtime_files()
    h = hashlib.sha256()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path, rel in files:
            data = path.read_bytes()
            h.update(rel.encode() + b"\0" + data + b"\0")
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return h.hexdigest()[:24], buf.getvalue()


# the runtime's sibling modules a script sent as source imports (`import nofollow`)
RUNTIME_NEEDS = {"workdir.py": ("nofollow",), "ckptscan.py": ("nofollow",)}


def runtime_source(module: str) -> str:
    """The source of a runtime script to run as `python -c`, with the sibling modules it
    imports registered first (each executed as its own module), so one choke point
    (nofollow.py) serves the host as it serves this machine, with no upload."""
    source = (runtime_dir_path / module).read_text()
    needs = RUNTIME_NEEDS.get(module, ())
    if not needs:
        return source
    lines = ["import sys as _s, types as _t"]
    for name in needs:
        text = (runtime_dir_path / f"{name}.py").read_text()
        lines += [f"_m = _t.ModuleType({name!r}); _s.modules[{name!r}] = _m",
                  f"exec(compile({text!r}, {name + '.py'!r}, 'exec'), _m.__dict__)"]
    lines.append(f"exec(compile({source!r}, {module!r}, 'exec'), {{'__name__': '__main__'}})")
    return "\n".join(lines) + "\n"


def parse_gpus(text: str) -> list[dict]:
    """nvidia-smi rows (index, name, total, free) as the dicts TargetInfo holds."""
    from core.providers.gpuprobe import parse_nvidia_smi

    return [g.to_json() for g in parse_nvidia_smi(text)]


HOST_FACTS = r"""
printf 'load '; (cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || sysctl -n vm.loadavg 2>/dev/null | tr -d '{}' || echo '?') | head -n1
printf 'cpus '; (nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?') | head -n1
printf 'mem '; (awk '/MemAvailable/ {printf "%.1f\n", $2/1048576}' /proc/meminfo 2>/dev/null || echo '?') | head -n1
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv,noheader,nounits 2>/dev/null | sed 's/^/gpu /'
fi
"""


def parse_host_facts(text: str) -> dict:
    facts: dict[str, Any] = {"gpus": []}
    gpu_rows = []
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "gpu":
            gpu_rows.append(value)
        elif key in ("load", "cpus", "mem"):
            facts[key] = value.strip()
    facts["gpus"] = parse_gpus("\n".join(gpu_rows))
    return facts


def run_sync(coro_fn) -> Any:
    """Run an async function to completion from synchronous code, even inside a running loop
    (a fresh loop in a short-lived thread), closing the connections it opened."""
    from core.transport.ssh import close_all

    box: dict[str, Any] = {}

    async def wrapped() -> Any:
        try:
            return await coro_fn()
        finally:
            await close_all()

    def target() -> None:
        try:
            box["value"] = asyncio.run(wrapped())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


class RemoteProvider(ABC):
    """A target reached through a Transport; subclasses start and watch the job."""

    kind = "remote"

    @classmethod
    def from_config(cls, t):
        """A provider of this kind from a user-config target (core.config.user.TargetConfig)."""
        o = t.options
        return cls(t.name, make_transport(t.name, o), root=o.get("root") or "~/.gpu-router",
                   python=o.get("python") or "python3", max_jobs=t.max_jobs, gpus=t.gpus, options=o)

    def __init__(self, name: str, transport: Transport, *, root: str = "~/.gpu-router",
                 python: str = "python3", max_jobs: int = 1, gpus: list[dict] | None = None,
                 options: dict | None = None) -> None:
        self.name = name
        self.transport = transport
        self.root_option = root
        self.python = python
        self.max_jobs = max_jobs
        self.declared_gpus = gpus
        self.options = dict(options or {})
        self.enabled = True
        self._gathers: dict[str, tuple[asyncio.AbstractEventLoop, Any]] = {}
        # how long the host may be unreachable before the job's session counts as lost
        grace = self.options.get("unreachable_grace_s", 600)
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace <= 0:
            from core.errors import UserError

            raise UserError(f"targets.{name}.unreachable_grace_s must be a number of seconds above 0",
                            fix="for example unreachable_grace_s: 900")
        self.unreachable_grace_s = float(grace)
        self._remote: dict | None = None
        self._remote_task: asyncio.Task | None = None
        self._present: dict[str, float] = {}  # marker -> when it was last seen
        self._locks: dict[str, asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- where things live ------------------------------------------------------------------

    async def remote(self) -> dict:
        """The host's absolute root, Python and its version (asked once, then remembered).

        Every job's first step asks at the same moment: they share one question (a task they
        all await, so they all resume together) rather than each asking the host."""
        if self._remote is not None:
            return self._remote
        loop = asyncio.get_running_loop()
        task = self._remote_task
        if task is None or task.get_loop() is not loop or (task.done() and task.exception()):
            task = self._remote_task = loop.create_task(self._ask_remote())
        return await asyncio.shield(task)

    async def _ask_remote(self) -> dict:
        if self._remote is None:
            script = f"""set -e
root={remote_path_expr(self.root_option)}
mkdir -p "$root/bundles" "$root/data" "$root/runtime" "$root/venvs" "$root/jobs"
cd "$root"; pwd -P
py=$(command -v {quote(self.python)}) || {{ echo "no {self.python} on the host's PATH (target option python)" >&2; exit 3; }}
printf '%s\\n' "$py"
"$py" -c 'import sys; print(sys.version.split()[0])'
"""
            r = await self.transport.run(script, check=f"preparing {self.root_option} on {self.name}")
            lines = r.out.splitlines()
            if len(lines) < 3:
                raise TransportError(f"unexpected answer from {self.name}: {r.out[:200]!r}")
            self._remote = {"root": lines[0], "python": lines[1], "version": lines[2]}
        return self._remote

    def _root(self) -> str:
        assert self._remote is not None
        return self._remote["root"]

    def job_dir(self, job: Job) -> str:
        return f"{self._root()}/jobs/{job.id}"

    def attempt_dir(self, job: Job, attempt: int | None = None) -> str:
        return f"{self.job_dir(job)}/attempts/{attempt or job.attempt}"

    def _adir(self, job: Job) -> str:
        return job.handle.get("attempt_dir") or self.attempt_dir(job)

    def local_dir(self, job: Job) -> Path:
        return paths.jobs_dir() / job.id

    def log_path(self, job: Job) -> Path:
        return self.local_dir(job) / "job.log"

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    # -- the upload cache -------------------------------------------------------------------

    async def _missing(self, markers: list[str]) -> set[str]:
        """Which cache markers are absent on the host; present ones are touched (their mtime is
        the entry's last use for `gpu gc`) and remembered for less than gc's minimum age."""
        now = time.monotonic()
        todo = [m for m in markers if now - self._present.get(m, -PRESENT_TTL_S) >= PRESENT_TTL_S]
        if not todo:
            return set()
        script = ("for f in " + " ".join(quote(m) for m in todo)
                  + '; do if [ -e "$f" ]; then touch "$f"; else printf \'%s\\n\' "$f"; fi; done')
        r = await self.transport.run(script, check="checking the upload cache")
        missing = set(r.out.splitlines())
        self._present.update({m: now for m in set(todo) - missing})
        return missing

    # -- storage (`gpu gc`) -------------------------------------------------------------------

    async def _run_runtime(self, module: str, args: list[str], *, check: str,
                           input: bytes | None = None) -> dict:
        """Run one of the runtime's stdlib scripts on the host (sent as its source, so it needs
        no upload) and read the JSON it prints."""
        remote = await self.remote()
        source = runtime_source(module)
        r = await self.transport.run(f"{quote(remote['python'])} -c {quote(source)} "
                                     + " ".join(quote(a) for a in args), input=input, check=check)
        return json.loads(r.out.strip().splitlines()[-1])

    async def _cachescan(self, *args: str, input: bytes | None = None) -> dict:
        remote = await self.remote()
        return await self._run_runtime("cachescan.py", [*args, remote["root"]], input=input,
                                       check=f"reading the caches on {self.name}")

    async def cache_scan(self) -> dict:
        """The host's cache entries under the target's root, judged on the host."""
        return await self._cachescan("scan")

    async def cache_evict(self, entries: list[str]) -> dict:
        """Remove cache entries on the host (a venv a job holds is kept); forget them here."""
        done = await self._cachescan("evict", input="\n".join(entries).encode() + b"\n")
        self._present.clear()
        return done

    async def _upload_file(self, local: Path, final: str, marker: str) -> int:
        """One file into the cache: a temporary name, a size check, a rename, then the marker."""
        part = f"{final}.part-{uuid.uuid4().hex[:8]}"
        size = local.stat().st_size
        sent = await self.transport.put_file(local, part)
        await self.transport.run(
            f"set -e; p={quote(part)}; [ $(wc -c < \"$p\") -eq {size} ] || "
            f"{{ rm -f \"$p\"; echo 'the upload arrived incomplete' >&2; exit 1; }}; "
            f"mv -f \"$p\" {quote(final)}; : > {quote(marker)}",
            check=f"storing {local.name} on {self.name}")
        self._present[marker] = time.monotonic()
        return sent

    async def _upload_tree(self, archive: bytes | Path, final: str, marker: str) -> int:
        """A tar.gz unpacked into a folder of the cache, marker last."""
        part = f"{final}.part-{uuid.uuid4().hex[:8]}.tar.gz"
        if isinstance(archive, bytes):
            sent = await self.transport.put_bytes(archive, part)
            size = len(archive)
        else:
            sent = await self.transport.put_file(archive, part)
            size = archive.stat().st_size
        tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
        await self.transport.run(
            f"set -e; p={quote(part)}; t={quote(tmp)}; "
            f"[ $(wc -c < \"$p\") -eq {size} ] || {{ rm -f \"$p\"; echo 'the upload arrived incomplete' >&2; exit 1; }}; "
            f"rm -rf \"$t\"; mkdir -p \"$t\"; tar -xzf \"$p\" -C \"$t\"; rm -f \"$p\"; "
            f"rm -rf {quote(final)}; mv \"$t\" {quote(final)}; : > {quote(marker)}",
            check=f"unpacking into {final} on {self.name}")
        self._present[marker] = time.monotonic()
        return sent

    async def _ensure_runtime(self) -> tuple[str, int]:
        rhash, data = runtime_archive()
        final = f"{self._root()}/runtime/{rhash}"
        marker = f"{final}.ready"
        async with self._lock(marker):
            if await self._missing([marker]):
                return final, await self._upload_tree(data, final, marker)
        return final, 0

    async def _ensure_bundle(self, job: Job) -> tuple[str, int]:
        local = paths.bundles_dir() / f"{job.bundle_hash}.tar.gz"
        final = f"{self._root()}/bundles/{job.bundle_hash}.tar.gz"
        marker = f"{self._root()}/bundles/{job.bundle_hash}.ready"
        async with self._lock(marker):
            if await self._missing([marker]):
                if not local.exists():
                    raise RuntimeError(f"bundle {job.bundle_hash[:12]} is gone from {local.parent}; "
                                       "submit the job again")
                return final, await self._upload_file(local, final, marker)
        return final, 0

    async def _ensure_data(self, job: Job) -> tuple[dict[str, str], int]:
        """Each data set once per content hash (an hf:// set is its copy downloaded at submit)."""
        links: dict[str, str] = {}
        sent = 0
        for item in local_data(job):
            h = job.plan.get("data", {}).get(item["name"])
            if not h:
                raise RuntimeError(f"data {item['name']} has no content hash in the plan")
            final = f"{self._root()}/data/{h}"
            marker = f"{final}.ready"
            links[item["name"]] = final
            async with self._lock(marker):
                if not await self._missing([marker]):
                    continue
                src = Path(item["source"])
                if not src.exists():
                    raise RuntimeError(f"data {item['name']}: {src} no longer exists here")
                # the same judge as at submit: credential files are never uploaded
                listing = await asyncio.to_thread(list_data, src, item["name"])
                if src.is_file():
                    sent += await self._upload_file(src, final, marker)
                elif src.is_dir():
                    archive = await asyncio.to_thread(_pack_dir, listing)
                    try:
                        sent += await self._upload_tree(archive, final, marker)
                    finally:
                        archive.unlink(missing_ok=True)
                else:
                    raise RuntimeError(f"data {item['name']}: {src} no longer exists here")
        return links, sent

    # -- preparing one attempt --------------------------------------------------------------

    async def prepare_attempt(self, job: Job, env_secrets: dict[str, str], *,
                              base_python: str | None = None) -> dict:
        """Upload what is missing, lay out the job folder, write the attempt's spec.
        Returns {"spec", "runtime", "adir", "sent"}; the subclass starts the launcher."""
        remote = await self.remote()
        runtime, sent_rt = await self._ensure_runtime()
        bundle, sent_b = await self._ensure_bundle(job)
        links, sent_d = await self._ensure_data(job)
        attempt = job.attempt
        jd, ad = self.job_dir(job), self.attempt_dir(job, attempt)
        workdir = f"{jd}/code/{job.plan.get('workdir') or ''}".rstrip("/")
        found = await asyncio.to_thread(
            requirements.bundle_dependencies, paths.bundles_dir() / f"{job.bundle_hash}.tar.gz",
            job.plan.get("workdir") or "", job.plan.get("extras") or ())
        python = base_python or remote["python"]
        deps = requirements.deps_spec(found, python=python, version=remote["version"],
                                      venvs_dir=f"{remote['root']}/venvs")
        spec = launch_spec(job, job_dir=jd, attempt_dir=ad, workdir=workdir, runtime_dir=runtime,
                           python=python, deps=deps, env_secrets=env_secrets)
        restore, sent_c = await self._restore_checkpoint(job, env_secrets)
        setup = [
            "set -e", f"J={quote(jd)}", f"A={quote(ad)}",
            'mkdir -p "$J/out" "$J/ckpt" "$J/ctl" "$J/data" "$A"',
            # each job gets its own copy of the code (jobs may write into their folder)
            f'if [ ! -e "$J/.code-ready" ]; then rm -rf "$J/code"; mkdir -p "$J/code"; '
            f'tar -xzf {quote(bundle)} -C "$J/code"; : > "$J/.code-ready"; fi',
            'rm -f "$J/ctl/checkpoint"',
            *([restore] if restore else []),
            *[f'ln -sfn {quote(target)} "$J/data/"{quote(name)}' for name, target in links.items()],
            'cat > "$A/spec.json.tmp"', 'mv -f "$A/spec.json.tmp" "$A/spec.json"',
        ]
        spec_bytes = json.dumps(spec, indent=1).encode()
        await self.transport.run("\n".join(setup), input=spec_bytes,
                                 check=f"preparing job {job.short_id} on {self.name}")
        return {"spec": f"{ad}/spec.json", "runtime": runtime, "adir": ad, "jdir": jd,
                "sent": sent_rt + sent_b + sent_d + sent_c + len(spec_bytes), "python": python,
                "checkpoint_bytes": sent_c}

    # -- stopping the job -------------------------------------------------------------------

    def kill_script(self, job: Job, force: bool = False) -> str:
        """The shell that cancels an attempt on the host: the launcher's own kill routine
        (`launch.py --kill`, the same one the local target calls), which ends every process
        the job started, also those that left its session; an attempt whose launcher cannot
        be found falls back to its process group."""
        sig = "KILL" if force else "TERM"
        python = self._remote["python"] if self._remote else self.python
        flags = "--kill --force" if force else "--kill"
        return "\n".join([
            f"A={quote(self._adir(job))}; py={quote(python)}",
            """L=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["runtime_dir"])' """
            """"$A/spec.json" 2>/dev/null)""",
            f'if [ -n "$L" ] && [ -f "$L/launch.py" ]; then exec "$py" "$L/launch.py" {flags} "$A"; fi',
            f'pg=$({PGID_OF} "$A/pid" 2>/dev/null)',
            f'if [ -n "$pg" ]; then kill -s {sig} -- "-$pg" 2>/dev/null; fi; true'])

    async def kill_attempt(self, job: Job, force: bool = False) -> None:
        await self.remote()
        await self.transport.run(self.kill_script(job, force), timeout=60)

    # -- following the job ------------------------------------------------------------------

    async def sync_log(self, job: Job) -> None:
        """Append what is new in the remote job.log to the local mirror (jobs/<id>/job.log)."""
        local = self.log_path(job)
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            offset = local.stat().st_size
        except FileNotFoundError:
            offset = 0
        # a job moved here: the local mirror holds the earlier targets' logs up to log_base
        offset = max(0, offset - int(job.handle.get("log_base") or 0))
        try:
            await self.remote()
            data, _ = await self.transport.read_from(f"{self.job_dir(job)}/job.log", offset, LOG_CHUNK)
        except TransportError:
            return  # poll says why; the mirror catches up once the host answers
        if data:
            with open(local, "ab") as f:
                f.write(data)

    async def read_metrics(self, job: Job, offset: int) -> tuple[bytes, int]:
        try:
            await self.remote()
            data, size = await self.transport.read_from(f"{self.job_dir(job)}/metrics.jsonl",
                                                         offset, METRICS_CHUNK)
        except TransportError:
            return b"", offset
        if 0 <= size < offset:  # the file was replaced: start again from the top
            return b"", 0
        cut = data.rfind(b"\n") + 1  # whole lines only; the rest waits for its newline
        return data[:cut], offset + cut

    async def _read_small(self, path: str, limit: int = 1 << 20) -> bytes | None:
        data, size = await self.transport.read_from(path, 0, limit)
        return None if size < 0 else data

    async def read_exit(self, job: Job) -> dict | None:
        raw = await self._read_small(f"{self._adir(job)}/exit.json")
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    async def fetch_outputs(self, job: Job, dest: Path) -> list[str]:
        """The out/ folder as one archive, unpacked by safe_extract; plus job.log and metrics."""
        notes: list[str] = []
        await self.remote()
        await self.sync_log(job)
        jd = self.job_dir(job)
        dest.mkdir(parents=True, exist_ok=True)
        try:
            r = await self.transport.run(
                f"set -e; cd {quote(jd)}; mkdir -p out; "
                "tar -czf outputs.tar.gz.part -C out . && mv -f outputs.tar.gz.part outputs.tar.gz; "
                "wc -c < outputs.tar.gz", check="packing the outputs")
            size = int(r.out.split()[-1])
            caps = OutputCaps.from_options(self.options)  # the same caps as the local target
            cap = caps.max_bytes
            if size > cap:
                notes.append(f"outputs are {size} bytes packed, over the {cap} byte cap: "
                             f"left on {self.name} in {jd}/out")
            else:
                fd, tmp_name = tempfile.mkstemp(prefix=".outputs-", suffix=".tar.gz", dir=dest.parent)
                os.close(fd)
                tmp = Path(tmp_name)
                try:
                    await self.transport.get_file(f"{jd}/outputs.tar.gz", tmp, max_bytes=cap)
                    notes += await asyncio.to_thread(safe_extract, tmp, dest, caps=caps)
                finally:
                    tmp.unlink(missing_ok=True)
            metrics = dest / "metrics.jsonl"
            try:
                await self.transport.get_file(f"{jd}/metrics.jsonl", metrics, max_bytes=1 << 30)
            except TransportError:
                pass  # no metrics logged
        except Unreachable:
            raise  # not now: the supervisor tries again on its next tick
        except (TransportError, ValueError) as exc:
            notes.append(f"outputs could not be brought home from {self.name}: {exc}")
        log = self.log_path(job)
        if log.is_file():
            (dest / "job.log").write_bytes(log.read_bytes())
        return notes

    async def fetch_paths(self, job: Job, rels: list[str], archive: Path, caps: OutputCaps) -> dict:
        """`gpu fetch`: the named paths of the job's working folder on the host, packed there
        without following a link and copied into the local `archive` (within the caps).
        Returns the packer's account ({"gone": true} when the folder was cleaned up)."""
        await self.remote()
        jd = self.job_dir(job)
        inner = f"code/{job.plan.get('workdir') or ''}".rstrip("/")
        packed = f"{jd}/fetch-{uuid.uuid4().hex[:12]}.tar.gz"
        doc = await self._run_runtime(
            "workdir.py", ["pack", jd, inner, packed, str(caps.max_bytes), str(caps.max_files), *rels],
            check=f"packing {len(rels)} path(s) of job {job.short_id} on {self.name}")
        if doc.get("gone") or doc.get("replaced"):
            return doc
        try:
            await self.transport.get_file(packed, archive, max_bytes=caps.max_bytes + (64 << 20))
        finally:
            await self.transport.run(f"rm -f {quote(packed)}")
        return doc

    # -- checkpoints (core.packaging.checkpoints) ----------------------------------------------

    async def checkpoint_scan(self, job: Job) -> dict:
        """The job's ckpt/ on the host, listed with hashes there (core/runtime/ckptscan.py);
        the listings asked for together (the supervisor asks for every job's on the same
        tick) are made by one process on the host."""
        await self.remote()

        async def scan_many(folders: list[str]) -> list[dict]:
            cap = OutputCaps.from_options(self.options).max_bytes  # nothing over it is hashed
            doc = await self._run_runtime("ckptscan.py", ["scan-many", "--max-bytes", str(cap), *folders],
                                          check=f"listing checkpoints on {self.name}")
            return doc["scans"]
        return await self.gathered("ckptscan", lambda: Gather(scan_many)).ask(f"{self.job_dir(job)}/ckpt")

    def gathered(self, key: str, make: Callable[[], G]) -> G:
        """This host's batch `key` (lookbatch.py) for the running loop: one per loop, since
        its futures belong to the loop that made them."""
        loop = asyncio.get_running_loop()
        held = self._gathers.get(key)
        if held is None or held[0] is not loop:
            held = self._gathers[key] = (loop, make())
        return held[1]

    async def checkpoint_pack(self, job: Job, rels: list[str], archive: Path) -> dict:
        """Only the named files of the job's ckpt/, packed on the host and copied home."""
        await self.remote()
        jd = self.job_dir(job)
        packed = f"{jd}/ckpt-{uuid.uuid4().hex[:12]}.tar.gz"
        doc = await self._run_runtime("ckptscan.py", ["pack", f"{jd}/ckpt", packed, *rels],
                                      input=None, check=f"packing the checkpoint of job {job.short_id}")
        try:
            await self.transport.get_file(packed, archive, max_bytes=1 << 40)
        finally:
            await self.transport.run(f"rm -f {quote(packed)}")
        return doc

    async def _restore_checkpoint(self, job: Job, env_secrets: dict[str, str]) -> tuple[str, int]:
        """A moved job's checkpoint from home, uploaded beside its job folder; returns the shell
        line that puts it into ckpt/ before the launcher starts, and the bytes sent. Names home
        masked are unsealed with the secret values this launch read (checkpoints.real_names)."""
        if not job.handle.get("restore_checkpoint"):
            return "", 0
        archive = await asyncio.to_thread(checkpoints.restore_archive, job.id, env_secrets)
        if archive is None:
            return "", 0
        try:
            remote_archive = f"{self.job_dir(job)}.ckpt-restore.tar.gz"
            await self.transport.run(f"mkdir -p {quote(self._root() + '/jobs')}")
            sent = await self.transport.put_file(archive, remote_archive)
        finally:
            archive.unlink(missing_ok=True)
        # never under an attempt that started (a restarted supervisor preparing it again)
        line = (f'if [ ! -e "$A/started" ]; then rm -rf "$J/ckpt"; mkdir -p "$J/ckpt"; '
                f'tar -xzf {quote(remote_archive)} -C "$J/ckpt"; rm -f "$J/.ckpt-hashes.json"; fi; '
                f'rm -f {quote(remote_archive)}')
        return line, sent

    # -- probing ----------------------------------------------------------------------------

    def _probe_cache_file(self) -> Path:
        key = hashlib.sha256(json.dumps([self.kind, self.transport.describe(), self.root_option,
                                         self.options, self.declared_gpus], sort_keys=True,
                                        default=str).encode()).hexdigest()[:12]
        return paths.cache_dir() / f"probe-{self.name}-{key}.json"

    def forget_probe(self) -> None:
        for f in paths.cache_dir().glob(f"probe-{self.name}-*.json"):
            f.unlink(missing_ok=True)

    def _cached_probe(self) -> TargetInfo | None:
        ttl = float(self.options.get("probe_ttl_s", PROBE_TTL_S))
        try:
            doc = json.loads(self._probe_cache_file().read_text())
            if time.time() - doc["at"] < ttl:
                return _info_from(doc["info"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def _store_probe(self, info: TargetInfo) -> None:
        doc = {"at": time.time(), "info": {**info.to_json(), "details": info.details}}
        try:
            path = self._probe_cache_file()
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, path)
        except OSError:
            pass

    async def probe(self, refresh: bool = False) -> TargetInfo:
        if not refresh:
            cached = self._cached_probe()
            if cached is not None:
                return cached
        try:
            info = await self.probe_fresh()
        except HostKeyError as exc:
            info = self._info(False, f"{exc.what}. Fix: {exc.fix}", details={"host_key": {
                "fingerprint": exc.fingerprint, "changed": exc.changed}})
        except TransportError as exc:
            info = self._info(False, f"unreachable: {exc}")
        self._store_probe(info)
        return info

    def probe_now(self) -> TargetInfo:
        """Synchronous probe for `core.engine.targets` (which may run inside the supervisor's loop):
        the cached answer, or a fresh one from a short-lived thread."""
        cached = self._cached_probe()
        if cached is not None:
            return cached
        return run_sync(self.probe)

    def _info(self, available: bool, why: str | None = None, gpus: list[dict] | None = None,
              details: dict | None = None) -> TargetInfo:
        gpus = self.declared_gpus if self.declared_gpus is not None else (gpus or [])
        info = TargetInfo(name=self.name, kind=self.kind, available=available, gpus=gpus,
                          why_unavailable=why, max_jobs=self.max_jobs)
        info.details = {"host": self.transport.describe(), **(details or {})}
        return info

    @abstractmethod
    async def probe_fresh(self) -> TargetInfo:
        """Each kind asks its host its own way (ssh: nvidia-smi; slurm/pbs: partitions, queues)."""

    async def host_facts(self) -> dict:
        r = await self.transport.run(HOST_FACTS, check=f"probing {self.name}")
        return parse_host_facts(r.out)


def _info_from(doc: dict) -> TargetInfo:
    info = TargetInfo(name=doc["name"], kind=doc["kind"], available=doc["available"],
                      gpus=doc.get("gpus") or [], why_unavailable=doc.get("why_unavailable"),
                      max_jobs=doc.get("max_jobs", 1))
    info.details = doc.get("details") or {}
    return info


def _pack_dir(listing: DataListing) -> Path:
    """A data folder as a temporary tar.gz: the files `list_data` lets go, links not followed."""
    fd, name = tempfile.mkstemp(prefix=".data-", suffix=".tar.gz", dir=paths.cache_dir())
    os.close(fd)
    out = Path(name)
    with tarfile.open(out, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
        for rel in listing.files:
            full = listing.source / rel
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            tar.add(full, arcname=rel, recursive=False)
    return out


def make_transport(name: str, options: dict) -> Transport:
    """The transport a target's options describe: SSH to `host`, or this machine (`local`)."""
    if options.get("local"):
        return LocalTransport(name, env={str(k): str(v) for k, v in (options.get("env") or {}).items()})
    from core.transport.ssh import Endpoint, SSHTransport

    ep = Endpoint(host=str(options["host"]), port=int(options.get("port") or 22),
                  user=options.get("user"), key=options.get("key"),
                  known_hosts=options.get("known_hosts"),
                  connect_timeout=float(options.get("connect_timeout_s") or 10))
    return SSHTransport(ep, name=name)
