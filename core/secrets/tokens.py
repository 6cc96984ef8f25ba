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

Speed: a tree's files are not searched with one big regex (5 MB/s). Most tokens are runs of
`[A-Za-z0-9_-]` at least RUN_MIN long holding their anchor (`ghp_`, `akia`): the text is mapped
to a mask once (`bytes.translate`), each such run is searched for the anchors, and a rule's
regex runs only over a run holding its anchor. The few rules whose match reaches outside one run
(webhook URLs, `SG.x.y`, `aws_secret_access_key = '...'`) are asked only when their anchor is
anywhere in the text.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

RUN_MIN = 20  # the shortest token in the table (an AWS key id) is 20 characters


@dataclass(frozen=True)
class TokenRule:
    """A kind of token: what it is, a literal (lower-cased) that any match contains, the regex,
    and whether a match can hold characters outside `[A-Za-z0-9_-]` runs (then it is looked
    for in the whole text, only when its anchor is there)."""

    what: str
    anchors: tuple[bytes, ...]
    regex: re.Pattern[bytes]
    whole_text: bool = False


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
# Patterns of theirs whose matches hold '/', '+', '=' or spaces (not one run): whole text.
_DS_WHOLE_TEXT = {("aws", 1), ("azure_storage_key", 0), ("npm", 0), ("slack", 1), ("sendgrid", 0)}

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
    ("hf_", 20, "a Hugging Face token"), ("sk-ant-", 10, "an Anthropic API key"),
    ("sk-proj-", 16, "an OpenAI API key (sk-...)"), ("sk-", 16, "an OpenAI API key (sk-...)"),
    ("AIza", 30, "a Google API key"), ("ya29.", 20, "a Google OAuth token"),
    ("GOCSPX-", 20, "a Google OAuth client secret"), ("pypi-AgE", 50, "a PyPI token"),
    ("dapi", 32, "a Databricks token"), ("r8_", 30, "a Replicate token"), ("gsk_", 40, "a Groq key"),
    ("hvs.", 20, "a Vault token"), ("dop_v1_", 40, "a DigitalOcean token"),
    ("SG.", 20, "a SendGrid key"), ("AGE-SECRET-KEY-1", 40, "an age secret key"),
)

