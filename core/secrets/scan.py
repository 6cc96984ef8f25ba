"""Does an environment entry look like a secret? Then it belongs in the keychain, not `env`.

`env` values are stored in the job, shown in plans and written to job.json, so a secret
there would leak; the submit refuses it and says where it should go instead.

Names: split into word parts on `_`, `-`, `.` and camelCase (`DB_PASSWORD` -> DB, PASSWORD;
`apiKey` -> api, Key); a part that contains one of SECRET_STEMS makes the name a secret's,
unless that part is one of the few ordinary words in ALLOWED_PARTS. An allowed part never
clears the rest of the name (TOKENIZERS_SECRET is still refused), and no other word does
either. Short words (PW, PIN, JWT, COOKIE, DSN, SAS, OTP ...) count only as whole parts
(SECRET_WORDS, SECRET_PAIRS): SPINE_DEPTH and OPTIMIZER are ordinary; PIN next to a word of
pinning (PIN_MEMORY, I_MPI_PIN_DOMAIN) means pinning, not a PIN.
Values: private key blocks, vendor tokens and webhook URLs (`core.secrets.tokens`, the table
credential files are judged by), URLs with a password, AWS secret access keys (40 characters
that may hold '/') are refused under any name, and so is a long random-looking token.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from core.secrets import tokens

SECRET_STEMS = ("PASS", "PWD", "SECRET", "TOKEN", "KEY", "CRED", "AUTH")

# Ordinary words that contain a stem. Keep this short: every entry is a name a secret could
# hide behind. Documented in docs/security/secrets.md.
ALLOWED_PARTS = frozenset({
    "TOKENIZER", "TOKENIZERS",  # TOKENIZERS_PARALLELISM (Hugging Face)
    "KEYBOARD", "KEYMAP",       # KEYBOARD_LAYOUT, XKB_KEYMAP
    "AUTHOR", "AUTHORS",        # GIT_AUTHOR_NAME, AUTHOR
    "KEYPOINT", "KEYPOINTS",    # NUM_KEYPOINTS (pose models)
})

# Whole word parts that name a secret (a substring is not enough: SPINE, OPTIMIZER, PWM).
SECRET_WORDS = frozenset({
    "PW", "PIN", "PINCODE", "JWT", "BEARER", "COOKIE", "COOKIES", "DSN", "SAS", "OTP", "TOTP",
    "HOTP", "MFA", "WEBHOOK", "WEBHOOKS", "CONNSTR",
})
# Two adjacent parts that name a secret together (CONN_STR, ConnectionString, 2FA_SEED).
SECRET_PAIRS = frozenset({("CONN", "STR"), ("CONN", "STRING"), ("CONNECTION", "STR"),
                          ("CONNECTION", "STRING"), ("2", "FA")})
# A secret word that means something else beside these parts (PIN_MEMORY pins memory).
WORD_CLEARED_BY = {
    "PIN": frozenset({"MEMORY", "MEM", "CPU", "CPUS", "CORE", "CORES", "THREAD", "THREADS",
                      "DOMAIN", "PROCESSOR", "NUMA", "AFFINITY", "MPI", "GPU", "GPUS", "NODE"}),
}

_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

SECRET_VALUES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-"),
     "a private key block"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key"),
    *((re.compile(rf"(?<![A-Za-z0-9]){re.escape(prefix)}[A-Za-z0-9_-]{{{n},}}"), what)
      for prefix, n, what in tokens.PREFIXES),
    (re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s/?#@:]*:[^\s/?#@]+@", re.IGNORECASE),
     "a URL with a password"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"), "a JSON web token"),
)


def name_parts(name: str) -> list[str]:
    """DB_PASSWORD -> [DB, PASSWORD]; apiKey -> [api, Key]; myAPIToken -> [my, API, Token]."""
    return [p for chunk in re.split(r"[_.\-]+", name) for p in _PARTS.findall(chunk)]


def secret_name_part(name: str) -> str | None:
    """The word part of `name` that makes it a secret's name, or None."""
    parts = name_parts(name)
    uppers = [p.upper() for p in parts]
    for part, upper in zip(parts, uppers):
        if upper not in ALLOWED_PARTS and any(stem in upper for stem in SECRET_STEMS):
            return part
        if upper in SECRET_WORDS and WORD_CLEARED_BY.get(upper, frozenset()).isdisjoint(uppers):
            return part
    for (a, b), (pa, pb) in zip(zip(uppers, uppers[1:]), zip(parts, parts[1:])):
        if (a, b) in SECRET_PAIRS:
            return f"{pa}_{pb}"
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


_WORDS = re.compile(r"[A-Z]?[a-z]{3,}")


def looks_like_aws_secret(value: str) -> bool:
    """An AWS secret access key: 40 characters of base64 that may hold '/' (which the random-token
    check passes over as a path). A path of that length reads as words: `data/ImageNet2012/..`
    has most of its characters in words of three or more lower-case letters; a key has few."""
    for token in re.split(r"[\s,;=:\"']+", value):
        if (re.fullmatch(r"[A-Za-z0-9/+]{40}", token) and "/" in token.strip("/")
                and not token.startswith("/") and "//" not in token
                and all(re.search(p, token) for p in (r"[a-z]", r"[A-Z]", r"[0-9]"))
                and sum(len(w) for w in _WORDS.findall(token)) < 0.5 * len(token)):
            return True
    return False


def value_problem(value: str) -> str | None:
    """What a value looks like when it looks like a secret, or None."""
    for pattern, what in SECRET_VALUES:
        if pattern.search(value):
            return what
    what = tokens.value_token(value)
    if what:
        return what
    if looks_like_aws_secret(value):
        return "an AWS secret access key"
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
