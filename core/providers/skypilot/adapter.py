"""The SkyPilot adapter: a small script run with SkyPilot's own venv python, never imported
by gpu-router (which never imports `sky`: SkyPilot pins click, bcrypt and uvicorn versions of
its own and lives in its own venv, core/providers/skypilot/venv.py).

It speaks JSON lines. Each request on stdin is one line

    {"id": 7, "op": "launch", "args": {...}}

and each gets exactly one answer on stdout,

    {"id": 7, "ok": true, "result": ...}     or
    {"id": 7, "ok": false, "error": {"type": "ClusterDoesNotExist", "message": "..."}}

An operation that streams (`logs`, and `launch`/`down`/`check` with "stream": true) first
sends its output as lines, `{"id": 7, "line": "..."}`, then its answer. Requests run each in
a thread, so a `logs` that follows a job does not hold up a `status`; answers may come in any
order and are matched by id. The real stdout is kept for the protocol only: anything SkyPilot
prints goes to stderr, so a stray print can never break a line of the protocol.

Operations (all through the SDK, `sky.client.sdk`, against the API server the environment
names, and checked against SkyPilot 0.14.1's signatures):
    version, check, prices, launch, status, queue, logs, cancel, down, cost_report.

The standard library only at import: `sky` is imported on the first request, so importing
this module (as gpu-router's own tests do, to check its layout) needs no SkyPilot.
"""

from __future__ import annotations

import enum
import io
import json
import os
import queue
import re
import sys
import threading
import traceback
from typing import Any, Callable

# Every match begins with ESC or is CR: core/runtime/frames.py escapes any job line that holds
# either, so what this takes out never makes a job's line begin as a frame does.
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\r")
MAX_MESSAGE = 4000  # an error's message is one readable paragraph, not a whole log
MAX_LINE = 256 * 1024  # characters a streamed line's message carries: a longer one goes in pieces


def plain(text: str) -> str:
    """SkyPilot's messages without colour codes or carriage returns."""
    return ANSI.sub("", text)


class Wire:
    """The protocol's output: one JSON object a line, written whole under a lock."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def send(self, doc: dict) -> None:
        line = json.dumps(doc, default=str, ensure_ascii=False)
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


class LineStream(io.TextIOBase):
    """A text stream SkyPilot writes its output to: each whole line goes out as a message."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.buf = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        """Whole lines out, each in pieces of at most MAX_LINE (gpu-router reads the protocol a
        line at a time, within a limit); text that never ends a line, once that long."""
        self.buf += text
        while "\n" in self.buf or len(self.buf) >= MAX_LINE:
            at = self.buf.find("\n")
            if at < 0 or at > MAX_LINE:
                line, self.buf = self.buf[:MAX_LINE], self.buf[MAX_LINE:]
            else:
                line, self.buf = self.buf[:at], self.buf[at + 1:]
            self.emit(plain(line))
        return len(text)

    def flush(self) -> None:
        pass

    def close_out(self) -> None:
        if self.buf:
            self.emit(plain(self.buf))
            self.buf = ""


def jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON-safe copy of what the SDK returns (pydantic models, enums, named tuples)."""
    if depth > 8:
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):  # ClusterStatus.UP -> "UP"
        return jsonable(value.value, depth + 1)
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if hasattr(value, "_asdict"):
        return jsonable(value._asdict(), depth + 1)
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v, depth + 1) for v in value]
    if hasattr(value, "model_dump"):
        fields = getattr(type(value), "model_fields", None) or {}
        return {k: jsonable(getattr(value, k, None), depth + 1) for k in fields}
    return str(value)


# -- the operations -------------------------------------------------------------------------


def _sdk():
    from sky.client import sdk

    return sdk


def op_version(args: dict, emit: Callable[[str], None]) -> dict:
    import sky

    out = {"skypilot": sky.__version__, "commit": getattr(sky, "__commit__", None),
           "python": sys.version.split()[0]}
    if args.get("server", True):
        info = _sdk().api_info()
        out["server"] = {"status": jsonable(getattr(info, "status", None)),
                         "version": getattr(info, "version", None),
                         "api_version": getattr(info, "api_version", None)}
    return out


