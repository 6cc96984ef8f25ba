"""Writes secrets.txt: one test vector per token family the rule set covers, and per shape the env
gate refuses by value, each under several names (ordinary ones, digest-like ones, secret ones).

Never live keys: every body is drawn from a fixed seed, in the family's documented format (its
prefix, length and alphabet), so the gate's rules meet what an issuer hands out. Run it again
only to add a family; the file is what bench/gates.py and the quick tests read.
"""

from __future__ import annotations

import base64
import random
import string
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository's core/

rng = random.Random(20261206)
AL = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
NAMES = ["X", "CONFIG", "RUN_NAME", "NOTE", "GIT_COMMIT", "HF_REVISION", "RUN_ID", "DATA_URL", "MODEL",
         "MAX_TOKENS", "HEROKU_API", "SERVICE_PASSWORD", "OPENAI_API_KEY", "SENHA"]


def r(alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def b64(n: int) -> str:
    return base64.b64encode(rng.randbytes(n)).decode()


FAMILIES: list[tuple[str, str]] = [
    ("AWS access key", "AKIA" + r(string.ascii_uppercase + string.digits, 16)),
    ("AWS session key", "ASIA" + r(string.ascii_uppercase + string.digits, 16)),
    ("AWS secret access key", r(AL, 12) + "/" + r(AL + "+", 14) + "/" + r(AL, 12)),
    ("AWS secret access key, no digits", r(string.ascii_letters, 20) + "/" + r(string.ascii_letters, 19)),
    ("GitHub classic token", "ghp_" + r(AL, 36)),
    ("GitHub OAuth token", "gho_" + r(AL, 36)),
    ("GitHub fine-grained token", "github_pat_" + r(AL, 22) + "_" + r(AL, 59)),
    ("GitLab token", "glpat-" + r(AL + "-_", 20)),
    ("Slack bot token", f"xoxb-{r(string.digits, 12)}-{r(string.digits, 13)}-{r(AL, 24)}"),
    ("Slack webhook", f"https://hooks.slack.com/services/T{r(AL, 10)}/B{r(AL, 10)}/{r(AL, 24)}"),
    ("Stripe live key", "sk_live_" + r(AL, 24)),
    ("Stripe test key", "sk_test_" + r(AL, 24)),
    ("Stripe webhook secret", "whsec_" + r(AL, 32)),
    ("OpenAI project key", "sk-proj-" + r(AL + "-_", 64)),
    ("OpenAI legacy key", "sk-" + r(AL, 20) + "T3BlbkFJ" + r(AL, 20)),
    ("Anthropic key", "sk-ant-api03-" + r(AL + "-_", 93) + "AA"),
    ("Hugging Face token", "hf_" + r(AL, 34)),
    ("Hugging Face organisation token", "api_org_" + r(string.ascii_letters, 34)),
    ("Google API key", "AIza" + r(AL + "-_", 35)),
    ("Google OAuth access token", "ya29." + r(AL + "-_", 60)),
    ("Google OAuth client secret", "GOCSPX-" + r(AL + "-_", 28)),
    ("PyPI token", "pypi-AgEIcHlwaS5vcmc" + r(AL + "-_", 80)),
    ("npm token", "npm_" + r(AL, 36)),
    ("SendGrid key", f"SG.{r(AL + '-_', 22)}.{r(AL + '-_', 43)}"),
    ("Azure storage connection string", f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={b64(66)};"
                                         "EndpointSuffix=core.windows.net"),
    ("Azure SAS URL", f"https://acct.blob.core.windows.net/c/shard.tar?sv=2022-11-02&se=2026-12-31&sp=r&sig={r(AL, 43)}%3D"),
    ("S3 presigned URL", "https://b.s3.amazonaws.com/k.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
                         f"AKIA{r(string.ascii_uppercase, 16)}%2F20261206&X-Amz-Signature={r(HEX, 64)}"),
    ("Square OAuth secret", "sq0csp-" + r(AL + "-_", 43)),
    ("Mailchimp key", r(HEX, 32) + "-us" + str(rng.randint(1, 20))),
    ("Databricks token", "dapi" + r(HEX, 32)),
    ("Replicate token", "r8_" + r(AL, 37)),
    ("Groq key", "gsk_" + r(AL, 52)),
    ("DigitalOcean token", "dop_v1_" + r(HEX, 64)),
    ("Vault token", "hvs." + r(AL + "-_", 90)),
    ("age secret key", "AGE-SECRET-KEY-1" + r("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)),
    ("Shopify token", "shpat_" + r(HEX, 32)),
    ("Linear key", "lin_api_" + r(AL, 40)),
    ("Notion token", "ntn_" + r(AL, 46)),
    ("Postman key", f"PMAK-{r(HEX, 24)}-{r(HEX, 34)}"),
    ("Grafana service-account token", f"glsa_{r(AL, 32)}_{r(HEX, 8)}"),
    ("Discord webhook", f"https://discord.com/api/webhooks/{r(string.digits, 18)}/{r(AL + '-_', 68)}"),
    ("Teams webhook", f"https://acme.webhook.office.com/webhookb2/{r(HEX, 8)}-{r(HEX, 4)}@{r(HEX, 8)}/IncomingWebhook/{r(HEX, 32)}/{r(HEX, 8)}"),
    ("JSON web token", f"eyJ{r(AL, 30)}.eyJ{r(AL, 60)}.{r(AL + '-_', 43)}"),
    ("URL with a password", f"postgres://trainer:{r(AL, 16)}@db.internal:5432/runs"),
    ("URL with a password (redis)", f"redis://:{r(AL, 24)}@cache.internal:6379/0"),
    ("RSA private key block", "-----BEGIN RSA PRIVATE KEY-----\\nMIIEow" + r(AL, 40)),
    ("OpenSSH private key block", "-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjEAAAAA" + r(AL, 30)),
    ("long random key (base62)", r(AL, 40)),
    ("long random key (base64)", b64(33)),
    ("long random key (hex)", r(HEX, 64)),
]


def _short_forms() -> list[tuple[str, str]]:
    """Every well-known prefix an env value is refused by (core/runtime/tokenshapes.py) that the
    families above do not start with: the prefix and a body of its shortest length and more."""
    from core.runtime.tokenshapes import PREFIXES

    covered = [value for _, value in FAMILIES]
    return [(f"{what} ({prefix}...)", prefix + r(AL, max(n, 24) + 12)) for prefix, n, what in PREFIXES
            if not any(v.startswith(prefix) for v in covered)]


def main() -> None:
    lines = ["# Secret values of the token families the rule set covers, and of the shapes the env",
             "# gate refuses by value: test vectors written by make_secrets.py from a fixed seed,",
             "# never live keys. FAMILY<TAB>NAME=VALUE; every line must be refused.", ""]
    for family, value in [*FAMILIES, *_short_forms()]:
        for name in rng.sample(NAMES, 3):
            lines.append(f"{family}\t{name}={value}")
    (Path(__file__).parent / "secrets.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
