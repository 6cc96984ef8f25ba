"""The options of remote targets (ssh, slurm, pbs) in the user config, and saving targets.

    targets:
      box:     {kind: ssh, host: gpu-box.lan, user: me, port: 22, key: ~/.ssh/id_ed25519}
      cluster: {kind: slurm, host: login.hpc.example.edu, user: me, partition: gpu,
                account: lab42, modules: [cuda/12.1], time_minutes: 120, cpus: 8, gpus: 1,
                memory_gb: 32}
      here:    {kind: slurm, local: true, partition: debug}   # this machine is the login node

Every option is checked here, once, with an error naming the file and key: values that end up
in a batch script's directives (partition, account, modules) allow no spaces or newlines, so
nothing in the config can add a line to a script.
"""

from __future__ import annotations

import re
from typing import Any

from core.config.schema import path_problem
from core.errors import UserError, shorten

REMOTE_KINDS = ("ssh", "slurm", "pbs")
SAFE_VALUE_RE = re.compile(r"^[A-Za-z0-9._:/@,+=%-]+\Z")
HOST_RE = re.compile(r"^[A-Za-z0-9._:%-]{1,253}\Z")
USER_RE = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,255}\$?\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")

# timing options: how long a connection may take, how long a probe is trusted, and how long a
# host may stay unreachable before the job's session counts as lost (it then moves elsewhere)
TIMING = {"connect_timeout_s", "probe_ttl_s", "unreachable_grace_s"}
# `offline` (auto | true | false): whether the host installs the project's dependencies from a
# wheelhouse built here (core/providers/remotedeps.py); `env`: the host's environment for what
# gpu-router runs there (the scheduler's commands, the launcher and pip), not the job's own
# `agents_without_sandbox`: where the host has no bubblewrap, an agent's job there waits for a
# person unless this is true (core/planning/policy.py; a job there can reach other jobs)
COMMON = {"host", "port", "user", "key", "known_hosts", "root", "python", "max_output_bytes",
          "max_output_files", "cache_cap_gb", "offline", "env", "agents_without_sandbox"} | TIMING
SCHEDULER = {"local", "partition", "account", "modules", "container", "container_runtime",
             "container_python", "cpus", "gpus_per_job", "memory_gb", "time_minutes",
             "pass_secrets", "signal_lead_s", "pbs_flavor", "requeue"}
# how long a job may wait to start on a target of each kind, in seconds, before it is cancelled
# there and planned again elsewhere (a target's `queue_timeout_s` overrides it; 0: never). The
# wait counts a free slot (max_jobs full) and the target's own queue (Slurm PENDING, PBS Q/H/W,
# Kaggle QUEUED). Why these: a cluster's queue is normally minutes, so half an hour is a
# partition that will not run it soon; a Kaggle session queues for minutes when its GPU pool is
# short; a box of one's own frees a slot when a job ends, which ten minutes covers for a test
# run and not for a training run (pin the target with `provider` to wait for it whatever the
# time); Modal reports no queue, only the slot wait counts there.
QUEUE_TIMEOUT_S = {"local": 600.0, "ssh": 600.0, "slurm": 1800.0, "pbs": 1800.0, "kaggle": 1200.0,
                   "modal": 1200.0, "skypilot": 1800.0}
# how long one probe of a target may take, connecting and answering, in seconds, before it is
# given up and the target counts as unavailable for now (a target's `probe_timeout_s` overrides
# it). A service's probe is one API call: 5 s is plenty for a service that is up, and what an
# offline laptop waits at most. A host's is an SSH login (its `connect_timeout_s`, default 10)
# and a command (nvidia-smi, sinfo) on a machine that may be busy: 30 s (a healthy host's probe
# took over 20 s on the 2-core test machine under a load of 10, and a pinned submit fails on a
# host that "did not answer"). This machine's is nvidia-smi, which takes seconds while the
# driver wakes up: 20 s.
# A SkyPilot server's is `sky check` and its catalog over every enabled cloud: seconds to a
# minute with real clouds (5 s against one Slurm infra on this machine); its answer is kept
# for 10 minutes (core/providers/skypilot/target.py).
PROBE_TIMEOUT_S = {"local": 20.0, "ssh": 30.0, "slurm": 30.0, "pbs": 30.0, "kaggle": 5.0, "modal": 5.0,
                   "skypilot": 90.0}
