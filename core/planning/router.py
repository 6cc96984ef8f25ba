"""Which target a request runs on, and why every other target was passed over.

Filters by the request (provider, GPU, VRAM, smoke), quota left and availability; orders
what is left free first, then by estimated price (hours x price per hour).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.config.request import JobRequest
from core.errors import UserError
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


def gpu_matches(info: TargetInfo, gpu: str | None, vram_gb: float | None) -> str | None:
    """Why `info` cannot serve this GPU/VRAM request, or None if it can."""
    if gpu:
        if not info.gpus:
            return f"{info.name} has no GPU (it runs jobs on the cpu), and {gpu} was asked for"
        names = [g["name"] for g in info.gpus]
        if not any(gpu.lower() in n.lower() for n in names):
            return f"{info.name} has {', '.join(sorted(set(names)))}, not {gpu}"
    if vram_gb:
        have = info.vram_gb
        if have < vram_gb:
            where = f"{have:g} GB" if info.gpus else "no GPU memory"
            return f"{info.name} has {where}, and {vram_gb:g} GB of VRAM was asked for"
    return None


def estimated_price(info: TargetInfo, hours: float | None) -> float:
    return round((hours or DEFAULT_ESTIMATE_HOURS) * info.price_per_hour, 4)


def _why_not(req: JobRequest, info: TargetInfo) -> str | None:
    if not info.available:
        return f"{info.name} is unavailable: {info.why_unavailable or 'unknown reason'}"
    why = gpu_matches(info, req.gpu, req.vram_gb)
    if why:
        return why
    if req.hours and info.quota_hours_left is not None and req.hours > info.quota_hours_left:
        return f"{info.name} has {info.quota_hours_left:g} h of quota left this week, and {req.hours:g} h were asked for"
    if info.credits_left is not None and estimated_price(info, req.hours) > info.credits_left:
        return f"{info.name} has ${info.credits_left:.2f} of credits left, and the job would cost ${estimated_price(info, req.hours):.2f}"
    return None


def route(req: JobRequest, infos: dict[str, TargetInfo]) -> Route:
    if req.provider and req.provider not in infos:
        raise UserError(f"there is no target named {req.provider!r}", where="provider",
                        fix=f"targets: {', '.join(sorted(infos))} (see `gpu targets`)")
    candidates = [req.provider] if req.provider else sorted(infos)
    passed: dict[str, str] = {}
    fitting: list[TargetInfo] = []
    for name in candidates:
        why = _why_not(req, infos[name])
        if why:
            passed[name] = why
        else:
            fitting.append(infos[name])
    if not fitting:
        raise UserError(f"no target can run this job: {'; '.join(passed.values())}",
                        fix="drop or change --gpu/--vram-gb/--hours, or add a target that fits "
                            "(see `gpu targets`)")

    def order(i: TargetInfo) -> tuple:
        smoke_first = not (req.smoke and i.kind == "local")
        return (smoke_first, i.price_per_hour > 0, estimated_price(i, req.hours),
                i.name != "local", i.name)

    fitting.sort(key=order)
    chosen = fitting[0]
    price = estimated_price(chosen, req.hours)
    reasons = []
    if req.provider:
        reasons.append(f"pinned with provider={req.provider}")
    reasons.append(f"{chosen.name} fits ({chosen.gpu_label}) and is "
                   + ("free" if chosen.price_per_hour == 0 else f"${price:.2f} for the estimate"))
    for other in fitting[1:]:
        if other.price_per_hour > 0 and chosen.price_per_hour == 0:
            passed[other.name] = f"costs ${estimated_price(other, req.hours):.2f}; {chosen.name} is free"
        elif estimated_price(other, req.hours) > price:
            passed[other.name] = f"dearer: ${estimated_price(other, req.hours):.2f} against ${price:.2f}"
        else:
            passed[other.name] = f"{chosen.name} was preferred (local first, then by name)"
    return Route(target=chosen.name, gpu=chosen.gpu_label, reasons=reasons, passed_over=passed,
                 info=chosen)
