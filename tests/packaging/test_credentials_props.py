"""Property tests of the one judge every shipped file passes (`core.packaging.gate`).

For any name drawn from a credential family, with random case, prefixes and backup suffixes,
under any folder, as a file system may show it and a person still reads it (trailing white space
and dots, zero-width and other format characters, fullwidth letters, a newline inside); for any PEM private key body under any name; for any innocent name that is a
hard link to one of the user's credential files: the file is not in the bundle, and is
reported as withheld. The families are described here from what people and tools write, not
from the implementation's rules.
"""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.packaging.listing import list_project

SETTINGS = settings(max_examples=examples(150), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

word = st.from_regex(r"[a-z][a-z0-9]{0,7}", fullmatch=True)
sep = st.sampled_from([".", "_", "-"])
maybe_prefix = st.one_of(st.just(""), st.builds(lambda w, s: w + s, word, sep))

# A family: a strategy for its spellings (what tools and people actually write).
DOTENV = st.one_of(
    st.builds(lambda tail: ".env" + tail,
              st.sampled_from(["", "rc", ".local", ".development", ".prod.local", "-backup", ".staging",
                               "\n", "\nlocal", "\n_"])),
    st.builds(lambda w, tail: f"{w}.env{tail}", word, st.sampled_from(["", ".local", ".prod"])),
)
SSH_KEY = st.builds(lambda pre, kind, tail: f"{pre}id_{kind}{tail}", maybe_prefix,
                    st.sampled_from(["rsa", "dsa", "ecdsa", "ed25519"]),
                    st.sampled_from(["", "_sk", ".pub", "_work", "-2019", ".github"]))
KEY_FILE = st.builds(lambda w, ext: f"{w}.{ext}", word,
                     st.sampled_from(["pem", "key", "p12", "pfx", "jks", "keystore", "p8", "ppk"]))
SECRETS = st.one_of(
    st.builds(lambda ext: f"secrets.{ext}", st.sampled_from(["yaml", "yml", "json", "toml", "py", "env", "ini"])),
    st.builds(lambda pre, ext: f"{pre}secrets.{ext}", st.builds(lambda w, s: w + s, word, sep),
              st.sampled_from(["yaml", "json", "toml", "txt"])),
    st.just(".secrets"),
)
WELL_KNOWN = st.sampled_from([
    ".netrc", "_netrc", ".pgpass", ".my.cnf", ".npmrc", ".pypirc", ".git-credentials",
    ".vault-token", "htpasswd", ".htpasswd", "kaggle.json", "credentials.json", "credentials",
    "application_default_credentials.json", "terraform.tfstate", "deploy_key", ".dockercfg",
    ".s3cfg", ".boto", ".databrickscfg", ".modal.toml", "kubeconfig", ".terraformrc",
    # OAuth token caches
    "token.json", "token.pickle", "credentials.db", "access_tokens.db", "msal_token_cache.json",
    "accessTokens.json", "service_principal_entries.json",
    # cloud console key exports
    "my-project-123456-1a2b3c4d5e6f.json", "prod_accessKeys.csv", "credentials.csv", "rootkey.csv",
    "MySub-1-2-2024-credentials.publishsettings", "acme-firebase-adminsdk-x1y2z-0a1b2c3d4e.json",
    # VPN and network
    "office.ovpn", "wg0.conf", "wg-home.conf", "Home WiFi.nmconnection", "ipsec.secrets",
    # package-manager rc files
    ".yarnrc.yml", ".yarnrc", ".sentryclirc",
    # MCP client configs
    "mcp.json", ".mcp.json", "claude_desktop_config.json", "mcp_config.json", "cline_mcp_settings.json",
    # framework dev-variable files
    ".dev.vars", ".dev.vars.production", ".envrc", ".env.staging", "secrets.toml",
    "local.settings.json", ".runtimeconfig.json", "credentials.yml.enc", "production.yml.enc",
])
TFSTATE = st.builds(lambda w: f"{w}.tfstate", word)
IN_PLACE = st.one_of(  # credential folders: anything inside them
    st.builds(lambda d, w: f"{d}/{w}", st.sampled_from([".ssh", ".aws", ".gnupg", ".kaggle", ".azure", ".kube"]), word),
    st.sampled_from([".kube/config", ".docker/config.json", ".config/gh/hosts.yml", ".huggingface/token",
                     ".gem/credentials", ".cargo/credentials", ".cargo/credentials.toml",
                     ".composer/auth.json", ".m2/settings.xml", ".gradle/gradle.properties",
                     ".cursor/mcp.json", ".streamlit/secrets.toml", ".config/pypoetry/auth.toml",
                     ".codex/auth.json", ".config/github-copilot/hosts.json", ".dbt/profiles.yml"]),
    st.builds(lambda w: f".config/gcloud/{w}", word),
)
FAMILY_NAME = st.one_of(DOTENV, SSH_KEY, KEY_FILE, SECRETS, WELL_KNOWN, TFSTATE, IN_PLACE)
BACKUP = st.sampled_from(["", "~", ".bak", ".old", ".orig", ".backup", ".save", "-backup", "_old", ".1"])
FOLDERS = st.lists(word, max_size=3).map(lambda ws: "".join(w + "/" for w in ws))


@st.composite
def random_case(draw, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.upper() if f else c for c, f in zip(text, flips))


# What a name may carry and still read the same: format characters (zero-width space, joiners,
# word joiner, BOM, soft hyphen) anywhere, fullwidth forms of its letters, trailing white space
# and dots (Windows and SMB drop them).
FORMAT_CHARS = st.sampled_from(["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"])
TRAILING = st.sampled_from(["", "", " ", "\t", ".", "..", " .", ". ", "  "])


@st.composite
def as_it_reads(draw, rel: str) -> str:
    parts = []
    for part in rel.split("/"):
        if draw(st.booleans()):
            wide = draw(st.lists(st.booleans(), min_size=len(part), max_size=len(part)))
            part = "".join(chr(ord(c) + 0xFEE0) if w and "!" <= c <= "~" else c for c, w in zip(part, wide))
        for _ in range(draw(st.integers(0, 2))):
            at = draw(st.integers(0, len(part)))
            part = part[:at] + draw(FORMAT_CHARS) + part[at:]
        parts.append(part + draw(TRAILING))
    return "/".join(parts)


@st.composite
def credential_paths(draw) -> str:
    name = draw(FAMILY_NAME) + draw(BACKUP)
    rel = draw(FOLDERS) + draw(random_case(name))
    return draw(as_it_reads(rel)) if draw(st.booleans()) else rel


def _listing_with(files: dict[str, bytes], links: dict[str, Path] = {}):
    """A project outside git holding these files (and hard links), as the packer lists it."""
    with tempfile.TemporaryDirectory(prefix="prop-") as tmp:
        project = Path(tmp) / "p"
        (project).mkdir()
        (project / "train.py").write_text("print(1)\n")
        for rel, data in files.items():
            path = project / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        for rel, target in links.items():
            (project / rel).parent.mkdir(parents=True, exist_ok=True)
            os.link(target, project / rel)
        return list_project(project)


def _assert_withheld(listing, rel: str) -> None:
    assert rel not in listing.entries, f"{rel!r} ships"
    reasons = {w["path"]: w["reason"] for w in listing.withheld}
    assert rel in reasons and reasons[rel].startswith("withheld:"), listing.withheld
    assert "train.py" in listing.entries


@SETTINGS
@given(rel=credential_paths())
def test_any_credential_family_name_is_withheld(home: Path, rel: str) -> None:
    listing = _listing_with({rel: b"anything at all\n"})
    # a credential folder is reported as the file inside it
    _assert_withheld(listing, rel)


PEM_LABELS = ["RSA PRIVATE KEY", "EC PRIVATE KEY", "DSA PRIVATE KEY", "OPENSSH PRIVATE KEY",
              "ENCRYPTED PRIVATE KEY", "PRIVATE KEY", "PGP PRIVATE KEY BLOCK",
              "SSH2 ENCRYPTED PRIVATE KEY"]
safe_name = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
                    min_size=1, max_size=40).filter(lambda n: n not in (".", "..", "train.py")
                                                    and len(n.encode()) < 200)


