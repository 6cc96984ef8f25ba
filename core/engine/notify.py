"""Telling the person who stepped away: a job waits for their approval, or it ended.

The apprise URLs under `notify:` in the user config (core/config/user.py) each get the events
they ask for (`NOTIFY_EVENTS`): approval_wait (a job held for a person: at submit, after a move,
or stopped past its hours; the message holds the exact `gpu approve ID` line and the price),
done, failed, stopped_by_rule (a kill rule, or the hours rule that stopped it) and cancelled.

One place sends them: the supervisor, which reads the store's new state moves once a tick (one
range read by event id, on its store thread), whichever process made the move (a submit held
by the rules, a person's cancel, the supervisor itself). Each move is claimed before it is sent
(the last event id read is written to `notify.json` in gpu-router's home), so a restarted
supervisor never sends it again; one killed in the middle of a send loses that message rather
than repeating it. Moves older than `MAX_AGE_S` are not sent: a supervisor that was down for a
day does not flood a phone with yesterday. A URL gets only the moves made since it was added:
the first time the supervisor sees a URL it dates it by the user config's last change (the
edit that added it, or later), kept in notify.json by a hash of the URL (never the URL, which
may hold a token), so a new URL is not sent the backlog of jobs that ended before it existed.

Sending never touches the event loop: the message is built on one thread (it reads the job's
secret values from the keychain to mask them) and sent on one thread per URL (in order per URL;
a slow service delays no other). Each try is bounded (`CONNECT_S`, `READ_S`), a failure is
tried again `TRIES` times in all, and a URL that still fails is recorded in notify.json and
shown as one line by `gpu daemon --status` (and its --json); the job is never touched.

What a message holds: the job's short id, target, price and, for an ending, its name and
reason, never a secret value nor a path of gpu-router's: every text that comes from the job goes
through the job's secret mask (core/secrets/names.NameMask, the one that masks the names of
outputs) and the terminal filter (one line, printable), and gpu-router's home, the bundle and
the project folder are replaced by words. Where the keychain cannot be read to mask a job that
holds secrets, its free text is left out and the message says so.

A job's words are quoted, never acted on (DESIGN.md, "The seams of that boundary"). A failed
job's reason is its own last error line, and its name and args are its (or its agent's)
choice: a URL there, sent verbatim, is fetched by a chat that unfurls links (a way out for a
job without network) or sits as a phishing line next to `gpu approve`. So `job_text`, the one
function every such text goes through, makes it inert: no scheme a chat turns into a link
(`https://` -> `hxxps[://]`, `mailto:` -> `mailto[:]`), no bare domain or address (`x.com` ->
`x[.]com`, `10.0.0.1` -> `10[.]0[.]0[.]1`, after NFKC so fullwidth and ideographic forms count),
no mention (`@everyone` -> `[@]everyone`), no markup that links or breaks out (`<`, `>`,
backticks, `](`), capped at EXCERPT_CHARS. An ending shows it only on quoted lines (`> `)
under a line that says so; an approval message holds none of it (not the name, the command,
the reason nor a sweep's tell_user): only gpu-router's words, numbers and the names of the
person's own targets and secrets, and points to `gpu status ID` for what would run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import unicodedata
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from core import paths
from core.config.user import NOTIFY_EVENTS, NotifyURL
from core.display.sanitize import printable
from core.errors import UserError, clip
from core.jobs.states import State
from core.jobs.store import Event, Job, Store

log = logging.getLogger("gpu-router.notify")

TRIES = 3  # tries of one message to one URL
BACKOFF_S = (1.0, 4.0)  # waits between tries
CONNECT_S = 5.0  # a try's connect and read limits (lower than the URL's own cto/rto are kept)
READ_S = 10.0
MAX_AGE_S = 900.0  # moves older than this when first read are not sent
DRAIN_S = 60.0  # how long an exiting supervisor waits for messages still being sent
STATE_NAME = "notify.json"
ERROR_CHARS = 200
EXCERPT_CHARS = 300  # characters kept of one text of the job's in a message

# the state moves a person is told about, and the event names they map to (kinds_of)
INTO = (State.AWAITING_APPROVAL, State.DONE, State.FAILED, State.CANCELLED)


@dataclass
class Notice:
    """One message: the events it counts as (a URL gets it when it asks for any of them)."""
    kinds: frozenset[str]
    title: str
    body: str
    level: str = "info"  # apprise's notify type: info, success, warning, failure
    job: str = ""  # short id, for the log


@dataclass
class Outcome:
    """What sending to one URL came to."""
    url: str  # as shown: apprise's privacy form, no query
    ok: bool
    tries: int
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "ok": self.ok, "tries": self.tries, "error": self.error}


# -- what a move says ----------------------------------------------------------------------


def kinds_of(event: Event, job: Job) -> frozenset[str]:
    """The notify events a state move counts as (empty: nobody is told, a denial say)."""
    dst = event.dst
    if dst == State.AWAITING_APPROVAL.value:
        overrun = any(isinstance(h, dict) and h.get("rule") == "overrun" for h in event.data.get("holds") or [])
        return frozenset({"approval_wait", "stopped_by_rule"} if overrun else {"approval_wait"})
    if dst == State.FAILED.value:
        return frozenset({"stopped_by_rule" if event.reason.startswith("stopped by kill rule") else "failed"})
    if dst == State.DONE.value:
        return frozenset({"done"})
    if dst == State.CANCELLED.value:
        return frozenset({"cancelled"})
    return frozenset()


# schemes a chat or a mail client links without `//` (those with it are all caught by `://`)
LINK_SCHEMES = ("mailto", "tel", "sms", "mms", "callto", "javascript", "data", "vbscript", "file",
                "magnet", "xmpp", "sip", "sips", "news", "nntp", "tg", "slack", "skype", "facetime",
                "geo", "bitcoin", "urn", "irc", "ircs", "webcal", "matrix", "spotify", "zoommtg",
                "msteams", "discord", "steam", "itms", "market", "intent", "about", "blob", "view-source",
                "ms-[a-z-]+")
_SCHEME_NO_SLASH = re.compile(r"(?i)\b(" + "|".join(LINK_SCHEMES) + r"):")
_HTTP = re.compile(r"(?i)\b(?:(h)tt(ps?)|(f)t(ps?))(?=:)")
_IPV4 = re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?![\w])")
_DOT_BEFORE_LETTER = re.compile(r"\.(?=[^\W\d_])")  # a top-level domain starts with a letter
# `&` too: a service that reads HTML (Telegram) decodes `&#104;ttps&#58;//` into `https://`
_FOLD = str.maketrans({"\u3002": ".", "\u2024": ".", "\ufe52": ".", "<": "\u2039", ">": "\u203a", "`": "'",
                       "&": "\uff06"})


def job_text(text: str) -> str:
    """Text the job chose (its error line, name, args), made inert for a chat, one line.

    Why: a chat that unfurls a link fetches it (a way out for a job without network), and a
    link or mention next to gpu-router's own lines is a phishing line. NFKC first (fullwidth
    `ｈｔｔｐｓ：／／` is `https://`), format characters dropped (a zero-width break inside
    `evil.com` is still the domain to a linker that drops it), then every linkable form
    defanged the way incident reports write them, and the whole capped at EXCERPT_CHARS."""
    text = printable(unicodedata.normalize("NFKC", text[:EXCERPT_CHARS * 4]), single_line=True)
    text = "".join(" " if unicodedata.category(c) in ("Zl", "Zp") else c for c in text
                   if unicodedata.category(c) != "Cf").translate(_FOLD)
    text = _HTTP.sub(lambda m: f"{m[1]}xx{m[2]}" if m[1] else f"{m[3]}x{m[4]}", text)
    text = re.sub(r"(?<!\[:)//", "/[/]", text.replace("://", "[://]"))  # and `//host`, scheme-less
    text = re.sub(r"(?<!\[):(?=[/\\])", "[:]", text)  # `http:/x`, `http:\\x`
    text = _SCHEME_NO_SLASH.sub(r"\1[:]", text)
    text = _IPV4.sub(lambda m: m.group().replace(".", "[.]"), text)
    text = _DOT_BEFORE_LETTER.sub("[.]", re.sub(r"(?i)\b(www)\.", r"\1[.]", text))
    text = text.replace("@", "[@]").replace("](", "] (")  # last: a markdown link's seam, ours too
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "\u2026"


def _scrubber(job: Job) -> tuple[Callable[[str], str], bool]:
    """(a function that makes a job's text fit to send, whether it could mask its secrets).

    The mask is the job's secret values in every form (NameMask, read from the keychain now);
    then gpu-router's own paths become words, and the text one printable, inert line
    (`job_text`)."""
    from core.secrets import names

    withheld = False
    try:
        mask = names.for_job(job)
    except UserError:  # no keychain answers: the values cannot be looked for, so no free text
        mask, withheld = None, True
    # words in brackets: `job_text` leaves them as they are (it turns `<` and `>` to lookalikes)
    roots = [(job.bundle.get("root"), "[bundle]"), (str(paths.home()), "[gpu-router home]"),
             (job.project_dir, "[project]"), (os.path.expanduser("~"), "~")]
    roots = sorted(((str(p).rstrip("/"), w) for p, w in roots if p and str(p) not in ("/", "")),
                   key=lambda pw: len(pw[0]), reverse=True)

    def scrub(text: str) -> str:
        if withheld:
            return "(withheld: the keychain could not be read to mask this job's secrets)"
        if mask:  # as printed, and again as job_text reads it: NFKC folds a fullwidth
            text = mask.mask(unicodedata.normalize("NFKC", mask.mask(text)))  # `ｓｅｃｒｅｔ` into it
        for root, word in roots:
            text = text.replace(root, word)
        return job_text(text)

    return scrub, not withheld


def build(event: Event, job: Job) -> Notice | None:
    """The message for one state move, or None when it is nobody's business.

    An approval message is gpu-router's words alone (numbers, the person's own target and
    secret names): a line the job chose never sits beside `gpu approve`. An ending quotes the
    job's name and reason on lines of their own (`> `), made inert by `job_text`."""
    from core.planning.policy import describe_cost

    kinds = kinds_of(event, job)
    if not kinds:
        return None
    scrub, _ = _scrubber(job)
    short = job.short_id  # hex: safe as it is
    target = scrub(str(job.plan.get("target") or job.provider or "?"))  # the person's own target's name
    group = job.plan.get("group") or {}
    holds = event.data.get("holds") or job.plan.get("holds") or []
    # the rules' reasons: gpu-router's words with numbers and the person's target and secret names
    why = "; ".join(scrub(str(h.get("reason", ""))) for h in holds if isinstance(h, dict)) \
        or "a rule in your config"
    if "approval_wait" in kinds and job.group_id and job.plan.get("hold_kind") == "group":
        gshort = str(group.get("short_id") or job.group_id[:8])
        gshort = gshort if re.fullmatch(r"[0-9a-f]{1,32}", gshort) else job.group_id[:8]
        totals = job.plan.get("group_totals") or {}
        body = [f"The sweep {gshort} waits for your approval."]
        if totals:
            n, hours, price = int(totals.get("points") or 0), totals.get("hours"), totals.get("estimated_price") or 0
            where = ", ".join(f"{scrub(str(k))} ({int(v)})" for k, v in (totals.get("targets") or {}).items())
            cost = (f"{hours:g} hours in all" if isinstance(hours, (int, float)) else "no time estimate") + (
                ", free (no charge on these targets)" if not price else f", estimated ${float(price):.2f} in all")
            body.append(f"Its {n} points would run on {where}: {cost}.")
        body += [f"Held because {why}.",
                 f"What it would run: gpu status {gshort}",
                 f"To approve all its points: gpu approve {gshort}",
                 f"To refuse them: gpu deny {gshort}"]
        return Notice(kinds, f"gpu-router: sweep {gshort} waits for your approval", "\n".join(body),
                      "warning", gshort)
    if "approval_wait" in kinds:
        gpu = scrub(str(job.plan.get("gpu") or "no GPU named"))
        body = [f"Job {short} waits for your approval.",
                f"It would run on {target} ({gpu}) {describe_cost(job.plan)}.",
                f"Held because {why}.",
                f"What it would run: gpu status {short}",
                f"To approve it: gpu approve {short}",
                f"To refuse it: gpu deny {short}"]
        return Notice(kinds, f"gpu-router: job {short} waits for your approval", "\n".join(body),
                      "warning", short)
    ran = _ran(job)
    words = {"done": ("is done", "success"), "failed": ("failed", "failure"),
             "stopped_by_rule": ("was stopped by a rule", "failure"), "cancelled": ("was cancelled", "warning")}
    kind = next(iter(kinds))
    verb, level = words[kind]
    body = [f"Job {short} on {target} {verb}.",
            "Its name and reason, quoted as the job wrote them (links disabled):",
            f"> name: {scrub(job.name)}",
            f"> reason: {scrub(event.reason)}"]
    if ran:
        body.append(f"It ran {ran}.")
    body.append(f"Outputs: runs/{short}/ in its project. Its log: gpu logs {short}")
    return Notice(kinds, f"gpu-router: job {short} {verb}", "\n".join(body), level, short)


