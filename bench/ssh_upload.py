"""What a second submit of an unchanged project to an ssh target sends, against the first.

    python bench/ssh_upload.py [--files 2000] [--mb 20] [--data-mb 50]

Starts a private OpenSSH server on 127.0.0.1 (tests/services.Sshd: its own host key and user
key), adds it as target `box` with `gpu targets add ssh`, builds a committed git project of
--files files (~--mb MB, half of it incompressible) plus a --data-mb MB data folder passed with
--data, and submits it twice through the installed `gpu` (the second with a different --env, so
it is a new job on the same bundle). For each it prints the bytes the provider sent for the
attempt (bundle, runtime, data, spec and the launcher's stdin: the handle's `uploaded_bytes`),
the launch time on the supervisor's side (`launch_s`: uploads, unpacking, starting the
launcher) and the wall time from `gpu submit` to the job running. Target: the second submit
sends only the attempt's spec (a few KB) and nothing of the bundle, runtime or data.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import parse_small, gpu_doc as gpu, log, make_code_project, private_world  # noqa: E402

JOB = """import gpu, time
gpu.log(step=0, ok=1)
(gpu.output_dir() / "done.txt").write_text("ok")
"""


def wait(short: str, states: set[str], timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = gpu("status", short, "--json", "--verbose")
        if doc["state"] in states:
            return doc
        time.sleep(0.1)
    raise SystemExit(f"job {short} did not reach {states}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--mb", type=float, default=20)
    ap.add_argument("--data-mb", type=float, default=50)
    a = parse_small(ap, {'files': 20, 'mb': 0.1, 'data_mb': 0.5})
    world = private_world("ssh-upload")
    os.environ["GPU_ROUTER_TICK_S"] = "0.2"
    from tests.services import Sshd

    sshd = Sshd(world.tmp / "sshd")
    try:
        o = sshd.target_options(world.tmp / "remote", getattr(sys, "_base_executable", sys.executable))
        gpu("targets", "add", "ssh", "box", "--host", o["host"], "--port", str(o["port"]), "--user", o["user"],
            "--key", o["key"], "--known-hosts", o["known_hosts"], "--root", o["root"], "--python", o["python"],
            "--max-jobs", "2", "--json")
        project = make_code_project(world.tmp / "project", a.files, a.mb, JOB)
        data = world.tmp / "dataset"
        data.mkdir()
        for i in range(10):
            (data / f"part{i}.bin").write_bytes(os.urandom(int(a.data_mb * 1024 * 1024 / 10)))
        log(f"project: {a.files} files, ~{a.mb:g} MB; data: {a.data_mb:g} MB; sshd on 127.0.0.1:{sshd.port}")
        rows = []
        for run in (1, 2):
            t0 = time.perf_counter()
            sub = gpu("submit", "job.py", "--provider", "box", "--hours", "0.1", "--data", f"ds={data}",
                      "--env", f"RUN={run}", "--wait-s", "0", "--json", "--project-dir", str(project))
            short = sub["job"]["short_id"]
            running = wait(short, {"running", "done", "failed"})
            to_running = time.perf_counter() - t0
            done = wait(short, {"done", "failed"})
            if done["state"] != "done":
                raise SystemExit(f"job {short} {done['state']}: {done['reason']}")
            h = done["handle"]
            rows.append((run, h["uploaded_bytes"], h["launch_s"], to_running))
            log(f"submit {run}: sent {h['uploaded_bytes']:,} bytes, launch {h['launch_s']:.3f} s, "
                f"submit -> running {to_running:.2f} s (state seen: {running['state']})")
        (_, b1, l1, w1), (_, b2, l2, w2) = rows
        print()
        print(f"{'':24}{'first':>16}{'second':>16}")
        print(f"{'bytes sent':24}{b1:>16,}{b2:>16,}")
        print(f"{'launch (supervisor)':24}{l1:>15.3f}s{l2:>15.3f}s")
        print(f"{'submit -> running':24}{w1:>15.2f}s{w2:>15.2f}s")
        print(f"second/first bytes: {b2 / b1:.5f}   launch: {l2 / l1:.2f}x")
        print("target: the second submit sends only the attempt's spec (a few KB):",
              "MET" if b2 < 8192 else "NOT MET")
    finally:
        world.cleanup()
        sshd.close()


if __name__ == "__main__":
    main()
