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

The rest of a request (`args`, the script line, names, paths, sweep values: all stored with
the job and printed in its plan) is held to the same formats (`check_request_text`), with two
differences for text that holds paths and names: a token is found by the full table, not by a
vendor prefix and a few characters (`runs/hf_finetune_llama_experiment_3` is a folder), and the
long-random guess applies only to the value of a flag named like a secret's (`--api-key
VALUE`), since a commit sha or a run id is an ordinary argument. And an error
message never shows a token-shaped value it quotes (`mask`, applied by core.errors).
"""

from __future__ import annotations

import functools
import math
import re
import shlex
from collections import Counter
from typing import Any, Iterator

from core.runtime import tokenshapes
from core.runtime.tokenshapes import PREFIX_VALUES, SECRET_VALUES
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

# the shapes (core.runtime.tokenshapes): a vendor prefix and a few token characters is the short
# form an `env` value is refused in; the same without the short prefix forms, for text that
# holds paths and names (`runs/hf_finetune_llama_experiment_3`): a token there is found by the
# full table
FORMAT_VALUES = tuple(v for v in SECRET_VALUES if v not in PREFIX_VALUES)


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
    what = _shape_problem(value, SECRET_VALUES)
    if what is None and looks_random(value):
        return "a key (long and random)"
    return what


def _shape_problem(value: str, shapes: tuple) -> str | None:
    """The first of `shapes`, the full token table, or an AWS secret key that `value` holds."""
    for pattern, what in shapes:
        if pattern.search(value):
            return what
    what = tokens.value_token(value)
    if what:
        return what
    if looks_like_aws_secret(value):
        return "an AWS secret access key"
    return None


def env_problem(name: str, value: str) -> str | None:
    """Why `name=value` may not go in `env`, or None when it is an ordinary setting."""
    part = secret_name_part(name)
    if part is not None:
        return f"the name {name} looks like a secret's (it has the word part {part!r})"
    what = tokens.value_token(name)  # the full token table: `hf_datasets_cache_dir` is a name
    if what:  # a token pasted as the name (never repeated: the message names no name)
        return f"the name of an env entry looks like {what}"
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
            name = "NAME" if tokens.value_token(name) else name
            raise UserError(f"{why}: secrets may not be passed in env", where=place,
                            fix=f"store it in the keychain with `gpu secrets set {name}` and list "
                                f"{name} under `secrets:` in gpu.yaml (or pass --secret {name}); "
                                f"the job then reads it from its environment")


# -- the rest of a request ------------------------------------------------------------------

SECRETS_FIX = ("store it in the keychain with `gpu secrets set {name}`{named} and list {name} under "
               "`secrets:` in gpu.yaml (or pass --secret {name}); the job then reads it from its "
               "environment{reads}")


_NAMED = " (NAME: a name of yours for it, e.g. HF_TOKEN)"


def text_problem(value: str) -> str | None:
    """What a free-text value (an argument, a name, a path) looks like when it holds a secret:
    the formats an `env` value is refused for, tokens by the full table (not by a prefix and a
    few characters: `--out runs/hf_finetune_llama_experiment_3` is a folder), and without the
    long-random guess."""
    return _shape_problem(value, FORMAT_VALUES)


def _flag_value(args: list[str], i: int) -> tuple[str, str] | None:
    """(flag, value) when args[i] is the value of a flag: `--flag=VALUE`, or `--flag VALUE`."""
    arg = args[i]
    if arg.startswith("-"):
        flag, eq, value = arg.partition("=")
        return (flag, value) if eq else None
    if i > 0 and args[i - 1].startswith("-") and "=" not in args[i - 1]:
        return args[i - 1], arg
    return None


def _env_name_of(flag: str | None) -> str:
    """The environment name a flag's secret would have (`--hf-token` -> HF_TOKEN), or NAME."""
    name = re.sub(r"[^A-Za-z0-9]+", "_", (flag or "").strip("-")).strip("_").upper()
    return name if re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", name) else "NAME"


def args_problem(args: list[str]) -> tuple[int, str, str | None] | None:
    """(index, what it looks like, the flag it is the value of) of the first argument that
    holds a secret; None when none does. Any argument is held to `text_problem`; the value of
    a flag named like a secret's (`--api-key`, `--token=`) also to the long-random guess."""
    for i, arg in enumerate(args):
        pair = _flag_value(args, i)
        flag = pair[0] if pair else None
        what = text_problem(arg)
        if what is None and pair is not None and secret_name_part(flag.lstrip("-")) and looks_random(pair[1]):
            what = "a key (long and random)"
        if what:
            return i, what, flag
    return None


def check_args(args: list[str], where: str, field: str = "args") -> None:
    """Refuse an argument that holds a secret: args are stored with the job, shown in its
    plan and on the target's process list. Said as `check_env` says it, naming the argument
    by its place (never by its value)."""
    from core.errors import UserError, shorten

    found = args_problem(args)
    if found is None:
        return
    i, what, flag = found
    if flag is not None and text_problem(flag):
        flag = None  # the token is in the flag itself (`--hf_...=x`): named by its place alone
    which = f"entry {i + 1} of {field}" + (f" (the value of {shorten(flag)})" if flag else "")
    name = _env_name_of(flag)
    raise UserError(f"{which} looks like {what}: secrets may not be passed in {field}", where=where,
                    fix=SECRETS_FIX.format(name=name, named=_NAMED if name == "NAME" else "",
                                           reads=f" (os.environ[{name!r}]), not from its arguments"))


def _texts(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string in a request's value (lists, a sweep's points, kill rules), keys too."""
    if isinstance(value, str):
        yield value
    elif depth < 6 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _texts(item, depth + 1)
    elif depth < 6 and isinstance(value, dict):
        for k, v in value.items():
            yield from _texts(k, depth + 1)
            yield from _texts(v, depth + 1)


def check_request_text(values: dict[str, Any], where: Any) -> None:
    """Refuse a secret in any field of a request but `env` (`check_env`'s): `args` and the
    script line by `check_args`, every other text (names, paths, globs, GPU, target, a sweep's
    values) by `text_problem`. `where(key)` says where a key was set."""
    from core.errors import UserError

    for key, value in values.items():
        if key == "env":
            continue
        if key == "args" and isinstance(value, list):
            check_args(value, where(key))
            continue
        if key == "script" and isinstance(value, str):
            try:
                parts = shlex.split(value)
            except ValueError:
                parts = [value]
            check_args(parts, where(key), field="the script line")
            continue
        for text in _texts(value):
            what = text_problem(text)
            if what:
                raise UserError(f"{key} holds what looks like {what}: secrets may not be passed in {key}",
                                where=where(key), fix=SECRETS_FIX.format(name="NAME", named=_NAMED, reads=""))


# -- masking what an error message quotes -----------------------------------------------------


@functools.cache
def _text_rules() -> tuple[tuple[re.Pattern[str], str], ...]:
    """The token table's regexes for text (`core.secrets.tokens` keeps them for bytes)."""
    return tuple((re.compile(r.pattern.decode("utf-8"), r.flags | re.ASCII), r.what) for r in tokens.rules())


def _table_spans(text: str) -> list[tuple[int, int, str]]:
    """The token table's finds (read from detect-secrets' rules once a process) and AWS secret
    access keys: added to `tokenshapes.spans` once this module is imported."""
    try:
        rules = _text_rules()
    except Exception:  # noqa: BLE001 - detect-secrets missing or unreadable: the formats hold
        rules = ()
    spans = [(m.start(), m.end(), what) for rx, what in rules for m in rx.finditer(text)]
    for m in re.finditer(r"[^\s,;=:\"'()\[\]{}<>]+", text):
        if len(m.group()) == 40 and looks_like_aws_secret(m.group()):
            spans.append((m.start(), m.end(), "an AWS secret access key"))
    return spans


tokenshapes.add_finder(_table_spans)  # errors.shorten masks by the full table once this is loaded
