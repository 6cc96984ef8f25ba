"""`gpu grep`: one pattern searched through the logs of many jobs, newest jobs first.

A hit is what a reader would see on that line (`gpu logs`): the progress bar folded to its
last state, the text reduced to printable characters (job text is untrusted: an escape
sequence in a hit must not reach the terminal that prints it). Line numbers are job.log's,
which folding keeps. The answer is bounded twice, so a search over years of logs cannot
flood a terminal or an agent's context: at most `max_hits` hits, each at most `LINE_CHARS`
characters around its match; when the bound stopped the search, the answer says where.
"""

from __future__ import annotations

from typing import Any, Iterable

from core.display.logtail import fold_returns
from core.display.sanitize import printable
from core.display.search import BadPattern, Pattern, Span, compile_search
from core.engine.jobfiles import log_path
from core.errors import UserError
from core.jobs.store import Job, Store

MAX_HITS = 200  # `gpu grep`'s default bound
LINE_CHARS = 400  # a hit's text around its match: a 10,000-character line is not all shown


def compile_pattern(pattern: str, *, ignore_case: bool = False) -> Pattern:
    """The pattern, searched in linear time (core/display/search.py: a job's line can never
    hang the search); a bad one is the user's error, said plainly."""
    try:
        return compile_search(pattern, ignore_case=ignore_case)
    except BadPattern as e:
        raise UserError(f"bad pattern {pattern!r}: {e}",
                        fix="gpu grep takes an RE2 regular expression: drop backreferences and "
                            "lookarounds, escape special characters with a backslash "
                            "(e.g. 'loss\\(val\\)'), or quote a plain word") from None


def _clip(text: str, m: Span) -> str:
    """At most LINE_CHARS characters of the line, the match among them; cut ends say `...`."""
    if len(text) <= LINE_CHARS:
        return text
    room = max(0, LINE_CHARS - (m.end - m.start))
    start = max(0, m.start - room // 2)
    end = min(len(text), max(m.end, start + LINE_CHARS))
    start = max(0, min(start, end - LINE_CHARS))
    return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")


def _search_log(job: Job, rx: Pattern, room: int) -> tuple[list[dict[str, Any]], bool]:
    """(hits in one job's log, up to `room`; whether more were left unread)."""
    hits: list[dict[str, Any]] = []
    try:
        f = open(log_path(job), "rb")
    except FileNotFoundError:
        return hits, False
    with f:
        for number, raw in enumerate(f, 1):
            text = printable(fold_returns(raw.rstrip(b"\n")))
            m = rx.search(text)
            if m is None:
                continue
            if len(hits) == room:
                return hits, True
            hits.append({"job": job.short_id, "line": number, "text": _clip(text, m)})
    return hits, False


def grep_logs(store: Store, pattern: str, jobs: Iterable[Job] | None = None, *,
              max_hits: int = MAX_HITS, ignore_case: bool = False) -> dict[str, Any]:
    """`gpu grep --json`: {pattern, hits: [{job, line, text}], jobs_searched, truncated, stopped}.

    `jobs` are searched newest first (all of the store's when None). `truncated` is true when
    `max_hits` stopped the search; `stopped` then names the job and line it stopped after, and
    how to see more (a larger --max, or the job's own log)."""
    if max_hits < 1:
        raise UserError(f"--max {max_hits}: at least one hit must be allowed", fix="pass --max 1 or more")
    rx = compile_pattern(pattern, ignore_case=ignore_case)
    chosen = store.jobs() if jobs is None else list(jobs)
    chosen = sorted({j.id: j for j in chosen}.values(), key=lambda j: j.created_at, reverse=True)
    hits: list[dict[str, Any]] = []
    searched = 0
    doc: dict[str, Any] = {"pattern": pattern, "hits": hits, "jobs_searched": 0,
                           "truncated": False, "stopped": None}
    for job in chosen:
        found, more = _search_log(job, rx, max_hits - len(hits))
        hits.extend(found)
        searched += 1
        if more or (len(hits) == max_hits and job is not chosen[-1]):
            left = len(chosen) - searched
            where = f"after job {job.short_id} line {hits[-1]['line']}"
            doc["truncated"] = True
            doc["stopped"] = (f"stopped at {max_hits} hits, {where}"
                              + (f"; {left} older job{'s' * (left != 1)} not searched" if left else "")
                              + ": pass a larger --max, or name the jobs to search")
            break
    doc["jobs_searched"] = searched
    return doc
