"""What every target on another machine shares, whatever starts the job there (ssh, slurm, pbs).

The layout on the host, under the target's `root` (default `~/.gpu-router`, so it never
collides with the local target's folders):

    root/bundles/<hash>.json    (+ <hash>.ready)   each bundle's manifest (core/packaging/objects.py)
    root/objects/<h[:2]>/<h[2:]>                   each file content, sent once (only those it lacks)
    root/data/<hash>            (+ <hash>.ready)   each data set, once per content hash
    root/runtime/<hash>/        (+ <hash>.ready)   launch.py and the `gpu` module
    root/venvs/<dep hash>/                         dependency envs, made by launch.py
    root/wheelhouse/<hash>/     (+ <hash>.ready)   wheels for a host without an index (remotedeps.py)
    root/jobs/<job id>/{code,out,ckpt,ckpt-gens,ctl,data}/   one job; job.log, metrics.jsonl
                                                   (code/: the job's own copy, from the objects)
    root/jobs/<job id>/attempts/<n>/               spec.json, pid, phase, exit.json

This module holds where things live on the host, one attempt's preparation (its spec and job
folder) and its kill; the parts, each a mixin of RemoteProvider: the upload cache and `gpu gc`'s
side of it (remotecache.py), what comes home (remotefetch.py: the log, metrics, exit,
outputs), checkpoints both ways (remoteckpt.py), the probe (remoteprobe.py) and dependencies
for a host without a package index (remotedeps.py: `offline`, the wheelhouse); the transport
a target's options describe is in hostlink.py, the runtime as the host gets it in runtimeship.py.
A transport that cannot reach the host makes `poll` answer "unreachable": the supervisor waits
and retries; it never fails a job because a link dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from abc import ABC
from pathlib import Path
from typing import Any, Callable, TypeVar

from core import paths
from core.packaging import objects, requirements
from core.jobs.store import Job
from core.providers.hostlink import make_transport
from core.providers.remotecache import RemoteCache
from core.providers.remoteckpt import RemoteCheckpoints
from core.providers.remotedeps import RemoteDeps
from core.providers.remotefetch import RemoteFetch
from core.providers.remoteprobe import NO_HOST_SANDBOX, RemoteProbe
from core.providers.runtimeship import runtime_archive, runtime_source
from core.runtime import files as runtime_files
from core.providers.spec import launch_spec
from core.transport.base import CommandFailed, Transport, TransportError, quote, remote_path_expr

G = TypeVar("G")
PGID_OF = "sed -n 's/.*\"pgid\": *\\([0-9][0-9]*\\).*/\\1/p'"  # the pgid from a pid file
START_GRACE_S = 60.0
BUILD_BAD_OBJECTS = 4  # codetree.py build's exit status: objects that failed their hash, removed
RUNTIME_CHANGED = 6  # RUNTIME_CHECK's exit status: the host's runtime folder is not as sent

# The runtime folder on a host without a sandbox, checked before a launch against the hashes of
# this machine's copy (argv: the folder, {relative path: sha256}): every file there and nothing
# else, each a regular file with its bytes; the bytecode caches Python wrote are derived and
# removed (a planted .pyc would be loaded in place of its source). Exits RUNTIME_CHANGED.
RUNTIME_CHECK = r'''
import hashlib, json, os, shutil, stat, sys
top, want = sys.argv[1], json.loads(sys.argv[2])
seen, bad = set(), []
for d, dirs, files in os.walk(top):
    for n in list(dirs):
        p = os.path.join(d, n)
        if n == "__pycache__" and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
            dirs.remove(n)
        elif os.path.islink(p):
            bad.append(os.path.relpath(p, top))
    for n in files:
        p = os.path.join(d, n)
        rel = os.path.relpath(p, top)
        seen.add(rel)
        st = os.lstat(p)
        if rel not in want or not stat.S_ISREG(st.st_mode):
            bad.append(rel)
            continue
        with open(p, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != want[rel]:
                bad.append(rel)
bad += [r for r in want if r not in seen]
if bad:
    print("runtime-changed " + json.dumps(sorted(bad)[:20]))
    sys.exit(6)
'''


def runtime_check(python: str, folder: str) -> str:
    """The shell line that checks a host's runtime folder against this machine's copy."""
    want = {rel: hashlib.sha256(path.read_bytes()).hexdigest() for path, rel in runtime_files()}
    return f"{quote(python)} -c {quote(RUNTIME_CHECK)} {quote(folder)} {quote(json.dumps(want, sort_keys=True))}"


def take_over_args(root: str, job_id: str, donor: str | None, sandboxed: bool,
                   kept: Callable[[str], str | None]) -> list[str]:
    """What `codetree.py build` is given to take over an ended job's code folder: [its folder,
    the hash its record had when it was built], or [] for a fresh build. Only where the job
    runs sandboxed (outside a sandbox a job can rewrite its folder and the record beside it
    together), only another job's folder, and only with the record's hash kept at home
    (`kept`: where no job writes; None when unknown), so a record rewritten to match a changed
    folder is not trusted."""
    if not sandboxed or not donor or donor == job_id:
        return []
    pin = kept(donor)
    return [f"{root}/jobs/{donor}/code", pin] if pin else []


class RemoteProvider(RemoteCache, RemoteDeps, RemoteFetch, RemoteCheckpoints, RemoteProbe, ABC):
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
mkdir -p "$root/bundles" "$root/data" "$root/runtime" "$root/venvs" "$root/jobs" "$root/wheelhouse"
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

    # -- what the parts share ---------------------------------------------------------------

    async def _run_runtime(self, module: str, args: list[str], *, check: str,
                           input: bytes | None = None) -> dict:
        """Run one of the runtime's stdlib scripts on the host (sent as its source, so it needs
        no upload) and read the JSON it prints."""
        r = await self.transport.run(await self._runtime_command(module, args), input=input, check=check)
        return json.loads(r.out.strip().splitlines()[-1])

    async def _runtime_command(self, module: str, args: list[str]) -> str:
        """The shell line that runs one of the runtime's stdlib scripts on the host."""
        remote = await self.remote()
        return f"{quote(remote['python'])} -c {quote(runtime_source(module))} " + " ".join(quote(a) for a in args)

    def gathered(self, key: str, make: Callable[[], G]) -> G:
        """This host's batch `key` (lookbatch.py) for the running loop: one per loop, since
        its futures belong to the loop that made them."""
        loop = asyncio.get_running_loop()
        held = self._gathers.get(key)
        if held is None or held[0] is not loop:
            held = self._gathers[key] = (loop, make())
        return held[1]

    # -- preparing one attempt --------------------------------------------------------------

    async def prepare_attempt(self, job: Job, env_secrets: dict[str, str], *,
                              base_python: str | None = None) -> dict:
        """Upload what is missing, lay out the job folder, write the attempt's spec.
        Returns {"spec", "runtime", "adir", "sent", "notes", ...}; the subclass starts the
        launcher and hands `notes` (what was decided about the dependencies) to the job's events."""
        remote = await self.remote()
        notes: list[str] = []  # what was decided about the dependencies: the job's events
        steps: dict[str, float] = {}  # seconds each part took: the handle's launch_steps
        clock = [time.monotonic()]

        def step(name: str) -> None:
            now = time.monotonic()
            steps[name] = round(now - clock[0], 3)
            clock[0] = now

        found = await asyncio.to_thread(
            requirements.bundle_dependencies, objects.manifest_file(job.bundle_hash),
            job.plan.get("workdir") or "", job.plan.get("extras") or ())
        python = base_python or remote["python"]
        # before any upload: a requirement the host cannot get is named with nothing sent
        wh = await self.plan_wheelhouse(found, remote["python"], notes.append,
                                        container=base_python is not None,
                                        bundle=objects.manifest_file(job.bundle_hash),
                                        workdir=job.plan.get("workdir") or "")
        step("dependencies")
        runtime, sent_rt = await self._ensure_runtime()
        step("runtime")
        bundle, sent_b = await self._ensure_bundle(job)
        step("bundle")
        links, sent_d = await self._ensure_data(job)
        wh_dir, sent_w = await self.ship_wheelhouse(wh, notes.append) if wh is not None else (None, 0)
        step("data")
        attempt = job.attempt
        jd, ad = self.job_dir(job), self.attempt_dir(job, attempt)
        workdir = f"{jd}/code/{job.plan.get('workdir') or ''}".rstrip("/")
        deps = requirements.deps_spec(found, python=python, version=remote["version"],
                                      venvs_dir=f"{remote['root']}/venvs")
        if deps is not None and wh_dir:
            deps["wheelhouse"] = wh_dir  # the launcher installs with --no-index from it
        spec = launch_spec(job, job_dir=jd, attempt_dir=ad, workdir=workdir, runtime_dir=runtime,
                           python=python, deps=deps, env_secrets=env_secrets, frozen_checkpoints=True)
        restore, sent_c = await self._restore_checkpoint(job, env_secrets)
        # the job runs in the launcher's sandbox where the host can make one (not inside a
        # container: the container is the job's world there, and bubblewrap seldom runs in one)
        sandboxed = base_python is None and (await self.host_sandbox())["ok"]
        if sandboxed:
            spec["sandbox"] = self.sandbox_request(job, list(links.values()))
        reuse = take_over_args(self._root(), job.id, job.handle.get("code_from"), sandboxed,
                               self._code_record)
        build = await self._runtime_command(
            "codetree.py", ["build", "--verify", bundle, f"{remote['root']}/objects", f"{jd}/code", *reuse])
        setup = [
            "set -e", f"J={quote(jd)}", f"A={quote(ad)}",
            # without a sandbox a job may have rewritten the runtime the launcher runs from:
            # checked against this machine's copy first (RUNTIME_CHANGED: sent again)
            *([runtime_check(remote["python"], runtime)] if not sandboxed else []),
            'mkdir -p "$J/out" "$J/ckpt" "$J/ckpt-gens" "$J/ctl" "$J/data" "$A"',
            # each job gets its own copy of the code, built from the host's objects (copies:
            # a job may write into its folder, and must reach no other job's files nor the store)
            # (or an ended job's folder of the same project, taken over when it is untouched
            # and changed only where the manifests differ: codetree.py, reuse)
            f'if [ ! -e "$J/.code-ready" ]; then rm -rf "$J/code"; '
            # (every object read is checked against its hash: a job without a sandbox could
            # have rewritten one; one that fails is removed and sent again: BUILD_BAD_OBJECTS)
            # (the build runs from the source sent here, not the host's runtime copy, which a
            # job without a sandbox could have rewritten to skip the check)
            f'b=$({build}); printf "code-build %s\\n" "$b"; : > "$J/.code-ready"; fi',
            'rm -f "$J/ctl/checkpoint"',
            *([f"mkdir -p {quote(wh_dir)}"] if wh_dir and wh_dir.endswith("/empty") else []),
            *([restore] if restore else []),
            *[f'ln -sfn {quote(target)} "$J/data/"{quote(name)}' for name, target in links.items()],
            'cat > "$A/spec.json.tmp"', 'mv -f "$A/spec.json.tmp" "$A/spec.json"',
        ]
        spec_bytes = json.dumps(spec, indent=1).encode()
        for tries_left in (2, 1, 0):
            try:
                r = await self.transport.run("\n".join(setup), input=spec_bytes,
                                             check=f"preparing job {job.short_id} on {self.name}")
                break
            except CommandFailed as exc:
                if exc.result.code not in (BUILD_BAD_OBJECTS, RUNTIME_CHANGED) or not tries_left:
                    raise
                sent_rt, sent_b = await self._resend(job, exc.result.code, notes, sent_rt, sent_b)
        self._keep_code_record(job, r.out)
        step("job folder")  # the code folder built from the objects, the spec written
        if base_python is not None:  # a container: what it shows the job is the container's choice
            notes.append(f"{self.name}: the job runs in its container, not in gpu-router's sandbox "
                         "(no take-over of its code folder)")
        elif not sandboxed:
            notes.append(f"{self.name}: {NO_HOST_SANDBOX}")
        return {"steps": steps, "spec": f"{ad}/spec.json", "runtime": runtime, "adir": ad, "jdir": jd,
                "sent": sent_rt + sent_b + sent_d + sent_w + sent_c + len(spec_bytes), "python": python,
                "checkpoint_bytes": sent_c, "wheelhouse_bytes": sent_w, "notes": notes}

    async def _resend(self, job: Job, code: int, notes: list[str], sent_rt: int, sent_b: int) -> tuple[int, int]:
        """What the host's copy lost, sent again: objects rewritten in its store (the build
        removed them, so the bundle is no longer whole there: its marker goes and the host is
        asked again what it lacks), or a runtime folder that is not as sent (removed whole, then
        uploaded again). Returns the bytes sent so far for the runtime and the bundle."""
        root = self._root()
        if code == RUNTIME_CHANGED:
            notes.append(f"{self.name}: the host's copy of gpu-router's runtime was changed (a job "
                         "without a sandbox can write it): removed and sent again")
            rhash, _ = runtime_archive()
            final = f"{root}/runtime/{rhash}"
            self._present.pop(f"{final}.ready", None)
            await self.transport.run(f"rm -rf {quote(final + '.ready')} {quote(final)}",
                                     check=f"resetting the runtime on {self.name}")
            _, sent = await self._ensure_runtime()
            return sent_rt + sent, sent_b
        notes.append(f"{self.name}: objects in the host's store did not match their hash "
                     "(rewritten since they were sent): removed and sent again")
        marker = f"{root}/bundles/{job.bundle_hash}.ready"
        self._present.pop(marker, None)
        await self.transport.run(f"rm -f {quote(marker)}", check=f"resetting bundle on {self.name}")
        _, sent = await self._ensure_bundle(job)
        return sent_rt, sent_b + sent

    def _code_record_file(self, job_id: str) -> Path:
        return paths.jobs_dir() / job_id / "code.record"

    def _keep_code_record(self, job: Job, out: str) -> None:
        """The hash of the record a build wrote beside the job's code folder (codetree.py
        prints it), kept at home: a later take-over of that folder asks for exactly that record,
        so a job that rewrote its folder and the record to match passes nothing on."""
        for line in out.splitlines():
            if line.startswith("code-build "):
                try:
                    record = json.loads(line[len("code-build "):]).get("record")
                except (ValueError, AttributeError):
                    record = None
                f = self._code_record_file(job.id)
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(record + "\n" if isinstance(record, str) else "")

    def _code_record(self, job_id: str) -> str | None:
        """The kept record hash of a job's code folder (None: unknown, so no take-over)."""
        try:
            text = self._code_record_file(job_id).read_text().strip()
        except OSError:
            return None
        return text if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else None

    def sandbox_request(self, job: Job, data: list[str]) -> dict:
        """What the launcher's sandbox (core/runtime/boundary.py) hides and lets through for a
        job on this host: the target's root is hidden (the object store, the wheelhouse, the
        bundles and every other job's folder: none of it is bound, and a root under a system
        folder gets an empty tmpfs), and so is the home (never bound: `~/.ssh` with it); the
        job's own folders, runtime, venv and the data sets it names (root/data/HASH, read-only)
        show through. As on the local target, where the launcher finds no sandbox after all,
        only a person's job, or one a person approved with that reason, runs without one."""
        network = bool(job.request.get("network", True))
        held_for_it = any(h.get("rule") == "sandbox" for h in job.plan.get("holds") or [])
        trusted = job.plan.get("submitted_by") == "person" or held_for_it
        return {"hide": [self._root()], "data": sorted(set(data)), "withheld": {}, "network": network,
                "fallback": "warn" if trusted else "refuse"}

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
