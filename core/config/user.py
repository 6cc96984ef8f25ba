"""The user's own config: targets, the approval rules and budgets.

It lives outside every project (`paths.user_config_file()`), so an agent that edits a
project cannot change where jobs run or loosen the rules. The rules here can only be made
stricter than the defaults; a looser value is an error that says so.

    targets:
      local: {kind: local, max_jobs: 1}      # enabled: false keeps new jobs off a target
      box:   {kind: local, price_per_hour: 0.4, hours_per_week: 30, session_limit_hours: 12,
              gpus: [{name: RTX 4090, memory_gb: 24}]}
      lab:   {kind: ssh, host: gpu-box.lan, user: me}   # ssh, slurm, pbs: see core/targetopts.py
    rules:
      agent_max_hours: 1.0        # an agent's job with no hours or more than this waits
      quota_fraction: 0.5         # a job using more than this share of a quota waits
      overrun_factor: 1.25        # a job running this far past its hours is stopped for approval
      checkpoint_grace_s: 60      # how long a stopped job gets to save before it is killed
      approve_everything: false   # true: every job waits for a person
      max_migrations: 3           # moves of one job to another target when its session ends
      smoke_max_minutes: 10       # a smoke run is stopped after this long; an agent's needs no hours
      kill_rules: [{nan_metric: true}]  # see core/config/killrules.py; gpu.yaml adds more
    budget:
      per_job: 5.0                # dollars; a dearer job waits
      weekly: 20.0                # dollars over the last 7 days, all targets
    dashboard:
      bell: true
    storage:
      home_cap_gb: 20             # bundles and venvs here, freed least-recently-used above it
      target_cap_gb: 50           # the same on each remote target (or its own cache_cap_gb)
    approvals:
      agent_markers: [MY_AGENT]   # more environment variables that mark a run as an agent's
      agent_max_usd: 5.0          # an agent's job estimated dearer than this waits, even under an hour
      agent_daily_hours: 12.0     # an agent's jobs that ran without you in the last 24 hours, in
      agent_daily_usd: 25.0       # estimated hours and dollars: past either, its next job waits
      pin: {scheme: scrypt, ...}  # written by `gpu approvals pin set`, never by hand
    accounts:                     # GPU cloud accounts read (never written): `gpu accounts add`
      runpod: {}                  # its key lives in the keychain only (account:runpod)
      lambda: {timeout_s: 3, base_url: https://cloud.lambda.ai}   # both optional
    notify:                       # apprise URLs told when a job waits for a person or ends
      - ntfy://ntfy.sh/my-gpu-jobs                    # every event (NOTIFY_EVENTS)
      - {url: tgram://BOT_TOKEN/CHAT_ID, events: [approval_wait, failed]}
    mcp:
      projects_root: ~/code       # compute_job's cwd names a folder under it (default: where
                                  # `gpu mcp` was started)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import paths
from core.config.schema import ENV_NAME_RE, NAME_RE
from core.config.targetopts import PROBE_TIMEOUT_S, QUEUE_TIMEOUT_S, check_output_caps, validate
from core.errors import UserError, shorten
from core.config import killrules

# a local target's own options (beside max_jobs, gpus, prices): the output caps, the Python to
# run jobs with, and `network: false` (the sandbox then gives its jobs loopback only)
LOCAL_OPTIONS = {"max_output_bytes", "max_output_files", "python", "network"}
TARGET_KINDS = ("local", "ssh", "slurm", "pbs", "kaggle", "modal", "skypilot")
SECTIONS = ("targets", "rules", "budget", "dashboard", "storage", "approvals", "accounts", "notify", "mcp")
# the GPU cloud accounts gpu-router can read (core/providers/accounts; a test keeps them equal)
ACCOUNT_PROVIDERS = ("tensorpool", "lambda", "primeintellect", "vast", "runpod")
ACCOUNT_KEYS = ("base_url", "timeout_s")
_PIN_KEYS = ("scheme", "salt", "n", "r", "p", "hash")
# what a person is told about (core/engine/notify.py sends them): a job waits for their approval
# (held at submit, or stopped past its hours), ended done, failed, was stopped by a kill rule,
# or was cancelled. A `notify:` entry without `events` gets every one.
NOTIFY_EVENTS = ("approval_wait", "done", "failed", "stopped_by_rule", "cancelled")
NOTIFY_KEYS = ("url", "events")
NOTIFY_URL_MAX = 2048
_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://\S+")
_HEX = re.compile(r"[0-9a-f]+")
# caches (bundles, venvs, data) are freed least-recently-used above these caps, in GB;
# a remote target's own `cache_cap_gb` overrides target_cap_gb
STORAGE_DEFAULTS = {"home_cap_gb": 20.0, "target_cap_gb": 50.0}


@dataclass
class Rules:
    agent_max_hours: float = 1.0
    quota_fraction: float = 0.5
    overrun_factor: float = 1.25
    checkpoint_grace_s: float = 60.0
    approve_everything: bool = False
    budget_per_job: float | None = None
    budget_weekly: float | None = None
    max_migrations: int = 3  # moves to another target per job (core.engine.supervisor)
    # a smoke run is stopped this long after it starts (core.engine.jobwatch); an agent's smoke
    # run with no hours counts this long for the rules (core.planning.policy)
    smoke_max_minutes: float = 10.0
    # the contract: "for anything over a few dollars ... state it before dispatch even under an
    # autonomous setting": an agent's job estimated over this waits for a person (approvals:)
    agent_max_usd: float = 5.0
    # issue 37: many small jobs add up. The estimated hours and dollars of an agent's work that
    # went on without a person's yes in the last 24 hours (core.planning.usage.agent_day); a job
    # of an agent's that would take the day past either waits for a person (approvals:)
    agent_daily_hours: float = 12.0
    agent_daily_usd: float = 25.0
    kill_rules: list = field(default_factory=list)  # core.config.killrules.Rule


# (key, default, "stricter" means: "lower" or "true")
_RULE_LIMITS = {
    "agent_max_hours": (1.0, "lower"),
    "quota_fraction": (0.5, "lower"),
    "overrun_factor": (1.25, "lower"),
    "checkpoint_grace_s": (600.0, "lower"),
    "max_migrations": (10, "lower"),
    "smoke_max_minutes": (10.0, "lower"),
}
AGENT_MAX_USD = 5.0  # approvals.agent_max_usd's default, and the most it may be
# approvals.agent_daily_*: (default, and the most it may be; stricter only, like every rule)
AGENT_DAILY = {"agent_daily_hours": (12.0, "hours"), "agent_daily_usd": (25.0, "dollars")}


@dataclass
class TargetConfig:
    name: str
    kind: str
    max_jobs: int = 1
    price_per_hour: float = 0.0
    hours_per_week: float | None = None
    credits: float | None = None
    session_limit_hours: float | None = None
    gpus: list[dict] | None = None
    enabled: bool = True
    # seconds a job may wait to start here (a free slot, the scheduler's queue) before it is
    # planned again elsewhere; None: the kind's default (targetopts.QUEUE_TIMEOUT_S), 0: never
    queue_timeout_s: float | None = None
    # seconds one probe (connecting and answering) may take before the target counts as
    # unavailable for now; None: the kind's default (targetopts.PROBE_TIMEOUT_S)
    probe_timeout_s: float | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def queue_timeout(self) -> float:
        """The queue timeout in force: the target's own, else its kind's default."""
        return QUEUE_TIMEOUT_S[self.kind] if self.queue_timeout_s is None else self.queue_timeout_s

    @property
    def probe_timeout(self) -> float:
        """The probe's bound in force: the target's own, else its kind's default."""
        return PROBE_TIMEOUT_S[self.kind] if self.probe_timeout_s is None else self.probe_timeout_s