_DISABLED = re.compile(r"^\s*(?:[✔✘x]\s*)?([A-Za-z][\w .-]*?):\s*disabled\b", re.I)
_REASON = re.compile(r"^\s*Reason:\s*(.*)$")
_NOTE = re.compile(r"^\s*Note: The following clouds were disabled because (.*?): (.*)$")


def op_check(args: dict, emit: Callable[[str], None]) -> dict:
    """Which clouds are enabled (and for what), and for the others what SkyPilot says is missing.

    The enabled ones are the request's result; the reasons for the others exist only in the
    check's printed output, which is read here line by line (`X: disabled` then `Reason: ...`)
    and also returned whole in `output`."""
    sdk = _sdk()
    clouds = args.get("clouds")
    lines: list[str] = []

    def keep(line: str) -> None:
        lines.append(line)
        if args.get("stream"):
            emit(line)

    out = LineStream(keep)
    result = sdk.stream_and_get(sdk.check(tuple(clouds) if clouds else None, verbose=False), output_stream=out)
    out.close_out()
    workspaces = jsonable(result) or {}
    enabled: dict[str, list[str]] = {}
    for caps in workspaces.values():
        for cloud, what in (caps or {}).items():
            enabled.setdefault(str(cloud).lower(), sorted({*enabled.get(str(cloud).lower(), []), *what}))
    disabled: dict[str, str] = {}
    current = None
    for line in lines:
        m = _DISABLED.match(line)
        if m:
            current = m.group(1).strip().lower()
            disabled[current] = ""
            continue
        r = _REASON.match(line)
        if r and current is not None and not disabled[current]:
            disabled[current] = r.group(1).strip()
        elif current is not None and disabled[current] == "" and line.strip() and not line.strip().endswith(":"):
            disabled[current] = line.strip()
    for line in lines:  # "Note: The following clouds were disabled because <why>: A, B, C"
        m = _NOTE.match(line)
        if m:
            for cloud in m.group(2).split(","):
                if cloud.strip():
                    disabled.setdefault(cloud.strip().lower(), m.group(1).strip())
    for cloud in enabled:
        disabled.pop(cloud, None)
    return {"enabled": enabled, "disabled": disabled, "workspaces": workspaces, "output": "\n".join(lines)}


def op_prices(args: dict, emit: Callable[[str], None]) -> dict:
    """List and spot prices per GPU type for the enabled clouds (SkyPilot's catalog; for Slurm
    the `slurm.pricing` of its config, which SkyPilot reads live), one offer a row."""
    sdk = _sdk()
    clouds = args.get("clouds") or [str(c).lower() for c in sdk.get(sdk.enabled_clouds())]
    gpus: dict[str, list[dict]] = {}
    errors: dict[str, str] = {}
    for cloud in clouds:
        try:
            found = sdk.get(sdk.list_accelerators(gpus_only=True, name_filter=args.get("gpu"), clouds=[cloud],
                                                  all_regions=True, require_price=False, case_sensitive=False))
        except Exception as e:  # one cloud's failure (no GPU nodes, an unreadable catalog) is said
            errors[cloud] = _message(e)
            continue
        for name, offers in (found or {}).items():
            for info in offers:
                row = jsonable(info)
                if isinstance(row, dict):
                    row.setdefault("cloud", cloud)
                    gpus.setdefault(str(name), []).append(row)
    out: dict[str, Any] = {"clouds": clouds, "gpus": gpus, "errors": errors}
    if "slurm" in clouds:
        from sky import skypilot_config

        out["slurm_pricing"] = jsonable(skypilot_config.get_nested(("slurm", "pricing"), None))
    return out


RESOURCE_KEYS = ("infra", "cloud", "region", "zone", "instance_type", "cpus", "memory", "accelerators",
                 "use_spot", "disk_size", "image_id", "ports", "labels", "max_hourly_cost")