@st.composite
def pem_documents(draw) -> bytes:
    label = draw(st.sampled_from(PEM_LABELS))
    body = base64.b64encode(draw(st.binary(min_size=16, max_size=700))).decode()
    width = draw(st.integers(16, 76))
    lines = [body[i:i + width] for i in range(0, len(body), width)]
    headers = draw(st.sampled_from([[], ["Proc-Type: 4,ENCRYPTED", "DEK-Info: AES-128-CBC,00FF", ""],
                                    ["Version: GnuPG v2", ""], ["Comment: made by hand"]]))
    nl = draw(st.sampled_from(["\n", "\r\n"]))
    before = draw(st.text(st.characters(codec="utf-8", blacklist_categories=("Cs",)), max_size=200))
    text = nl.join([f"-----BEGIN {label}-----", *headers, *lines, f"-----END {label}-----", ""])
    return (before + nl + text).encode("utf-8")


@SETTINGS
@given(name=safe_name, folder=FOLDERS, document=pem_documents())
def test_any_pem_private_key_under_any_name_is_withheld(home: Path, name: str, folder: str,
                                                        document: bytes) -> None:
    rel = folder + name
    listing = _listing_with({rel: document})
    _assert_withheld(listing, rel)


HOME_FILES = [".ssh/id_ed25519", ".aws/credentials", ".kube/config", ".docker/config.json",
              ".config/gh/hosts.yml", ".pypirc", ".npmrc", ".netrc", ".kaggle/kaggle.json",
              ".config/gcloud/application_default_credentials.json", ".azure/msal_token_cache.json",
              ".git-credentials", ".vault-token", ".aws/sso/cache/0a1b.json", ".codex/auth.json",
              ".dbt/profiles.yml", ".zsh_history", ".supabase/access-token",
              ".local/share/com.vercel.cli/auth.json"]


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "userhome"
    for rel in HOME_FILES:
        (h / rel).parent.mkdir(parents=True, exist_ok=True)
        (h / rel).write_text(f"not recognisable by content: {rel}\n")
    monkeypatch.setenv("HOME", str(h))
    return h


