"""Which target a request runs on, and why every other target was passed over."""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import JobRequest
from .errors import UserError
from .providers.base import TargetInfo


@dataclass
class Route:
    target: str
    gpu: str
    reasons: list[str]
    passed_over: dict[str, str] = field(default_factory=dict)


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


def route(req: JobRequest, infos: dict[str, TargetInfo]) -> Route:
    if req.provider and req.provider not in infos:
        raise UserError(f"there is no target named {req.provider!r}",
                        where="--provider" if req.provider else None,
                        fix=f"targets: {', '.join(sorted(infos))} (see `gpu targets`)")
    candidates = [req.provider] if req.provider else sorted(infos)
    passed: dict[str, str] = {}
    fitting: list[TargetInfo] = []
    for name in candidates:
        info = infos[name]
        why = None if info.available else (info.why_unavailable or "unavailable")
        why = why or gpu_matches(info, req.gpu, req.vram_gb)
        if why:
            passed[name] = why
        else:
            fitting.append(info)
    if not fitting:
        detail = "; ".join(passed.values())
        raise UserError(f"no target can run this job: {detail}",
                        fix="drop or change --gpu/--vram-gb, or add a target that has it "
                            "(see `gpu targets`)")
    # smoke tests prefer this machine; otherwise the first that fits (price order comes later)
    fitting.sort(key=lambda i: (not (req.smoke and i.kind == "local"), i.name != "local", i.name))
    chosen = fitting[0]
    reasons = [f"{chosen.name} fits: {chosen.gpu_label}"]
    if req.provider:
        reasons.insert(0, f"pinned with provider={req.provider}")
    for other in fitting[1:]:
        passed[other.name] = f"{chosen.name} was preferred"
    return Route(target=chosen.name, gpu=chosen.gpu_label, reasons=reasons, passed_over=passed)
