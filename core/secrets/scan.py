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
    "KEYFRAME", "KEYFRAMES", "KEYWORD", "KEYWORDS", "HOTKEY", "MONKEY",  # video, search, UI, patching
    "TOKENIZE", "TOKENIZED", "TOKENIZATION", "DETOKENIZE", "DETOKENIZER",
    "PASSAGE", "PASSAGES", "PASSES", "BYPASS", "PASSTHROUGH", "COMPASS", "PASSIVE",  # retrieval, epochs
    "CREDIT", "CREDITS",        # CREDIT_LIMIT
})

# Whole word parts that name a secret (a substring is not enough: SPINE, OPTIMIZER, PWM).
SECRET_WORDS = frozenset({
    "PW", "PIN", "PINCODE", "JWT", "BEARER", "COOKIE", "COOKIES", "DSN", "SAS", "OTP", "TOTP",
    "HOTP", "MFA", "WEBHOOK", "WEBHOOKS", "CONNSTR",
    # rarer words of the trade (a value that is plainly a setting still passes under them)
    "SIGNATURE", "SIG", "HMAC", "SALT", "CERT", "PRIV", "PRIVATE", "APIKEY", "PASSPHRASE",
    "CREDS", "LOGIN", "NONCE",
    # "password", "secret", "key" and "token" in the languages people write code in
    "KENNWORT", "PASSWORT", "GEHEIM", "SCHLUESSEL", "SCHLUSSEL",  # German
    "SENHA", "CHAVE", "SEGREDO",                                  # Portuguese
    "CONTRASENA", "CLAVE", "SECRETO",                             # Spanish
    "MOTDEPASSE", "MDP", "CLE", "JETON",                          # French
    "CHIAVE", "SEGRETO", "PAROLA",                                # Italian (and Romanian, Turkish)
    "WACHTWOORD", "SLEUTEL", "GEHEIMNIS",                         # Dutch, German
    "LOSENORD", "LOSEN", "NYCKEL", "ADGANGSKODE", "PASSORD",      # Swedish, Danish, Norwegian
    "SALASANA", "AVAIN", "HASLO", "KLUCZ", "HESLO", "JELSZO",     # Finnish, Polish, Czech, Hungarian
    "PAROL", "KLYUCH", "SIFRE", "PAROLLA", "MIMA", "MIYAO",       # Russian, Turkish, Chinese pinyin
    "ANGOU", "PASUWADO", "BIMILBEONHO", "AMHO",                   # Japanese, Korean romanised
})
# A word that names a secret only beside a value shaped like a key (HEROKU_API=<a UUID>): API_MODEL,
# API_TYPE, OPENAI_API_BASE hold model names, words and URLs.
WEAK_WORDS = frozenset({"API"})
# Words for a password: under them even a short word is refused (DB_PASSWORD=changeme), since a
# short word is what a weak password is; a key or a token never is one (TEXT_KEY=content).
PASSWORD_STEMS = ("PASS", "PWD")
PASSWORD_WORDS = frozenset({"PW", "PIN", "PINCODE", "KENNWORT", "PASSWORT", "SENHA", "CONTRASENA", "MDP",
                            "PAROLA", "WACHTWOORD", "LOSENORD", "PASSORD", "ADGANGSKODE", "SALASANA",
                            "HASLO", "HESLO", "JELSZO", "PAROL", "SIFRE", "PAROLLA", "MIMA", "PASUWADO",
                            "BIMILBEONHO", "AMHO", "ANGOU", "LOGIN"})
# Two adjacent parts that name a secret together (CONN_STR, ConnectionString, 2FA_SEED).
SECRET_PAIRS = frozenset({("CONN", "STR"), ("CONN", "STRING"), ("CONNECTION", "STR"),
                          ("CONNECTION", "STRING"), ("2", "FA"), ("MOT", "PASSE"), ("MOT", "DE"),
                          ("CLE", "API"), ("CLAVE", "API")})
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


