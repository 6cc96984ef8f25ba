"""What Modal offers and what it costs: GPU types, their memory and prices, how many of one type
a container may have, and the function's timeout for a job's hours.

Kept apart from the target's calls because the router reads it at plan time (core/planning/
router.py prices a Modal offer from here) without the Modal client.
"""

from __future__ import annotations

from typing import Any

from core.errors import UserError

# USD per GPU-hour, on demand, from https://modal.com/pricing (Modal bills per second; these are
# its per-second rates x 3600). Read 2026-05 through techbytes.app's table ("prices verified on
# May 7, 2026 from official vendor pricing"): T4, L4, L40S, A100-80GB, H100. A10G, A100-40GB,
# H200 and B200 are the same page's per-second rates as last known, NOT re-verified here.
PRICES_AS_OF = "2026-05-07"
PRICES_SOURCE = "https://modal.com/pricing"
PRICES = {"T4": 0.5904, "L4": 0.7992, "A10G": 1.1016, "L40S": 1.9512, "A100-40GB": 2.0988,
          "A100-80GB": 2.4984, "H100": 3.9492, "H200": 4.5396, "B200": 6.2496}
UNVERIFIED = ("A10G", "A100-40GB", "H200", "B200")
VRAM_GB = {"T4": 16.0, "L4": 24.0, "A10G": 24.0, "L40S": 48.0, "A100-40GB": 40.0, "A100-80GB": 80.0,
           "H100": 80.0, "H200": 141.0, "B200": 180.0}
# GPUs of one type Modal attaches to one container (https://modal.com/docs/guide/gpu, "Specifying
# GPU count": B200, H200, H100, A100, L4, T4 and L40S up to 8, A10 up to 4); `gpu: H100:4`
GPU_COUNT_MAX = {g: 4 if g == "A10G" else 8 for g in PRICES}
MAX_TIMEOUT_S = 24 * 3600  # Modal's cap on a function's timeout
MARGIN_FACTOR, MARGIN_S = 1.25, 600  # the function's timeout: hours x 1.25 + 10 minutes
MAX_HOURS = (MAX_TIMEOUT_S - MARGIN_S) / MARGIN_FACTOR / 3600


def gpu_spec(offer: Any, default: str) -> str:
    """A plan's offer as Modal's gpu argument (`T4`, `H100:4`), checked against what Modal gives
    (GPU_COUNT_MAX); `default` (the target's own type) where the plan names none."""
    kind, _, count = str(offer or "").partition(":")
    if kind not in PRICES:
        return default
    if not count:
        return kind
    if not count.isdigit() or not 1 <= int(count) <= GPU_COUNT_MAX[kind]:
        raise UserError(f"the plan asks Modal for {offer}, and Modal allows 1 to {GPU_COUNT_MAX[kind]} "
                        f"{kind} GPUs per job", fix=f"ask for at most {GPU_COUNT_MAX[kind]} (gpu: "
                                                    f"{kind}:{GPU_COUNT_MAX[kind]}) and submit again")
    return kind if int(count) == 1 else f"{kind}:{int(count)}"


def timeout_for(hours: float) -> int:
    return int(min(hours * MARGIN_FACTOR * 3600 + MARGIN_S, MAX_TIMEOUT_S))