@dataclass
class UserConfig:
    path: Path
    targets: dict[str, TargetConfig]
    rules: Rules
    raw: dict[str, Any]
    bell: bool = True
    storage: dict[str, float] = field(default_factory=lambda: dict(STORAGE_DEFAULTS))
    approval_pin: dict[str, Any] | None = None  # the PIN's scrypt record (core.engine.pin)
    agent_markers: list[str] = field(default_factory=list)
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)  # NAME -> {base_url?, timeout_s?}
    notify: list["NotifyURL"] = field(default_factory=list)
    projects_root: Path | None = None  # mcp.projects_root: compute_job's cwd lives under it


@dataclass(frozen=True)
class NotifyURL:
    """One `notify:` entry: an apprise URL (it may hold a service's token: never shown whole)
    and the events sent to it."""
    url: str
    events: frozenset[str] = frozenset(NOTIFY_EVENTS)


def _number(value: Any, where: str, what: str, *, minimum: float = 0.0, allow_zero: bool = True) -> float:
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and abs(value) < 1e300 else math.nan
    if not math.isfinite(number) or number < minimum or (not allow_zero and number == 0):
        raise UserError(f"{what} must be a finite number {'of 0 or more' if allow_zero else 'above 0'} "
                        f"(got {shorten(value)})", where=where)
    return number


