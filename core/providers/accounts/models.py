"""What an account reading holds, the same for every provider: offers, instances, the account.

Every figure carries `read_at` (epoch seconds) because it is a price or a balance that moves:
a person choosing where to run a job must see how old it is. Text in here (GPU names, regions,
instance names) came from the provider and is untrusted: the fronts filter it for the terminal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class Offer:
    """GPUs one can rent now: `price_per_hour` is for the whole offer (`gpu_count` GPUs)."""

    provider: str
    gpu: str
    vram_gb: float | None
    price_per_hour: float
    available: int | None  # how many such offers/machines the provider says are free; None: not said
    region: str | None
    read_at: float
    gpu_count: int = 1
    stock: str | None = None  # the provider's own word for availability ("High", "Low", ...)


@dataclass
class Instance:
    """One of the user's own running (or starting) instances, pods or jobs."""

    provider: str
    id: str
    name: str | None
    gpu: str | None
    status: str
    price_per_hour: float | None
    cost_so_far: float | None  # reported, or price x time running; None where neither is given
    read_at: float
    gpu_count: int = 1


@dataclass
class Account:
    provider: str
    read_at: float
    balance: float | None = None  # dollars of balance or credits, where the API gives them
    balance_note: str | None = None  # why there is none ("its API gives no balance")
    spend_per_hour: float | None = None
    error: str | None = None


@dataclass
class Reading:
    """One provider read once: what `gpu accounts` shows and the cache keeps."""

    provider: str
    read_at: float
    account: Account
    offers: list[Offer] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)  # parts the public API does not give

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Reading":
        def build(kind: type, d: dict) -> Any:
            names = {f.name for f in fields(kind)}
            return kind(**{k: v for k, v in d.items() if k in names})

        return cls(provider=doc["provider"], read_at=float(doc["read_at"]),
                   account=build(Account, doc["account"]),
                   offers=[build(Offer, o) for o in doc.get("offers", [])],
                   instances=[build(Instance, i) for i in doc.get("instances", [])],
                   unavailable=list(doc.get("unavailable", [])))


def number(value: Any) -> float | None:
    """A finite number from a provider's JSON, or None (they send nulls, strings, garbage)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        v = float(value)
        return v if v == v and abs(v) < 1e12 else None
    if isinstance(value, str):
        try:
            return number(float(value))
        except ValueError:
            return None
    return None


def text(value: Any, limit: int = 120) -> str | None:
    """A provider's string, cut to `limit` (it is shown in tables); None for non-strings."""
    if value is None:
        return None
    return str(value)[:limit]
