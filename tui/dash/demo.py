"""A seeded demo store with a fixed clock: for screenshots, snapshot tests and benchmarks.

Everything is deterministic (ids, times, metrics, logs) so an SVG of the dashboard is the
same on every machine.
"""

from __future__ import annotations

import math

from core import paths
from core.jobs.states import State
from core.jobs.store import Store

NOW = 1_796_000_000.0  # the demo's fixed "now" (2026-11-30)

# Targets with declared GPUs, so no machine's own GPUs leak into screenshots. `kaggle` is a
# Kaggle target (its 2x T4 from its accelerator): `seed` leaves a fresh probe of it in the
# cache, so the demo shows it as a Kaggle account would, without asking Kaggle.
CONFIG = """\
targets:
  local: {kind: local, gpus: [{name: RTX 4090, memory_gb: 24}]}
  lab-a100: {kind: local, price_per_hour: 1.2, max_jobs: 4, gpus: [{name: A100, memory_gb: 80}, {name: A100, memory_gb: 80}, {name: A100, memory_gb: 80}, {name: A100, memory_gb: 80}]}
  kaggle: {kind: kaggle, hours_per_week: 30, max_jobs: 2, accelerator: t4x2}
"""

_PLAN = {"target": "local", "gpu": "1x RTX 4090", "price_per_hour": 0.0, "estimated_price": 0.0,
         "reasons": ["local fits (1x RTX 4090) and is free"], "passed_over": {}, "holds": [],
         "workdir": "", "env": {}, "secrets": [], "data": {}, "python_file": True}

JOBS = [
    # (n, name, state path, hours, target, gpu, price, minutes ago created, run minutes, holds)
    (1, "llama-lora", ["routing", "provisioning", "running"], 2.0, "lab-a100", "4x A100", 1.2, 95, None, []),
    (2, "yolo-train", ["routing", "provisioning", "running"], 0.5, "local", "1x RTX 4090", 0.0, 20, None, []),
    (3, "sweep-lr3e-4", ["routing", "awaiting_approval"], 3.0, "kaggle", "2x T4", 0.0, 3, None,
     [{"rule": "agent_hours", "reason": "it was submitted without a terminal (by an agent) for 3 hours, over the 1-hour limit for unattended jobs"}]),
    (4, "eval-mmlu", ["routing", "provisioning", "running", "done"], 0.25, "local", "1x RTX 4090", 0.0, 240, 14, []),
    # attempt 1 on kaggle, whose session was lost; moved to lab-a100 from checkpoint 2 (MOVED)
    (5, "bert-finetune", ["routing", "provisioning", "running", "migrating", "provisioning", "running", "failed"],
     1.0, "lab-a100", "4x A100", 1.2, 300, 38, []),
    (6, "smoke-test", ["routing", "cancelled"], 0.1, "local", "1x RTX 4090", 0.0, 400, None, []),
]


# job 5's move, as the supervisor records one (core/engine/jobmoves.py): why, from which checkpoint
MOVED_CKPT = {"generation": 2, "bytes": 48_200_000, "files": 3, "age_s": 40.0, "target": "kaggle", "attempt": 1}
MOVED_WHY = "session lost: kaggle unreachable for 180 s"
# seconds after the job's creation of each of job 5's events, in order
MOVED_TIMES = [0, 1, 2, 30, 60, 1560, 1600, 1640, 1660, 2340]


def _id(n: int) -> str:
    return f"{n:02d}c0ffee" + "0" * 24


