"""`gpu targets` subcommands: list, add ssh|slurm|pbs|kaggle|modal|skypilot, probe, rm, trust.

    gpu targets [list] [--json]
    gpu targets add ssh NAME --host H [--user U] [--port P] [--key PATH]
    gpu targets add slurm NAME (--host H ... | --local) [--partition P] [--account A]
    gpu targets add skypilot NAME [--endpoint URL] [--venv PATH] [--clouds aws,runpod]
    gpu targets rm NAME
    gpu targets trust NAME [--fingerprint SHA256:...] [--replace]

`add` writes the target into the user's config (keeping the rest of the file) and probes it
at once, so a wrong host, user or key, or a host key not yet trusted, is said right away.
`trust` is the one deliberate way to accept a host key: it shows the fingerprint and needs a
person's "yes" at a terminal, or the same fingerprint given with --fingerprint (what a script
or an agent must pass, after a person checked it). Kept out of tui/cli/parser.py, which only hooks
these in.
"""

from __future__ import annotations

import argparse
import time
import sys
from typing import Any, Callable

from core.config.targetopts import KAGGLE_ACCELERATORS, MODAL_GPUS
from core.errors import UserError, shorten
from tui.show.output import ask, emit_json, joined, markup, say, write

KINDS = ("ssh", "slurm", "pbs", "kaggle", "modal", "skypilot")


def add_target_commands(p: argparse.ArgumentParser, list_func: Callable[[argparse.Namespace], int]) -> None:
    """Hang list/add/rm/trust under `gpu targets` (which alone still lists)."""
    p.usage = "gpu targets [list | add | probe | rm | trust] [--json] [...]"
    sub = p.add_subparsers(dest="targets_action", metavar="ACTION")

    lp = sub.add_parser("list", prog="gpu targets list", help="the targets (the same as plain `gpu targets`)",
                        description="the targets: GPUs, availability, quota left, price")
    lp.add_argument("--json", action="store_true", help="print {targets: [...]}")
    lp.set_defaults(func=list_func)

    ap = sub.add_parser("add", prog="gpu targets add", help="save an ssh, slurm or pbs target and probe it",
                        description="save an ssh, slurm or pbs target in your config and probe it",
                        usage="gpu targets add {ssh,slurm,pbs} NAME (--host H [--user U] [--port P] "
                              "[--key PATH] | --local) [options]")
    ap.add_argument("kind", choices=KINDS, help="ssh: a machine you log into; slurm/pbs: a cluster's login node; "
                                                "kaggle: Kaggle's free weekly GPU hours; "
                                                "modal: your Modal account's GPUs, paid by the second; "
                                                "skypilot: the clouds a SkyPilot API server has enabled")
    ap.add_argument("name", help="the target's name (letters, digits, . _ -)")
    ap.add_argument("--host", help="host name or address")
    ap.add_argument("--user", help="login user (default: your SSH config, else your name)")
    ap.add_argument("--port", type=int, help="SSH port (default 22)")
    ap.add_argument("--key", metavar="PATH", help="private key file (default: your SSH agent and keys)")
    ap.add_argument("--local", action="store_true", help="slurm/pbs: this machine is the login node (no SSH)")
    ap.add_argument("--partition", help="slurm partition / pbs queue")
    ap.add_argument("--account", help="account to charge")
    ap.add_argument("--env", action="append", metavar="K=V",
                    help="the host's environment for the scheduler's commands, the launcher and pip, e.g. "
                         "SLURM_CONF=/etc/slurm/other.conf or PIP_INDEX_URL=https://mirror/simple "
                         "(a job's own environment goes in gpu.yaml's env)")
    ap.add_argument("--root", help="folder on the host for gpu-router's cache and jobs (default ~/.gpu-router)")
    ap.add_argument("--python", help="Python on the host (default python3)")
    ap.add_argument("--known-hosts", metavar="PATH", help="known_hosts file (default ~/.ssh/known_hosts)")
    ap.add_argument("--max-jobs", type=int, help="jobs at once on this target (default 1)")
    ap.add_argument("--price-per-hour", type=float, help="dollars per hour (default 0: free)")
    ap.add_argument("--hours-per-week", type=float, help="a weekly quota in hours")
    ap.add_argument("--kaggle-json", metavar="PATH",
                    help="kaggle: the kaggle.json to import into the keychain (default ~/.kaggle/kaggle.json)")
    ap.add_argument("--token-stdin", action="store_true",
                    help="kaggle: read an API token (or kaggle.json's text) from standard input; "
                         "modal: read the token id and secret (or ~/.modal.toml's text) from standard input")
    ap.add_argument("--modal-toml", metavar="PATH",
                    help="modal: the token file to import into the keychain (default ~/.modal.toml)")
    ap.add_argument("--gpu", choices=MODAL_GPUS,
                    help="modal: the GPU a job gets unless it asks for another (default T4)")
    ap.add_argument("--accelerator", choices=KAGGLE_ACCELERATORS, help="kaggle: the GPU to ask for (default t4x2)")
    ap.add_argument("--internet", action="store_true", help="kaggle, modal: let the job reach the internet (default off)")
    ap.add_argument("--endpoint", metavar="URL",
                    help="skypilot: a team's API server (default: the local one SkyPilot starts on demand)")
    ap.add_argument("--venv", metavar="PATH",
                    help="skypilot: a venv that has SkyPilot already (default: gpu-router makes its own with uv)")
    ap.add_argument("--clouds", metavar="A,B",
                    help="skypilot: only these of SkyPilot's enabled clouds, e.g. aws,runpod (default: all)")
    ap.add_argument("--no-probe", action="store_true", help="save without connecting")
    ap.add_argument("--json", action="store_true", help="print {target, saved_to, config, probe}")
    ap.set_defaults(func=cmd_add)

    rp = sub.add_parser("rm", prog="gpu targets rm", help="remove a target from your config",
                        description="remove a target from your config")
    rp.add_argument("name")
    rp.add_argument("--force", action="store_true", help="even while jobs run on it")
    rp.add_argument("--json", action="store_true", help="print {removed, saved_to}")
    rp.set_defaults(func=cmd_rm)

    pp = sub.add_parser("probe", prog="gpu targets probe", help="ask a target now what it has (GPUs, quota), past any cached answer",
                        description="probe a target now: reachable or why not, GPUs, load, quota left")
    pp.add_argument("name")
    pp.add_argument("--json", action="store_true", help="print {target, probe}")
    pp.set_defaults(func=cmd_probe)

    tp = sub.add_parser("trust", prog="gpu targets trust", help="accept a target's SSH host key, deliberately",
                        description="show a target's SSH host key fingerprint and record it in known_hosts")
    tp.add_argument("name")
    tp.add_argument("--fingerprint", help="the SHA256:... fingerprint you checked (required without a terminal)")
    tp.add_argument("--replace", action="store_true", help="replace a different key recorded for the host")
    tp.add_argument("--json", action="store_true", help="print {target, host, fingerprint, known_hosts, trusted}")
    tp.set_defaults(func=cmd_trust)