def _secret_part(upper: str, uppers: list[str], stems: tuple[str, ...] = SECRET_STEMS,
                 words: frozenset[str] = SECRET_WORDS) -> bool:
    """Does this word part (of a name whose parts are `uppers`) name a secret: a stem inside it
    (unless it is an allowed ordinary word), or a whole secret word (unless cleared beside)?"""
    return ((upper not in ALLOWED_PARTS and any(stem in upper for stem in stems))
            or (upper in words and WORD_CLEARED_BY.get(upper, frozenset()).isdisjoint(uppers)))


def secret_name_part(name: str) -> str | None:
    """The word part of `name` that makes it a secret's name, or None."""
    parts = name_parts(name)
    uppers = [p.upper() for p in parts]
    for part, upper in zip(parts, uppers):
        if _secret_part(upper, uppers):
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
# a part of a path as people and programs name them: data, ImageNet2012, Class001, 2024, and
# lower-case names with digits (tmpa8f3k2j9, n01440764)
_NAME_PART = re.compile(r"(?:[A-Z]?[a-z]+)+[0-9]*|[0-9]+|[a-z][a-z0-9]*")


def _reads_as_path(token: str) -> bool:
    """A path of a key's length (`/data/ImageNet2012/ImageNet2012/Class001`): three or more
    parts between slashes, half its characters in parts that read as names (words, CamelCase,
    a number after them, lower case with digits). A key's '/' falls at random, and its random
    parts rarely read so: of random 40-character keys with a '/' inside, one in 90,000 more is
    taken for a path than before this look (19 missed against 17, of 90,356 drawn)."""
    parts = [p for p in token.split("/") if p]
    if len(parts) < 3:
        return False
    return 2 * sum(len(p) for p in parts if len(p) >= 2 and _NAME_PART.fullmatch(p)) >= len(token)


def looks_like_aws_secret(value: str) -> bool:
    """An AWS secret access key: 40 characters of base64 that may hold '/' (which the random-token
    check passes over as a path). A path of that length reads as words: `data/ImageNet2012/..`
    has most of its characters in words of three or more lower-case letters, and repeats its
    letters (under 4.5 bits a character); a key has few words, or such words at a key's entropy
    (4.3 to 5 bits: 40 characters drawn from 64)."""
    for token in re.split(r"[\s,;=:\"']+", value):
        if (re.fullmatch(r"[A-Za-z0-9/+]{40}", token) and "/" in token.strip("/")
                and all(re.search(p, token) for p in (r"[a-z]", r"[A-Z]"))  # digits: most, not all
                and (sum(len(w) for w in _WORDS.findall(token)) < 0.5 * len(token)
                     or _entropy(token) >= 4.5)  # random letters that happen to form runs
                and not _reads_as_path(token)):
            return True
    return False


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


# -- the env gate: a name is a hint, a value is evidence ------------------------------------

