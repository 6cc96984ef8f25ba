"""Named secrets: values in the keychain (`core.keychain`), names in a small index file.

The keychain cannot list its entries portably, so the names (never the values) are kept
beside the store for `gpu secrets list`.
"""

from __future__ import annotations

import json
import os
import re

from core.secrets import keychain
from core import paths
from core.errors import UserError

# A secret reaches its job as an environment variable, so it is named like one: the rule of
# core.config.schema.ENV_NAME_RE, kept here because the secrets sit a floor below the config.
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def _index():
    return paths.home() / "secret-names.json"


def names() -> list[str]:
    """The names stored with `gpu secrets set`; without a usable keychain, the error that says
    how to get one (an empty list there would read as "nothing stored")."""
    keychain.get("gpu-router-keychain-check")  # raises the no-keychain UserError with its fix
    try:
        return sorted(json.loads(_index().read_text()))
    except (OSError, ValueError):
        return []


def _save(items: list[str]) -> None:
    tmp = _index().with_suffix(".tmp")
    tmp.write_text(json.dumps(sorted(set(items))))
    os.replace(tmp, _index())


def put(name: str, value: str) -> None:
    if not NAME_RE.match(name):
        raise UserError(f"secret name {name!r} is not allowed",
                        fix="use an environment name like HF_TOKEN (letters, digits, _)")
    if not value:
        raise UserError(f"no value given for {name}",
                        fix=f"type it at the hidden prompt, or pipe it: printf %s \"$VALUE\" | gpu secrets set {name}")
    keychain.set(name, value)
    _save([*names(), name])


def remove(name: str) -> None:
    found = keychain.delete(name)
    _save([n for n in names() if n != name])
    if not found:
        raise UserError(f"there is no secret {name} in the keychain", fix="see `gpu secrets list`")