innocent = st.builds(lambda w, ext: f"{w}.{ext}", word, st.sampled_from(["txt", "csv", "py", "json", "md"]))


@SETTINGS
@given(rel=st.builds(lambda f, n: f + n, FOLDERS, innocent), target=st.sampled_from(HOME_FILES))
def test_any_hard_link_to_a_home_credential_is_withheld(home: Path, user_home: Path, rel: str,
                                                        target: str) -> None:
    listing = _listing_with({}, links={rel: user_home / target})
    _assert_withheld(listing, rel)


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_every_name_a_rule_matches_passes_the_quick_look(data) -> None:
    """The keyword prefilter that spares ordinary names the full rules never hides a match."""
    from core.packaging.credentials import NAME_RULES, might_be_credential_name, name_reason

    rule, _ = data.draw(st.sampled_from(NAME_RULES))
    name = data.draw(st.from_regex(rule, fullmatch=True).filter(lambda n: "/" not in n))
    assert might_be_credential_name(name), (rule, name)
    if name == name.lower():
        assert name_reason(name) is not None or "env" in name  # an env template is judged by content


# -- content: vendor tokens anywhere, in UTF-8 or UTF-16 --------------------------------------

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
URLSAFE = ALNUM + "_-"


def _chars(alphabet: str, n: int, m: int | None = None):
    return st.text(st.sampled_from(alphabet), min_size=n, max_size=m or n)


# Tokens as the vendors issue them (their documented or observed shapes), not as the rules say.
TOKENS = st.one_of(
    st.builds(lambda k, b: f"gh{k}_{b}", st.sampled_from("pousr"), _chars(ALNUM, 36)),
    st.builds(lambda a, b: f"github_pat_{a}_{b}", _chars(ALNUM, 22), _chars(ALNUM, 59)),
    st.builds(lambda b: f"glpat-{b}", _chars(URLSAFE, 20)),
    st.builds(lambda k, a, b, c: f"xox{k}-{a}-{b}-{c}", st.sampled_from("bpa"), _chars("0123456789", 10, 13),
              _chars("0123456789", 10, 13), _chars("abcdefghijklmnopqrstuvwxyz0123456789", 24)),
    st.builds(lambda b: f"sk-ant-api03-{b}AA", _chars(URLSAFE, 93)),
    st.builds(lambda b: f"sk-proj-{b}", _chars(URLSAFE, 100, 160)),
    st.builds(lambda a, b: f"sk-{a}T3BlbkFJ{b}", _chars(ALNUM, 20), _chars(ALNUM, 20)),
    st.builds(lambda b: f"hf_{b}", _chars(ALNUM[:52], 34)),
    st.builds(lambda p, b: f"{p}{b}", st.sampled_from(["AKIA", "ASIA"]), _chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)),
    st.builds(lambda b: f"AIza{b}", _chars(URLSAFE, 35)),
    st.builds(lambda b: f"npm_{b}", _chars(ALNUM, 36)),
    st.builds(lambda b: f"pypi-AgEIcHlwaS5vcmc{b}", _chars(URLSAFE, 70, 180)),
    st.builds(lambda k, b: f"{k}k_live_{b}", st.sampled_from("sr"), _chars(ALNUM, 24, 99)),
    st.builds(lambda t, b, c: f"https://hooks.slack.com/services/T{t}/B{b}/{c}",
              _chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 8, 10),
              _chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 8, 10), _chars(ALNUM, 24)),
    st.builds(lambda i, b: f"https://discord.com/api/webhooks/{i}/{b}", _chars("0123456789", 17, 19),
              _chars(URLSAFE, 68)),
)
SEP = st.sampled_from([" ", "\n", "=", ": ", '"', "'", "(", "\t", "Bearer ", "\r\n", ",", "> "])
any_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


@SETTINGS
@given(name=safe_name, token=TOKENS, before=any_text, after=any_text, seps=st.tuples(SEP, SEP),
       encoding=st.sampled_from(["utf-8", "utf-16", "utf-16-le", "utf-16-be"]))
