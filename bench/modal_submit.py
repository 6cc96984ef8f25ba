"""Submit-to-running through the loopback Modal, and what a first and an unchanged second
submit send.

    python bench/modal_submit.py [--files 300] [--mb 2]

Runs the loopback Modal control plane (tests/fake_modal.py, reached by the official client
through MODAL_SERVER_URL) and a private keychain (tests/services.Keychain), adds a modal target
with `gpu targets add modal`, and submits a committed git project of --files files twice through
the installed `gpu` (the second with another --env: a new job on the same bundle). For each it
prints the RPCs made (by method), the file bytes uploaded into mounts (MountPutFile), the bytes
of all requests, and the wall time from `gpu submit` to `running` and to `done`.
Target: the second submit uploads no file (every content hash is known). Keep the bundle under
the client's 4 MiB blob limit: the fake does not serve Modal's HTTP blob store.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import parse_small, gpu_doc as gpu, log, make_code_project, private_world  # noqa: E402

JOB = """import time, gpu
gpu.log(step=0, ok=1)
time.sleep(1)
(gpu.output_dir() / "done.txt").write_text("ok")
"""
TOKEN = "ak-bench0id as-bench0secret"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--mb", type=float, default=2)
    a = parse_small(ap, {'files': 20, 'mb': 0.1})
    world = private_world("modal-submit")
    from tests.fake_modal import FakeModal
    from tests.services import Keychain

    keychain = Keychain(world.tmp / "keychain")
    os.environ.update(keychain.env)
    tid, secret = TOKEN.split()
    fake = FakeModal(world.tmp / "modal", token_id=tid, token_secret=secret)
    os.environ.update(GPU_ROUTER_TICK_S="0.2", MODAL_SERVER_URL=fake.url,
                      MODAL_CONFIG_PATH=str(world.tmp / "no-modal.toml"))
    try:
        gpu("targets", "add", "modal", "md", "--token-stdin", "--json", input=TOKEN + "\n")
        project = make_code_project(world.tmp / "project", a.files, a.mb, JOB)
        log(f"project: {a.files} files, ~{a.mb:g} MB")
        rows = []
        for run in (1, 2):
            mark, up0 = len(fake.calls), fake.uploaded_bytes
            t0 = time.perf_counter()
            sub = gpu("submit", "job.py", "--provider", "md", "--hours", "0.1", "--env", f"RUN={run}",
                      "--wait-s", "0", "--json", "--project-dir", str(project))
            short = sub["job"]["short_id"]
            to_running = None
            while True:
                doc = gpu("status", short, "--json")
                if doc["state"] == "running" and to_running is None:
                    to_running = time.perf_counter() - t0
                if doc["state"] in ("done", "failed", "cancelled"):
                    break
                time.sleep(0.1)
            wall = time.perf_counter() - t0
            if doc["state"] != "done":
                raise SystemExit(f"job {short} {doc['state']}: {doc.get('reason')}")
            calls = fake.calls[mark:]
            sent = sum(len(c["raw"]) for c in calls)
            by = collections.Counter(c["method"] for c in calls)
            rows.append((fake.uploaded_bytes - up0, sent, len(calls), by, to_running or wall, wall))
            log(f"submit {run}: uploaded {fake.uploaded_bytes - up0:,} file bytes, {sent:,} request bytes, "
                f"{len(calls)} calls, submit -> running {to_running or wall:.2f} s, -> done {wall:.2f} s")
        (u1, s1, n1, by1, r1, w1), (u2, s2, n2, by2, r2, w2) = rows
        print()
        print(f"{'':28}{'first':>14}{'second':>14}")
        print(f"{'file bytes uploaded':28}{u1:>14,}{u2:>14,}")
        print(f"{'all request bytes':28}{s1:>14,}{s2:>14,}")
        print(f"{'RPCs':28}{n1:>14}{n2:>14}")
        for method in sorted(set(by1) | set(by2)):
            print(f"  {method:26}{by1.get(method, 0):>14}{by2.get(method, 0):>14}")
        print(f"{'submit -> running':28}{r1:>13.2f}s{r2:>13.2f}s")
        print(f"{'submit -> done':28}{w1:>13.2f}s{w2:>13.2f}s")
        print("target: the second submit uploads no file:", "MET" if u2 == 0 else "NOT MET")
    finally:
        fake.close()
        world.cleanup()
        keychain.close()


if __name__ == "__main__":
    main()
