"""How long `gpu gc` takes over 1,000 cached bundles, and the bytes it frees.

    python bench/gc.py [--bundles 1000] [--kb 256] [--live 50] [--reps 3]

Fills a private home with N bundles of random bytes (mtimes spread over 30 days) and a store
with `--live` queued jobs that need some of them, then times, each over a fresh copy:
  (a) `gpu gc --dry-run --json` with a cap of half the bytes: judge everything, free nothing
  (b) `gpu gc --json` with a cap of half the bytes    free the older half, LRU
  (c) `gpu gc --all --json`         free everything no live job needs
and, as the peer, `du -sb bundles` + `find bundles -mtime +15 -delete` over the same tree
(what a person would script, without knowing what a job needs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import parse_small, gpu_entry_point, log, median, private_world, timed  # noqa: E402

DAY = 86400


def fill(home: Path, n: int, kb: int, live: int) -> int:
    from core.jobs.store import Store

    bundles = home / "bundles"
    bundles.mkdir(parents=True, exist_ok=True)
    now = time.time()
    total = 0
    blob = os.urandom(kb * 1024)
    for i in range(n):
        path = bundles / f"{i:064x}.tar.gz"
        path.write_bytes(blob[: kb * 1024 - (i % 7)])  # not all the same size
        t = now - DAY - (i * 30 * DAY / n)
        os.utime(path, (t, t))
        total += path.stat().st_blocks * 512
    store = Store()
    for j in range(live):
        key = f"{(j * n // max(live, 1)):064x}"
        store.insert_job({"id": f"{j:032x}", "short_id": f"{j:08x}", "name": "b", "provider": "local",
                          "project_dir": "/p", "outputs_dir": "/p/runs/x", "fingerprint": f"fp{j}",
                          "bundle_hash": key, "request": {"script": "a.py"}}, reason="bench", actor="bench")
        os.utime(bundles / f"{key}.tar.gz", (now - 40 * DAY, now - 40 * DAY))
    store.conn.execute("UPDATE jobs SET updated_at = ?", (now - 40 * DAY,))
    store.conn.commit()
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.conn.close()
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundles", type=int, default=1000)
    ap.add_argument("--kb", type=int, default=256)
    ap.add_argument("--live", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    a = parse_small(ap, {'bundles': 20, 'kb': 4, 'live': 5, 'reps': 1})
    world = private_world("gc")
    seed = world.tmp / "seed"
    world.set_home(seed)
    seed.mkdir()
    log(f"filling {a.bundles} bundles of {a.kb} KB and {a.live} live jobs")
    total = fill(seed, a.bundles, a.kb, a.live)
    log(f"{total / 1e6:.1f} MB on disk")
    gpu = gpu_entry_point()
    rows: dict[str, list[float]] = {}
    freed: dict[str, int] = {}
    for rep in range(a.reps):
        half = f"storage: {{home_cap_gb: {total / 2 / 1e9:.9f}}}\n"
        for name, args, cfg in (("dry-run, cap at half", ["gc", "--dry-run", "--json"], half),
                                ("cap at half", ["gc", "--json"], half),
                                ("--all", ["gc", "--all", "--json"], "{}\n")):
            home = world.tmp / f"home-{rep}-{name.replace(' ', '')}"
            shutil.copytree(seed, home)
            world.write_config(cfg)
            dt, out = timed(gpu + args, env=world.env(GPU_ROUTER_HOME=str(home)))
            doc = json.loads(out.stdout)["locations"][0]
            rows.setdefault(name, []).append(dt)
            freed[name] = doc["evict_bytes"] if name.startswith("dry-run") else doc["freed"]
            shutil.rmtree(home)
        home = world.tmp / f"home-{rep}-peer"
        shutil.copytree(seed, home)
        dt, _ = timed("du -sb bundles >/dev/null && find bundles -mtime +15 -delete", shell=True, cwd=home)
        rows.setdefault("peer: du + find -delete", []).append(dt)
        shutil.rmtree(home)
    print()
    print(f"{a.bundles} bundles, {total / 1e6:.1f} MB, {a.live} needed by live jobs; median of {a.reps}")
    peer = median(rows["peer: du + find -delete"])
    for name, samples in rows.items():
        m = median(samples)
        extra = f"  frees {freed[name] / 1e6:8.1f} MB" if name in freed else ""
        print(f"  {name:<24} {m * 1000:8.1f} ms  ({m / peer:5.2f}x the peer){extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
