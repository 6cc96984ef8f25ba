"""The one list of credential files that never ship, included or not.

Every rule is matched against a path relative to the bundle root; `withheld_reason` returns
why a path is withheld, or None. Keep additions here and nowhere else.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import PurePosixPath

# (glob on a file's own name, what it is)
NAME_RULES: tuple[tuple[str, str], ...] = (
    (".env", "dotenv file"),
    (".env.*", "dotenv file"),
    ("*.pem", "PEM key or certificate"),
    ("*.key", "private key"),
    ("*.p12", "PKCS#12 key store"),
    ("*.pfx", "PKCS#12 key store"),
    ("id_rsa*", "SSH private key"),
    ("id_ed25519*", "SSH private key"),
    ("id_ecdsa*", "SSH private key"),
    ("id_dsa*", "SSH private key"),
    ("*_rsa", "SSH private key"),
    (".netrc", "netrc credentials"),
    ("_netrc", "netrc credentials"),
    (".git-credentials", "git credentials"),
    (".pgpass", "PostgreSQL password file"),
    ("credentials.json", "cloud credentials"),
    ("application_default_credentials.json", "Google Cloud credentials"),
    ("kaggle.json", "Kaggle API token"),
    (".modal.toml", "Modal token"),
    (".npmrc", "npm token"),
    (".pypirc", "PyPI token"),
    ("*.kdbx", "KeePass database"),
    ("*.ovpn", "OpenVPN profile"),
    (".bash_history", "shell history"),
    (".zsh_history", "shell history"),
    (".sh_history", "shell history"),
    (".history", "shell history"),
    (".python_history", "shell history"),
    (".psql_history", "shell history"),
    (".mysql_history", "shell history"),
    ("fish_history", "shell history"),
)

# (directory name anywhere in the path, what it holds)
DIR_RULES: tuple[tuple[str, str], ...] = (
    (".ssh", "SSH keys"),
    (".aws", "AWS credentials"),
    (".kaggle", "Kaggle credentials"),
    (".gnupg", "GnuPG keys"),
)

# (path suffix of two or more parts, what it is)
SUFFIX_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".huggingface", "token"), "Hugging Face token"),
    (("huggingface", "token"), "Hugging Face token"),
    ((".docker", "config.json"), "Docker registry credentials"),
    ((".config", "gcloud"), "Google Cloud credentials"),
)

# Never shipped, but not secrets: gpu-router's own and git's folders.
NEVER_DIRS: frozenset[str] = frozenset({".git"})


def _prefilter() -> "re.Pattern[str]":
    """One regex that any withheld path matches (a cheap first look, then the full rules)."""
    alternatives = [fnmatch.translate(p) for p, _ in NAME_RULES]
    names = "|".join(f"(?:{a})" for a in alternatives)
    dirs = "|".join(re.escape(d) for d, _ in (*DIR_RULES,))
    suffix = "|".join(re.escape(s[0]) for s, _ in SUFFIX_RULES)
    return re.compile(rf"(?:^|/)(?:{dirs}|{suffix})(?:/|$)|(?:^|/)(?:{names.replace('(?s:', '(?:')})$"
                      .replace("\\Z", ""), re.IGNORECASE)


def withheld_reason(relpath: str) -> str | None:
    """Why `relpath` (relative, `/`-separated) must not ship, or None if it may."""
    if not _QUICK.search(relpath):
        return None
    parts = PurePosixPath(relpath).parts
    if not parts:
        return None
    for part in parts[:-1]:
        for dirname, what in DIR_RULES:
            if part == dirname:
                return f"credential folder {dirname}/ ({what}): never ships"
    name = parts[-1]
    for dirname, what in DIR_RULES:
        if name == dirname:
            return f"credential folder {dirname}/ ({what}): never ships"
    lowered = name.lower()
    for pattern, what in NAME_RULES:
        if fnmatch.fnmatchcase(lowered, pattern):
            return f"credential file ({what}, matches {pattern}): never ships"
    for suffix, what in SUFFIX_RULES:
        n = len(suffix)
        for i in range(len(parts) - n + 1):
            if parts[i:i + n] == suffix:
                return f"credential file ({what}): never ships"
    return None


def is_dir_withheld(relpath: str) -> str | None:
    """Why a whole directory is withheld (so a walk need not descend), or None."""
    name = PurePosixPath(relpath).name
    for dirname, what in DIR_RULES:
        if name == dirname:
            return f"credential folder {dirname}/ ({what}): never ships"
    return withheld_reason(relpath + "/x") if "/" in relpath else None


_QUICK = _prefilter()