def _section(raw: dict, name: str, where: str, example: str) -> dict:
    """A section of the file (targets:, rules:, ...) as a mapping; absent or empty: {}."""
    value = raw.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{name} must be a mapping (got {shorten(value)})", where=where,
                        fix=f"for example:\n{example}")
    return value


def _gpu_list(value: Any, where: str, what: str) -> list[dict]:
    if not isinstance(value, list) or not all(
            isinstance(g, dict) and isinstance(g.get("name"), str) for g in value):
        raise UserError(f"{what} must be a list of {{name: T4, memory_gb: 16}}", where=where)
    return [{"name": g["name"], "memory_gb": _number(g.get("memory_gb", 0), where, f"{what}.memory_gb")}
            for g in value]


def _target(name: str, body: Any, where: str) -> TargetConfig:
    if not isinstance(body, dict):
        raise UserError(f"target {shorten(name)} must be a mapping with a kind", where=where,
                        fix=f"targets:\n    {name}: {{kind: local}}")
    kind = body.get("kind", "local" if name == "local" else None)
    if kind not in TARGET_KINDS:
        raise UserError(f"target {shorten(name)} has kind {shorten(kind)}", where=where,
                        fix=f"kinds: {', '.join(TARGET_KINDS)}")
    t = TargetConfig(name=name, kind=kind)
    known = {"kind", "max_jobs", "price_per_hour", "hours_per_week", "credits",
             "session_limit_hours", "gpus", "enabled", "queue_timeout_s", "probe_timeout_s"}
    for key, value in body.items():
        w = f"targets.{name}.{key}"
        if key == "max_jobs":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{w} must be a whole number of 1 or more", where=where)
            t.max_jobs = value
        elif key == "enabled":
            if not isinstance(value, bool):
                raise UserError(f"{w} must be true or false", where=where)
            t.enabled = value
        elif key == "price_per_hour":
            t.price_per_hour = _number(value, where, w)
        elif key == "queue_timeout_s":
            t.queue_timeout_s = _number(value, where, w)
        elif key == "probe_timeout_s":
            t.probe_timeout_s = _number(value, where, w, allow_zero=False)
        elif key in ("hours_per_week", "credits", "session_limit_hours"):
            setattr(t, key, None if value is None else _number(value, where, w))
        elif key == "gpus" and isinstance(value, int) and not isinstance(value, bool) and kind != "local":
            t.options["gpus_per_job"] = value  # a scheduler target: GPUs per job, not a list
        elif key == "gpus":
            t.gpus = _gpu_list(value, where, w)
        elif key not in known:
            t.options[key] = value
    if kind != "local":
        validate(name, kind, t.options, where)
    else:
        check_output_caps(name, t.options, where)
        for key in t.options:
            if key not in LOCAL_OPTIONS:
                raise UserError(f"targets.{name}: unknown option {shorten(key)} for a local target",
                                where=where, fix=f"options: {', '.join(sorted(LOCAL_OPTIONS | known))}")
        if not isinstance(t.options.get("network", True), bool):
            raise UserError(f"targets.{name}.network must be true or false", where=where)
    return t


