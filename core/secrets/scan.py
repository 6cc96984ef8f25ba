"""Does an environment entry look like a secret? Then it belongs in the keychain, not `env`.

`env` values are stored in the job, shown in plans and written to job.json, so a secret
there would leak; the submit refuses it and says where it should go instead.

Names: split into word parts on `_`, `-`, `.` and camelCase (`DB_PASSWORD` -> DB, PASSWORD;
`apiKey` -> api, Key); a part that contains one of SECRET_STEMS makes the name a secret's,
unless that part is one of the few ordinary words in ALLOWED_PARTS. An allowed part never
clears the rest of the name (TOKENIZERS_SECRET is still refused), and no other word does
either. Values: private key blocks, well-known token prefixes and URLs with a password are
refused under any name, and so is a long random-looking token.
"""

from __future__ import annotations

import math
import re
from collections import Counter

SECRET_STEMS = ("PASS", "PWD", "SECRET", "TOKEN", "KEY", "CRED", "AUTH")

# Ordinary words that contain a stem. Keep this short: every entry is a name a secret could
# hide behind. Documented in README ("Secrets").
ALLOWED_PARTS = frozenset({
    "TOKENIZER", "TOKENIZERS",  # TOKENIZERS_PARALLELISM (Hugging Face)
    "KEYBOARD", "KEYMAP",       # KEYBOARD_LAYOUT, XKB_KEYMAP
    "AUTHOR", "AUTHORS",        # GIT_AUTHOR_NAME, AUTHOR
    "KEYPOINT", "KEYPOINTS",    # NUM_KEYPOINTS (pose models)
})

_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

SECRET_VALUES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-"),
     "a private key block"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key"),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), "a GitHub token"),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), "a GitLab token"),
    (re.compile(r"\bnpm_[A-Za-z0-9]{30,}"), "an npm token"),
    (re.compile(r"\bxox[a-z]-[A-Za-z0-9-]{10,}"), "a Slack token"),
    (re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}"), "a Stripe key"),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), "a Hugging Face token"),
    (re.compile(r"\bsk-ant-[A-Za-z0-9_-]{10,}"), "an Anthropic API key"),
    (re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{16,}"), "an OpenAI API key (sk-...)"),
    (re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s/?#@:]*:[^\s/?#@]+@", re.IGNORECASE),
     "a URL with a password"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"), "a JSON web token"),
)


def name_parts(name: str) -> list[str]:
    """DB_PASSWORD -> [DB, PASSWORD]; apiKey -> [api, Key]; myAPIToken -> [my, API, Token]."""
    return [p for chunk in re.split(r"[_.\-]+", name) for p in _PARTS.findall(chunk)]


def secret_name_part(name: str) -> str | None:
    """The word part of `name` that makes it a secret's name, or None."""
    for part in name_parts(name):
        upper = part.upper()
        if upper not in ALLOWED_PARTS and any(stem in upper for stem in SECRET_STEMS):
            return part
    return None


def _entropy(s: str) -> float:
    counts = Counter(s)
    return -sum(c / len(s) * math.log2(c / len(s)) for c in counts.values())


def looks_random(value: str) -> bool:
    """A long, high-entropy token: an API key, most likely (not a path, URL or run name)."""
    for token in re.split(r"[\s,;]+", value):
        if len(token) < 24 or "/" in token.strip("/") and not re.search(r"[+=]", token):
            continue  # paths and URLs are long but not keys
        if sum(token.count(c) for c in "_-.:") / len(token) > 0.1:
            continue  # readable names (exp_2024_lr3e-4_bs32) have separators
        mixed = all(re.search(p, token) for p in (r"[a-z]", r"[A-Z]", r"[0-9]"))
        hexish = len(token) >= 32 and re.fullmatch(r"[0-9a-fA-F]+", token) is not None
        if (mixed or hexish) and _entropy(token) >= 3.5:
            return True
    return False


def value_problem(value: str) -> str | None:
    """What a value looks like when it looks like a secret, or None."""
    for pattern, what in SECRET_VALUES:
        if pattern.search(value):
            return what
    if looks_random(value):
        return "a key (long and random)"
    return None


def env_problem(name: str, value: str) -> str | None:
    """Why `name=value` may not go in `env`, or None when it is an ordinary setting."""
    part = secret_name_part(name)
    if part is not None:
        return f"the name {name} looks like a secret's (it has the word part {part!r})"
    what = value_problem(value)
    if what:
        return f"the value of {name} looks like {what}"
    return None


def check_env(env: dict[str, str], where: str | dict[str, str] = "env") -> None:
    """Refuse the first secret-looking entry, saying where it is and where secrets go instead.

    `where` names the place of every entry (gpu.yaml's file and line, or `argument --env`)
    or one place for all of them."""
    from core.errors import UserError

    for name, value in env.items():
        why = env_problem(name, value)
        if why:
            place = where.get(name, "env") if isinstance(where, dict) else where
            raise UserError(f"{why}: secrets may not be passed in env", where=place,
                            fix=f"store it in the keychain with `gpu secrets set {name}` and list "
                                f"{name} under `secrets:` in gpu.yaml (or pass --secret {name}); "
                                f"the job then reads it from its environment")