def test_any_text_holding_a_vendor_token_is_withheld(home: Path, name: str, token: str, before: str,
                                                     after: str, seps: tuple[str, str],
                                                     encoding: str) -> None:
    document = (before + seps[0] + token + seps[1] + after).encode(encoding, "surrogatepass")
    listing = _listing_with({name: document})
    _assert_withheld(listing, name)


def _der_keys() -> list[tuple[str, bytes]]:
    """Private keys in DER as tools write them: PKCS#1/SEC1 ('traditional'), PKCS#8, encrypted
    PKCS#8, PKCS#12; for RSA, DSA, EC (P-256, P-384) and Ed25519."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import pkcs12

    keys = [rsa.generate_private_key(65537, 1024), dsa.generate_private_key(1024),
            ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP384R1()),
            ed25519.Ed25519PrivateKey.generate()]
    out = []
    for key in keys:
        kind = type(key).__name__
        out.append((f"{kind} PKCS#8", key.private_bytes(ser.Encoding.DER, ser.PrivateFormat.PKCS8,
                                                        ser.NoEncryption())))
        out.append((f"{kind} encrypted PKCS#8", key.private_bytes(
            ser.Encoding.DER, ser.PrivateFormat.PKCS8, ser.BestAvailableEncryption(b"pw"))))
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            out.append((f"{kind} traditional", key.private_bytes(
                ser.Encoding.DER, ser.PrivateFormat.TraditionalOpenSSL, ser.NoEncryption())))
    out.append(("PKCS#12", pkcs12.serialize_key_and_certificates(b"k", keys[0], None, None,
                                                                 ser.NoEncryption())))
    return out


DER_KEYS = _der_keys()


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=safe_name, key=st.sampled_from(DER_KEYS))
def test_any_der_private_key_under_any_name_is_withheld(home: Path, name: str,
                                                        key: tuple[str, bytes]) -> None:
    listing = _listing_with({name: key[1]})
    _assert_withheld(listing, name)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=safe_name, document=pem_documents(), prefix=st.sampled_from(["", "GOOGLE_CREDENTIALS=", "key: ", "x", "ab"]),
       mime=st.booleans(), urlsafe=st.booleans(), service_account=st.booleans())
def test_base64_wrapped_keys_are_withheld(home: Path, name: str, document: bytes, prefix: str,
                                          mime: bool, urlsafe: bool, service_account: bool) -> None:
    import json

    if service_account:  # a service-account key file, as CI variables hold it
        document = json.dumps({"type": "service_account", "project_id": "p", "private_key_id": "0a",
                               "private_key": document.decode("utf-8", "replace"),
                               "client_email": "x@p.iam.gserviceaccount.com"}, indent=2).encode()
    blob = (base64.encodebytes(document) if mime else
            base64.urlsafe_b64encode(document) if urlsafe else base64.b64encode(document))
    listing = _listing_with({name: prefix.encode() + blob + b"\n"})
    _assert_withheld(listing, name)


# -- folders reached through links: the gate's resolution is realpath's ------------------------

_dir_name = st.sampled_from(["a", "b", "c", "d"])


@settings(max_examples=examples(120), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dirs=st.lists(st.lists(_dir_name, min_size=1, max_size=3).map("/".join), min_size=1, max_size=6),
       links=st.lists(st.tuples(st.lists(_dir_name, min_size=1, max_size=3).map("/".join),
                                st.sampled_from(["a", "b/c", "..", "../..", "/", ".", "a/../..", "missing"])),
                      max_size=4),
       probes=st.lists(st.lists(_dir_name, min_size=1, max_size=4).map("/".join), min_size=1, max_size=6))
def test_a_folder_resolves_as_realpath_says(home: Path, dirs: list[str], links: list, probes: list[str]) -> None:
    """Whatever mix of folders and links (inside, outside, dangling, loops) a tree holds, the
    gate's one-lstat-a-folder resolution of a file's folder is exactly os.path.realpath's: a
    folder reached through a link that leaves the project is None (its files are withheld)."""
    from core.packaging.gate import Gate

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(os.path.realpath(tmp)) / "project"
        root.mkdir()
        for d in dirs:
            (root / d).mkdir(parents=True, exist_ok=True)
        for where, target in links:
            path = root / where
            if not path.parent.is_dir() or os.path.lexists(path):
                continue
            os.symlink(target, path)
        gate = Gate(root)
        for probe in probes:
            real = os.path.realpath(root / probe)
            want = ("" if real == str(root) else
                    real[len(str(root)) + 1:] if real.startswith(f"{root}/") else None)
            assert gate._real_dir(probe) == want, (probe, dirs, links)