def op_launch(args: dict, emit: Callable[[str], None]) -> dict:
    """Launch (or reuse) a cluster and run one task on it; returns once the job is submitted.

    `resources` takes the keys of sky.Resources in RESOURCE_KEYS; `max_hourly_cost` is passed
    only where the installed SkyPilot's Resources takes it (0.14 does) and is an error
    otherwise, never silently dropped. SkyPilot applies it when it picks an instance type
    from a cloud's catalog, but 0.14.1 ignores it on Slurm (slurm_catalog's
    get_default_instance_type deletes it; a launch asking 1.0 an hour of a GPU priced 2.0 was
    seen to run): it is no spending limit there, and gpu-router must hold its own limit against
    `prices` before it launches. `down` is autodown (the cluster goes when its jobs end or after
    `idle_minutes_to_autostop`)."""
    import inspect

    res = dict(args.get("resources") or {})
    unknown = sorted(set(res) - set(RESOURCE_KEYS))
    if unknown:  # said before SkyPilot is even loaded: a mistake of ours, not of the cluster's
        raise ValueError(f"unknown resource keys: {', '.join(unknown)}")
    if not args.get("cluster"):
        raise ValueError("launch needs a cluster name")

    import sky

    sdk = _sdk()
    accepted = inspect.signature(sky.Resources.__init__).parameters
    missing = [k for k in res if k not in accepted]
    if missing:
        raise ValueError(f"this SkyPilot ({sky.__version__}) takes no {', '.join(missing)} in its resources")
    task = sky.Task(name=args.get("name"), setup=args.get("setup"), run=args.get("run"),
                    workdir=args.get("workdir"), envs=args.get("envs") or None,
                    num_nodes=args.get("num_nodes") or 1)
    task.set_resources(sky.Resources(**res))
    request = sdk.launch(task, cluster_name=args["cluster"],
                         idle_minutes_to_autostop=args.get("idle_minutes_to_autostop"),
                         down=bool(args.get("down", False)), retry_until_up=bool(args.get("retry_until_up", False)),
                         no_setup=bool(args.get("no_setup", False)))
    out = LineStream(emit if args.get("stream", True) else (lambda line: None))
    job_id, handle = sdk.stream_and_get(request, output_stream=out)
    out.close_out()
    return {"cluster": args["cluster"], "job_id": job_id, "request_id": str(request),
            "resources": str(getattr(handle, "launched_resources", "")) or None}


def op_status(args: dict, emit: Callable[[str], None]) -> dict:
    from sky.utils import common

    sdk = _sdk()
    refresh = common.StatusRefreshMode.AUTO if args.get("refresh") else common.StatusRefreshMode.NONE
    names = args.get("clusters")
    if isinstance(names, str):
        names = [names]
    records = sdk.get(sdk.status(names or None, refresh=refresh))
    clusters = []
    for r in records or []:
        get = (lambda k: getattr(r, k, None)) if not isinstance(r, dict) else r.get
        clusters.append({"name": get("name"), "status": jsonable(get("status")),
                         "launched_at": get("launched_at"), "resources": get("resources_str"),
                         "autostop": get("autostop"), "to_down": get("to_down"),
                         "cloud": get("cloud"), "region": get("region"), "zone": get("zone")})
    return {"clusters": clusters}


def op_queue(args: dict, emit: Callable[[str], None]) -> dict:
    sdk = _sdk()
    jobs = sdk.get(sdk.queue(args["cluster"], skip_finished=bool(args.get("skip_finished", False))))
    rows = []
    for j in jobs or []:
        get = (lambda k: getattr(j, k, None)) if not isinstance(j, dict) else j.get
        rows.append({"job_id": get("job_id"), "name": get("job_name"), "status": jsonable(get("status")),
                     "submitted_at": get("submitted_at"), "start_at": get("start_at"), "end_at": get("end_at"),
                     "resources": get("resources")})
    return {"cluster": args["cluster"], "jobs": rows}


def op_logs(args: dict, emit: Callable[[str], None]) -> dict:
    """A job's log as lines (messages), then its exit code as SkyPilot reports it (0 done,
    100 failed, see sky.exceptions.JobExitCode). `follow` waits for the job to end."""
    sdk = _sdk()
    out = LineStream(emit)
    code = sdk.tail_logs(args["cluster"], args.get("job_id"), bool(args.get("follow", False)),
                         tail=int(args.get("tail", 0) or 0), output_stream=out)
    out.close_out()
    return {"cluster": args["cluster"], "job_id": args.get("job_id"), "exit_code": code}


