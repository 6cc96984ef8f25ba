"""Where a bug's traceback goes: one log file in the data dir, for every front.

A bug in gpu-router is one line for the person or agent (the CLI's stderr, an MCP tool error)
naming this log; the traceback itself is appended here, rotated at 1 MiB.
"""

from __future__ import annotations

import time
import traceback


def log_traceback(exc: BaseException, command: str | None) -> str:
    """Append the traceback to the error log; returns where it went (or why it could not)."""
    from core import __version__, paths

    try:
        log = paths.error_log_file()
        if log.exists() and log.stat().st_size > 1 << 20:
            log.replace(log.with_name(log.name + ".1"))
        with open(log, "a", encoding="utf-8", errors="replace") as f:
            f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} gpu {command or ''} "
                    f"(gpu-router {__version__})\n")
            f.write("".join(traceback.format_exception(exc)))
        return str(log)
    except Exception as log_exc:  # the log's folder may be the very thing that is broken
        return f"no log (it could not be written: {log_exc})"