# Word parts that say a value is a digest or an id: a hex digest (or a UUID) under such a name is
# a commit, a revision or a checksum, however random it looks (HF_REVISION, DATASET_SHA256).
DIGEST_PARTS = frozenset({"HASH", "SHA", "MD", "COMMIT", "REV", "REVISION", "ID", "IDS", "UUID", "GUID",
                          "DIGEST", "CHECKSUM", "CRC", "ETAG", "REF", "FINGERPRINT", "BUILD"})
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_PLAIN_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"{_NUMBER}(?:\s*[,:;x/ ]\s*{_NUMBER})*"), "a number"),  # 0,1  3e-4  224x224  1/8
    (re.compile(r"v?\d+(?:\.\d+)+(?:[-+.]?[A-Za-z0-9]+)*"), "a version"),  # 1.2.3, v2.1.0rc1
    (re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[-+]\d{2}:?\d{2})?)?"),
     "a date"),
)
# a word (none, offline, Bearer) or a short name with a number (bf16, fp8, gpt2, v1)
_SHORT_WORD = re.compile(r"[A-Za-z]{1,10}|[A-Za-z]{1,4}[0-9]{1,2}|[A-Za-z]{1,10}(?:-[A-Za-z]{1,10}){1,2}")
# Words a setting takes whatever its name says (AUTH=none, TOKEN_TYPE=bearer, HF_TOKEN=false).
SETTING_WORDS = frozenset({
    "none", "null", "nil", "true", "false", "yes", "no", "on", "off", "y", "n", "t", "f", "auto",
    "default", "enabled", "disabled", "enable", "disable", "required", "optional", "basic", "bearer",
    "digest", "oauth", "oidc", "saml", "ldap", "kerberos", "token", "key", "password", "env", "file",
    "keychain", "rsa", "dsa", "ecdsa", "ed25519", "hmac", "sha256", "aes", "local", "remote", "offline",
    "online", "strict", "lax", "fast", "slow", "mean", "sum", "max", "min", "first", "last", "all",
    "any", "unset", "empty", "anonymous", "public", "private", "read", "write", "info", "debug",
})
_SPECIAL_TOKEN = re.compile(r"</?[A-Za-z_|]{1,24}>|<\|[A-Za-z_]{1,24}\|>|\[[A-Z_]{2,12}\]")  # <pad> </s> <|eot|> [CLS]
_HEX_DIGEST = re.compile(r"(?:(?:sha1|sha256|sha512|md5):)?[0-9a-fA-F]{7,128}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_KEY_LIKE = re.compile(r"[A-Za-z0-9_\-]{16,}")
_URL = re.compile(r"[a-z][a-z0-9+.-]{0,31}://\S+", re.IGNORECASE)
_PATH = re.compile(r"(?:~|\.{1,2})?/[^\s]*|[^\s/]+(?:/[^\s/]+)+/?")


def _readable(segment: str) -> bool:
    """A path segment people wrote (ImageNet2012, exp_lr3e-4, Llama-2-7b-hf), not a key's
    base64: short, or with separators, or mostly words, or repeating its letters."""
    return (len(segment) < 16 or sum(segment.count(c) for c in "_-. ") > 0.1 * len(segment)
            or sum(len(w) for w in _WORDS.findall(segment)) >= 0.5 * len(segment)
            or _entropy(segment) < 3.5)


def _url_credential(value: str) -> str | None:
    """The query or fragment parameter of a URL that carries a credential (`?sig=`, `#access_token=`,
    `X-Amz-Signature=`), or None."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(value)
    except ValueError:
        return "an unreadable URL"
    for text in (parts.query, parts.fragment):
        for key, val in parse_qsl(text, keep_blank_values=True):
            if len(val) >= 8 and (secret_name_part(key) or key.lower() in ("sig", "code", "apikey")):
                return key
    return None


def plain_value(name: str, value: str) -> str | None:
    """What a value is when it cannot be a secret (a number, a boolean, a short word, a path, a URL
    without credentials, a hex digest or UUID under a name that says hash, commit, revision or
    id), or None. Such a value passes whatever its name: MAX_TOKENS=2048, AUTH_MODE=none."""
    text = value.strip()
    if not text:
        return "empty"
    for shape, what in _PLAIN_SHAPES:
        if shape.fullmatch(text):
            return what
    if _SPECIAL_TOKEN.fullmatch(text):
        return "a tokenizer's special token"
    if _SHORT_WORD.fullmatch(text):
        # a word passes unless the name's last word part, its noun, is a password's (DB_PASSWORD,
        # SENHA): there a short word is what a weak password is. AUTH_MODE=none, TEXT_KEY=content pass.
        uppers = [p.upper() for p in name_parts(name)]
        password = bool(uppers) and _secret_part(uppers[-1], uppers, PASSWORD_STEMS, PASSWORD_WORDS)
        if text.lower() in SETTING_WORDS or not password:
            return "a short word"
    if _URL.fullmatch(text) and _url_credential(text) is None:
        return "a URL without credentials"
    if _PATH.fullmatch(text) and all(_readable(seg) for seg in text.strip("/~.").split("/") if seg):
        return "a path"
    if _HEX_DIGEST.fullmatch(text) or _UUID.fullmatch(text):
        uppers = [p.upper() for p in name_parts(name)]
        marks = [i for i, p in enumerate(uppers) if p in DIGEST_PARTS]
        secret = [i for i, p in enumerate(uppers) if _secret_part(p, uppers)]
        if marks and (not secret or max(marks) > max(secret)):  # API_KEY_ID: the name's noun is the id
            return "a digest under a name that says so"
    return None


def value_evidence(value: str) -> str | None:
    """What a value is when its shape alone says secret, whatever its name: a vendor token, a key
    block, a URL with a password or a credential in its query, an AWS secret key."""
    what = _shape_problem(value, SECRET_VALUES)
    if what is None and _URL.search(value):
        for url in _URL.findall(value):
            key = _url_credential(url)
            if key:
                return f"a URL that carries a credential ({key}=)"
    return what


def env_problem(name: str, value: str, plain: frozenset[str] | set[str] = frozenset()) -> str | None:
    """Why `name=value` may not go in `env`, or None when it is an ordinary setting: the env
    gate's one rule, in this order (each refusal says which step refused, in one line).

    1. A value whose shape is a secret's (`value_evidence`) is refused under any name.
    2. A value that cannot be a secret (`plain_value`) passes under any name.
    3. A long random-looking value is refused under any name.
    4. Between the two, the name decides: a secret's word part (`secret_name_part`) refuses.
    A name in `plain` (a person's `not_secret`) skips steps 3 and 4, never step 1."""
    what = tokens.value_token(name)  # the full token table: `hf_datasets_cache_dir` is a name
    if what:  # a token pasted as the name (never repeated: the message names no name)
        return f"the name of an env entry looks like {what}"
    what = value_evidence(value)
    if what:
        return f"the value of {name} looks like {what}"
    if name in plain or plain_value(name, value):
        return None
    if looks_random(value):
        return f"the value of {name} looks like a key (long and random)"
    part = secret_name_part(name)
    if part is not None:
        return (f"the name {name} looks like a secret's (it has the word part {part!r}) and its "
                f"value is not plainly a setting (a number, a word, a path, a URL)")
    weak = next((p for p in name_parts(name) if p.upper() in WEAK_WORDS), None)
    if weak and _KEY_LIKE.fullmatch(value.strip()) and re.search(r"[0-9]", value) and re.search(r"[A-Za-z]", value):
        return f"the name {name} has the word part {weak!r} and its value is shaped like a key (or an id)"
    return None


def check_env(env: dict[str, str], where: str | dict[str, str] = "env",
              plain: frozenset[str] | set[str] = frozenset()) -> None:
    """Refuse the first secret-looking entry, saying where it is and where secrets go instead.

    `where` names the place of every entry (gpu.yaml's file and line, or `argument --env`)
    or one place for all of them. `plain` names the entries a person passed as not secret."""
    from core.errors import UserError

    for name, value in env.items():
        why = env_problem(name, value, plain)
        if why:
            place = where.get(name, "env") if isinstance(where, dict) else where
            pasted = tokens.value_token(name)  # a token as the name: never repeated, said as NAME
            name = "NAME" if pasted else name
            # judged by its name or a guess at randomness (not by a secret's shape): a person may
            # vouch it is a setting (steps 3 and 4 of env_problem); a variable named NAME too
            vouch = "" if pasted or not ("word part" in why or "long and random" in why) else (
                f"; if it is not a secret, say so: --not-secret {name} (or not_secret: [{name}] in "
                f"gpu.yaml), shown in the plan (an agent's job is then held for you)")
            raise UserError(f"{why}: secrets may not be passed in env", where=place,
                            fix=f"store it in the keychain with `gpu secrets set {name}` and list "
                                f"{name} under `secrets:` in gpu.yaml (or pass --secret {name}); "
                                f"the job then reads it from its environment{vouch}")


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