ALLOWED = {"ssh": COMMON, "slurm": COMMON | SCHEDULER, "pbs": COMMON | SCHEDULER}


def _fail(what: str, where: str, fix: str | None = None) -> None:
    raise UserError(what, where=where, fix=fix)


def offline_option(options: dict[str, Any]) -> str:
    """The target's `offline` as "auto", "true" or "false" (after check_offline)."""
    value = options.get("offline", "auto")
    return "true" if value is True else "false" if value is False else "auto"


def check_offline(name: str, options: dict[str, Any], where: str) -> None:
    """`offline` is auto, true or false, on every kind that takes it."""
    if options.get("offline", "auto") not in ("auto", True, False):
        _fail(f"targets.{name}.offline must be auto, true or false (got {shorten(options.get('offline'))})",
              where, "true: the dependencies come from a wheelhouse built here; false: pip on the host "
                     "installs them; auto: the host's reach of its package index decides")


def check_output_caps(name: str, options: dict[str, Any], where: str) -> None:
    """`max_output_bytes` and `max_output_files`: how much of a job's outputs comes home, on any
    kind of target (core.packaging.safe_extract.OutputCaps reads them)."""
    for key in ("max_output_bytes", "max_output_files"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            _fail(f"targets.{name}.{key} must be a whole number above 0 (got {value!r})", where)


KAGGLE_ACCELERATORS = ("t4x2", "p100")  # core/providers/kaggle/target.py maps them to Kaggle's machine shapes
MODAL_GPUS = ("T4", "L4", "A10G", "L40S", "A100-40GB", "A100-80GB", "H100", "H200", "B200")  # core.providers.modal.catalog.PRICES
# a service target (credentials in the keychain, never here): (its GPU key, the choices, the
# default; its numeric options and their ranges)
SERVICE_KINDS = {
    "kaggle": (("accelerator", KAGGLE_ACCELERATORS, "t4x2"),
               {"max_resumes": (0, 100), "checkpoint_lead_s": (0, 86_400), "upload_timeout_s": (1, 86_400),
                "api_timeout_s": (0.1, 3600)}),
    "modal": (("gpu", MODAL_GPUS, "T4"),
              {"max_resumes": (0, 100), "checkpoint_lead_s": (0, 86_400), "connect_timeout_s": (1, 600),
               "volume_read_timeout_s": (1, 86_400)}),
}


def validate_service(name: str, kind: str, options: dict[str, Any], where: str) -> dict[str, Any]:
    """A kaggle or modal target's options, by SERVICE_KINDS."""
    (gpu_key, choices, default), numbers = SERVICE_KINDS[kind]
    allowed = {gpu_key, "internet", *numbers, "max_output_bytes", "max_output_files"}
    if kind == "kaggle":
        allowed.add("offline")
    for key in options:
        if key not in allowed:
            _fail(f"targets.{name}: unknown option {shorten(key)} for a {kind} target", where,
                  f"options: {', '.join(sorted(allowed))}")
    if options.get(gpu_key, default) not in choices:
        _fail(f"targets.{name}.{gpu_key} must be one of {', '.join(choices)} "
              f"(got {shorten(options.get(gpu_key))})", where)
    if not isinstance(options.get("internet", False), bool):
        _fail(f"targets.{name}.internet must be true or false", where)
    check_offline(name, options, where)
    if options.get("offline", "auto") is False and not options.get("internet", False):
        _fail(f"targets.{name}: offline: false installs dependencies from the package index, which "
              "needs internet", where, f"add internet: true to targets.{name} (a phone-verified Kaggle "
              "account), or leave offline at auto")
    for key, (lo, hi) in numbers.items():
        v = options.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi):
            _fail(f"targets.{name}.{key} must be a number from {lo} to {hi} (got {shorten(v)})", where)
    check_output_caps(name, options, where)
    return options


