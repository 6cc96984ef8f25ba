"""The launcher's log filter against the masker it replaced: lines per second, 3 secrets.

    python bench/mask.py [--lines 500000] [--reps 3]

Builds --lines log lines like a training job's (about 90 bytes each: steps, losses, colour
codes, tqdm-style carriage returns), 1 in 100 holding one of 3 secrets in some spelling (raw,
base64, an HTTP Basic header, URL-encoded with mixed escapes, hex, or with a colour code inside),
and pushes them through:
(a) the launcher's pipeline, `launch.Masker` (mask, terminal filter, mask again), in 64 KiB
    reads: what a job that prints fast gives the launcher's read loop;
(b) the old masker (copied below: bytes.replace of raw/base64/URL forms, no terminal filter);
(c) a plain copy (no masking): the floor;
(d) the same lines through a real pipe: a child process prints them (`cat`, and (d') a Python
    child that flushes after every line, as `print(..., flush=True)` does), the launcher's
    `_run_logged` copies them into a JobLog file (the code path a job's output takes); the
    Python child alone, writing to /dev/null, is timed too: reads batch up whenever the
    launcher is behind, so it keeps pace with a job that flushes every line;
(e) one line per read (a job that prints slowly: per-call overhead), on 100,000 lines.
It also checks that no raw secret reached (a) or (d). Target: the masked log still follows at
50,000 lines/s or more.
"""

from __future__ import annotations

import argparse
import base64
import random
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parse_small  # noqa: E402
from core.runtime import launch  # noqa: E402

SECRETS = ["hf_Zx8Kq2LmN4pR7sT1vW3yA5bC6dE9fG0hJk", "tok-3xAmPle/VALUE+with=chars",
           "correct horse battery staple"]
CHUNK = 65536


class OldMasker:
    """The masker before this change (core/runtime/launch.py at 9e99222), for comparison."""

    def __init__(self, values: list[str]) -> None:
        self.needles = [v.encode() for s in values for v in self.variants(s)]
        self.keep = max((len(n) for n in self.needles), default=1) - 1
        self.tail = b""

    @staticmethod
    def variants(value: str) -> list[str]:
        if len(value) < 4:
            return []
        raw = value.encode()
        forms = {value, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
                 urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value)}
        forms |= {f.rstrip("=") for f in list(forms) if f.endswith("=") and len(f.rstrip("=")) >= 4}
        return sorted(forms, key=len, reverse=True)

    def feed(self, data: bytes) -> bytes:
        buf = self.tail + data
        for needle in self.needles:
            buf = buf.replace(needle, b"[secret]")
        if self.keep and len(buf) > self.keep:
            out, self.tail = buf[:-self.keep], buf[-self.keep:]
        else:
            out, self.tail = b"", buf
        return out

    def flush(self) -> bytes:
        out, self.tail = self.tail, b""
        for needle in self.needles:
            out = out.replace(needle, b"[secret]")
        return out


def _spelling(rng: random.Random, value: str) -> str:
    raw = value.encode()
    kind = rng.randrange(6)
    if kind == 0:
        return value
    if kind == 1:
        return base64.b64encode(raw).decode()
    if kind == 2:
        return "Authorization: Basic " + base64.b64encode(b"ada:" + raw).decode()
    if kind == 3:
        return "".join(urllib.parse.quote(c, safe="") if i % 2 else c for i, c in enumerate(value))
    if kind == 4:
        return raw.hex()
    return value[:4] + "\x1b[0m" + value[4:]


def make_lines(n: int) -> list[bytes]:
    rng = random.Random(0)
    lines = []
    for i in range(n):
        r = rng.random()
        if r < 0.01:
            text = f"step {i} using {_spelling(rng, rng.choice(SECRETS))} for the hub\n"
        elif r < 0.05:
            text = (f"\x1b[32mepoch {i // 1000}\x1b[0m {rng.randrange(100)}%|#####     | {i}/{n} "
                    f"[00:0{i % 10}<00:10]\r")
        else:
            text = (f"step {i:>7} loss {rng.random():.6f} lr {rng.random() * 1e-3:.3e} "
                    f"grad_norm {rng.random() * 10:.4f} tokens/s {rng.randrange(10**5):>6}\n")
        lines.append(text.encode())
    return lines