def _person(args: argparse.Namespace) -> bool:
    """A person at a terminal, whose typed yes trusts a key; an agent in a pseudo-terminal
    (core.engine.actor) passes the fingerprint a person checked, like any script."""
    from core.engine.actor import current

    return current(json=bool(args.json)).is_person


# per service kind: the flags it refuses, the flags it keeps in its entry, and its usage
SERVICE_FLAGS = {
    "kaggle": (("host", "local", "partition", "env"), ("accelerator", "internet", "max_jobs"),
               "[--kaggle-json PATH | --token-stdin]"),
    "modal": (("host", "local", "partition", "env", "accelerator", "kaggle_json"),
              ("gpu", "internet", "max_jobs", "price_per_hour"),
              "[--gpu T4] [--internet] [--modal-toml PATH | --token-stdin]"),
    "skypilot": (("host", "local", "partition", "account", "user", "port", "key", "gpu", "accelerator",
                  "internet", "kaggle_json", "modal_toml", "token_stdin", "price_per_hour", "hours_per_week"),
                 ("endpoint", "venv", "max_jobs"),
                 "[--endpoint URL] [--venv PATH] [--clouds aws,runpod] [--env NAME=VALUE]"),
}
SKYPILOT_ONLY = ("endpoint", "venv", "clouds")  # the flags no other kind takes


def _service_body(args: argparse.Namespace) -> dict:
    """A kaggle or modal target's entry: the flags it takes, refusing those of hosts."""
    refused, kept, usage = SERVICE_FLAGS[args.kind]
    if any(getattr(args, flag) for flag in refused):
        names = [f"--{flag.replace('_', '-')}" for flag in refused]
        raise UserError(f"a {args.kind} target takes no {', '.join(names[:-1])} or {names[-1]}",
                        fix=f"gpu targets add {args.kind} {args.name} {usage}")
    body: dict[str, Any] = {"kind": args.kind}
    for flag in kept:
        value = getattr(args, flag)
        if value is not None and value is not False and value != "":
            body[flag] = value
    if args.kind == "skypilot":
        if args.clouds:
            body["clouds"] = [c.strip().lower() for c in args.clouds.split(",") if c.strip()]
        if args.env:
            body["env"] = _env_pairs(args.env)
    return body


