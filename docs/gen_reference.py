"""Write docs/reference/configuration.md from the code that reads the configuration.

Run `python docs/gen_reference.py` after changing a key; `--check` exits 1 when the committed
page differs from what this writes (tests/project/test_docs.py asserts the same, so the page cannot rot).

Why a committed page and not a build-time hook: the page is read on GitHub and in a review's
diff (a key added to the schema shows up beside the code that added it), and building the
site needs no import of gpu-router's code; the test keeps the two equal.

The keys come from the code itself: gpu.yaml's from `SCHEMA` in core/config/schema.py (key
and description, in its order), the user config's sections from core/config/user.py
(`SECTIONS`, the target fields, `Rules` and its limits, `STORAGE_DEFAULTS`, the account
providers) and core/config/targetopts.py (the remote and service targets' options and ranges).
The user config's keys carry no description in the code, so they are described here in
`DESCRIBE`; a key the code accepts that has no description here, or a description of a key the
code no longer has, stops this script with the names, so neither can drift from the other.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: the repository's own code
    sys.path.insert(0, str(ROOT))

from core.config import schema, targetopts, user  # noqa: E402

PAGE = ROOT / "docs" / "reference" / "configuration.md"

# keys the user config's readers take but hold in no table of their own (user.load checks
# them inline): budget, dashboard and approvals
BUDGET_KEYS = ("per_job", "weekly")
DASHBOARD_KEYS = ("bell",)
APPROVALS_KEYS = ("agent_markers", "pin", "agent_max_usd", "agent_daily_hours", "agent_daily_usd")
MCP_KEYS = ("projects_root",)
# Rules fields that are read from another section (and described there)
OTHER_SECTION = ("budget_per_job", "budget_weekly", "agent_max_usd", "agent_daily_hours", "agent_daily_usd")

DESCRIBE: dict[str, str] = {
    # every target, whatever its kind (user.TargetConfig)
    "target.kind": "local, ssh, slurm, pbs, kaggle, modal or skypilot (a target named `local` may leave it out)",
    "target.max_jobs": "jobs run at once on this target (a whole number, 1 or more)",
    "target.price_per_hour": "dollars per hour, for the plan's estimate and the budget rules (0: free)",
    "target.hours_per_week": "a weekly quota of hours; the router spends free quota first, and a job "
                             "over `rules.quota_fraction` of what is left waits for a person",
    "target.credits": "credits left, counted like a quota",
    "target.session_limit_hours": "the longest one session may run; a job is asked to checkpoint "
                                  "before it and resumed in a new session",
    "target.gpus": "the hardware: a list of `{name, memory_gb}`; on slurm and pbs a number is "
                   "GPUs per job",
    "target.enabled": "false keeps new jobs off the target",
    "target.queue_timeout_s": "seconds a job may wait to start here (a free slot, or the "
                              "scheduler's queue: Slurm PENDING, PBS Q, Kaggle QUEUED) before it "
                              "is cancelled here and planned again elsewhere; default by kind: "
                              "slurm, pbs and skypilot 1800, kaggle and modal 1200, local and ssh 600; 0: "
                              "wait however long (a request pinned with `provider` always waits)",
    "target.probe_timeout_s": "seconds one probe of the target may take, connecting and answering, "
                              "before it counts as unavailable for now (\"Modal did not answer in "
                              "5 s\", remembered for 60 s); default by kind: modal and kaggle 5, "
                              "local 20, ssh, slurm and pbs 30, skypilot 90",
    # local
    "local.max_output_bytes": "bytes of a job's outputs that come home (default 20 GiB, counted "
                              "on bytes written)",
    "local.max_output_files": "files of a job's outputs that come home (default 100,000)",
    "local.python": "the Python that runs jobs and their venvs",
    "local.network": "false: the sandbox gives jobs loopback only",
    # ssh, slurm, pbs
    "remote.host": "the host name (not for `local: true`)",
    "remote.port": "the SSH port (default 22)",
    "remote.user": "the SSH user",
    "remote.key": "the SSH private key file",
    "remote.known_hosts": "the known_hosts file host keys are checked against (default "
                          "~/.ssh/known_hosts)",
    "remote.root": "gpu-router's folder on the host (default ~/.gpu-router)",
    "remote.python": "the host's Python (default python3)",
    "remote.max_output_bytes": "bytes of a job's outputs that come home (default 20 GiB)",
    "remote.max_output_files": "files of a job's outputs that come home (default 100,000)",
    "remote.cache_cap_gb": "this host's cap on cached bundles, venvs and data (overrides "
                           "`storage.target_cap_gb`)",
    "remote.connect_timeout_s": "seconds a connection may take",
    "remote.probe_ttl_s": "seconds a probe of the host is trusted (default 30)",
    "remote.env": "the host's environment for what gpu-router runs there, NAME: value: the "
                  "scheduler's commands (e.g. SLURM_CONF), the launcher and pip (e.g. PIP_INDEX_URL "
                  "for a mirror); a job's own variables go in gpu.yaml's env",
    "remote.offline": "auto (default: a bounded probe of whether the package index pip would use "
                      "answers from the host; on slurm/pbs the login node's answer), true (always "
                      "install the dependencies from a wheelhouse built on this machine for the host's "
                      "Python and shipped once) or false (pip on the host, from its index)",
    "remote.unreachable_grace_s": "seconds a host may be silent before the job's session counts as "
                                  "lost and the job moves (default 600)",
    "remote.agents_without_sandbox": "true: agents' jobs run on this host even where it has no "
                                     "bubblewrap (default false: such a job waits for a person, since "
                                     "a job there runs as your account and can reach other jobs, the "
                                     "host's object store and your `~/.ssh`); shown in `gpu targets`",
    "scheduler.local": "true: this machine is the login node (no SSH)",
    "scheduler.partition": "the Slurm partition or PBS queue",
    "scheduler.account": "the account jobs are charged to",
    "scheduler.modules": "environment modules loaded first, e.g. [cuda/12.1]",
    "scheduler.container": "an Apptainer/Singularity image jobs run in",
    "scheduler.container_runtime": "the container command (default apptainer)",
    "scheduler.container_python": "the Python inside the container",
    "scheduler.cpus": "CPU cores per job",
    "scheduler.gpus_per_job": "GPUs per job (written `gpus: N` in the file)",
    "scheduler.memory_gb": "GB of memory per job",
    "scheduler.time_minutes": "the time limit (default: the hours estimate x 1.25 + 5 min)",
    "scheduler.pass_secrets": "true lets jobs with keychain secrets run (the scheduler keeps a "
                              "job's environment in its state files)",
    "scheduler.signal_lead_s": "seconds before the time limit the job is asked to checkpoint",
    "scheduler.pbs_flavor": "pro (PBS Pro, OpenPBS) or torque",
    "scheduler.requeue": "true (default): a time limit or preemption resumes on the same cluster; "
                         "false: the job moves elsewhere",
    # skypilot
    "skypilot.endpoint": "a team's SkyPilot API server, `https://host:port` (default: the local one "
                         "SkyPilot starts on demand); its login is SkyPilot's own (`sky api login`)",
    "skypilot.venv": "a venv that has SkyPilot already, used as it is (default: gpu-router's own, "
                     "made with uv under the data folder by `gpu targets add skypilot`)",
    "skypilot.env": "`NAME: value` for SkyPilot's client (its `HOME`, where `~/.sky` lives, for one)",
    "skypilot.clouds": "only these of the clouds SkyPilot has enabled, e.g. `[aws, runpod]` (default: all)",
    "skypilot.connect_timeout_s": "seconds asking SkyPilot (`sky check` and the prices) may take (default 60)",
    "skypilot.probe_ttl_s": "seconds SkyPilot's answer is kept (default 600)",
    "skypilot.autodown_minutes": "minutes an idle cluster stays before it takes itself down (default "
                                 "10; gpu-router downs a job's cluster as soon as the job ends)",
    "skypilot.launch_timeout_s": "seconds a launch may take: provisioning, the workdir's sync, the "
                                 "runtime's setup (default 1800)",
    "skypilot.poll_interval_s": "seconds between asking SkyPilot how a job's cluster and task stand "
                                "(default 15)",
    "skypilot.max_resumes": "times a job resumes on a new cluster after its cluster was lost (default 3)",
    "skypilot.max_output_bytes": "bytes of a job's outputs that come home",
    "skypilot.max_output_files": "files of a job's outputs that come home",
    # kaggle and modal
    "service.accelerator": "the Kaggle accelerator",
    "service.gpu": "the default Modal GPU type",
    "service.internet": "true lets the job reach the internet (off by default; Kaggle grants it only "
                        "to phone-verified accounts, and a refusal falls back to a wheelhouse)",
    "service.offline": "kaggle: auto (default: offline unless internet is true), true (always install "
                       "the dependencies from a wheelhouse built on this machine) or false (always "
                       "from the package index; needs internet: true)",
    "service.max_resumes": "new sessions a job may be resumed in after the limit",
    "service.checkpoint_lead_s": "seconds before the session's limit the job is asked to checkpoint "
                                 "(default 600)",
    "service.upload_timeout_s": "seconds an upload may take",
    "service.api_timeout_s": "seconds one API call may take",
    "service.connect_timeout_s": "seconds connecting to Modal may take",
    "service.volume_read_timeout_s": "seconds reading a checkpoint from the job's volume may take "
                                     "(default 600)",
    "service.max_output_bytes": "bytes of a job's outputs that come home (default 20 GiB)",
    "service.max_output_files": "files of a job's outputs that come home (default 100,000)",
    # rules (user.Rules); budget_* are the budget: section
    "rules.agent_max_hours": "an agent's job with no hours, or more than this, waits for a person",
    "rules.quota_fraction": "a job that would use more than this share of a target's remaining "
                            "quota waits",
    "rules.overrun_factor": "a job running this far past its hours is stopped and held",
    "rules.checkpoint_grace_s": "seconds a stopped job gets to save before it is killed",
    "rules.approve_everything": "true: every job waits for a person",
    "rules.max_migrations": "moves of one job to another target when its session ends",
    "rules.smoke_max_minutes": "a smoke run (`smoke: true`) is stopped this long after it starts "
                               "(asked to checkpoint first); an agent's smoke run with no hours "
                               "counts this long for the rules instead of being held for them",
    "rules.kill_rules": "rules that stop a running job: nan_metric, no_improvement, gpu_util_below, "
                        "over_budget (a job's gpu.yaml adds more)",
    "budget.per_job": "dollars; a dearer job waits for a person",
    "budget.weekly": "dollars over the last 7 days, all targets",
    "dashboard.bell": "false: a newly held job raises a notification without the terminal bell",
    "storage.home_cap_gb": "GB of caches (bundles, venvs, data, ended jobs' folders) kept at home",
    "storage.target_cap_gb": "GB of caches kept on each ssh/slurm/pbs host",
    "approvals.agent_markers": "more environment variables whose presence makes a run an agent's",
    "approvals.pin": "the approval PIN's salted scrypt hash, written by `gpu approvals pin set`, "
                     "never by hand",
    "approvals.agent_max_usd": "dollars (default 5, at most 5): an agent's job whose estimated "
                               "price is over this waits for a person, even under an hour; the "
                               "price is in the hold's reason and `tell_user`",
    "approvals.agent_daily_hours": "hours (default 12, at most 12): the estimated hours of an "
                                   "agent's work that went on without a person in the last 24 "
                                   "hours (submits, resumes, retries, sweep points, each counted "
                                   "when it is let go on); an agent's job that would take the day "
                                   "past it waits for a person, with the day's totals and the "
                                   "limit in `tell_user` (see docs/security/approvals.md)",
    "approvals.agent_daily_usd": "dollars (default 25, at most 25): the same day's estimated "
                                 "cost, counted and held the same way; `gpu cost` and the "
                                 "dashboard header show the agent's day against both",
    "mcp.projects_root": "the folder `compute_job`'s `cwd` names a project in (default: the folder "
                         "`gpu mcp` was started in); an absolute folder or `~/...`",
    "accounts.base_url": "another address for the provider's API (https, or plain http to this "
                         "machine only)",
    "accounts.timeout_s": "seconds one reading may take (default 3, at most 30)",
    "notify.url": "an apprise URL (ntfy://, slack://, tgram://, mailto://, json://, ... one per "
                  "service); it may hold the service's token, so gpu-router shows it only in "
                  "apprise's privacy form",
    "notify.events": "the events this URL is told about (default: all of them): "
                     + ", ".join(f"`{e}`" for e in user.NOTIFY_EVENTS),
}


def _fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{value:g}`"
    if value == []:
        return "`[]`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out + [""]


def _described(group: str, keys: list[str] | tuple[str, ...], used: set[str]) -> list[tuple[str, str]]:
    rows, missing = [], []
    for key in keys:
        name = f"{group}.{key}"
        if name not in DESCRIBE:
            missing.append(name)
            continue
        used.add(name)
        rows.append((f"`{'gpus' if key == 'gpus_per_job' else key}`", DESCRIBE[name]))
    if missing:
        raise SystemExit(f"docs/gen_reference.py: no description for {', '.join(missing)}: "
                         "add them to DESCRIBE")
    return rows


def _gpu_yaml() -> list[str]:
    out = ["## gpu.yaml", "",
           "A project's own defaults, read from the project root by `gpu submit`; arguments override",
           "them. Unknown keys and wrong types are errors that name the file, the line and the key.",
           "Where a job runs and what needs approval are not set here but in the user config below.",
           ""]
    rows = []
    for key, (_check, text) in schema.SCHEMA.items():
        # gpus counts on every target (a local/ssh one must have them, Modal gives 1 to 8)
        scope = " (a scheduler target: slurm, pbs)" if key in schema.RESOURCE_KEYS and key != "gpus" else ""
        rows.append((f"`{key}`", text + scope))
    out += _table(("key", "what it takes"), rows)
    example = (ROOT / "gpu.yaml.example").read_text()
    out += ["`gpu.yaml.example`, every key with its comments:", "", "```yaml", example.rstrip("\n"),
            "```", ""]
    return out


def _targets(used: set[str]) -> list[str]:
    fields = [f for f in dataclasses.fields(user.TargetConfig) if f.name not in ("name", "options")]
    rows = [(f"`{f.name}`", DESCRIBE.get(f"target.{f.name}", ""), _fmt(f.default) if f.default
             is not dataclasses.MISSING else "") for f in fields]
    for f in fields:
        _described("target", [f.name], used)
    out = ["### targets", "",
           f"`targets: {{NAME: {{kind: KIND, ...}}}}`; kinds: {', '.join(user.TARGET_KINDS)}. "
           "A target named `local` is always there. Keys every kind takes:", ""]
    out += _table(("key", "what it takes", "default"), rows)
    out += ["#### local", ""] + _table(("key", "what it takes"),
                                       _described("local", sorted(user.LOCAL_OPTIONS), used))
    remote = sorted(targetopts.COMMON)
    scheduler = sorted(targetopts.SCHEDULER)
    out += ["#### ssh, slurm, pbs", "", "Every remote kind:", ""]
    out += _table(("key", "what it takes"), _described("remote", remote, used))
    out += ["slurm and pbs also take (values that reach a batch script allow no spaces or newlines):", ""]
    out += _table(("key", "what it takes"), _described("scheduler", scheduler, used))
    for kind, ((gpu_key, choices, default), numbers) in targetopts.SERVICE_KINDS.items():
        rows = [(f"`{gpu_key}`", f"{DESCRIBE[f'service.{gpu_key}']}: {', '.join(choices)} "
                                 f"(default {default})")]
        used.add(f"service.{gpu_key}")
        for key in ("internet", *(("offline",) if kind == "kaggle" else ()), *numbers,
                    "max_output_bytes", "max_output_files"):
            (_, text), = _described("service", [key], used)
            if key in numbers:
                lo, hi = numbers[key]
                text += f"; {lo:g} to {hi:g}"
            rows.append((f"`{key}`", text))
        out += [f"#### {kind}", "", f"Its credentials live in the keychain ({kind}:NAME), never here.", ""]
        out += _table(("key", "what it takes"), rows)
    out += ["#### skypilot", "", "SkyPilot keeps its own cloud credentials; gpu-router reads its enabled clouds "
            "and prices, and runs each job's attempt on a cluster of its own.", ""]
    out += _table(("key", "what it takes"), _described("skypilot", sorted(targetopts.SKYPILOT), used))
    return out


def _user_config(used: set[str]) -> list[str]:
    out = ["## The user config", "",
           "`~/.config/gpu-router/config.yaml` (`$XDG_CONFIG_HOME/gpu-router/config.yaml`, or the",
           "file `$GPU_ROUTER_CONFIG` names): the person's own, outside every project, so an agent",
           "that edits a project cannot change where jobs run or loosen a rule. Sections: "
           + ", ".join(f"`{s}`" for s in user.SECTIONS) + ".", ""]
    out += _targets(used)
    defaults = user.Rules()
    rows = []
    for f in dataclasses.fields(user.Rules):
        if f.name in OTHER_SECTION:
            continue
        (_, text), = _described("rules", [f.name], used)
        limit = user._RULE_LIMITS.get(f.name)
        stricter = f"; at most {limit[0]:g}" if limit else ""
        value = getattr(defaults, f.name)
        rows.append((f"`{f.name}`", text + stricter, _fmt(value)))
    out += ["### rules", "", "Rules can only be made stricter than their defaults; a looser value is an error.", ""]
    out += _table(("key", "what it takes", "default"), rows)
    out += ["Kill rules, each a one-key mapping:", "", "```yaml", "rules:", "  kill_rules:",
            "    - nan_metric: true                   # any metric that becomes NaN or infinite",
            "    - nan_metric: [loss, val/loss]       # only these",
            "    - no_improvement: {metric: val/loss, minutes: 30, mode: min}",
            "    - gpu_util_below: {percent: 10, minutes: 15}",
            "    - over_budget: true                  # spend past budget.per_job while it runs",
            "```", ""]
    out += ["### budget", ""] + _table(("key", "what it takes"), _described("budget", BUDGET_KEYS, used))
    out += ["### dashboard", ""] + _table(("key", "what it takes"),
                                          _described("dashboard", DASHBOARD_KEYS, used))
    storage = _described("storage", list(user.STORAGE_DEFAULTS), used)
    out += ["### storage", ""] + _table(
        ("key", "what it takes", "default"),
        [(k, t, _fmt(user.STORAGE_DEFAULTS[k.strip("`")])) for k, t in storage])
    out += ["### approvals", ""] + _table(("key", "what it takes"),
                                          _described("approvals", APPROVALS_KEYS, used))
    out += ["### accounts", "",
            "GPU cloud accounts, read only: `accounts: {PROVIDER: {...}}`; providers: "
            + ", ".join(f"`{p}`" for p in sorted(user.ACCOUNT_PROVIDERS))
            + ". The API key lives in the keychain (`gpu accounts add PROVIDER`), never here.", ""]
    out += _table(("key", "what it takes"), _described("accounts", user.ACCOUNT_KEYS, used))
    out += ["### notify", "",
            "Where the person is told that a job waits for their approval or ended (sent by the "
            "supervisor; see [Notifications](../notifications.md)): a list whose entries are an "
            "apprise URL, or a mapping of these keys:", ""]
    out += _table(("key", "what it takes"), _described("notify", user.NOTIFY_KEYS, used))
    out += ["```yaml", "notify:", "  - ntfy://ntfy.sh/my-gpu-jobs            # every event",
            "  - url: tgram://BOT_TOKEN/CHAT_ID", "    events: [approval_wait, failed, stopped_by_rule]",
            "```", ""]
    out += ["### mcp", "", "What `gpu mcp` serves agents ([agents](../mcp.md)).", ""]
    out += _table(("key", "what it takes"), _described("mcp", MCP_KEYS, used))
    return out


def render() -> str:
    """The page, as text; raises SystemExit when DESCRIBE and the code disagree."""
    used: set[str] = set()
    lines = ["# Configuration reference", "",
             "<!-- written by `python docs/gen_reference.py` from core/config: do not edit by hand -->", "",
             "Every key gpu-router reads, from the code that reads it: a job's `gpu.yaml` and the",
             "user's own config.", ""]
    lines += _gpu_yaml() + _user_config(used)
    stale = sorted(set(DESCRIBE) - used)
    if stale:
        raise SystemExit(f"docs/gen_reference.py: DESCRIBE names keys the code does not take: "
                         f"{', '.join(stale)}")
    while lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the committed page differs from what would be written")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python docs/gen_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
