"""Which target a request runs on, and why every other target was passed over.

Filters by the request (provider, GPU, VRAM, smoke), quota left and availability; orders
what is left free first, then by estimated price (hours x price per hour). Within free and
within paid, a target that can start the job now (a free slot: max_jobs less the jobs running
and waiting there) comes before a busy one, so a job does not queue behind a busy box while a
fitting one idles; a busy free target still comes before an idle paid one (waiting is not
spending: the busy target's `queue_timeout_s` moves the job later, under the approval rules).
A job left waiting is routed again here when a slot frees elsewhere or a target is added, and
moves once another target can start it now (core/engine/reroute.py).
A request pinned to a target by name waits for it whatever its load.

`provider` pins a target by its name or by its kind (the contract's "kaggle, colab, local, ...":
what a person writes after `gpu targets add kaggle kg`). A name wins; a kind leaves the router
to choose among the targets of that kind, by the same order as an unpinned request, and the
plan says which it chose and why the others were passed over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from core import paths
from core.config.request import JobRequest
from core.config.user import TARGET_KINDS
from core.errors import UserError
from core.planning.policy import as_run, plan_notes
from core.providers.base import TargetInfo

# an estimate of price for a job that gives no hours
DEFAULT_ESTIMATE_HOURS = 1.0


@dataclass
class Route:
    target: str
    gpu: str
    reasons: list[str]
    passed_over: dict[str, str] = field(default_factory=dict)
    info: TargetInfo | None = None
    offer: str | None = None  # the GPU set-up asked of a target that offers several


# what a route adds to its plan: dropped and set again wherever a job is planned anew
ROUTE_KEYS = ("offer", "skypilot")


def route_fields(chosen: Route, checkpoint: str | None, restart: str) -> dict:
    """What the chosen route adds to its plan: the GPU set-up asked of a target that offers
    several, and on a skypilot target the price ceiling and candidate set a person approves
    (catalog.plan_binding; the digest covers it), which the launch is then held to."""
    out: dict = {}
    if chosen.offer:
        out["offer"] = chosen.offer
    info = chosen.info
    if info is not None and info.kind == "skypilot":
        from core.providers.skypilot.catalog import plan_binding

        offer = chosen.offer or (info.gpus[0]["name"] if info.gpus else None)
        bound = plan_binding(info.details, offer, checkpoint, restart)
        if bound is not None:
            out.update(offer=offer, skypilot=bound)
    return out


def gpu_matches(info: TargetInfo, gpu: str | None, vram_gb: float | None,
                count: int | None = None) -> str | None:
    """Why `info` cannot serve this GPU/VRAM request (and `count` GPUs of that type, where more
    than one is asked for), or None if it can."""
    if gpu:
        if not info.gpus:
            return f"{info.name} has no GPU (it runs jobs on the cpu), and {gpu} was asked for"
        names = [g["name"] for g in info.gpus]
        if not any(gpu.lower() in n.lower() for n in names):
            return f"{info.name} has {', '.join(sorted(set(names)))}, not {gpu}"
    if count and count > 1 and (info.gpus or info.kind != "pbs"):  # PBS says nothing of its GPUs
        have = sum(1 for g in info.gpus if not gpu or gpu.lower() in g["name"].lower())
        if have < count:
            what = f"{gpu} GPU" if gpu else "GPU"
            return (f"{info.name} has {have or 'no'} {what}{'s' * (have != 1)}"
                    + (" (per node)" if info.kind in ("slurm", "pbs") else "")
                    + f", and the job asks for {count} (gpus: {count})")
    if vram_gb:
        have = info.vram_gb
        if have < vram_gb:
            where = f"{have:g} GB" if info.gpus else "no GPU memory"
            return f"{info.name} has {where}, and {vram_gb:g} GB of VRAM was asked for"
    return None


class NoGpuTarget(UserError):
    """No configured target has the GPU asked for (often: only this machine's CPU). Its fix
    names the kinds of target that do (`ways_forward`); the engine adds the user's accounts'
    matching offers (core/engine/service.prepare), which the router cannot read."""

    def __init__(self, what: str, gpu: str | None, vram_gb: float | None, offers: str = "") -> None:
        self.gpu, self.vram_gb, self.offers = gpu, vram_gb, offers
        ways = ways_forward(gpu, vram_gb)
        fix = "add a target that has it, then plan again: " + "; ".join(ways)
        if offers:
            fix += f". {offers}"
        super().__init__(what, fix=fix)

    def with_offers(self, offers: str) -> "NoGpuTarget":
        return NoGpuTarget(self.what, self.gpu, self.vram_gb, offers)


def _fits(name: str, memory_gb: float, gpu: str | None, vram_gb: float | None) -> bool:
    """The router's own test (gpu_matches), for a GPU a kind of target offers."""
    return (not gpu or gpu.lower() in name.lower()) and (not vram_gb or memory_gb >= vram_gb)


def ways_forward(gpu: str | None, vram_gb: float | None) -> list[str]:
    """The `gpu targets add` commands that would give this request a GPU that fits, each with
    what it offers: Kaggle and Modal only where their GPUs match (core/providers/kaggle/target.py's
    accelerators, core/providers/modal/catalog.py's GPU types and prices), and a machine or
    cluster of the user's own, which may have any GPU."""
    from core.providers.kaggle.target import ACCELERATORS
    from core.providers.modal.catalog import PRICES, VRAM_GB

    ways: list[str] = []
    kaggle = [acc for acc, (_, gpus) in ACCELERATORS.items()
              if any(_fits(g["name"], g["memory_gb"], gpu, vram_gb) for g in gpus)]
    if kaggle:
        acc = "" if "t4x2" in kaggle else f" --accelerator {kaggle[0]}"
        shown = ", ".join(f"{len(ACCELERATORS[a][1])}x {ACCELERATORS[a][1][0]['name']}" for a in kaggle)
        ways.append(f"`gpu targets add kaggle kaggle{acc}` (Kaggle's free weekly GPU hours: {shown}; "
                    "reads your ~/.kaggle/kaggle.json)")
    modal = sorted((t for t, mem in VRAM_GB.items() if _fits(t, mem, gpu, vram_gb)), key=lambda t: PRICES[t])
    if modal:
        ways.append(f"`gpu targets add modal modal --gpu {modal[0]}` (your Modal account: {modal[0]} at "
                    f"${PRICES[modal[0]]:.2f}/h, paid by the second; reads your ~/.modal.toml)")
    ways.append("`gpu targets add ssh NAME --host HOST` (a machine with a GPU that you log into: "
                "a workstation, a cloud VM, a running Colab with an SSH server)")
    ways.append("`gpu targets add slurm NAME --host LOGIN` (a cluster's login node; pbs alike)")
    return ways


def estimated_price(info: TargetInfo, hours: float | None) -> float:
    return round((hours or DEFAULT_ESTIMATE_HOURS) * info.price_per_hour, 4)


def image_problem(req: JobRequest, info: TargetInfo) -> str | None:
    """Why `info` cannot build the environment the request defines (`image`, `packages`: a
    Modal image's), or None. Only a modal target builds one; elsewhere the job would run
    without what it named, so the target is passed over with the way to run it there."""
    keys = [k for k in ("image", "packages") if getattr(req, k)]
    if not keys or info.kind == "modal":
        return None
    return (f"{info.name} ({info.kind}) does not build an image: {' and '.join(keys)} define a Modal "
            f"image, so the job runs only on a modal target (to run it here, drop "
            f"{' and '.join(keys)} and list the packages in requirements.txt, which every target installs)")


def count_problem(req: JobRequest, info: TargetInfo) -> str | None:
    """Why a target that gives a job several GPUs of one type up to a limit per type (Modal:
    `details["gpu_count_max"]`) cannot give the count asked for, or None."""
    most: dict = info.details.get("gpu_count_max") or {}
    if not most or req.gpus is None or req.gpus == 1:
        return None
    if req.gpus == 0:
        return (f"{info.name} runs each job on a GPU, and gpus: 0 asks for none (drop gpus, or give "
                f"1 to {max(most.values())})")
    types = [t for t in most if not req.gpu or req.gpu.lower() in t.lower()] or list(most)
    if any(req.gpus <= most[t] for t in types):
        return None
    top = max(most[t] for t in types)
    fewer = f"gpu: {req.gpu}:{top}" if req.gpu else f"gpus: {top}"
    return (f"{info.name}: Modal allows 1 to {top} GPUs of one type per job"
            + (f" ({', '.join(f'{t}: {most[t]}' for t in sorted(most) if most[t] != top)})"
               if any(most[t] != top for t in most) and not req.gpu else "")
            + f", and the job asks for {req.gpus}: ask for {top} or fewer ({fewer}), "
              f"or use a machine or cluster with {req.gpus} GPUs")


def _why_not(req: JobRequest, info: TargetInfo) -> str | None:
    if not info.available:
        return f"{info.name} is unavailable: {info.why_unavailable or 'unknown reason'}"
    why = image_problem(req, info) or count_problem(req, info) or gpu_matches(
        info, req.gpu, req.vram_gb, req.gpus)
    if why:
        return why
    if req.secrets and not info.takes_secrets:
        return f"{info.name} cannot receive keychain secrets, and the job reads {', '.join(req.secrets)}"
    if req.hours and info.max_hours is not None and req.hours > info.max_hours:
        return (f"{info.name} runs a job for at most {info.max_hours:g} h"
                + (f" ({info.max_hours_why})" if info.max_hours_why else "") + f", and {req.hours:g} h were asked for")
    if req.hours and info.quota_hours_left is not None and req.hours > info.quota_hours_left:
        return f"{info.name} has {info.quota_hours_left:g} h of quota left this week, and {req.hours:g} h were asked for"
    if info.credits_left is not None and estimated_price(info, req.hours) > info.credits_left:
        return f"{info.name} has ${info.credits_left:.2f} of credits left, and the job would cost ${estimated_price(info, req.hours):.2f}"
    return None


def tier(i: TargetInfo) -> int:
    """Free first, for real: a free target whose quota has hours left (Kaggle's weekly GPU
    hours) spends what would otherwise expire; then this machine's own GPU; then the other
    free targets (this machine first); then paid ones, by price."""
    if i.price_per_hour > 0:
        return 3
    if i.quota_hours_left is not None and i.gpus:
        return 0
    if i.kind == "local" and i.gpus:
        return 1
    return 2


def order(req: JobRequest, i: TargetInfo) -> tuple:
    smoke_first = not (req.smoke and i.kind == "local")  # a smoke test: this machine, in minutes
    paid = i.price_per_hour > 0
    return (paid, i.free_slots == 0, smoke_first, tier(i), estimated_price(i, req.hours),
            i.name != "local", i.name)


COLAB = ("free Colab has no job API: gpu-router cannot start, watch or stop a job there without "
         "driving a browser session, which it will not pretend to do")
COLAB_FIX = ("attach a running Colab (or any notebook VM) as an ssh target: start an SSH server in it, "
             "reach it through a tunnel you trust, then `gpu targets add ssh colab --host HOST --port PORT "
             "--user root --key KEY` and `gpu targets trust colab`; for free GPU hours with a job API, "
             "add a Kaggle account: `gpu targets add kaggle kg`")


# what `provider` may name besides a target: a kind gpu-router runs jobs on, and colab (refused
# honestly: there is no job API to run one on)
PIN_KINDS = (*TARGET_KINDS, "colab")


def _no_target_of(kind: str) -> UserError:
    """A kind pinned with no target of it configured: the way to add one."""
    if kind == "colab":
        return UserError(COLAB, where="provider", fix=COLAB_FIX)
    if kind == "local":  # `local` always exists unless the config gives that name to another kind
        return UserError("no target of kind local is configured", where="provider",
                         fix=f"add one to your user config ({paths.user_config_file()}):\n"
                             "targets:\n  box: {kind: local}")
    return UserError(f"no {kind} target is configured", where="provider",
                     fix=f"add one: gpu targets add {kind} NAME (`gpu targets add --help` says what "
                         f"it asks for), or omit provider and let gpu-router choose")


def pinned(provider: str | None, kinds: Mapping[str, str]) -> tuple[list[str], str | None]:
    """The targets a `provider` pin leaves to choose among, and the kind it named (None when it
    named a target, or nothing). A name wins over a kind: a target named `colab` attached over
    ssh is that target, and a target named `ssh` is that one, not every ssh target.

    `kinds` is every configured target's kind by name: the config says it, no probe is needed,
    so a pin is judged (and colab refused) before any target is asked anything."""
    if not provider:
        return sorted(kinds), None
    if provider in kinds:
        return [provider], None
    if provider in PIN_KINDS:
        of_kind = sorted(n for n, k in kinds.items() if k == provider)
        if not of_kind:
            raise _no_target_of(provider)
        return of_kind, provider
    raise UserError(f"there is no target named {provider!r}, and {provider!r} is not a kind of target",
                    where="provider",
                    fix=f"give a target name ({', '.join(sorted(kinds))}; see `gpu targets`) or a kind "
                        f"({', '.join(PIN_KINDS)}), or omit provider and let gpu-router choose")


def _pin_reason(provider: str, kind: str | None, candidates: list[str], chosen: str,
                kinds: Mapping[str, str]) -> str:
    """What the pin did, in the plan's words."""
    if kind is None:
        others = [n for n, k in kinds.items() if k == provider and n != provider]
        if provider in PIN_KINDS and others:
            return (f"pinned with provider={provider}: the target named {provider} (a name wins "
                    f"over the kind; {', '.join(sorted(others))} also of kind {provider})")
        return f"pinned with provider={provider}"
    if len(candidates) == 1:
        return f"pinned with provider={kind}: {chosen} is the one {kind} target"
    return (f"pinned with provider={kind}: chose {chosen} among the {kind} targets "
            f"{', '.join(candidates)} (the others are passed over, with why)")


def route(req: JobRequest, infos: dict[str, TargetInfo], kinds: Mapping[str, str] | None = None) -> Route:
    """The target for `req` among `infos` (the probed targets: every configured one, or only
    those its pin leaves); `kinds`, every configured target's kind, words the pin's reason
    when `infos` holds only the pinned ones."""
    candidates, kind = pinned(req.provider, {n: i.kind for n, i in infos.items()})
    kinds = {n: i.kind for n, i in infos.items()} if kinds is None else kinds
    passed: dict[str, str] = {}
    fitting: list[TargetInfo] = []
    for name in candidates:
        info = _offer_for(req, infos[name])
        why = _why_not(req, info)
        if why:
            passed[name] = why
        else:
            fitting.append(info)
    if not fitting:
        what = f"no target can run this job: {'; '.join(passed.values())}"
        if (req.gpu or req.vram_gb) and not req.provider and all(
                gpu_matches(infos[n], req.gpu, req.vram_gb) for n in candidates):
            raise NoGpuTarget(what, req.gpu, req.vram_gb)
        down = [n for n in candidates if not infos[n].available
                and (infos[n].why_unavailable or "").startswith(("unreachable", "the probe of"))]
        if down and len(down) == len(candidates):  # none could be asked: not the job's resources
            fix = (f"the target{'s' * (len(down) != 1)} could not be used as configured: check "
                   f"{'its' if len(down) == 1 else 'their'} address, login and network (`gpu targets probe "
                   f"{down[0]}` says why; `gpu targets add` again with the right --host/--user/--port "
                   f"replaces it), or choose another target (see `gpu targets`)")
        else:
            fix = "drop or change --gpu/--vram-gb/--hours, or add a target that fits (see `gpu targets`)"
        if (req.gpus or 0) > 1 and not any(i.kind == "modal" for i in infos.values()):
            fix += ("; a modal target gives a job up to 8 GPUs of one type (`gpu targets add modal NAME`, "
                    "then gpu: H100:4)")
        raise UserError(what, fix=fix)

    fitting.sort(key=lambda i: order(req, i))
    chosen = fitting[0]
    price = estimated_price(chosen, req.hours)
    reasons = []
    if req.provider:
        reasons.append(_pin_reason(req.provider, kind, candidates, chosen.name, kinds))
    reasons += _load_reasons(req, chosen, fitting, passed)
    reasons.append(f"{chosen.name} fits ({chosen.gpu_label}) and is "
                   + ("free" if chosen.price_per_hour == 0 else f"${price:.2f} for the estimate"))
    if chosen.quota_hours_left is not None and chosen.price_per_hour == 0:
        need = req.hours or DEFAULT_ESTIMATE_HOURS
        reasons.append(f"uses up to {need:g} h of its {chosen.quota_hours_left:g} h of free quota left "
                       f"this week ({max(chosen.quota_hours_left - need, 0):g} h after it)")
    for other in fitting[1:]:
        if other.name in passed:  # already said: busy
            continue
        if other.price_per_hour > 0 and chosen.price_per_hour == 0:
            passed[other.name] = f"costs ${estimated_price(other, req.hours):.2f}; {chosen.name} is free"
        elif tier(chosen) < tier(other) and tier(chosen) == 0:
            passed[other.name] = f"{chosen.name}'s free quota is used first"
        elif tier(chosen) < tier(other) and tier(chosen) == 1:
            passed[other.name] = f"{chosen.name}'s GPU is preferred to a target without one"
        elif estimated_price(other, req.hours) > price:
            passed[other.name] = f"dearer: ${estimated_price(other, req.hours):.2f} against ${price:.2f}"
        else:
            passed[other.name] = f"{chosen.name} was preferred (local first, then by name)"
    if req.gpus and req.gpus > 1 and not chosen.gpus and chosen.kind == "pbs":
        reasons.append(f"{chosen.name} does not say which GPUs it has: PBS itself judges gpus: {req.gpus} "
                       f"(list them in your user config, targets.{chosen.name}.gpus, for gpu-router to)")
    chosen = as_run(chosen, req.resources())  # a job in a container is not in the sandbox
    reasons += plan_notes(chosen)  # a host without a sandbox says so in the plan
    return Route(target=chosen.name, gpu=chosen.gpu_label, reasons=reasons, passed_over=passed,
                 info=chosen, offer=chosen.details.get("offer"))


def _load_reasons(req: JobRequest, chosen: TargetInfo, fitting: list[TargetInfo],
                  passed: dict[str, str]) -> list[str]:
    """What the targets' load did to the choice, as the plan's reasons (and in `passed` the
    busy targets passed over): "local is busy (1 of 1 in use): box1 can start it now"."""
    if chosen.free_slots == 0:
        why = ("pinned there" if req.provider else
               "no other fitting target can start it now" if not any(
                   i.free_slots for i in fitting[1:]) else
               "the targets that could start it now cost money; the wait is bounded by "
               f"{chosen.name}'s queue_timeout_s")
        return [f"{chosen.name} is busy ({chosen.busy_text}): the job waits for a free slot there ({why})"]
    busy = [i for i in fitting[1:] if i.free_slots == 0 and order(req, replace(i, running=0, waiting=0))
            < order(req, chosen)]
    for other in busy:
        passed[other.name] = f"busy ({other.busy_text}); {chosen.name} can start it now"
    return [f"{other.name} is busy ({other.busy_text}): {chosen.name} can start it now" for other in busy]


def _offer_for(req: JobRequest, info: TargetInfo) -> TargetInfo:
    """A target with several GPU set-ups, seen with the first that fits the request (its
    default first); with none fitting, as it is, so the reason names what it has."""
    info = _counted(req, info)
    if not info.offers or gpu_matches(info, req.gpu, req.vram_gb, req.gpus) is None:
        return info
    for name, gpus in info.offers.items():
        other = replace(info, gpus=gpus, details={**info.details, "offer": name},
                        price_per_hour=info.offer_prices.get(name, info.price_per_hour))
        if gpu_matches(other, req.gpu, req.vram_gb, req.gpus) is None:
            return other
    return info


def _counted(req: JobRequest, info: TargetInfo) -> TargetInfo:
    """A target that gives a job N GPUs of one type (Modal, up to `details["gpu_count_max"]`
    per type) seen with its offers at the count asked: each offer N GPUs at N times its price,
    named in Modal's spelling (`H100:4`), which is what the provider asks Modal for; where the
    target prices N by its machines' shapes (`details["count_prices"]`, SkyPilot's clouds),
    that price. As it is
    where one GPU (or no count) is asked for, or it cannot give that many of any type
    (`count_problem` says why)."""
    most: dict = info.details.get("gpu_count_max") or {}
    n = req.gpus or 1
    if not most or n <= 1 or not info.offers:
        return info
    offers: dict[str, list[dict]] = {}
    prices: dict[str, float] = {}
    shaped: dict = info.details.get("count_prices") or {}  # N GPUs cost what a machine of N+ costs
    for name, gpus in info.offers.items():
        if gpus and n <= int(most.get(name, 1)):
            offers[f"{name}:{n}"] = [dict(gpus[0]) for _ in range(n)]
            known = (shaped.get(name) or {}).get(str(n))
            prices[f"{name}:{n}"] = round(float(known) if known is not None
                                          else info.offer_prices.get(name, info.price_per_hour) * n, 4)
    if not offers:
        return info
    first = next(iter(offers))
    return replace(info, gpus=offers[first], offers=offers, offer_prices=prices,
                   price_per_hour=prices[first], details={**info.details, "offer": first})
