"""Property tests of the one judge every shipped file passes (`core.packaging.gate`).

For any name drawn from a credential family, with random case, prefixes and backup suffixes,
under any folder; for any PEM private key body under any name; for any innocent name that is a
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

from core.packaging.bundle import list_project

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

word = st.from_regex(r"[a-z][a-z0-9]{0,7}", fullmatch=True)
sep = st.sampled_from([".", "_", "-"])
maybe_prefix = st.one_of(st.just(""), st.builds(lambda w, s: w + s, word, sep))

# A family: a strategy for its spellings (what tools and people actually write).
DOTENV = st.one_of(
    st.builds(lambda tail: ".env" + tail,
              st.sampled_from(["", "rc", ".local", ".development", ".prod.local", "-backup", ".staging"])),
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
])
TFSTATE = st.builds(lambda w: f"{w}.tfstate", word)
IN_PLACE = st.one_of(  # credential folders: anything inside them
    st.builds(lambda d, w: f"{d}/{w}", st.sampled_from([".ssh", ".aws", ".gnupg", ".kaggle", ".azure", ".kube"]), word),
    st.sampled_from([".kube/config", ".docker/config.json", ".config/gh/hosts.yml", ".huggingface/token"]),
    st.builds(lambda w: f".config/gcloud/{w}", word),
)
FAMILY_NAME = st.one_of(DOTENV, SSH_KEY, KEY_FILE, SECRETS, WELL_KNOWN, TFSTATE, IN_PLACE)
BACKUP = st.sampled_from(["", "~", ".bak", ".old", ".orig", ".backup", ".save", "-backup", "_old", ".1"])
FOLDERS = st.lists(word, max_size=3).map(lambda ws: "".join(w + "/" for w in ws))


@st.composite
def random_case(draw, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.upper() if f else c for c, f in zip(text, flips))


@st.composite
def credential_paths(draw) -> str:
    name = draw(FAMILY_NAME) + draw(BACKUP)
    return draw(FOLDERS) + draw(random_case(name))


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
              ".git-credentials", ".vault-token"]


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


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_name_a_rule_matches_passes_the_quick_look(data) -> None:
    """The keyword prefilter that spares ordinary names the full rules never hides a match."""
    from core.packaging.credentials import NAME_RULES, might_be_credential_name, name_reason

    rule, _ = data.draw(st.sampled_from(NAME_RULES))
    name = data.draw(st.from_regex(rule, fullmatch=True).filter(lambda n: "/" not in n))
    assert might_be_credential_name(name), (rule, name)
    if name == name.lower():
        assert name_reason(name) is not None or "env" in name  # an env template is judged by content