# a skypilot target: its API server (`endpoint`, else the local one), SkyPilot's venv (`venv`,
# else ours under the data folder), the adapter's environment (`env`), the clouds it may use
SKYPILOT = {"endpoint", "venv", "env", "clouds", "connect_timeout_s", "probe_ttl_s",
            "max_output_bytes", "max_output_files", "autodown_minutes", "launch_timeout_s",
            "poll_interval_s", "max_resumes"}
# a skypilot target's numbers: (least, most)
SKYPILOT_NUMBERS = {"connect_timeout_s": (1e-9, 86_400), "probe_ttl_s": (1e-9, 86_400),
                    "autodown_minutes": (1, 10_080), "launch_timeout_s": (60, 86_400),
                    "poll_interval_s": (1, 3_600), "max_resumes": (0, 100)}
ENDPOINT_RE = re.compile(r"^https?://[A-Za-z0-9._:\[\]-]+(?::[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?\Z")
CLOUD_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}\Z")


def validate_skypilot(name: str, options: dict[str, Any], where: str) -> dict[str, Any]:
    """A skypilot target's options, by SKYPILOT."""
    for key in options:
        if key not in SKYPILOT:
            _fail(f"targets.{name}: unknown option {shorten(key)} for a skypilot target", where,
                  f"options: {', '.join(sorted(SKYPILOT))}")
    endpoint = options.get("endpoint")
    if endpoint is not None and (not isinstance(endpoint, str) or not ENDPOINT_RE.match(endpoint)):
        _fail(f"targets.{name}.endpoint must be the API server's http(s) URL, without a password "
              f"(got {shorten(endpoint)})", where, "e.g. https://sky.example.org:46580 (SkyPilot asks for "
              "its login itself: `sky api login`)")
    venv = options.get("venv")
    if venv is not None and (not isinstance(venv, str) or not venv.strip() or any(ord(c) < 32 for c in venv)):
        _fail(f"targets.{name}.venv must be a folder's path on one line (got {shorten(venv)})", where)
    clouds = options.get("clouds")
    if clouds is not None:
        if isinstance(clouds, str):
            clouds = options["clouds"] = [clouds]
        if not isinstance(clouds, list) or not clouds or not all(isinstance(c, str) and CLOUD_RE.match(c)
                                                                 for c in clouds):
            _fail(f"targets.{name}.clouds must be a list of SkyPilot's cloud names like [aws, runpod] "
                  f"(got {shorten(clouds)})", where)
    for key, (lo, hi) in SKYPILOT_NUMBERS.items():
        v = options.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi):
            what = "of seconds above 0" if 0 < lo < 1e-6 else f"from {lo:g} to {hi:g}"
            _fail(f"targets.{name}.{key} must be a number {what} (got {shorten(v)})", where)
    env = options.get("env")
    if env is not None and (not isinstance(env, dict) or not all(
            isinstance(k, str) and ENV_NAME_RE.match(k) and isinstance(v, (str, int, float))
            and "\x00" not in str(v) for k, v in env.items())):
        _fail(f"targets.{name}.env must map NAME: value (the environment SkyPilot's client runs with)", where)
    check_output_caps(name, options, where)
    return options


