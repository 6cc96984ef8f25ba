"""The one table of what a vendor's token looks like, for file contents and `env` values alike.

The patterns come first from detect-secrets (Yelp's maintained rule set, its regex plugins),
then from a short supplement for formats it does not know yet (Hugging Face, Anthropic, GitHub
fine-grained, Google API keys, webhooks...). `core.packaging.credentials` withholds any file
whose text holds one; `core.secrets.scan` refuses an `env` value that holds one.

Not taken from detect-secrets, on purpose (measured on ordinary code, numpy, huggingface_hub,
textual, rich, wandb: 1,849 files):
- its high-entropy-string and keyword plugins: 120 findings in that ordinary code (hashes,
  docstrings, `token=token` lines), and its line-by-line scanner ran at 0.13 MB/s;
- Twilio (`AC`/`SK` + 32 lowercase: any hex digest after those letters), Telegram (a Unix time,
  a colon and a sha256 match), Discord bot tokens (`NormalizationLayerBlock.weight.<27 chars>`,
  a checkpoint key, matches), Artifactory (`AP` + hex digit + 8 letters), JWT (any `eyJ...`
  base64 JSON with a dot), basic auth (every `postgres://user:pass@localhost` in a README);
  IBM, Softlayer and Cloudant are keyword rules. Private keys are judged by our own PEM, DER
  and PuTTY rules, which ask for a key body, not a mention.

Speed: a tree's files are not searched with one big regex (5 MB/s). Every token but three
holds a run of `[A-Za-z0-9_-]` at least RUN_MIN long: the text is mapped to a mask once
(`bytes.translate`), and only such runs (RUN rules) or the window before and through them
(WINDOW rules: webhook URLs, `SG.x.y`, `ya29.x`) are searched, for the anchors first, then with
the regexes whose anchor is there. Text without such a run (prose, CSV, most code) costs the
mask and three substring searches for the WHOLE rules (an AWS secret key beside its name, an
Azure AccountKey, a Stripe webhook secret, whose base64 '/' and '+' cut into short pieces).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from dataclasses import dataclass

from core.runtime import tokenshapes

RUN_MIN = 20  # the shortest token in the table (an AWS key id) is 20 characters


RUN, WINDOW, WHOLE = "run", "window", "whole"
WINDOW_BEFORE = 160  # a URL or `key=` before the run a match ends in (hooks.slack.com/services/T../B../)


@dataclass(frozen=True)
class TokenRule:
    """A kind of token: what it is, literals (lower-cased) one of which any match contains, the
    regex, and where a match lies: RUN, inside one run of `[A-Za-z0-9_-]` (most tokens);
    WINDOW, ending in such a run with a URL or `key=` before it; WHOLE, anywhere (its token may
    be cut by '/' and '+' into short pieces: looked for only when its anchor is in the text)."""

    what: str
    anchors: tuple[bytes, ...]
    pattern: bytes
    flags: int = 0
    reach: str = RUN

    @functools.cached_property
    def regex(self) -> re.Pattern[bytes]:
        """Compiled when first needed: an `env` value (every submit checks them) meets the
        few rules whose anchor it holds, not all ~50 (~10 ms of each submit's CPU)."""
        return re.compile(self.pattern, self.flags)


# (detect-secrets plugin module, class, anchors per pattern (lower-cased), what it is).
# Anchors are ours: one of them is in every match of that pattern, lower-cased.
DETECT_SECRETS_PLUGINS: tuple[tuple[str, str, tuple[tuple[bytes, ...], ...], str], ...] = (
    ("aws", "AWSKeyDetector", ((b"a3t", b"abia", b"acca", b"akia", b"asia"), (b"aws",)),
     "an AWS key"),
    ("github_token", "GitHubTokenDetector", ((b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"),),
     "a GitHub token"),
    ("gitlab_token", "GitLabTokenDetector",
     ((b"glpat-", b"gldt-", b"glft-", b"glsoat-", b"glrt-"), (b"gr1348941",), (b"glcbt-",),
      (b"glimt-",), (b"glptt-",), (b"glagent-",), (b"gloas-",)), "a GitLab token"),
    ("slack", "SlackDetector", ((b"xox",), (b"hooks.slack.com",)), "a Slack token or webhook"),
    ("stripe", "StripeDetector", ((b"k_live_",),), "a Stripe key"),
    ("openai", "OpenAIDetector", ((b"t3blbkfj",),), "an OpenAI API key"),
    ("pypi_token", "PypiTokenDetector", ((b"pypi-ageichlwas5vcmc",), (b"pypi-agendgvzdc5wexbplm9yzw",)),
     "a PyPI token"),
    ("npm", "NpmDetector", ((b"_authtoken",),), "an npm token"),
    ("sendgrid", "SendGridDetector", ((b"sg.",),), "a SendGrid key"),
    ("azure_storage_key", "AzureStorageKeyDetector", ((b"accountkey=",),), "an Azure storage key"),
    ("square_oauth", "SquareOAuthDetector", ((b"sq0csp-",),), "a Square OAuth secret"),
    ("mailchimp", "MailchimpDetector", ((b"-us",),), "a Mailchimp key"),
)
# Patterns of theirs whose matches reach outside one run (RUN for the rest).
_DS_REACH = {("aws", 1): "whole", ("azure_storage_key", 0): "whole", ("npm", 0): "window",
             ("slack", 1): "window", ("sendgrid", 0): "window"}

# Well-known prefixes (core.runtime.tokenshapes keeps them, for core.errors to mask by)
PREFIXES = tokenshapes.PREFIXES

_B = r"(?<![A-Za-z0-9])"  # not glued to a longer word on the left
# (anchors, regex, what, reach): formats detect-secrets does not know. One a line.
SUPPLEMENT: tuple[tuple[tuple[bytes, ...], str, str, str], ...] = (
    ((b"github_pat_",), r"github_pat_[A-Za-z0-9_]{40,}", "a GitHub fine-grained token", RUN),
    ((b"sk-ant-",), r"sk-ant-[A-Za-z0-9_-]{32,}", "an Anthropic API key", RUN),
    ((b"sk-",), _B + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{40,}", "an OpenAI API key", RUN),
    ((b"hf_",), _B + r"hf_[A-Za-z0-9]{30,}", "a Hugging Face token", RUN),
    ((b"aiza",), r"AIza[0-9A-Za-z_-]{35}", "a Google API key", RUN),
    ((b"ya29.",), r"ya29\.[0-9A-Za-z_-]{30,}", "a Google OAuth access token", WINDOW),
    ((b"1//0",), r"1//0[0-9A-Za-z_-]{40,}", "a Google OAuth refresh token", WINDOW),
    ((b"gocspx-",), r"GOCSPX-[0-9A-Za-z_-]{28}", "a Google OAuth client secret", RUN),
    ((b"npm_",), _B + r"npm_[A-Za-z0-9]{36}", "an npm token", RUN),
    ((b"_test_",), r"(?:sk|rk)_test_[0-9a-zA-Z]{24,}", "a Stripe test key", RUN),
    ((b"whsec_",), r"whsec_[A-Za-z0-9+/]{32,}", "a Stripe webhook secret", WHOLE),
    ((b"xapp-",), r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]{20,}", "a Slack app token", RUN),
    ((b"hooks.slack.com",), r"https://hooks\.slack\.com/(?:workflows|triggers)/T[A-Za-z0-9]+/[A-Za-z0-9_/]{10,}",
     "a Slack webhook", WINDOW),
    ((b"discord",), r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]{20,}",
     "a Discord webhook", WINDOW),
    ((b"webhook.office.com",), r"https://[A-Za-z0-9-]+\.webhook\.office\.com/webhookb2/[A-Za-z0-9@/_-]{20,}",
     "a Microsoft Teams webhook", WINDOW),
    ((b"chat.googleapis.com",), r"https://chat\.googleapis\.com/v1/spaces/[^/\s]+/messages\?[^\s\"']*token=",
     "a Google Chat webhook", WINDOW),
    ((b"dapi",), _B + r"dapi[0-9a-f]{32}", "a Databricks token", RUN),
    ((b"r8_",), _B + r"r8_[A-Za-z0-9]{37}", "a Replicate token", RUN),
    ((b"gsk_",), _B + r"gsk_[A-Za-z0-9]{48,}", "a Groq key", RUN),
    ((b"dop_v1_", b"doo_v1_", b"dor_v1_"), r"do[opr]_v1_[a-f0-9]{64}", "a DigitalOcean token", RUN),
    ((b"hvs.", b"hvb."), r"hv[sb]\.[A-Za-z0-9_-]{24,}", "a Vault token", WINDOW),
    ((b"age-secret-key-1",), r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}", "an age secret key", RUN),
    ((b"shpat_", b"shpca_", b"shppa_", b"shpss_"), r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", "a Shopify token", RUN),
    ((b"lin_api_",), r"lin_api_[A-Za-z0-9]{40}", "a Linear key", RUN),
    ((b"ntn_",), _B + r"ntn_[A-Za-z0-9]{40,}", "a Notion token", RUN),
    ((b"pmak-",), r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}", "a Postman key", RUN),
    ((b"atlasv1.",), r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_-]{60,}", "a Terraform Cloud token", WINDOW),
    ((b"glsa_",), r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}", "a Grafana service-account token", RUN),
)


@functools.cache
def rules() -> tuple[TokenRule, ...]:
    """detect-secrets' selected regex plugins, then the supplement."""
    out: list[TokenRule] = []
    for (module, cls_name, anchors, what), patterns in zip(DETECT_SECRETS_PLUGINS,
                                                           _detect_secrets_patterns()):
        if len(patterns) != len(anchors):
            raise RuntimeError(f"detect-secrets {cls_name} has {len(patterns)} patterns, expected "
                               f"{len(anchors)}: review core/secrets/tokens.py for this version")
        for i, ((pattern, flags), anchor) in enumerate(zip(patterns, anchors)):
            out.append(TokenRule(what, anchor, pattern.encode(), flags,
                                 _DS_REACH.get((module, i), RUN)))
    for anchors, rx, what, reach in SUPPLEMENT:
        out.append(TokenRule(what, anchors, rx.encode(), 0, reach))
    return tuple(out)


def _detect_secrets_patterns() -> list[list[tuple[str, int]]]:
    """[(pattern, flags), ...] per plugin of DETECT_SECRETS_PLUGINS, read from the plugins once
    per detect-secrets version and kept in the cache folder: importing them pulls in `requests`
    (0.2 s), which every submit that changed a file would otherwise pay."""
    import json

    from core import paths

    key = hashlib.sha256(repr((detect_secrets_version(), DETECT_SECRETS_PLUGINS)).encode()).hexdigest()[:16]
    cached = paths.cache_dir() / f"detect-secrets-patterns-{key}.json"
    try:
        return [[(p, f) for p, f in plugin] for plugin in json.loads(cached.read_text())]
    except (OSError, ValueError, TypeError):
        pass
    import importlib

    keep = re.IGNORECASE | re.VERBOSE | re.MULTILINE | re.DOTALL
    found = []
    for module, cls_name, _, _ in DETECT_SECRETS_PLUGINS:
        cls = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), cls_name)
        found.append([(p.pattern, p.flags & keep) for p in cls.denylist])
    try:
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(found))
        os.replace(tmp, cached)
    except OSError:
        pass  # a cache: the plugins are read again next time
    return found


_RUN_CHARS = bytes(0x61 if (chr(i).isascii() and chr(i).isalnum()) or chr(i) in "_-" else 0x20
                   for i in range(256))
_RUN = b"a" * RUN_MIN


@functools.cache
def _compiled() -> tuple[tuple[tuple[bytes, re.Pattern[bytes], str], ...], tuple[TokenRule, ...],
                         re.Pattern[bytes], tuple[TokenRule, ...], re.Pattern[bytes]]:
    """The rules by reach, with one regex of the anchors of each of RUN and WINDOW. Flat
    tuples: this runs once per file of a 20,000-file tree."""
    whole = tuple((a, r.regex, r.what) for r in rules() if r.reach == WHOLE for a in r.anchors)

    def anchors_of(rs: tuple[TokenRule, ...]) -> re.Pattern[bytes]:
        found = sorted({a for r in rs for a in r.anchors}, key=len, reverse=True)
        return re.compile(b"|".join(re.escape(a) for a in found))

    runs = tuple(r for r in rules() if r.reach == RUN)
    windows = tuple(r for r in rules() if r.reach == WINDOW)
    return whole, runs, anchors_of(runs), windows, anchors_of(windows)


def _found(regex: re.Pattern[bytes], text: bytes, start: int = 0, end: int | None = None) -> bool:
    """A match that is not a vendor's documented example (AWS documents AKIAIOSFODNN7EXAMPLE
    and wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY; its CLI and SDK docs are full of them)."""
    for m in regex.finditer(text, start, len(text) if end is None else end):
        if b"EXAMPLE" not in m.group(0):
            return True
    return False


def find_token(text: bytes, lowered: bytes | None = None) -> str | None:
    """What vendor token `text` holds, anywhere in it, or None."""
    lowered = text.lower() if lowered is None else lowered
    whole, runs, run_anchors, windows, window_anchors = _compiled()
    for anchor, regex, what in whole:
        if anchor in lowered and _found(regex, text):
            return what
    mask = text.translate(_RUN_CHARS)
    pos = mask.find(_RUN)
    while pos != -1:
        end = mask.find(b" ", pos)
        end = len(mask) if end == -1 else end
        if run_anchors.search(lowered, pos, end):
            run_low = lowered[pos:end]
            for rule in runs:
                if any(a in run_low for a in rule.anchors) and _found(rule.regex, text, pos, end):
                    return rule.what
        start = max(0, pos - WINDOW_BEFORE)
        if window_anchors.search(lowered, start, end):
            window_low = lowered[start:end]
            for rule in windows:
                if any(a in window_low for a in rule.anchors) and _found(rule.regex, text, start, end + 1):
                    return rule.what
        pos = mask.find(_RUN, end)
    return None


def value_token(value: str) -> str | None:
    """What vendor token an `env` value holds, or None (the same table as for files)."""
    data = value.encode("utf-8", "surrogateescape")
    lowered = data.lower()
    for rule in rules():
        if any(a in lowered for a in rule.anchors) and _found(rule.regex, data):
            return rule.what
    return None


@functools.cache
def detect_secrets_version() -> str:
    """The installed detect-secrets' version, read from its `__version__.py` without importing
    it (part of the key of cached patterns and content verdicts)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("detect_secrets")
    if spec is None or not spec.origin:
        return "absent"
    try:
        text = (Path(spec.origin).parent / "__version__.py").read_text()
    except OSError:
        return "unknown"
    m = re.search(r"VERSION\s*=\s*['\"]([^'\"]+)", text)
    return m.group(1) if m else "unknown"