def through(masker, data: bytes, chunk: int) -> tuple[float, bytes]:
    started = time.perf_counter()
    out = [masker.feed(data[i:i + chunk]) for i in range(0, len(data), chunk)]
    out.append(masker.flush())
    return time.perf_counter() - started, b"".join(out)


def per_line(masker, lines: list[bytes]) -> float:
    started = time.perf_counter()
    for line in lines:
        masker.feed(line)
    masker.flush()
    return time.perf_counter() - started


class Copy:
    def feed(self, data: bytes) -> bytes:
        return bytes(data)

    def flush(self) -> bytes:
        return b""


PRINTER = ("import sys\nw = sys.stdout.buffer\n"
           "for line in open(sys.argv[1], 'rb'):\n    w.write(line); w.flush()\n")


def through_pipe(command: list[str], log_path: Path, masker) -> float:
    """A child prints the lines; the launcher's own copy loop writes the job log."""
    log = launch.JobLog(str(log_path), masker)
    started = time.perf_counter()
    launch._run_logged(command, log)
    log.close()
    return time.perf_counter() - started


def alone(command: list[str]) -> float:
    """The same child writing to /dev/null: how fast it can print at all."""
    import subprocess

    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=500_000)
    ap.add_argument("--reps", type=int, default=3)
    args = parse_small(ap, {'lines': 5000, 'reps': 1})
    lines = make_lines(args.lines)
    data = b"".join(lines)
    print(f"{args.lines} lines, {len(data) / 1e6:.1f} MB, 3 secrets, "
          f"{sum(any(s[:4].encode() in ln for s in SECRETS) for ln in lines)} lines hold one")
    rows = {}
    for name, make in (("(a) launcher pipeline, 64 KiB reads", lambda: launch.Masker(SECRETS)),
                       ("(b) old masker, 64 KiB reads", lambda: OldMasker(SECRETS)),
                       ("(c) plain copy, 64 KiB reads", Copy)):
        times = []
        for _ in range(args.reps):
            took, out = through(make(), data, CHUNK)
            times.append(took)
        rows[name] = statistics.median(times)
        if name.startswith("(a)"):
            assert not any(s.encode() in out for s in SECRETS), "a raw secret got through"
    with tempfile.TemporaryDirectory(prefix="gpu-bench-mask-") as tmp:
        src, dest = Path(tmp) / "lines.txt", Path(tmp) / "job.log"
        src.write_bytes(data)
        for name, command in (("(d) launcher, `cat` -> pipe -> JobLog file", ["cat", str(src)]),
                              ("(d') launcher, a child flushing every line",
                               [sys.executable, "-c", PRINTER, str(src)])):
            times = []
            for _ in range(args.reps):
                dest.unlink(missing_ok=True)
                times.append(through_pipe(command, dest, launch.Masker(SECRETS)))
            rows[name] = statistics.median(times)
            stored = dest.read_bytes()
            assert not any(s.encode() in stored for s in SECRETS), "a raw secret reached the log file"
        rows["(d') the same child alone, to /dev/null"] = alone([sys.executable, "-c", PRINTER, str(src)])
    few = lines[:100_000]
    scale = args.lines / len(few)
    rows["(e) launcher pipeline, one line per read"] = per_line(launch.Masker(SECRETS), few) * scale
    rows["(e') old masker, one line per read"] = per_line(OldMasker(SECRETS), few) * scale
    print(f"{'path':<48} {'seconds':>8} {'lines/s':>11} {'MB/s':>7}")
    for name, took in rows.items():
        print(f"{name:<48} {took:>8.2f} {args.lines / took:>11,.0f} {len(data) / took / 1e6:>7.1f}")
    new, old = rows["(a) launcher pipeline, 64 KiB reads"], rows["(b) old masker, 64 KiB reads"]
    slowest = max(new, rows["(d) launcher, `cat` -> pipe -> JobLog file"])
    print(f"new/old time: {new / old:.2f}x; target 50,000 lines/s: "
          f"{'met' if args.lines / slowest >= 50_000 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