def _env_pairs(given: list[str]) -> dict[str, str]:
    pairs = [e.partition("=") for e in given]
    if any(not sep or not k for k, sep, _ in pairs):
        raise UserError(f"--env takes NAME=VALUE (got {given})")
    return {k: v for k, _, v in pairs}


def _body(args: argparse.Namespace) -> dict:
    from core.config.schema import NAME_RE

    if not NAME_RE.match(args.name) or args.name == "local":
        raise UserError(f"{shorten(args.name)} cannot name a target",
                        fix="letters, digits, '.', '_' or '-'; `local` is this machine")
    if args.kind != "skypilot" and any(getattr(args, flag) for flag in SKYPILOT_ONLY):
        raise UserError("--endpoint, --venv and --clouds are for skypilot targets")
    if args.kind in SERVICE_FLAGS:
        return _service_body(args)
    if args.gpu or args.modal_toml:
        raise UserError("--gpu and --modal-toml are for modal targets")
    if args.accelerator or args.internet or args.kaggle_json or args.token_stdin:
        raise UserError("--accelerator, --internet, --kaggle-json and --token-stdin are for kaggle and modal targets")
    if args.kind == "ssh" and args.local:
        raise UserError("an ssh target cannot be --local", fix="leave out --local, or use `gpu submit` on this machine")
    if not args.host and not args.local:
        raise UserError(f"gpu targets add {args.kind} needs --host" + ("" if args.kind == "ssh" else " or --local"),
                        fix=f"gpu targets add {args.kind} {args.name} --host login.example.org --user me")
    if args.local and (args.host or args.user or args.port or args.key):
        raise UserError("--local runs the scheduler's commands here: leave out --host/--user/--port/--key")
    if args.kind == "ssh" and (args.partition or args.account):
        raise UserError("--partition and --account are for slurm and pbs targets")
    body: dict[str, Any] = {"kind": args.kind}
    if args.local:
        body["local"] = True
    for key in ("host", "user", "port", "key", "partition", "account", "root", "python"):
        value = getattr(args, key)
        if value is not None:
            body[key] = value
    if args.known_hosts:
        body["known_hosts"] = args.known_hosts
    if args.env:
        body["env"] = _env_pairs(args.env)
    for key in ("max_jobs", "price_per_hour", "hours_per_week"):
        value = getattr(args, key)
        if value is not None:
            body[key] = value
    return body


def describe_probe(info) -> list[str]:
    """Lines a person reads: reachable or why not, GPUs and free memory, load, partitions.

    The host wrote most of these values (GPU and partition names, load): each is filtered on
    its own (`v`), so one that opens an escape sequence cannot hide the rest of its line."""
    def v(value: object) -> str:
        return joined([value])

    d = info.details or {}
    if not info.available:
        return [f"not available: {v(info.why_unavailable)}", *skypilot_lines(d, v)]
    if info.kind == "skypilot":  # its clouds and prices are what it offers
        at = d.get("as_of")
        when = f" (as of {time.strftime('%Y-%m-%d %H:%M', time.localtime(float(at)))}; `gpu targets probe " \
               f"{v(info.name)}` asks again)" if isinstance(at, (int, float)) else ""
        return [f"available: jobs launch on clusters of their own{when}", *skypilot_lines(d, v)]
    lines = [f"reachable ({v(d.get('host', info.name))})"]
    if info.gpus:
        free = d.get("gpus_free_gb") or []
        gpus = ", ".join(f"{v(g['name'])} {g.get('memory_gb', 0):g} GB"
                         + (f" ({free[i]:g} GB free)" if i < len(free) and free[i] is not None else "")
                         for i, g in enumerate(info.gpus))
        lines.append(f"GPUs: {gpus}")
    else:
        lines.append("GPUs: none found (jobs run on the CPU)" if info.kind == "ssh" else "GPUs: none in the partition")
    q = d.get("quota")
    if isinstance(q, dict):
        lines.append(f"Kaggle account {v(d.get('user', '?'))}: {v(q.get('left_hours'))} h of "
                     f"{v(q.get('allowed_hours'))} h of GPU quota left this week"
                     + (f" (resets {v(q['resets_at'])})" if q.get("resets_at") else ""))
    prices = d.get("prices")
    if isinstance(prices, dict) and isinstance(prices.get("usd_per_hour"), dict):
        table = ", ".join(f"{v(g)} ${float(p):.2f}" for g, p in prices["usd_per_hour"].items())
        lines.append(f"Modal prices per GPU-hour (as of {v(prices.get('as_of'))}, {v(prices.get('source'))}): {table}")
        lines.append("network: " + ("on" if d.get("internet") else "off (a job that downloads models needs internet: true)"))
    if d.get("load"):
        lines.append(f"load: {v(d['load'])} on {v(d.get('cpus', '?'))} CPUs, {v(d.get('mem', '?'))} GB memory free")
    for p in d.get("partitions", []):
        gres = ", ".join(f"{v(g['count'])}x {v(g['type'])}" for g in p.get("gpus", [])) or "no GPUs"
        mark = " (used)" if p["name"] == d.get("partition") else ""
        lines.append(f"partition {v(p['name'])}{mark}: {'up' if p['up'] else 'DOWN'}, {v(p['nodes'])} nodes, "
                     f"{gres} per node, {v(p['queued'])} queued, time limit {v(p['time_limit'])}")
    return lines