def seed(store: Store | None = None, with_logs: bool = True) -> Store:
    store = store or Store()
    for n, name, states, hours, target, gpu, price, ago, ran, holds in JOBS:
        jid = _id(n)
        plan = {**_PLAN, "target": target, "gpu": gpu, "price_per_hour": price, "hours": hours,
                "reasons": [f"{target} fits ({gpu}) and is " + ("free" if not price else f"${hours * price:.2f} for the estimate")],
                "estimated_price": round(hours * price, 2), "holds": holds,
                "command": ["train.py", "--config", f"configs/{name}.yaml"]}
        plan["digest"] = f"{n:02d}" + "ab" * 31
        if holds:
            from core.planning.policy import tell_user

            plan["tell_user"] = tell_user(jid[:8], name, plan, holds)
            plan["hold_kind"] = "rules"
        store.insert_job({
            "id": jid, "short_id": jid[:8], "name": name, "provider": target,
            "project_dir": "/home/ada/code/" + name, "outputs_dir": f"/home/ada/code/{name}/runs/{jid[:8]}",
            "fingerprint": f"demo{n}", "request": {"script": "train.py", "hours": hours, "data": [],
                                                   "args": ["--config", f"configs/{name}.yaml"]},
            "plan": plan, "digest": plan["digest"], "bundle_hash": "b" * 64,
            "bundle": {"files": 40 + n, "bytes": 180_000 * n, "hint": "train.py refers to data/, which did not ship (ignored by git): pass it as data (`--data data=data`, read at gpu.data_dir()/data) or, if it is code, ship it with `include: [data/]`",
                       "left_out": [{"path": "data/", "files": 1200, "bytes": 2_400_000_000, "reason": "ignored by git"}]},
        }, reason="submitted by agent (no terminal)", actor="agent (no terminal)")
        if n == 5:
            _moved_journey(store, jid)
        for st in ([] if n == 5 else states):
            reason = {"routing": f"{target} fits ({gpu})", "awaiting_approval": "held for approval: " + "; ".join(h["reason"] for h in holds),
                      "provisioning": f"placed on {target}", "running": "started",
                      "done": "exited with status 0", "failed": "exited with status 1: CUDA out of memory",
                      "cancelled": "cancelled by ada (terminal)"}[st]
            store.transition(jid, State(st), reason)
        created = NOW - ago * 60
        started = created + 60 if "running" in states else None
        ended = (started + ran * 60) if ran and started else (created + 120 if states[-1] == "cancelled" else None)
        store.conn.execute("UPDATE jobs SET created_at=?, updated_at=?, started_at=?, ended_at=?, exit_code=? WHERE id=?",
                           (created, created + 1, started, ended,
                            {"done": 0, "failed": 1}.get(states[-1]), jid))
        if n == 5:
            ids = [r[0] for r in store.conn.execute("SELECT id FROM events WHERE job_id = ? ORDER BY id", (jid,))]
            for event_id, after in zip(ids, MOVED_TIMES):
                store.conn.execute("UPDATE events SET ts = ? WHERE id = ?", (created + after, event_id))
        else:
            store.conn.execute("UPDATE events SET ts = ? + (id % 97) WHERE job_id = ?", (created, jid))
        if "running" in states:
            points = {1: 900, 2: 400, 4: 250, 5: 60}[n]
            rows = []
            for step in range(points):
                loss = 2.5 * math.exp(-step / (points / 4)) + 0.15 + 0.05 * math.sin(step / 7.0)
                rows.append((step, "loss", round(loss, 5), created + 60 + step))
                if step % 10 == 0:
                    rows.append((step, "lr", 3e-4 * (1 - step / points), created + 60 + step))
            last = {"loss": rows[-1][2] if rows[-1][1] == "loss" else rows[-2][2], "_step": points - 1}
            store.add_metrics(jid, rows, 0, last)
        if with_logs:
            log = paths.jobs_dir() / jid / "job.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            lines = ["[gpu-router] dependencies: reusing environment 74e4ce24a07d",
                     "[gpu-router] attempt 1: running train.py"]
            lines += [f"step {s:5d}  loss {2.5 * math.exp(-s / 100) + 0.15:.4f}" for s in range(0, 400, 20)]
            if states[-1] == "failed":
                lines += ["", "[gpu-router] moved from kaggle to lab-a100: " + MOVED_WHY,
                          "[gpu-router] attempt 2: running train.py", "resumed from checkpoint 2 at step 380",
                          "Traceback (most recent call last):",
                          '  File "train.py", line 88, in <module>', "    loss = model(**batch).loss",
                          "RuntimeError: CUDA out of memory"]
            log.write_text("\n".join(lines) + "\n")
    _seed_kaggle_probe()
    return store


def _moved_journey(store: Store, jid: str) -> None:
    """Job 5's events as the supervisor writes a move: placed on kaggle, its session lost,
    moved to lab-a100 from checkpoint 2, failed there (what the journey is read from)."""
    store.transition(jid, State.ROUTING, "kaggle fits (2x T4) and is free", data={"target": "kaggle"})
    store.transition(jid, State.PROVISIONING, "placed on kaggle", attempt=1)
    store.add_event(jid, "attempt 1 started on kaggle", data={"attempt": 1})
    store.transition(jid, State.RUNNING, "started")
    store.transition(jid, State.MIGRATING, MOVED_WHY + "; moving it to another target")
    store.transition(jid, State.PROVISIONING,
                     f"migrating from kaggle to lab-a100: {MOVED_WHY}, from checkpoint 2 (48.2 MB, 40 s old)",
                     attempt=2, data={"from": "kaggle", "to": "lab-a100", "why": MOVED_WHY, "checkpoint": MOVED_CKPT})
    store.add_event(jid, "attempt 2 started on lab-a100", data={"attempt": 2})
    store.transition(jid, State.RUNNING, "started")
    store.transition(jid, State.FAILED, "exited with status 1: CUDA out of memory")


