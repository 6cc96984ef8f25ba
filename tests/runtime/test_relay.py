"""core/runtime/relay.py, as a Kaggle kernel or a Modal function runs it: the job's log lines
and metric rows, written by the job while two relay threads copy them to one standard output,
all reach home, each on a line of its own (logmirror.split is what home reads them with)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from core.providers import logmirror

RUNTIME = Path(__file__).resolve().parents[2] / "core" / "runtime"

# stands in for launch.py --foreground: writes the log and the metrics as a busy job does
LAUNCHER = '''
import json, sys
spec = json.load(open(sys.argv[2]))
with open(spec["log"], "a") as log, open(spec["env"]["GPU_ROUTER_METRICS_FILE"], "a") as met:
    for i in range({n}):
        log.write(f"log line {{i}}\\n")
        met.write(json.dumps({{"step": i, "loss": i / 7}}) + "\\n")
        if i % 50 == 0:
            log.flush(); met.flush()
'''

KERNEL = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import relay
spec = json.load(open(sys.argv[2]))
code, asked = relay.run(spec, sys.argv[2], sys.argv[3], None, "session time limit")
sys.exit(code)
'''


def test_every_metric_row_and_log_line_comes_through_on_its_own_line(tmp_path: Path) -> None:
    """Unbuffered standard output (PYTHONUNBUFFERED, as this suite's machines and many
    containers set it) makes print()'s text and its newline two writes: the two relay threads
    must not put a metric row and a log line on one line (the row would be lost as log)."""
    n = 3000
    spec = {"log": str(tmp_path / "job.log"), "attempt_dir": str(tmp_path),
            "env": {"GPU_ROUTER_METRICS_FILE": str(tmp_path / "metrics.jsonl"),
                    "GPU_ROUTER_CONTROL_DIR": str(tmp_path)}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "launch.py").write_text(LAUNCHER.format(n=n))
    (tmp_path / "kernel.py").write_text(KERNEL)
    for _ in range(3):  # lines cross only now and then: a few runs make a crossing near certain
        proc = subprocess.run([sys.executable, str(tmp_path / "kernel.py"), str(RUNTIME),
                               str(tmp_path / "spec.json"), str(tmp_path / "launch.py")],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.returncode == 0, proc.stderr
        bodies = logmirror.split(proc.stdout)
        rows = bodies["metrics"].decode().splitlines()
        assert rows == [json.dumps({"step": i, "loss": i / 7}) for i in range(n)], \
            [row for row in rows if not row.endswith("}") or "log line" in row][:3] or "rows lost"
        assert bodies["log"].decode().splitlines() == [f"log line {i}" for i in range(n)]
        for p in (tmp_path / "job.log", tmp_path / "metrics.jsonl"):
            p.unlink()


LONG_LINES = '''
import json, sys, time
spec = json.load(open(sys.argv[2]))
with open(spec["log"], "a") as log:
    log.write("é" * 150_000 + "\\n")  # one 300 KB line (two bytes a character)
    log.flush()
    log.write("." * 100_000)  # dots for hours, no newline yet
    log.flush()
    time.sleep(1.5)
    log.write("done\\n")
'''


def test_a_long_line_goes_out_in_pieces_each_within_the_limit(tmp_path: Path) -> None:
    """A 20 MB line once went out as one, past the line limit of SkyPilot's adapter protocol,
    which broke every job's stream on that target; and dots printed without a newline were held
    until the line ended. Each piece now is at most MAX_LINE characters, and the text is whole."""
    sys.path.insert(0, str(RUNTIME))
    try:
        from relay import MAX_LINE
    finally:
        sys.path.remove(str(RUNTIME))
    spec = {"log": str(tmp_path / "job.log"), "attempt_dir": str(tmp_path),
            "env": {"GPU_ROUTER_METRICS_FILE": str(tmp_path / "metrics.jsonl"),
                    "GPU_ROUTER_CONTROL_DIR": str(tmp_path)}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "launch.py").write_text(LONG_LINES)
    (tmp_path / "kernel.py").write_text(KERNEL)
    proc = subprocess.run([sys.executable, str(tmp_path / "kernel.py"), str(RUNTIME),
                           str(tmp_path / "spec.json"), str(tmp_path / "launch.py")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = logmirror.split(proc.stdout)["log"].decode().splitlines()
    assert max(map(len, lines)) <= MAX_LINE
    assert "".join(line for line in lines if line.startswith("é")) == "é" * 150_000
    assert "".join(line for line in lines if line[:1] in ".d") == "." * 100_000 + "done"