def skypilot_lines(d: dict, v: Callable[[object], str]) -> list[str]:
    """A SkyPilot server's clouds (enabled, and what each other one lacks) and its cheapest
    price per GPU type; nothing for other kinds. SkyPilot wrote these words: each is filtered."""
    clouds = d.get("clouds")
    if not isinstance(clouds, dict):
        return []
    enabled = clouds.get("enabled") or {}
    lines = [f"SkyPilot ({v(d.get('server'))}): enabled "
             + (", ".join(v(c) for c in sorted(enabled)) if enabled else "none")]
    by_reason: dict[str, list[str]] = {}  # 28 clouds share "not in allowed_clouds": one line
    for cloud, why in sorted((clouds.get("disabled") or {}).items()):
        by_reason.setdefault(str(why or "no reason given"), []).append(str(cloud))
    for why, names in list(by_reason.items())[:20]:
        lines.append(f"  disabled: {v(', '.join(names))} ({v(why)})")
    for gpu, p in list((d.get("prices") or {}).items())[:40]:
        lines.append(f"{v(gpu)}: from ${float(p['usd_per_hour']):.2f}/h per GPU on {v(', '.join(p['clouds']))}"
                     f", up to {v(p['count_max'])} per job")
    for cloud, why in (d.get("price_errors") or {}).items():
        lines.append(f"{v(cloud)}: no prices ({v(why)})")
    return lines


def cmd_add(args: argparse.Namespace) -> int:
    from core.engine import target_setup as targets

    body = _body(args)
    if args.kind == "kaggle":
        path, info = targets.add_kaggle(args.name, body, _kaggle_credentials(args), probe_now=not args.no_probe)
    elif args.kind == "modal":
        path, info = targets.add_modal(args.name, body, _modal_token(args), probe_now=not args.no_probe)
    elif args.kind == "skypilot":
        path, info = targets.add_skypilot(args.name, body, probe_now=not args.no_probe,
                                          tell=lambda text: write(text + "\n", sys.stderr))
    else:
        path, info = targets.add(args.name, body, probe_now=not args.no_probe)
    if args.json:
        emit_json({"target": args.name, "saved_to": str(path), "config": body,
               "probe": info.to_json() if info else None})
        return 0
    say(markup("saved target [bold]{name}[/] ({kind}) to {path}", name=args.name, kind=args.kind, path=path))
    if info is not None and not info.available and not (info.details or {}).get("clouds"):
        # saved all the same: one line, and what to do
        say(markup("  [yellow]not available now:[/] {why}; saved anyway: once it can be reached, "
                   "[bold]gpu targets probe {name}[/] asks again", why=info.why_unavailable or "?",
                   name=args.name))
    elif info is not None:
        for line in describe_probe(info):
            say("  " + line)
    return 0


def _secret_text(args: argparse.Namespace, *, given: str | None, default: str, what: str, stdin_fix: str,
                 prompt: str, file_fix: str) -> str:
    """A service's credentials as text: standard input (--token-stdin), its own file (`given`,
    else `default` under the home folder), or typed hidden at a terminal. Never an argument:
    a command line is visible to every process on the machine."""
    import os

    from tui.show.output import ask_hidden

    if args.token_stdin:
        text = sys.stdin.read(1 << 16)
        if not text.strip():
            raise UserError("nothing on standard input", fix=stdin_fix)
        return text
    path = os.path.expanduser(given or default)
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(1 << 16)
    if given:
        raise UserError(f"no file {shorten(given)}", fix=file_fix)
    if sys.stdin.isatty():
        return ask_hidden(prompt)
    raise UserError(f"no {what}: no {default} and no terminal to type one", fix=stdin_fix)