def _ran(job: Job) -> str:
    if not job.started_at or not job.ended_at:
        return ""
    seconds = max(0.0, job.ended_at - job.started_at)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# -- sending -------------------------------------------------------------------------------


def shown(url: str) -> str:
    """A URL as it may be shown: apprise's privacy form (tokens and passwords cut), no query;
    one apprise does not know is shown by its scheme alone."""
    plugin = _plugin(url)
    text = plugin.url(privacy=True) if plugin is not None else f"{urlsplit(url).scheme}://..."
    return printable(text.split("?", 1)[0], single_line=True)


def _plugin(url: str):
    import apprise

    return apprise.Apprise.instantiate(url, suppress_exceptions=True)


def _secret_parts(url: str) -> list[str]:
    """The parts of a URL that may be a token (user, password, path, query values), longest
    first: cut from any error text apprise gives, which may quote them."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    pieces = [url, parts.username or "", parts.password or "", parts.query]
    pieces += parts.path.split("/") + [v for kv in parts.query.split("&") for v in kv.split("=")[1:]]
    return sorted({p for p in pieces if len(p) >= 4}, key=len, reverse=True)


class _Errors(logging.Handler):
    """apprise says why a send failed only in its log: the warnings of this thread's send."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.lines.append(record.getMessage())


