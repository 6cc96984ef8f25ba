"""The user's own config: targets, and later the approval rules and budgets.

It lives outside every project (`paths.user_config_file()`), so an agent that edits a
project cannot change where jobs run or loosen the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import paths
from .errors import UserError

TARGET_KINDS = ("local",)


@dataclass
class TargetConfig:
    name: str
    kind: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class UserConfig:
    path: Path
    targets: dict[str, TargetConfig]
    raw: dict[str, Any]


def load() -> UserConfig:
    import yaml

    path = paths.user_config_file()
    raw: dict[str, Any] = {}
    if path.exists():
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise UserError(f"not valid YAML: {getattr(exc, 'problem', exc)}",
                            where=f"{path}:{mark.line + 1}" if mark else str(path)) from exc
        if not isinstance(raw, dict):
            raise UserError("must be a mapping (targets: ...)", where=str(path))
    targets: dict[str, TargetConfig] = {"local": TargetConfig("local", "local", {})}
    for name, body in (raw.get("targets") or {}).items():
        if not isinstance(body, dict):
            raise UserError(f"target {name!r} must be a mapping with a kind", where=str(path))
        kind = body.get("kind", "local" if name == "local" else None)
        if kind not in TARGET_KINDS:
            raise UserError(f"target {name!r} has kind {kind!r}", where=str(path),
                            fix=f"kinds: {', '.join(TARGET_KINDS)}")
        targets[name] = TargetConfig(name, kind, {k: v for k, v in body.items() if k != "kind"})
    return UserConfig(path=path, targets=targets, raw=raw)


def providers(cfg: UserConfig | None = None) -> dict[str, Any]:
    """A provider object for each configured target, by name."""
    from .providers.local import LocalProvider

    cfg = cfg or load()
    out: dict[str, Any] = {}
    for name, t in cfg.targets.items():
        if t.kind == "local":
            max_jobs = t.options.get("max_jobs", 1)
            if not isinstance(max_jobs, int) or max_jobs < 1:
                raise UserError(f"targets.{name}.max_jobs must be a whole number of 1 or more",
                                where=str(cfg.path))
            out[name] = LocalProvider(name, max_jobs=max_jobs, python=t.options.get("python"))
    return out
