"""Saving and removing entries in the user's config file: targets (`gpu targets add` / `rm`)
and the approval PIN (`gpu approvals pin set` / `clear`).

`save_target`, `remove_target` and `save_section_key` edit the file as text where they can (one
line per entry, comments and the rest of the file left as they were), check the result by
loading it back, and fall back to rewriting the YAML only when the file's layout defeats the
text edit.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

from core import paths
from core.config import user as userconfig
from core.errors import UserError, shorten

def _flow(body: dict) -> str:
    import yaml

    return yaml.safe_dump(body, default_flow_style=True, sort_keys=False, width=1 << 20).strip()


def _load(path: Path) -> tuple[str, dict]:
    from core.config import safeyaml

    text = safeyaml.read_text(path) or ""
    try:
        raw = safeyaml.load(text, str(path))
    except UserError as exc:
        raise UserError(exc.what, where=exc.where,
                        fix="fix the file by hand, then run the command again") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise UserError("must be a mapping (targets:, rules:, budget:)", where=str(path))
    return text, raw


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _section_line(section: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(section)}:\s*(#.*)?$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _text_edit(text: str, name: str, body: dict | None, section: str = "targets") -> str | None:
    """Replace, add (body) or drop (None) one entry of `section`, keeping every other line."""
    lines = text.splitlines()
    heading = _section_line(section)
    at = next((i for i, ln in enumerate(lines) if heading.match(ln)), None)
    if at is None:
        if body is None:
            return text
        sep = "" if not text or text.endswith("\n") else "\n"
        return f"{text}{sep}{section}:\n  {name}: {_flow(body)}\n"
    child = None
    end = len(lines)
    for i in range(at + 1, len(lines)):
        ln = lines[i]
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        if _indent(ln) == 0:
            end = i
            break
        if child is None:
            child = _indent(ln)
    child = child or 2
    key_re = re.compile(rf"^ {{{child}}}(?:{re.escape(name)}|'{re.escape(name)}'|\"{re.escape(name)}\")\s*:")
    out = lines[:at + 1]
    i = at + 1
    while i < end:
        ln = lines[i]
        if key_re.match(ln):
            i += 1
            while i < end and (not lines[i].strip() or _indent(lines[i]) > child):
                if not lines[i].strip():
                    break
                i += 1
            continue
        out.append(ln)
        i += 1
    if body is not None:
        out.insert(at + 1, " " * child + f"{name}: {_flow(body)}")
    out += lines[end:]
    return "\n".join(out) + "\n"


def _save(path: Path, raw: dict, text: str, name: str, body: dict | None,
          section: str = "targets") -> None:
    import yaml

    from core.config import safeyaml

    expected = copy.deepcopy(raw)
    entries = dict(expected.get(section) or {})
    if body is None:
        entries.pop(name, None)
    else:
        entries[name] = body
    expected[section] = entries or None  # a heading left with no entries loads as null
    edited = _text_edit(text, name, body, section)
    try:
        if edited is not None and (safeyaml.load(edited, str(path)) or {}) == expected:
            _write(path, edited)
            return
    except UserError:
        pass
    _write(path, yaml.safe_dump(expected, sort_keys=False))


def save_target(name: str, body: dict) -> Path:
    """Add or replace target `name` in the user's config, checked by loading it back."""
    return save_section_key("targets", name, body)


def save_section_key(section: str, key: str, body: dict | None) -> Path:
    """Set (`body`) or remove (None) `section.key` in the user's config, checked by loading
    it back; a result that does not load puts the file back as it was."""
    path = paths.user_config_file()
    text, raw = _load(path)
    before = path.read_bytes() if path.exists() else None
    _save(path, raw, text, key, body, section)
    try:
        userconfig.load()
    except UserError:
        if before is None:
            path.unlink(missing_ok=True)
        else:
            _write(path, before.decode())
        raise
    return path


def remove_target(name: str) -> Path:
    path = paths.user_config_file()
    text, raw = _load(path)
    if name not in (raw.get("targets") or {}):
        raise UserError(f"there is no target named {shorten(name)} in {path}",
                        fix="see `gpu targets` for the names")
    _save(path, raw, text, name, None)
    return path
