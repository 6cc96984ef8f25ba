"""The shapes a secret has in text: vendor prefixes, key blocks, URLs with a password, JSON web
tokens. The standard library only, on the lowest floor, because `core.errors` masks by them
whatever a message quotes (a token pasted into the wrong key) and every layer raises its
errors; `core.secrets.scan` refuses `env` values by them and adds the full token table
(`add_finder`) once it is imported.
"""

from __future__ import annotations

import re
from typing import Callable

# Well-known prefixes, a token's first characters: (prefix, shortest body, what it is). An `env`
# value holding one is refused in this short form (a value may be a truncated or older token);
# files are judged by the full rules below, which a code file's identifiers do not match.
PREFIXES: tuple[tuple[str, int, str], ...] = (
    ("ghp_", 20, "a GitHub token"), ("gho_", 20, "a GitHub token"), ("ghu_", 20, "a GitHub token"),
    ("ghs_", 20, "a GitHub token"), ("ghr_", 20, "a GitHub token"),
    ("github_pat_", 20, "a GitHub token"), ("glpat-", 20, "a GitLab token"),
    ("npm_", 30, "an npm token"), ("xoxa-", 10, "a Slack token"), ("xoxb-", 10, "a Slack token"),
    ("xoxp-", 10, "a Slack token"), ("xoxo-", 10, "a Slack token"), ("xoxs-", 10, "a Slack token"),
    ("xoxr-", 10, "a Slack token"), ("xapp-", 10, "a Slack token"),
    ("sk_live_", 10, "a Stripe key"), ("rk_live_", 10, "a Stripe key"),
    ("sk_test_", 10, "a Stripe key"), ("rk_test_", 10, "a Stripe key"), ("whsec_", 20, "a Stripe key"),
    ("hf_", 20, "a Hugging Face token"), ("api_org_", 20, "a Hugging Face organisation token"),
    ("sk-ant-", 10, "an Anthropic API key"),
    ("sk-proj-", 16, "an OpenAI API key (sk-...)"), ("sk-", 16, "an OpenAI API key (sk-...)"),
    ("AIza", 30, "a Google API key"), ("ya29.", 20, "a Google OAuth token"),
    ("GOCSPX-", 20, "a Google OAuth client secret"), ("pypi-AgE", 50, "a PyPI token"),
    ("dapi", 32, "a Databricks token"), ("r8_", 30, "a Replicate token"), ("gsk_", 40, "a Groq key"),
    ("hvs.", 20, "a Vault token"), ("dop_v1_", 40, "a DigitalOcean token"),
    ("SG.", 20, "a SendGrid key"), ("AGE-SECRET-KEY-1", 40, "an age secret key"),
)


PREFIX_VALUES: tuple[tuple[re.Pattern, str], ...] = tuple(
    (re.compile(rf"(?<![A-Za-z0-9]){re.escape(prefix)}[A-Za-z0-9_-]{{{n},}}"), what)
    for prefix, n, what in PREFIXES)
SECRET_VALUES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-"),
     "a private key block"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key"),
    *PREFIX_VALUES,
    # a scheme is short: bounded, `a.a.a...` is one linear scan, not a quadratic one
    (re.compile(r"\b[a-z][a-z0-9+.-]{0,31}://[^\s/?#@:]*:[^\s/?#@]+@", re.IGNORECASE),
     "a URL with a password"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"), "a JSON web token"),
)

HIDDEN = "[hidden: {what}]"
_KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
Span = tuple[int, int, str]
_FINDERS: list[Callable[[str], list[Span]]] = []  # more finders (core.secrets.scan's token table)


def add_finder(finder: Callable[[str], list[Span]]) -> None:
    if finder not in _FINDERS:
        _FINDERS.append(finder)


def spans(text: str, *, table: bool = True) -> list[Span]:
    """(start, end, what) of every part of `text` that looks like a secret: the formats of
    SECRET_VALUES and, with `table`, what the added finders find."""
    found = [(m.start(), m.end(), what) for pattern, what in SECRET_VALUES for m in pattern.finditer(text)]
    for n, (start, end, what) in enumerate(found):
        if what == "a private key block":  # the key is what follows its first line: to its end
            close = _KEY_END.search(text, end)
            found[n] = (start, close.end() if close else len(text), what)
    if table:
        for finder in _FINDERS:
            found += finder(text)
    return found


def mask(text: str, *, table: bool = True) -> str:
    """`text` with every part that looks like a secret (`spans`) replaced by
    "[hidden: what it looks like]"; overlapping parts are hidden as one."""
    parts = sorted(spans(text, table=table))
    if not parts:
        return text
    out, pos = [], 0
    i = 0
    while i < len(parts):
        start, end, what = parts[i]
        while i + 1 < len(parts) and parts[i + 1][0] < end:  # overlapping: one hidden part
            end = max(end, parts[i + 1][1])
            i += 1
        out.append(text[pos:start])
        out.append(HIDDEN.format(what=what))
        pos = max(pos, end)
        i += 1
    out.append(text[pos:])
    return "".join(out)
