"""A key block is hidden to its END line, and what follows it shows (issue 40: the survivor of
`python bench/mutation.py --module tokenshapes`: the END line looked for with `.match` at the
BEGIN line's end, so it was never found after the key's body and everything to the end of the
text was hidden: the key still, but also the message's own words after it)."""

from __future__ import annotations

from core.runtime.tokenshapes import mask, spans

BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\nq1w2e3r4t5y6u7i8o9p0\n"


def test_a_key_block_is_hidden_to_its_end_line_only() -> None:
    for kind in ("", "RSA ", "OPENSSH ", "ENCRYPTED "):
        block = f"-----BEGIN {kind}PRIVATE KEY-----\n{BODY}-----END {kind}PRIVATE KEY-----"
        text = f"config error in key.pem:\n{block}\nsee docs/secrets.md"
        assert mask(text) == "config error in key.pem:\n[hidden: a private key block]\nsee docs/secrets.md"
        start = text.index("-----BEGIN")
        assert (start, start + len(block), "a private key block") in spans(text)


def test_a_key_block_without_its_end_is_hidden_to_the_end_of_the_text() -> None:
    text = f"cut off: -----BEGIN PRIVATE KEY-----\n{BODY}"
    assert mask(text) == "cut off: [hidden: a private key block]"
