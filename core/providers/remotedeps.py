"""Dependencies for a host that may not reach a package index (compute nodes of many Slurm and
PBS clusters, a box behind a firewall): the target option `offline: auto | true | false`.

- false: pip on the host installs from the index it is configured for (as before).
- true: the project's requirements are resolved on this machine into a wheelhouse for the
  host's Python and platform (core/packaging/wheelhouse.py), shipped once through the host's
  content cache (`root/wheelhouse/<content hash>/`, by hash, skipped when the host has it), and
  the launcher installs with `--no-index --find-links` from it.
- auto (the default): one bounded probe on the host (core/runtime/hostpy.py --reach): does the
  index pip would use there (PIP_INDEX_URL of the host's environment with the target's `env`,
  else pypi.org:443; through the proxy when one is set) answer a TCP connection? Yes: as false;
  no: as true. On slurm and pbs targets the probe runs on the login node, not on a compute node
  (a job's allocation is not there yet when the wheelhouse has to be built and shipped): auto
  takes the login node's answer, and a cluster whose compute nodes have no internet needs
  `offline: true`.

The host's Python (version, implementation, abi, platform tags with glibc's manylinux) and the
packages it already has come from the same probe; the packages it has at a version the
project's pins accept are not shipped (the job's venv sees them: `--system-site-packages`). The
probe's answer is cached on disk beside the host facts for the target's `probe_ttl_s`. What was
decided and why goes into the job's events (the launch's `notes`). A requirement with no wheel
for the host and no pure-Python build is named before anything is uploaded: the build runs
before any upload, and its error fails the job in provisioning.

A mixin of `core.providers.remote.RemoteProvider` (name, kind, transport, options, root_option).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import time
from pathlib import Path
from typing import Callable

from core import paths
from core.config.targetopts import offline_option
from core.packaging import requirements
from core.providers.remoteprobe import PROBE_TTL_S
from core.providers.runtimeship import runtime_source
from core.transport.base import quote

REACH_TIMEOUT_S = 5.0  # one TCP connection to the index (name lookup included)


class RemoteDeps:
    """The wheelhouse side of preparing an attempt (see the module's docstring)."""

    def _host_env(self) -> str:
        """The target's `env` exported for a command on the host (pip's index, a proxy)."""
        return "".join(f"export {k}={quote(str(v))}; " for k, v in (self.options.get("env") or {}).items())

    def _hostpy_file(self, python: str) -> Path:
        key = hashlib.sha256(json.dumps([self.kind, self.transport.describe(), self.root_option, python,
                                         self.options.get("env") or {}], sort_keys=True,
                                        default=str).encode()).hexdigest()[:12]
        return paths.cache_dir() / f"probe-{self.name}-python-{key}.json"  # forget_probe clears it too

    def last_host_python(self) -> dict | None:
        """The host's Python as the newest answer kept tells, however old: what a plan sizes
        the environment for at submit, without a connection (a Python's version and platform
        rarely change; a launch asks again past `probe_ttl_s`). None before any job ran there."""
        newest: tuple[float, dict] | None = None
        for path in paths.cache_dir().glob(f"probe-{self.name}-python-*.json"):
            try:
                doc = json.loads(path.read_text())
                at = float(doc["at"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if isinstance(doc, dict) and (newest is None or at > newest[0]):
                newest = (at, doc)
        return None if newest is None else newest[1]

    async def host_python(self, python: str, *, reach: bool) -> dict:
        """The host's Python as core/runtime/hostpy.py reports it, cached for `probe_ttl_s`."""
        path = self._hostpy_file(python)
        ttl = float(self.options.get("probe_ttl_s", PROBE_TTL_S))
        try:
            doc = json.loads(path.read_text())
            if time.time() - float(doc["at"]) < ttl and (not reach or "reach" in doc):
                return doc
        except (OSError, ValueError, KeyError, TypeError):
            pass
        args = ["--timeout", str(REACH_TIMEOUT_S), *(["--reach"] if reach else [])]
        r = await self.transport.run(
            self._host_env() + f"{quote(python)} -c {quote(runtime_source('hostpy.py'))} "
            + " ".join(quote(a) for a in args),
            timeout=60 + REACH_TIMEOUT_S, check=f"asking {self.name} about its Python")
        doc = json.loads(r.out.strip().splitlines()[-1])
        doc["at"] = time.time()
        try:
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, path)
        except OSError:
            pass
        return doc

    async def plan_wheelhouse(self, found: requirements.Dependencies | None, python: str,
                              say: Callable[[str], None], *, container: bool = False,
                              bundle: Path | None = None, workdir: str = ""):
        """The job's wheelhouse (core.packaging.wheelhouse.Wheelhouse), built or from the cache,
        or None when pip on the host installs from its index. Uploads nothing. `bundle` (the
        job's manifest) and `workdir`: where the project's own `--find-links` folders are read
        from, since the wheelhouse is built here, not in the job's folder."""
        if found is None or not found.requirements:
            return None
        mode = offline_option(self.options)
        if mode == "false":
            return None
        doc = await self.host_python(python, reach=mode == "auto")
        where = f"{self.name}'s login node" if self.kind in ("slurm", "pbs") else self.name
        if mode == "auto":
            got = doc.get("reach") or {}
            if got.get("ok"):
                say(f"dependencies: offline: auto: the package index {got.get('index')} answers from {where}: "
                    "pip installs from it there"
                    + (" (asked on the login node; if compute nodes have no internet, set offline: true)"
                       if self.kind in ("slurm", "pbs") else ""))
                return None
            say(f"dependencies: offline: auto: the package index {got.get('index')} does not answer from "
                f"{where} ({got.get('error') or 'unreachable'}): installing from a wheelhouse built here")
        else:
            say(f"dependencies: offline: true: installing from a wheelhouse built here for {self.name}")
        if container:
            say("dependencies: the wheelhouse is built for the host's Python, not the container's "
                "(container images are not probed): keep their Python versions the same")
        from core.packaging import wheelhouse

        platform = wheelhouse.TargetPlatform(python_version=doc["python_version"],
                                             implementation=doc["implementation"], abi=doc["abi"],
                                             platforms=tuple(doc["platforms"]))
        pip_args = [arg for line in found.options for arg in shlex.split(line)]
        local = wheelhouse.local_folders(found.local, bundle, workdir) if bundle is not None else None
        return await asyncio.to_thread(wheelhouse.build, found.requirements, found.constraints, pip_args,
                                       platform, dict(doc.get("packages") or {}), say=say, local=local)

    async def ship_wheelhouse(self, wh, say: Callable[[str], None]) -> tuple[str, int]:
        """The wheelhouse on the host through the content cache (once per content hash):
        (its folder there, bytes sent)."""
        base = f"{self._root()}/wheelhouse"
        if not wh.files:  # the host has every one: pip still installs with --no-index
            say(f"dependencies: {self.name} has every one already: no wheelhouse to ship")
            return f"{base}/empty", 0
        final = f"{base}/{wh.content_hash[:32]}"
        marker = f"{final}.ready"
        async with self._lock(marker):
            if await self._missing([marker]):
                archive = await asyncio.to_thread(wh.archive)
                sent = await self._upload_tree(archive, final, marker, gzip=False)
                say(f"dependencies: wheelhouse {wh.content_hash[:12]} uploaded to {self.name} "
                    f"({len(wh.files)} wheels, {sent} bytes)")
                return final, sent
        say(f"dependencies: wheelhouse {wh.content_hash[:12]} is on {self.name} already: nothing uploaded")
        return final, 0