def send(url: str, title: str, body: str, level: str = "info", *, tries: int = TRIES,
         sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """Send one message to one apprise URL: each try bounded, `tries` in all. Never raises."""
    import apprise

    where = shown(url)
    plugin = _plugin(url)
    if plugin is None:
        return Outcome(where, False, 0, "apprise does not know this URL (see its wiki for the service's form)")
    plugin.socket_connect_timeout = min(float(plugin.socket_connect_timeout or CONNECT_S), CONNECT_S)
    plugin.socket_read_timeout = min(float(plugin.socket_read_timeout or READ_S), READ_S)
    kind = {"info": apprise.NotifyType.INFO, "success": apprise.NotifyType.SUCCESS,
            "warning": apprise.NotifyType.WARNING, "failure": apprise.NotifyType.FAILURE}[level]
    error = "it answered no"
    for n in range(1, tries + 1):
        catcher = _Errors()
        logger = logging.getLogger("apprise")
        logger.addHandler(catcher)
        try:
            # the body is plain text: a service that reads HTML or markdown gets it escaped
            ok = bool(plugin.notify(body=body, title=title, notify_type=kind,
                                    body_format=apprise.NotifyFormat.TEXT))
        except Exception as exc:  # noqa: BLE001 - a plugin's bug is a failed send, not a crash
            ok, catcher.lines = False, [f"{type(exc).__name__}: {exc}"]
        finally:
            logger.removeHandler(catcher)
        if ok:
            return Outcome(where, True, n)
        if catcher.lines:
            error = " / ".join(dict.fromkeys(line.strip() for line in catcher.lines if line.strip()))
        if n < tries:
            sleep(BACKOFF_S[min(n - 1, len(BACKOFF_S) - 1)])
    for part in _secret_parts(url):
        error = error.replace(part, "...")
    return Outcome(where, False, tries, clip(printable(error, single_line=True), ERROR_CHARS))


def test_all(urls: list[NotifyURL], *, tries: int = TRIES) -> list[Outcome]:
    """`gpu notify test`: one message to every configured URL, whatever its events."""
    title = "gpu-router: a test message"
    body = ("This is `gpu notify test`: gpu-router will tell you here when a job waits for your "
            "approval or ends (the events this URL asks for).")
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(urls)))) as pool:
        return list(pool.map(lambda u: send(u.url, title, body, "info", tries=tries), urls))