def _kaggle_credentials(args: argparse.Namespace) -> str:
    return _secret_text(args, given=args.kaggle_json, default="~/.kaggle/kaggle.json", what="Kaggle credentials",
                        stdin_fix=f"gpu targets add kaggle {args.name} --kaggle-json PATH, or --token-stdin < token.txt",
                        prompt="Kaggle API token (kaggle.com > Settings > API; not shown): ",
                        file_fix="give the path of your kaggle.json")


def _modal_token(args: argparse.Namespace) -> str:
    return _secret_text(args, given=args.modal_toml, default="~/.modal.toml", what="Modal token",
                        stdin_fix=f"gpu targets add modal {args.name} --modal-toml PATH, or "
                                  "printf 'ak-... as-...' | gpu targets add modal NAME --token-stdin",
                        prompt="Modal token id and secret, separated by a space (modal.com > Settings > "
                               "API Tokens; not shown): ",
                        file_fix="give the path of your .modal.toml")


def cmd_probe(args: argparse.Namespace) -> int:
    from core.engine import target_setup as targets

    info = targets.probe(args.name)
    if args.json:
        emit_json({"target": args.name, "probe": info.to_json()})
        return 0
    say(markup("[bold]{name}[/] ({kind})", name=args.name, kind=info.kind))
    for line in describe_probe(info):
        say("  " + line)
    return 0 if info.available else 2


def cmd_rm(args: argparse.Namespace) -> int:
    from core.engine import target_setup as targets
    from core.jobs.store import Store

    path = targets.remove(args.name, Store(), force=args.force)
    if args.json:
        emit_json({"removed": args.name, "saved_to": str(path)})
    else:
        say(markup("removed target [bold]{name}[/] from {path}", name=args.name, path=path))
    return 0


def cmd_trust(args: argparse.Namespace) -> int:
    from core.engine import target_setup as targets

    hk = targets.host_key(args.name)
    doc = hk.to_json()
    fp = hk.fingerprint
    if hk.trusted:
        if args.json:
            emit_json(doc)
        else:
            say(markup("{name}: {host} ({algorithm} {fp}) is already trusted",
                       name=args.name, host=hk.host, algorithm=hk.algorithm, fp=fp))
        return 0
    if hk.changed and not args.replace:
        targets.trust(hk)  # refuses a changed key without --replace, saying why
    if args.fingerprint:
        if args.fingerprint.strip() != fp:
            raise UserError(f"{hk.host} presents {fp}, not {args.fingerprint.strip()}: nothing was trusted",
                            fix="check which key the host really has before trusting it")
    elif _person(args):
        say(markup("{host} presents this {algorithm} host key:\n  [bold]{fp}[/]",
                   host=hk.host, algorithm=hk.algorithm, fp=fp))
        say("Compare it with the host's own (`ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on the host).")
        answer = ask("Type yes to trust it: ").strip().lower()
        if answer != "yes":
            raise UserError("not trusted: you did not type yes", fix=f"gpu targets trust {args.name}")
    else:
        raise UserError(f"{hk.host} presents {fp}; trusting it needs a person at a terminal or "
                        f"that fingerprint, checked, given back",
                        fix=f"gpu targets trust {args.name} --fingerprint {fp}")
    path = targets.trust(hk, replace=args.replace)
    doc.update(trusted=True, known_hosts=str(path))
    if args.json:
        emit_json(doc)
    else:
        say(markup("trusted {host} ({algorithm} {fp}); recorded in {path}",
                   host=hk.host, algorithm=hk.algorithm, fp=fp, path=path))
    return 0


def cmd_targets(args: argparse.Namespace) -> int:
    """`gpu targets` (and `gpu targets list`): every target with its GPUs, availability, quota
    left and price, as a table or {targets: [...]}."""
    from tui.cli.common import open_store

    if args.json:
        from core.engine.reports import targets_doc

        emit_json(targets_doc(open_store()))
        return 0
    from core.engine import targets
    from tui.show.render import targets_table

    infos = targets.infos(open_store())
    say(targets_table(list(infos.values())))
    return 0