def _parse(text: str, where: str) -> Any:
    from core.config import safeyaml  # PyYAML only when the file's text is new (yamlfile)

    return safeyaml.load(text, where)


def load() -> UserConfig:
    from core.config import yamlfile

    path = paths.user_config_file()
    where = str(path)
    text = yamlfile.read_text(path)
    raw = None if text is None else yamlfile.remembered(path, text, "user-config/1",
                                                        lambda t: _parse(t, where))
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError("must be a mapping (targets:, rules:, budget:)", where=where)
    unknown = [key for key in raw if key not in SECTIONS]
    if unknown:
        raise UserError(f"unknown section(s) {shorten(sorted(map(str, unknown)))}", where=where,
                        fix=f"sections: {', '.join(SECTIONS)}")
    targets: dict[str, TargetConfig] = {"local": TargetConfig("local", "local")}
    for name, body in _section(raw, "targets", where, "targets:\n  box: {kind: ssh, host: gpu-box.lan}").items():
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise UserError(f"target name {shorten(name)} is not allowed", where=where,
                            fix="use letters, digits, '.', '_' or '-' (at most 64)")
        targets[name] = _target(name, body, where)

    rules = Rules()
    for key, value in _section(raw, "rules", where, "rules:\n  agent_max_hours: 0.5").items():
        if key == "approve_everything":
            if not isinstance(value, bool):
                raise UserError("rules.approve_everything must be true or false", where=where)
            rules.approve_everything = value
            continue
        if key == "kill_rules":
            try:
                rules.kill_rules = killrules.parse(value)
            except ValueError as exc:
                raise UserError(f"rules.kill_rules: {exc}", where=where,
                                fix="kill_rules:\n    - nan_metric: true\n    - no_improvement: "
                                    "{metric: val/loss, minutes: 30, mode: min}") from None
            continue
        if key not in _RULE_LIMITS:
            raise UserError(f"unknown rule {shorten(key)}", where=where,
                            fix=f"rules: {', '.join([*_RULE_LIMITS, 'approve_everything', 'kill_rules'])}")
        limit, _ = _RULE_LIMITS[key]
        number = _number(value, where, f"rules.{key}", allow_zero=key == "checkpoint_grace_s")
        if number > limit:
            raise UserError(f"rules.{key} = {value} would loosen a rule (the most allowed is {limit:g})",
                            where=where, fix="rules can only be made stricter than the defaults")
        if key == "overrun_factor" and number < 1:
            raise UserError("rules.overrun_factor must be 1 or more", where=where)
        if key == "max_migrations":
            if number != int(number):
                raise UserError("rules.max_migrations must be a whole number", where=where)
            number = int(number)
        setattr(rules, key, number)
    budget = _section(raw, "budget", where, "budget:\n  per_job: 5.0")
    if set(budget) - {"per_job", "weekly"}:
        raise UserError("budget takes per_job and weekly (dollars)", where=where)
    if budget.get("per_job") is not None:
        rules.budget_per_job = _number(budget["per_job"], where, "budget.per_job")
    if budget.get("weekly") is not None:
        rules.budget_weekly = _number(budget["weekly"], where, "budget.weekly")
    bell = _section(raw, "dashboard", where, "dashboard:\n  bell: false").get("bell", True)
    storage = dict(STORAGE_DEFAULTS)
    section = _section(raw, "storage", where, "storage:\n  home_cap_gb: 20")
    if set(section) - set(STORAGE_DEFAULTS):
        raise UserError(f"storage takes {', '.join(STORAGE_DEFAULTS)} (gigabytes)", where=where)
    for key, value in section.items():
        storage[key] = _number(value, where, f"storage.{key}", allow_zero=False)
    approvals = _section(raw, "approvals", where, "approvals:\n  agent_markers: [MY_AGENT]")
    pin, markers = _approvals(approvals, where)
    if approvals.get("agent_max_usd") is not None:
        usd = _number(approvals["agent_max_usd"], where, "approvals.agent_max_usd")
        if usd > AGENT_MAX_USD:
            raise UserError(f"approvals.agent_max_usd = {approvals['agent_max_usd']} would loosen a rule "
                            f"(the most allowed is {AGENT_MAX_USD:g} dollars)", where=where,
                            fix="rules can only be made stricter than the defaults")
        rules.agent_max_usd = usd
    for key, (most, unit) in AGENT_DAILY.items():
        if approvals.get(key) is not None:
            number = _number(approvals[key], where, f"approvals.{key}")
            if number > most:
                raise UserError(f"approvals.{key} = {approvals[key]} would loosen a rule "
                                f"(the most allowed is {most:g} {unit})", where=where,
                                fix="rules can only be made stricter than the defaults")
            setattr(rules, key, number)
    accounts = check_accounts(_section(raw, "accounts", where, "accounts:\n  runpod: {}"), where)
    return UserConfig(path=path, targets=targets, rules=rules, raw=raw, bell=bool(bell),
                      storage=storage, approval_pin=pin, agent_markers=markers, accounts=accounts,
                      notify=check_notify(raw.get("notify"), where),
                      projects_root=_projects_root(_section(raw, "mcp", where, "mcp:\n  projects_root: ~/code"),
                                                   where))