_B = r"(?<![A-Za-z0-9])"  # not glued to a longer word on the left
# (anchors, regex, what, whole text?): formats detect-secrets does not know. One a line.
SUPPLEMENT: tuple[tuple[tuple[bytes, ...], str, str, bool], ...] = (
    ((b"github_pat_",), r"github_pat_[A-Za-z0-9_]{40,}", "a GitHub fine-grained token", False),
    ((b"sk-ant-",), r"sk-ant-[A-Za-z0-9_-]{32,}", "an Anthropic API key", False),
    ((b"sk-",), _B + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{40,}", "an OpenAI API key", False),
    ((b"hf_",), _B + r"hf_[A-Za-z0-9]{30,}", "a Hugging Face token", False),
    ((b"aiza",), r"AIza[0-9A-Za-z_-]{35}", "a Google API key", False),
    ((b"ya29.",), r"ya29\.[0-9A-Za-z_-]{30,}", "a Google OAuth access token", True),
    ((b"1//0",), r"1//0[0-9A-Za-z_-]{40,}", "a Google OAuth refresh token", True),
    ((b"gocspx-",), r"GOCSPX-[0-9A-Za-z_-]{28}", "a Google OAuth client secret", False),
    ((b"npm_",), _B + r"npm_[A-Za-z0-9]{36}", "an npm token", False),
    ((b"_test_",), r"(?:sk|rk)_test_[0-9a-zA-Z]{24,}", "a Stripe test key", False),
    ((b"whsec_",), r"whsec_[A-Za-z0-9+/]{32,}", "a Stripe webhook secret", True),
    ((b"xapp-",), r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]{20,}", "a Slack app token", False),
    ((b"hooks.slack.com",), r"https://hooks\.slack\.com/(?:workflows|triggers)/T[A-Za-z0-9]+/[A-Za-z0-9_/]{10,}",
     "a Slack webhook", True),
    ((b"discord",), r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]{20,}",
     "a Discord webhook", True),
    ((b"webhook.office.com",), r"https://[A-Za-z0-9-]+\.webhook\.office\.com/webhookb2/[A-Za-z0-9@/_-]{20,}",
     "a Microsoft Teams webhook", True),
    ((b"chat.googleapis.com",), r"https://chat\.googleapis\.com/v1/spaces/[^/\s]+/messages\?[^\s\"']*token=",
     "a Google Chat webhook", True),
    ((b"dapi",), _B + r"dapi[0-9a-f]{32}", "a Databricks token", False),
    ((b"r8_",), _B + r"r8_[A-Za-z0-9]{37}", "a Replicate token", False),
    ((b"gsk_",), _B + r"gsk_[A-Za-z0-9]{48,}", "a Groq key", False),
    ((b"dop_v1_", b"doo_v1_", b"dor_v1_"), r"do[opr]_v1_[a-f0-9]{64}", "a DigitalOcean token", False),
    ((b"hvs.", b"hvb."), r"hv[sb]\.[A-Za-z0-9_-]{24,}", "a Vault token", True),
    ((b"age-secret-key-1",), r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}", "an age secret key", False),
    ((b"shpat_", b"shpca_", b"shppa_", b"shpss_"), r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", "a Shopify token", False),
    ((b"lin_api_",), r"lin_api_[A-Za-z0-9]{40}", "a Linear key", False),
    ((b"ntn_",), _B + r"ntn_[A-Za-z0-9]{40,}", "a Notion token", False),
    ((b"pmak-",), r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}", "a Postman key", False),
    ((b"atlasv1.",), r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_-]{60,}", "a Terraform Cloud token", True),
    ((b"glsa_",), r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}", "a Grafana service-account token", False),
)


@functools.cache
def rules() -> tuple[TokenRule, ...]:
    """detect-secrets' selected regex plugins, then the supplement (imported on first use: the
    plugins pull in `requests`, and a warm verdict cache never needs them)."""
    import importlib

    out: list[TokenRule] = []
    for module, cls_name, anchors, what in DETECT_SECRETS_PLUGINS:
        cls = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), cls_name)
        patterns = list(cls.denylist)
        if len(patterns) != len(anchors):
            raise RuntimeError(f"detect-secrets {cls_name} has {len(patterns)} patterns, expected "
                               f"{len(anchors)}: review core/secrets/tokens.py for this version")
        for i, (pattern, anchor) in enumerate(zip(patterns, anchors)):
            flags = pattern.flags & (re.IGNORECASE | re.VERBOSE | re.MULTILINE | re.DOTALL)
            out.append(TokenRule(what, anchor, re.compile(pattern.pattern.encode(), flags),
                                 (module, i) in _DS_WHOLE_TEXT))
    for anchors, rx, what, whole in SUPPLEMENT:
        out.append(TokenRule(what, anchors, re.compile(rx.encode()), whole))
    return tuple(out)


_RUN_CHARS = bytes(0x61 if (chr(i).isascii() and chr(i).isalnum()) or chr(i) in "_-" else 0x20
                   for i in range(256))
_RUN = b"a" * RUN_MIN


@functools.cache
def _compiled() -> tuple[tuple[TokenRule, ...], tuple[TokenRule, ...], re.Pattern[bytes]]:
    """(whole-text rules, run rules, one regex of every run rule's anchors)."""
    whole = tuple(r for r in rules() if r.whole_text)
    runs = tuple(r for r in rules() if not r.whole_text)
    anchors = sorted({a for r in runs for a in r.anchors}, key=len, reverse=True)
    return whole, runs, re.compile(b"|".join(re.escape(a) for a in anchors))


def find_token(text: bytes, lowered: bytes | None = None) -> str | None:
    """What vendor token `text` holds, anywhere in it, or None."""
    lowered = text.lower() if lowered is None else lowered
    whole, runs, anchors = _compiled()
    for rule in whole:
        if any(a in lowered for a in rule.anchors) and rule.regex.search(text):
            return rule.what
    mask = text.translate(_RUN_CHARS)
    pos = mask.find(_RUN)
    while pos != -1:
        end = mask.find(b" ", pos)
        end = len(mask) if end == -1 else end
        if anchors.search(lowered, pos, end):
            run_low = lowered[pos:end]
            for rule in runs:
                if any(a in run_low for a in rule.anchors) and rule.regex.search(text, pos, end):
                    return rule.what
        pos = mask.find(_RUN, end)
    return None


def value_token(value: str) -> str | None:
    """What vendor token an `env` value holds, or None (the same table as for files)."""
    data = value.encode("utf-8", "surrogateescape")
    lowered = data.lower()
    for rule in rules():
        if any(a in lowered for a in rule.anchors) and rule.regex.search(data):
            return rule.what
    return None


def detect_secrets_version() -> str:
    """The installed detect-secrets' version (part of the cache key of content verdicts)."""
    from importlib import metadata

    try:
        return metadata.version("detect-secrets")
    except metadata.PackageNotFoundError:
        return "absent"