def op_cancel(args: dict, emit: Callable[[str], None]) -> dict:
    sdk = _sdk()
    ids = args.get("job_ids")
    sdk.get(sdk.cancel(args["cluster"], all=not ids, job_ids=ids or None))
    return {"cluster": args["cluster"], "job_ids": ids}


def op_down(args: dict, emit: Callable[[str], None]) -> dict:
    sdk = _sdk()
    out = LineStream(emit if args.get("stream", True) else (lambda line: None))
    sdk.stream_and_get(sdk.down(args["cluster"], purge=bool(args.get("purge", False))), output_stream=out)
    out.close_out()
    return {"cluster": args["cluster"]}


def op_cost_report(args: dict, emit: Callable[[str], None]) -> dict:
    """Every cluster's cost as SkyPilot computes it (at report time, from the current config)."""
    sdk = _sdk()
    rows = []
    for r in sdk.get(sdk.cost_report(days=args.get("days"))) or []:
        rows.append({"name": r.get("name"), "status": jsonable(r.get("status")),  # None once downed
                     "launched_at": r.get("launched_at"), "duration_s": r.get("duration"),
                     "usage_intervals": jsonable(r.get("usage_intervals")),  # [start, end|None]
                     "num_nodes": r.get("num_nodes"), "cost": r.get("total_cost"),
                     "cloud": r.get("cloud"), "region": r.get("region"),
                     "accelerators": r.get("accelerators"),
                     "resources": str(r.get("resources")) if r.get("resources") is not None else None})
    return {"clusters": rows}


OPS: dict[str, Callable[[dict, Callable[[str], None]], Any]] = {
    "version": op_version, "check": op_check, "prices": op_prices, "launch": op_launch,
    "status": op_status, "queue": op_queue, "logs": op_logs, "cancel": op_cancel, "down": op_down,
    "cost_report": op_cost_report,
}


def _message(e: BaseException) -> str:
    text = plain(str(e)).strip() or type(e).__name__
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " ..."


def handle(wire: Wire, line: str) -> None:
    """One request, start to answer; every failure is an answer, never a dead adapter."""
    rid: Any = None
    try:
        doc = json.loads(line)
        if not isinstance(doc, dict):
            raise ValueError("a request is a JSON object")
        rid = doc.get("id")
        op = OPS.get(doc.get("op"))
        if op is None:
            raise ValueError(f"unknown operation {doc.get('op')!r} (known: {', '.join(OPS)})")
        args = doc.get("args") or {}
        if not isinstance(args, dict):
            raise ValueError("args is a JSON object")
        result = op(args, lambda text: wire.send({"id": rid, "line": text}))
        wire.send({"id": rid, "ok": True, "result": jsonable(result)})
    except BaseException as e:  # noqa: BLE001 - the answer says what went wrong
        sys.stderr.write(f"request {rid!r} failed:\n{traceback.format_exc()}")
        wire.send({"id": rid, "ok": False, "error": {"type": type(e).__name__, "message": _message(e)}})


def main() -> int:
    # the protocol keeps the real stdout; fd 1 (what SkyPilot and its subprocesses print to)
    # becomes stderr
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    wire = Wire(proto)
    threads = []
    ordered: queue.Queue = queue.Queue()  # `check` then `prices`, one after the other (IN_ORDER)
    worker = threading.Thread(target=_in_order, args=(wire, ordered), daemon=True)
    worker.start()
    for line in sys.stdin:
        if not line.strip():
            continue
        if _op_of(line) in IN_ORDER:
            ordered.put(line)
            continue
        t = threading.Thread(target=handle, args=(wire, line), daemon=True)
        t.start()
        threads.append(t)
    ordered.put(None)
    for t in [*threads, worker]:  # stdin closed: finish what was asked, then end
        t.join()
    return 0


# answered one after the other, in the order asked: once, in a test session's first probe of a
# fresh API server, a `prices` run beside `check` listed no GPU while the check said slurm was
# enabled (a race with the check enabling it is the one in sight); in order, prices reads the
# clouds the check has just settled
IN_ORDER = {"check", "prices"}


def _op_of(line: str) -> str | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    return doc.get("op") if isinstance(doc, dict) else None


def _in_order(wire: Wire, lines: "queue.Queue") -> None:
    while (line := lines.get()) is not None:
        handle(wire, line)


if __name__ == "__main__":
    sys.exit(main())