_NOTIFY_FIX = ("notify:\n  - ntfy://ntfy.sh/my-gpu-jobs\n"
               "  - {url: json://127.0.0.1:8080/hook, events: [approval_wait, failed]}")


def check_notify(value: Any, where: str) -> list[NotifyURL]:
    """notify: a list of apprise URLs, each a string or {url, events}. A URL is named by its
    place in the list in errors, never quoted: it may hold a service's token. Whether apprise
    knows the scheme is said by `gpu notify test` (the config reader does not import apprise)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise UserError("notify must be a list of apprise URLs", where=where, fix=_NOTIFY_FIX)
    out: list[NotifyURL] = []
    for i, entry in enumerate(value):
        w = f"notify[{i}]"
        body = {"url": entry} if isinstance(entry, str) else entry
        if not isinstance(body, dict) or set(body) - set(NOTIFY_KEYS) or "url" not in body:
            raise UserError(f"{w} must be an apprise URL or {{url, events}}", where=where, fix=_NOTIFY_FIX)
        url = body["url"]
        if not isinstance(url, str) or len(url) > NOTIFY_URL_MAX or not _URL_SCHEME.fullmatch(url.strip()) \
                or not url.isprintable():
            raise UserError(f"{w}.url is not an apprise URL (SCHEME://..., one line, at most "
                            f"{NOTIFY_URL_MAX} characters)", where=where,
                            fix="see https://github.com/caronc/apprise/wiki for each service's URL")
        events = body.get("events")
        if events is None:
            chosen = frozenset(NOTIFY_EVENTS)
        elif isinstance(events, list) and events and all(e in NOTIFY_EVENTS for e in events):
            chosen = frozenset(events)
        else:
            raise UserError(f"{w}.events must be a non-empty list of {', '.join(NOTIFY_EVENTS)} "
                            f"(got {shorten(events)})", where=where, fix=_NOTIFY_FIX)
        out.append(NotifyURL(url=url.strip(), events=chosen))
    return out


def _projects_root(section: dict, where: str) -> Path | None:
    """mcp.projects_root: an absolute folder (or ~/...), the folder compute_job's cwd is under."""
    if set(section) - {"projects_root"}:
        raise UserError(f"mcp takes projects_root (got {shorten(sorted(map(str, section)))})", where=where)
    value = section.get("projects_root")
    if value is None:
        return None
    path = Path(value).expanduser() if isinstance(value, str) and value else None
    if path is None or not path.is_absolute():
        raise UserError(f"mcp.projects_root must be an absolute folder (got {shorten(value)})", where=where,
                        fix="mcp:\n  projects_root: ~/code")
    return path