def validate(name: str, kind: str, options: dict[str, Any], where: str) -> dict[str, Any]:
    """Check a remote target's options; returns them unchanged when they are fine."""
    if kind in SERVICE_KINDS:
        return validate_service(name, kind, options, where)
    if kind == "skypilot":
        return validate_skypilot(name, options, where)
    allowed = ALLOWED[kind]
    for key in options:
        if key not in allowed:
            _fail(f"targets.{name}: unknown option {shorten(key)} for a {kind} target", where,
                  f"options: {', '.join(sorted(allowed))}")
    local = options.get("local", False)
    if not isinstance(local, bool):
        _fail(f"targets.{name}.local must be true or false", where)
    if not local:
        host = options.get("host")
        if not isinstance(host, str) or not HOST_RE.match(host) or host.startswith("-"):
            _fail(f"targets.{name} needs a host name (got {shorten(host)})", where,
                  f"targets:\n    {name}: {{kind: {kind}, host: gpu-box.example.org}}"
                  + (" (or local: true on a login node)" if kind != "ssh" else ""))
    if "port" in options:
        port = options["port"]
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            _fail(f"targets.{name}.port must be a port number (got {shorten(port)})", where)
    if options.get("user") is not None and (not isinstance(options["user"], str)
                                            or not USER_RE.match(options["user"])):
        _fail(f"targets.{name}.user is not a user name (got {shorten(options['user'])})", where)
    for key in ("key", "known_hosts", "root", "python", "container", "container_runtime",
                "container_python"):
        value = options.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()
                                  or any(ord(c) < 32 for c in value)):
            _fail(f"targets.{name}.{key} must be a path or name on one line (got {shorten(value)})", where)
        problem = path_problem(value) if isinstance(value, str) else None
        if problem:
            _fail(f"targets.{name}.{key} {shorten(value)} {problem}", where,
                  f"give the path of an existing file or folder as targets.{name}.{key}")
    for key in ("partition", "account", "pbs_flavor"):
        value = options.get(key)
        if value is not None and (not isinstance(value, str) or not SAFE_VALUE_RE.match(value)):
            _fail(f"targets.{name}.{key} allows letters, digits and . _ - : / @ , + = only "
                  f"(got {shorten(value)})", where)
    if options.get("pbs_flavor") not in (None, "pro", "torque"):
        _fail(f"targets.{name}.pbs_flavor is pro (PBS Pro, OpenPBS) or torque", where)
    if "modules" in options:
        mods = options["modules"]
        if isinstance(mods, str):
            mods = options["modules"] = [mods]
        if not isinstance(mods, list) or not all(isinstance(m, str) and SAFE_VALUE_RE.match(m) for m in mods):
            _fail(f"targets.{name}.modules must be a list of module names like cuda/12.1", where)
    for key, whole in (("cpus", True), ("gpus_per_job", True), ("time_minutes", True),
                       ("memory_gb", False), ("connect_timeout_s", False), ("probe_ttl_s", False),
                       ("unreachable_grace_s", False), ("cache_cap_gb", False),
                       ("signal_lead_s", True)):
        value = options.get(key)
        if value is None:
            continue
        ok = not isinstance(value, bool) and isinstance(value, int if whole else (int, float)) \
            and abs(value) < 1e15  # also refuses NaN and infinity
        if not ok or value < (0 if key in ("gpus_per_job", "probe_ttl_s") else 1e-9):
            shown = "gpus" if key == "gpus_per_job" else key
            _fail(f"targets.{name}.{shown} must be a {'whole ' if whole else ''}number above 0 "
                  f"(got {shorten(value)})", where)
    check_output_caps(name, options, where)
    env = options.get("env")
    if env is not None:
        if not isinstance(env, dict) or not all(isinstance(k, str) and ENV_NAME_RE.match(k)
                                                and isinstance(v, (str, int, float))
                                                and "\x00" not in str(v) for k, v in env.items()):
            _fail(f"targets.{name}.env must map NAME: value (the host's environment for the scheduler's "
                  "commands, the launcher and pip)", where)
    check_offline(name, options, where)
    for key in ("pass_secrets", "requeue", "agents_without_sandbox"):
        if key in options and not isinstance(options[key], bool):
            _fail(f"targets.{name}.{key} must be true or false", where)
    return options
