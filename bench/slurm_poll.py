"""How many `squeue` calls it costs the supervisor to watch 100 running Slurm jobs.

    python bench/slurm_poll.py [--jobs 100] [--cycles 10]

Starts a private one-node Slurm (tests/services.SlurmCluster: munge, slurmctld, slurmd; the node
declares 128 CPUs with SlurmdParameters=config_overrides so 100 one-CPU jobs run at once), adds
it as target `lab` (`local: true`, the login node is this machine) with a PATH shim that logs
every real `squeue` process before running the real one, submits --jobs jobs in-process
(`core.engine.service.submit`, each `sleep` for 10 minutes), and drives a `Supervisor` tick by tick
until Slurm runs them all. Then it runs --cycles more ticks, one second apart, and prints per
cycle: the `squeue` processes started (from the shim's log), the provider's own count, and the
time the tick took. Target: one squeue per cycle, not one per job. At the end every job is
cancelled with scancel and the cluster is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import committed_project, parse_small, log, private_world  # noqa: E402

SHIM = """#!/bin/sh
echo "$$ $(date +%s.%N) $*" >> {log}
exec {real} "$@"
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=10)
    a = parse_small(ap, {'jobs': 4, 'cycles': 2})
    world = private_world("slurm-poll")
    from tests.services import SlurmCluster

    root = Path(tempfile.mkdtemp(prefix="gpu-bench-slurm-"))
    root.chmod(0o755)
    cluster = SlurmCluster(root, cpus=128, gpus=0, memory_mb=64000)
    try:
        run(world, cluster, a)
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
        world.cleanup()


def run(world, cluster, a) -> None:
    shim_dir = world.tmp / "shim"
    shim_dir.mkdir()
    calls = world.tmp / "squeue.calls"
    calls.touch()
    (shim_dir / "squeue").write_text(SHIM.format(log=calls, real=shutil.which("squeue")))
    (shim_dir / "squeue").chmod(0o755)
    python = getattr(sys, "_base_executable", sys.executable)
    world.write_config(
        "targets:\n"
        f"  lab: {{kind: slurm, local: true, root: {world.tmp / 'remote'}, python: {python},\n"
        f"        max_jobs: {a.jobs}, gpus: 0, cpus: 1,\n"
        f"        env: {{SLURM_CONF: {cluster.conf}, PATH: '{shim_dir}:{os.environ['PATH']}'}}}}\n")
    project = committed_project(world.tmp / "project", {"sleep.py": "import time\ntime.sleep(600)\n"})

    from core.config.request import build_request
    from core.engine.service import submit
    from core.jobs.states import State
    from core.jobs.store import Store
    from core.engine.supervisor import Supervisor

    store = Store()
    t0 = time.perf_counter()
    for i in range(a.jobs):
        req = build_request(project, {"script": "sleep.py", "hours": 0.1, "provider": "lab", "env": {"I": str(i)}, "wait_s": 0})
        submit(req, store=store, start_supervisor=False)
    log(f"submitted {a.jobs} jobs in {time.perf_counter() - t0:.1f} s")

    async def drive() -> None:
        sup = Supervisor(store=store, tick_s=1.0)
        t1 = time.perf_counter()
        while True:
            await sup.tick()
            running = len(store.jobs(states=[State.RUNNING]))
            if running == a.jobs:
                break
            if time.perf_counter() - t1 > 600:
                raise SystemExit(f"only {running} of {a.jobs} running after 10 minutes")
            await asyncio.sleep(1.0)
        log(f"all {a.jobs} jobs running (Slurm RUNNING) after {time.perf_counter() - t1:.1f} s")
        prov = sup.providers["lab"]
        print(f"\n{'cycle':>5} {'squeue processes':>17} {'provider count':>15} {'other commands':>15} {'tick':>9}")
        total = 0
        for cycle in range(1, a.cycles + 1):
            await asyncio.sleep(1.0)
            before_lines = len(calls.read_text().splitlines())
            before_prov = prov.stats["squeue"]
            before_cmds = prov.transport.stats["commands"]
            t = time.perf_counter()
            await sup.tick()
            dt = time.perf_counter() - t
            n = len(calls.read_text().splitlines()) - before_lines
            cmds = prov.transport.stats["commands"] - before_cmds - n
            total += n
            print(f"{cycle:>5} {n:>17} {prov.stats['squeue'] - before_prov:>15} {cmds:>15} {dt * 1000:>7.0f}ms")
        still = len(store.jobs(states=[State.RUNNING]))
        print(f"\n{a.jobs} running jobs ({still} still running after the cycles), {a.cycles} cycles: "
              f"{total} squeue calls = {total / a.cycles:.2f} per cycle "
              f"({total / a.cycles / a.jobs:.3f} per job per cycle)")
        print("target: one squeue per cycle, not one per job:", "MET" if total <= a.cycles else "NOT MET")

    asyncio.run(drive())
    import pwd

    cluster.run("scancel", "-u", pwd.getpwuid(os.getuid()).pw_name)


if __name__ == "__main__":
    main()