def check_accounts(section: dict, where: str) -> dict[str, dict[str, Any]]:
    """accounts.NAME: {base_url, timeout_s}, both optional. A base_url must be https, or plain
    http to this machine only (a test's fake): the account's key travels with every request."""
    from urllib.parse import urlsplit

    out: dict[str, dict[str, Any]] = {}
    for name, body in section.items():
        w = f"accounts.{name}"
        if name not in ACCOUNT_PROVIDERS:
            raise UserError(f"unknown account {shorten(name)}", where=where,
                            fix=f"accounts: {', '.join(ACCOUNT_PROVIDERS)}")
        body = {} if body is None else body
        if not isinstance(body, dict) or set(body) - set(ACCOUNT_KEYS):
            raise UserError(f"{w} takes {', '.join(ACCOUNT_KEYS)} (got {shorten(body)})", where=where,
                            fix=f"accounts:\n  {name}: {{timeout_s: 3}}   # the key itself: gpu accounts add {name}")
        entry: dict[str, Any] = {}
        if body.get("base_url") is not None:
            url = body["base_url"]
            parts = urlsplit(url) if isinstance(url, str) else None
            host = parts.hostname if parts else None
            local = host in ("127.0.0.1", "::1", "localhost")
            if not parts or not host or parts.scheme not in ("http", "https") or (parts.scheme == "http" and not local):
                raise UserError(f"{w}.base_url must be an https URL (plain http only to this machine); "
                                f"got {shorten(url)}", where=where,
                                fix=f"leave it out to use {name}'s own API")
            entry["base_url"] = url.rstrip("/")
        if body.get("timeout_s") is not None:
            t = _number(body["timeout_s"], where, f"{w}.timeout_s", allow_zero=False)
            if t > 30:
                raise UserError(f"{w}.timeout_s is at most 30 seconds (a plan waits for it)", where=where)
            entry["timeout_s"] = t
        out[name] = entry
    return out


def _approvals(section: dict, where: str) -> tuple[dict | None, list[str]]:
    """approvals.pin (a well-formed scrypt record, or absent) and approvals.agent_markers."""
    if set(section) - {"pin", "agent_markers", "agent_max_usd", *AGENT_DAILY}:
        raise UserError(f"approvals takes pin, agent_markers, agent_max_usd, {', '.join(AGENT_DAILY)} "
                        f"(got {shorten(sorted(map(str, section)))})", where=where)
    markers = section.get("agent_markers") or []
    if not isinstance(markers, list) or not all(isinstance(m, str) and ENV_NAME_RE.match(m) for m in markers):
        raise UserError("approvals.agent_markers must be a list of environment variable names",
                        where=where, fix="approvals:\n  agent_markers: [MY_AGENT, MY_AGENT_SESSION]")
    pin = section.get("pin")
    if pin is None:
        return None, list(markers)
    fix = "run `gpu approvals pin set` again, or delete approvals.pin to have no PIN"
    if not isinstance(pin, dict) or set(pin) != set(_PIN_KEYS) or pin.get("scheme") != "scrypt":
        raise UserError("approvals.pin must be the record `gpu approvals pin set` writes "
                        "({scheme: scrypt, salt, n, r, p, hash})", where=where, fix=fix)
    for key in ("salt", "hash"):
        if not isinstance(pin[key], str) or not _HEX.fullmatch(pin[key]) \
                or len(pin[key]) < 32 or len(pin[key]) % 2:
            raise UserError(f"approvals.pin.{key} must be hex of 16 bytes or more", where=where, fix=fix)
    ints = {k: pin[k] for k in ("n", "r", "p")}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints.values()) \
            or not (2 ** 10 <= ints["n"] <= 2 ** 17 and ints["n"] & (ints["n"] - 1) == 0) \
            or not 1 <= ints["r"] <= 8 or not 1 <= ints["p"] <= 4:
        raise UserError("approvals.pin has scrypt parameters out of range (n a power of 2 from "
                        "2^10 to 2^17, r 1 to 8, p 1 to 4)", where=where, fix=fix)
    return dict(pin), list(markers)
