"""A small training loop: fits y = 3x - 1 with numpy by gradient descent.

It shows the whole gpu-router runtime: metrics with gpu.log, checkpoints in
gpu.checkpoint_dir() (and resuming from them), and a result in gpu.output_dir().
"""

import argparse
import json
import time

import numpy as np

import gpu

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--sleep", type=float, default=0.05, help="seconds per step, to watch it live")
args = parser.parse_args()

rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, size=256)
y = 3 * x - 1 + rng.normal(0, 0.05, size=x.shape)

ckpt = gpu.checkpoint_dir() / "state.json"
w, b, start = 0.0, 0.0, 0
if ckpt.exists():  # resumed after a stop or a migration: carry on, do not restart
    state = json.loads(ckpt.read_text())
    w, b, start = state["w"], state["b"], state["step"] + 1
    print(f"resuming from step {start}")

def save(step: int) -> None:
    tmp = ckpt.with_suffix(".tmp")
    tmp.write_text(json.dumps({"w": w, "b": b, "step": step}))
    tmp.replace(ckpt)

step = start
for step in range(start, args.steps):
    pred = w * x + b
    err = pred - y
    loss = float(np.mean(err ** 2))
    w -= args.lr * float(np.mean(2 * err * x))
    b -= args.lr * float(np.mean(2 * err))
    gpu.log(step=step, loss=loss, w=w, b=b)
    if step % 10 == 0:
        print(f"step {step:4d}  loss {loss:.5f}  w {w:.3f}  b {b:.3f}", flush=True)
    if step % 20 == 0 or gpu.should_checkpoint():
        save(step)
        if gpu.should_checkpoint():
            print(f"checkpoint at step {step}: asked to stop, saving and exiting", flush=True)
            raise SystemExit(0)
    time.sleep(args.sleep)

save(step)
result = {"w": w, "b": b, "final_loss": loss, "steps": args.steps}
(gpu.output_dir() / "result.json").write_text(json.dumps(result, indent=2))
print(f"done: w={w:.3f} b={b:.3f} loss={loss:.5f}")