def _seed_kaggle_probe() -> None:
    """A fresh probe of the demo's Kaggle target in the probe cache (a Kaggle account with
    its weekly quota), so the dashboard shows it without credentials or a network."""
    from core.config.user import load
    from core.engine.targets import remember_probe

    target = load().targets.get("kaggle")
    if target is not None and target.kind == "kaggle":  # not under a test's own config
        remember_probe("kaggle", quota_hours_left=21.5)


def main() -> None:
    seed()
    from tui.show.output import emit_json

    emit_json({"home": str(paths.home())})


if __name__ == "__main__":
    main()


SWEEP_GROUP = "5eed" + "0" * 28  # the demo sweep's group id (seed_sweep)
SWEEP_POINTS = [(7, 3e-4), (8, 1e-3), (9, 3e-3)]  # (n, LR): three points of one sweep, running


def seed_sweep(store: Store | None = None) -> Store:
    """A sweep of three running points (LR 3e-4, 1e-3, 3e-3), each with its own loss curve, on
    top of `seed`'s jobs: the dashboard's overlaid charts and a sweep's approval, deterministic."""
    store = store or Store()
    created = NOW - 10 * 60
    points = [{"LR": lr} for _, lr in SWEEP_POINTS]
    with store.write() as db:
        store.insert_group({"id": SWEEP_GROUP, "short_id": SWEEP_GROUP[:8], "name": "lr-sweep",
                            "created_at": created, "project_dir": "/home/ada/code/lr-sweep",
                            "request_id": None, "fingerprint": "demo-sweep", "digest": "5e" * 32,
                            "spec": {"points": points, "targets": {"lab-a100": 3}, "hours": 1.5,
                                     "estimated_price": 1.8, "holds": []},
                            "max_parallel": None, "approval": "approved"}, db)
    for i, (n, lr) in enumerate(SWEEP_POINTS):
        jid = _id(n)
        plan = {**_PLAN, "target": "lab-a100", "gpu": "1x A100", "price_per_hour": 1.2, "hours": 0.5,
                "estimated_price": 0.6, "command": ["train.py", "--lr", str(lr)], "point": {"LR": lr},
                "group": {"id": SWEEP_GROUP, "short_id": SWEEP_GROUP[:8], "index": i + 1, "max_parallel": None},
                "digest": f"{n:02d}" + "cd" * 31}
        store.insert_job({
            "id": jid, "short_id": jid[:8], "name": f"lr-sweep[LR={lr}]", "provider": "lab-a100",
            "project_dir": "/home/ada/code/lr-sweep", "outputs_dir": f"/home/ada/code/lr-sweep/runs/{jid[:8]}",
            "fingerprint": f"demo{n}", "request": {"script": "train.py", "hours": 0.5, "data": [],
                                                   "args": ["--lr", str(lr)], "env": {"LR": str(lr)}},
            "plan": plan, "digest": plan["digest"], "bundle_hash": "b" * 64, "group_id": SWEEP_GROUP,
            "bundle": {"files": 12, "bytes": 90_000},
        }, reason="submitted by agent (no terminal) as a point of sweep 5eed0000", actor="agent (no terminal)")
        for st in ("routing", "provisioning", "running"):
            store.transition(jid, State(st), {"routing": "lab-a100 fits (1x A100)", "provisioning": "placed on lab-a100",
                                              "running": "started"}[st])
        at = created - i  # the first point is the newest row
        store.conn.execute("UPDATE jobs SET created_at=?, updated_at=?, started_at=? WHERE id=?",
                           (at, at + 1, at + 60, jid))
        store.conn.execute("UPDATE events SET ts = ? + (id % 97) WHERE job_id = ?", (at, jid))
        rows = []
        rate = {3e-4: 60.0, 1e-3: 25.0, 3e-3: 10.0}[lr]
        for step in range(300):
            loss = 2.0 * math.exp(-step / rate) + 0.2 + 0.1 * i + 0.03 * math.sin(step / 5.0)
            rows.append((step, "loss", round(loss, 5), at + 60 + step))
        store.add_metrics(jid, rows, 0, {"loss": rows[-1][2], "_step": 299})
        log = paths.jobs_dir() / jid / "job.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("[gpu-router] attempt 1: running train.py --lr %s\n" % lr
                       + "".join(f"step {s:4d}  loss {r[2]:.4f}\n" for s, r in zip(range(0, 300, 30), rows[::30])))
    return store
