"""`gpu daemon`: run the supervisor, start it in the background, or say whether it runs (and
stop it), with its event loop's lag, strays left on lost targets, failing notifications and the
warm server beside it (tui/warm/server.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from tui.show.output import emit_json, say, write


def cmd_daemon(args: argparse.Namespace) -> int:
    from core.engine import daemon, supervisor

    if args.status or args.stop:
        pid = daemon.running_pid()
        if args.stop and pid:
            import signal

            os.kill(pid, signal.SIGTERM)
        from tui.warm import wire  # the one door into tui.warm: it shows and stops the warm server

        warm = wire.running_pid()
        if args.stop and warm:
            wire.stop(warm)
        from core import paths
        from core.engine import looplag, strays

        doc = {"running": pid is not None, "pid": pid, "stopped": bool(args.stop and pid)}
        lag = looplag.read(paths.home() / "supervisor-lag.json")
        if lag and lag.get("pid") == pid:
            doc["loop_lag"] = lag  # how late its event loop ran (p50/p99/max, stalls over 100 ms)
        from core.jobs.store import Store

        # copies left on lost targets, to be stopped; read without starting a supervisor: a
        # look at whether one runs (or a --stop) must not start one
        doc["strays"] = strays.pending(Store())
        from tui.cli.notify import status_doc, status_lines

        doc["notify"] = status_doc()  # apprise URLs whose last message did not arrive
        doc["warm"] = {"running": warm is not None and not args.stop, "pid": warm}  # tui/warm/server.py
        if args.json:
            emit_json(doc)
        else:
            say(f"supervisor {'pid %d %s' % (pid, 'stopping' if args.stop else 'running') if pid else 'not running'}")
            if "loop_lag" in doc:
                say(f"event loop lag: p50 {lag['p50_ms']:.1f} ms, p99 {lag['p99_ms']:.1f} ms, max "
                    f"{lag['max_ms']:.1f} ms over {lag['samples']} samples; "
                    f"{lag['stalls_over_100ms']} stalls over 100 ms")
                last = lag.get("last_minute")
                if last:
                    say(f"  in the last minute: p50 {last['p50_ms']:.1f} ms, p99 {last['p99_ms']:.1f} ms, "
                        f"max {last['max_ms']:.1f} ms")
            if warm:
                say(f"warm server pid {warm} {'stopping' if args.stop else 'running'} (an agent's "
                    "`gpu submit --json` starts there; GPU_ROUTER_WARM=0 turns it off)")
            for line in status_lines(doc["notify"]):
                say(line)
            for s in doc["strays"]:
                say(f"attempt {s['attempt']} of job {s['job'][:8]} left on {s['target']} when it moved: "
                    + ("stop sent, confirming" if s["stop_sent"] else
                       f"{s['target']} not answering; next look in {s['next_look_in_s']:.0f} s"))
        return 0
    if args.detach:
        pid = daemon.ensure_running(wait_s=10)
        if args.json:
            emit_json({"running": True, "pid": pid})
        else:
            say(f"supervisor running (pid {pid})")
        return 0
    if daemon.running_pid():
        write("a supervisor already runs for this user (gpu daemon --status)\n", sys.stderr)
        return 0
    return supervisor.main()