# -- what was sent, and what failed ---------------------------------------------------------


def state_file() -> Path:
    return paths.home() / STATE_NAME


class NotifyState:
    """notify.json: the last event id claimed (sent or being sent) and, per URL as shown, how
    its last send went. One supervisor writes it (its lock); `gpu daemon --status` reads it."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_file()
        self._lock = threading.Lock()
        self.doc = read_state(self.path)

    def claim(self, upto: int) -> None:
        with self._lock:
            self.doc["cursor"] = upto
            self._write()

    def added(self, urls: list[NotifyURL]) -> dict[str, float]:
        """When each URL was added ({url: epoch seconds}): a URL seen for the first time is
        dated by the user config's last change (the edit that added it, or a later one), and
        written; URLs no longer configured are forgotten (one added back is new again). A state
        from before this was kept (a cursor and no dates) dates the URLs it already served 0."""
        with self._lock:
            legacy = isinstance(self.doc.get("cursor"), int) and "added" not in self.doc
            known = self.doc.get("added") if isinstance(self.doc.get("added"), dict) else {}
            now = time.time()
            try:
                edited = min(now, paths.user_config_file().stat().st_mtime)
            except OSError:
                edited = now
            out, keep = {}, {}
            for u in urls:
                key = _url_key(u.url)
                when = known.get(key)
                if not isinstance(when, (int, float)):
                    when = 0.0 if legacy else edited
                keep[key] = out[u.url] = float(when)
            if keep != known or "added" not in self.doc:
                self.doc["added"] = keep
                self._write()
            return out

    def record(self, outcome: Outcome, job: str) -> None:
        with self._lock:
            services = self.doc.setdefault("services", {})
            now = time.time()
            if outcome.ok:
                services[outcome.url] = {"ok": True, "at": now}
            else:
                was = services.get(outcome.url) or {}
                services[outcome.url] = {
                    "ok": False, "at": now, "error": outcome.error, "job": job,
                    "since": was.get("since", now) if not was.get("ok", True) else now,
                    "missed": int(was.get("missed", 0) if not was.get("ok", True) else 0) + 1}
            self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".part")
        try:
            tmp.write_text(json.dumps(self.doc, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError as exc:  # a full disk: a restart may then send a move again
            log.warning("could not record what was notified: %s", exc)


def _url_key(url: str) -> str:
    """A URL's name in notify.json's dates: a hash (the URL may hold a service's token)."""
    return hashlib.sha256(url.encode()).hexdigest()[:24]


def read_state(path: Path | None = None) -> dict[str, Any]:
    try:
        doc = json.loads((path or state_file()).read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def failing(urls: list[NotifyURL], path: Path | None = None) -> list[dict[str, Any]]:
    """The configured URLs whose last send failed: {url, error, since, missed, job}, for
    `gpu daemon --status`. A URL no longer configured is not reported."""
    services = read_state(path).get("services") or {}
    out = []
    for where in dict.fromkeys(shown(u.url) for u in urls):
        entry = services.get(where)
        if entry and not entry.get("ok", True):
            out.append({"url": where, "error": entry.get("error"), "since": entry.get("since"),
                        "missed": entry.get("missed", 1), "job": entry.get("job")})
    return out


# -- the supervisor's side ------------------------------------------------------------------


@dataclass
class Notifier:
    """Held by the supervisor: `collect` on its store thread, `dispatch` from the loop (it only
    queues), `drain` when it exits."""
    urls: list[NotifyURL] = field(default_factory=list)
    state: NotifyState | None = None
    _builder: ThreadPoolExecutor | None = None
    _senders: dict[str, ThreadPoolExecutor] = field(default_factory=dict)
    _pending: set[Future] = field(default_factory=set)
    _added: dict[str, float] = field(default_factory=dict)  # url -> when it was added (NotifyState.added)

    def configure(self, urls: list[NotifyURL]) -> None:
        self.urls = list(urls)

    def collect(self, store: Store) -> list[tuple[Event, Job]]:
        """The moves to tell about since the last claim, claimed now (store thread)."""
        if not self.urls:
            return []
        if self.state is None:
            self.state = NotifyState()
        self._added = self.state.added(self.urls)
        last = store.last_event_id()
        cursor = self.state.doc.get("cursor")
        if not isinstance(cursor, int) or cursor > last:  # none yet, or a store made anew
            cursor = 0
        if cursor == last:
            return []
        moves = store.moves_between(cursor, last, INTO)
        self.state.claim(last)
        oldest = time.time() - MAX_AGE_S
        out, held_groups = [], set()
        since = min(self._added.values(), default=0.0)  # before every URL was added: nobody's
        for e, j in moves:
            if e.ts < oldest or e.ts < since:
                continue
            if e.dst == State.AWAITING_APPROVAL.value and j.group_id and j.plan.get("hold_kind") == "group":
                if j.group_id in held_groups:  # a sweep held as one is told once (its tell_user names it)
                    continue
                held_groups.add(j.group_id)
            out.append((e, j))
        return out

    def dispatch(self, moves: list[tuple[Event, Job]]) -> None:
        """Queue the messages (never waits): built on one thread, sent on one per URL."""
        if self._builder is None:
            self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpu-router-notify")
        for event, job in moves:
            # a URL gets only the moves made since it was added (not the backlog before it)
            urls = [u for u in self.urls if event.ts >= self._added.get(u.url, 0.0)]
            if urls:
                self._track(self._builder.submit(self._fan_out, event, job, urls))

    def _track(self, future: Future) -> None:
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)

    def _fan_out(self, event: Event, job: Job, urls: list[NotifyURL]) -> None:
        try:
            if event.dst == State.AWAITING_APPROVAL.value and job.state != State.AWAITING_APPROVAL:
                return  # decided already (approved, denied, cancelled) before it could be said
            notice = build(event, job)
        except Exception:  # noqa: BLE001 - one bad message must not stop the others
            log.exception("job %s: could not build its notification", job.short_id)
            return
        if notice is None:
            return
        for u in urls:
            if u.events & notice.kinds:
                pool = self._senders.get(u.url)
                if pool is None:
                    pool = self._senders[u.url] = ThreadPoolExecutor(
                        max_workers=1, thread_name_prefix="gpu-router-notify-send")
                self._track(pool.submit(self._send, u.url, notice))

    def _send(self, url: str, notice: Notice) -> None:
        outcome = send(url, notice.title, notice.body, notice.level)
        if outcome.ok:
            log.info("job %s: notified %s", notice.job, outcome.url)
        else:
            log.warning("job %s: could not notify %s after %d tries: %s", notice.job, outcome.url,
                        outcome.tries, outcome.error)
        if self.state is not None:
            self.state.record(outcome, notice.job)

    def drain(self, timeout: float = DRAIN_S) -> None:
        """Wait (bounded) for what is being sent; what is left then is given up, and said."""
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            wait(list(self._pending), timeout=max(0.0, deadline - time.monotonic()))
        if self._pending:
            log.warning("%d notification(s) still being sent when the supervisor left", len(self._pending))
        for pool in [self._builder, *self._senders.values()]:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["NOTIFY_EVENTS", "Notice", "Notifier", "Outcome", "build", "failing", "kinds_of",
           "send", "shown", "test_all"]
