"""Does an environment entry look like a secret? Then it belongs in the keychain, not `env`.

`env` values are stored in the job, shown in plans and written to job.json, so a secret
there would leak; the submit refuses it and says where it should go instead.
"""

from __future__ import annotations

import math
import re
from collections import Counter

SECRET_NAME = re.compile(r"(?:_|^)(apikey|auth|credential|credentials|key|password|passwd|secret|token)(?:_|$)",
                         re.IGNORECASE)

SECRET_VALUES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key"),
    (re.compile(r"\bghp_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}|\bgh[ousr]_[A-Za-z0-9]{20,}"), "a GitHub token"),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), "a Hugging Face token"),
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"), "an API key (sk-...)"),
    (re.compile(r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----"), "a private key block"),
    (re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s/:@]+:[^\s/@]+@"), "a URL with a user and password"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "a Slack token"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"), "a JSON web token"),
)


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


def env_problem(name: str, value: str) -> str | None:
    """Why `name=value` may not go in `env`, or None when it is an ordinary setting."""
    if SECRET_NAME.search(name) and "public" not in name.lower():
        return f"the name {name} looks like a secret"
    for pattern, what in SECRET_VALUES:
        if pattern.search(value):
            return f"the value of {name} looks like {what}"
    if looks_random(value):
        return f"the value of {name} looks like a key (long and random)"
    return None


def check_env(env: dict[str, str], where: str = "env") -> None:
    """Refuse the first secret-looking entry, saying where secrets go instead."""
    from core.errors import UserError

    for name, value in env.items():
        why = env_problem(name, value)
        if why:
            raise UserError(f"{why}: secrets may not be passed in env", where=where,
                            fix=f"store it in the keychain with `gpu secrets set {name}` and list "
                                f"{name} under `secrets:` in gpu.yaml (or pass --secret {name}); "
                                f"the job then reads it from its environment")
