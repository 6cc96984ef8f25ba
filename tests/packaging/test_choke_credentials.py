"""The credential gate, shaped like its rule (issue 40): what never ships in a bundle.

core/packaging/credentials.py is the one list of what a credential looks like, and every path
that could ship passes it: by name (every family of NAME_RULES, in any case, under any folder,
with any backup, copy or editor decoration, as a file system may show it: trailing dots and
blanks, zero-width characters, fullwidth letters), by place (every DIR_RULES folder wherever it
lies and whatever lies below it, every SUFFIX_RULES path), and by content (every kind at any
offset within the head it reads, in UTF-16, JSON-escaped and base64-wrapped, and the verdict
cached by the bytes and whether they are the whole file). Each rule has a twin that is near it
and ships: a gate that withholds everything would pass the first half alone.

Each assertion names the reason expected: a rule that matched the wrong family, or a place
reported as a name, is a broken rule too.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.packaging import credentials as cred
from tests.props import examples

pytestmark = pytest.mark.quick

# -- names -----------------------------------------------------------------------------------

# (a name of each NAME_RULES family, what the gate calls it, a near-miss twin that ships).
# test_every_name_rule_has_an_example checks that each row of NAME_RULES is the first match of
# one of these names, so a family added without an example here fails.
NAMES: list[tuple[str, str, str]] = [
    (".env.local", "dotenv file", "env.py"),
    ("prod.env", "dotenv file", "prod_env.py"),
    ("id_ed25519", "SSH key", "id_generator.py"),
    ("work-ecdsa.pub", "SSH key", "ecdsa.py"),
    ("ssh_host_rsa_key", "SSH host key", "ssh_host.py"),
    ("deploy_key.pub", "deploy key", "deploy_keys.py"),
    ("server.pem", "private key or key store", "server.pem.md"),
    (".keystore", "Java key store", "keystore.py"),
    ("_netrc", "netrc credentials", "netrc.py"),
    (".git-credentials", "git credentials", "git_credentials.md"),
    (".pgpass", "database password file", "pgpass.py"),
    (".npmrc", "package registry token", "npmrc.md"),
    ("credentials.json", "cloud credentials", "credentials.py"),
    ("prod_accessKeys.csv", "AWS console access-key export", "accesskeys.py"),
    (".passwd-s3fs", "s3fs mount credentials", "passwd_s3fs.md"),
    ("adc.json", "Google Cloud credentials", "adc.py"),
    ("access_tokens.db", "Google Cloud credentials", "access_tokens.py"),
    ("client_secret_123.apps.googleusercontent.com.json", "OAuth client secret", "client_secret.py"),
    ("my-service-account.json", "cloud service-account key", "service_account.py"),
    ("azureProfile.json", "Azure credentials", "azureprofile.py"),
    ("rclone.conf", "cloud storage credentials", "rclone.md"),
    ("kubeconfig.yaml", "Kubernetes config", "kubeconfig.py"),
    (".dockercfg", "Docker registry credentials", "dockercfg.md"),
    (".vault-token", "Vault token", "vault.py"),
    ("prod.tfstate", "Terraform state", "tfstate.md"),
    (".terraformrc", "Terraform token", "terraform.py"),
    ("kaggle.json", "Kaggle API token", "kaggle.py"),
    (".modal.toml", "Modal token", "modal.toml.md"),
    (".secrets.yaml", "secrets file", "secret_sauce.py"),
    ("prod-secret.json", "secrets file", "prod-secret.py"),
    (".htpasswd", "web server password file", "htpasswd.py"),
    ("vault.kdbx", "password database or VPN profile", "kdbx.md"),
    ("secring.gpg", "GnuPG secret keyring", "secring.md"),
    ("token.pickle", "OAuth token cache", "tokenizer.json"),
    ("service_principal_entries.json", "OAuth token cache", "service_principal.py"),
    ("proj-1a2b3c4d5e6f.json", "Google Cloud service-account key export", "proj-1a2b3c4d5e6.json"),
    ("x-firebase-adminsdk-abc.json", "Firebase admin key", "firebase_adminsdk.py"),
    ("rootkey.csv", "AWS root access keys", "rootkey.py"),
    ("prod.publishsettings", "Azure credentials", "publishsettings.md"),
    ("wg0.conf", "VPN or network credentials", "wg0.py"),
    (".smbcredentials", "SMB mount credentials", "smbcredits.md"),
    (".yarnrc.yml", "package registry or service token", "yarnrc.md"),
    (".mcp.json", "MCP client config", "mcp.py"),
    (".dev.vars", "framework secrets file", "dev_vars.py"),
    (".bash_history", "shell history", "history.py"),
    ("login.keychain-db", "macOS keychain", "keychain.py"),
    ("Login Data", "browser password or cookie store", "login.py"),
]
# Code and data whose names merely hold a word (the module's own list of deliberate exceptions)
ORDINARY_NAMES = ["keys.py", "tokenizer.json", "environment.yml", "env.py", "secret_sauce.py",
                  "deploy_keys.py", "credentials.py", "train.py", "README.md", "config.json"]

SAFE_FOLDER = st.from_regex(r"[a-z][a-z0-9]{0,7}", fullmatch=True).filter(
    lambda w: cred.place_reason(w + "/x") is None and cred.name_reason(w) is None
    and w not in cred._SUFFIX_PARTS)
FOLDERS = st.lists(SAFE_FOLDER, max_size=4).map("/".join)
# What a backup, a copy or an editor adds to a name (each taken off by the gate)
DECORATIONS = ["~", "#", ".bak", ".backup", ".old", ".orig", ".save", ".tmp", ".1", ".12", "-backup",
               "_old", " copy", "-2", " (1)", ".bak~"]


def _name_reason(what: str) -> str:
    return f"withheld: credential file ({what})"


def _under(folders: str, name: str) -> str:
    return f"{folders}/{name}" if folders else name


def _mixed_case(name: str, flips: list[bool]) -> str:
    return "".join(c.upper() if flip else c.lower() for c, flip in zip(name, flips + [False] * len(name)))


def test_every_name_rule_has_an_example() -> None:
    """Each row of NAME_RULES is the first match of some name above (so a row's property is
    tested), and the example's family is that row's."""
    for i, (_, what) in enumerate(cred.NAME_RULES):
        firsts = [n for n, _, _ in NAMES if int(cred._name_regex().fullmatch(n.lower()).lastgroup[1:]) == i]
        assert firsts, f"NAME_RULES[{i}] ({what}) has no example in NAMES"
        assert all(w == what for n, w, _ in NAMES if n in firsts)


@pytest.mark.parametrize("name, what, twin", NAMES, ids=[n for n, _, _ in NAMES])
def test_each_name_family_is_withheld_and_its_twin_ships(name: str, what: str, twin: str) -> None:
    assert cred.name_reason(name) == _name_reason(what)
    assert cred.withheld_reason(name) == _name_reason(what)
    assert cred.withheld_reason(f"/home/u/proj/{name}/") == _name_reason(what)  # a folder, with its slash
    assert cred.might_be_credential_name(name) is True
    assert cred.name_reason(twin) is None
    assert cred.withheld_reason(f"src/{twin}") is None


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_names_with_a_word_ship(name: str) -> None:
    assert cred.name_reason(name) is None
    assert cred.withheld_reason(f"project/src/{name}") is None


@pytest.mark.parametrize("row", NAMES, ids=[n for n, _, _ in NAMES])
@settings(max_examples=examples(50), deadline=None)
@given(folders=FOLDERS, flips=st.lists(st.booleans(), max_size=60),
       absolute=st.booleans())
def test_a_credential_name_is_withheld_in_any_case_anywhere(row: tuple[str, str, str], folders: str,
                                                            flips: list[bool], absolute: bool) -> None:
    """Any folder above it, any case (case-insensitive file systems, a person typing ID_RSA)."""
    name, what, twin = row
    named = _mixed_case(name, flips)
    path = ("/home/u/" if absolute else "") + _under(folders, named)
    assert cred.name_reason(named) == _name_reason(what)
    assert cred.withheld_reason(path) == _name_reason(what)
    assert cred.place_reason(path) is None  # a name rule, not a place
    assert cred.withheld_reason(("/home/u/" if absolute else "") + _under(folders, _mixed_case(twin, flips))) is None


@pytest.mark.parametrize("row", NAMES, ids=[n for n, _, _ in NAMES])
@settings(max_examples=examples(50), deadline=None)
@given(decorations=st.lists(st.sampled_from(DECORATIONS), min_size=1, max_size=3),
       folders=FOLDERS, pad=st.sampled_from(["", "", " ", ".", " .", "\t"]))
def test_a_backup_or_copy_of_a_credential_is_one(row: tuple[str, str, str], decorations: list[str],
                                                 folders: str, pad: str) -> None:
    """`id_rsa.bak~`, `kaggle.json (1)`, `.env.orig`: decorations are taken off, repeatedly,
    and what a file system drops from a name's end with them (`kaggle.json .bak`)."""
    name, what, _ = row
    decorated = name + pad + "".join(decorations)
    assert cred.name_reason(decorated) == _name_reason(what), decorated
    assert cred.withheld_reason(_under(folders, decorated)) == _name_reason(what)
    assert name.lower() in cred.name_variants(decorated)


# The decorated name as written is looked at before the name it decorates, so anything put in
# front of these two dotfiles reads as another family (still withheld): `.#.keystore` as a
# `*.keystore` file, `#.git-credentials#` and `.\u200bgit-credentials` as `*-credentials` ones.
PREFIXED = {".keystore": "private key or key store", ".git-credentials": "cloud credentials"}


@pytest.mark.parametrize("name, what, twin", NAMES, ids=[n for n, _, _ in NAMES])
def test_editor_files_and_copies_of_a_credential_are_one(name: str, what: str, twin: str) -> None:
    """An emacs lock (`.#name`), an autosave (`#name#`), vim's swap (`.name.swp`, `.name.swo`),
    and a file manager's copy before the extension (`kaggle (1).json`, `kaggle copy.json`)."""
    for form in (f".#{name}", f"#{name}#", f".{name}.swp", f".{name}.swo"):
        expected = PREFIXED.get(name, what)
        assert cred.name_reason(form) == _name_reason(expected), form
    stem, dot, ext = name.rpartition(".")
    if stem and dot and not stem.startswith(".") and "." not in stem:
        for copy in (" (1)", " (12)", " copy", " copy 2", "-copy", "_copy"):
            assert cred.name_reason(f"{stem}{copy}.{ext}") == _name_reason(what), f"{stem}{copy}.{ext}"
    assert cred.name_reason(f"{twin}.bak") is None


@pytest.mark.parametrize("row", NAMES, ids=[n for n, _, _ in NAMES])
def test_a_hidden_copy_of_a_credential_is_one(row: tuple[str, str, str]) -> None:
    """`.token.json`, `.rootkey.csv`, `.rclone.conf`: hiding a credential does not make it
    safe to ship, and it keeps its own family's reason."""
    name, what, twin = row
    hidden = name if name.startswith(".") else "." + name
    assert cred.name_reason(hidden) == _name_reason(what), hidden
    twice = PREFIXED.get(name, what) if name.startswith(".") else what  # `..keystore` reads as `*.keystore`
    assert cred.name_reason("." + hidden) == _name_reason(twice), "." + hidden  # hidden twice
    assert cred.withheld_reason(f"conf/{hidden}~") == _name_reason(what)


@pytest.mark.parametrize("name", ["xkaggle.json", "skaggle.json", "xtoken.json", "xrootkey.csv", "xadc.json",
                                  "xrclone.conf", "xsecring.gpg"])
def test_only_a_dot_is_taken_off_a_name_not_a_letter(name: str) -> None:
    """A letter before an exact name makes another name: it ships (a dot hides the same name)."""
    assert cred.name_reason(name) is None
    assert cred.name_reason("." + name[1:]) is not None


@pytest.mark.parametrize("name", [".gitignore", ".python-version", ".pre-commit-config.yaml", ".token.py",
                                  ".config.json", ".settings.json", ".dockerignore", ".env.example"])
def test_a_hidden_file_that_is_no_credential_still_ships(name: str) -> None:
    """Reading a hidden name as the name it hides adds no rule: these ship as before (a
    template such as `.env.example` is judged by its content), and a hidden copy of a
    template is not made one by its hidden form (`.example.env` stays a dotenv file)."""
    assert cred.name_reason(name) is None
    assert cred.name_reason(".example.env") == _name_reason("dotenv file")


ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u00ad", "\ufeff", "\u2060"]


@pytest.mark.parametrize("row", NAMES, ids=[n for n, _, _ in NAMES])
@settings(max_examples=examples(50), deadline=None)
@given(trailing=st.sampled_from(["", ".", " ", "..", " .", "\t", ". "]),
       zw=st.sampled_from(ZERO_WIDTH), at=st.integers(min_value=0), fullwidth=st.booleans())
def test_a_credential_name_as_a_file_system_shows_it(row: tuple[str, str, str], trailing: str, zw: str,
                                                     at: int, fullwidth: bool) -> None:
    """What reads as the name is the name: trailing dots and blanks (Windows and SMB drop them),
    a format character anywhere, fullwidth letters (NFKC)."""
    name, what, twin = row
    i = at % (len(name) + 1)
    shown = name[:i] + zw + name[i:] + trailing
    if fullwidth:
        shown = "".join(chr(ord(c) + 0xFEE0) if "a" <= c <= "z" else c for c in shown)
    expected = {_name_reason(what), _name_reason(PREFIXED.get(name, what))}  # one of the two
    assert cred.name_reason(shown) in expected, repr(shown)
    assert cred.withheld_reason(f"code/{shown}") in expected, repr(shown)
    assert cred.name_reason(twin + trailing) is None


@pytest.mark.parametrize("lowered, normal", [
    ("kaggle.json.", "kaggle.json"), ("kaggle.json \t.", "kaggle.json"), (".env", ".env"),
    ("ｋａｇｇｌｅ.json", "kaggle.json"), ("kag\u200bgle.json", "kaggle.json"), ("...", "..."),
    ("id_rsa\u00ad ", "id_rsa"), ("é.env", "é.env"), ("ＩＤ_ＲＳＡ", "id_rsa"), ("x\u200b.", "x"),
])
def test_normal_form_of_a_name(lowered: str, normal: str) -> None:
    """`_normal`: the plain-ASCII name untouched (the same object), else folded; a name of only
    dots keeps its dots (it has nothing else to read as)."""
    assert cred._normal(lowered) == normal
    if lowered.isascii() and lowered[-1:] not in " \t.":
        assert cred._normal(lowered) is lowered


@pytest.mark.parametrize("name, variants", [
    ("ID_RSA.bak~", ["id_rsa.bak~", "id_rsa.bak"]),
    ("kaggle (1).json", ["kaggle (1).json", "kaggle.json"]),
    ("..env.swp", ["..env.swp", ".env"]),
    ("#.env#", ["#.env#", ".env#", "#.env", ".env"]),
    ("kaggle.json. ", ["kaggle.json. ", "kaggle.json"]),
])
def test_name_variants(name: str, variants: list[str]) -> None:
    """The lower-cased name first, then what it reads as without each decoration."""
    got = cred.name_variants(name)
    assert got[0] == name.lower()
    assert all(v in got for v in variants), got
    assert len(got) == len(set(got))


def test_might_be_credential_name_looks_at_the_name_as_it_reads() -> None:
    """The cheap first look: a keyword as written, or only once the name is read (`ｅnv`)."""
    assert cred.might_be_credential_name("train.py") is False
    assert cred.might_be_credential_name("model.bin.") is False
    assert cred.might_be_credential_name(".ENV") is True
    assert cred.might_be_credential_name(".ｅnv") is True
    assert cred.might_be_credential_name(".e\u200bnv") is True
    assert cred.name_reason(".ｅnv") == _name_reason("dotenv file")


@pytest.mark.parametrize("name", [".env.example", ".env.sample", ".env.template", ".env.dist", "example.env",
                                  "prod.env.example", "env.sample", ".env.local.example", ".env.example.bak",
                                  ".ENV.EXAMPLE"])
def test_an_env_template_is_not_a_credential_by_name(name: str) -> None:
    """A template is judged by its content (it ships while it sets nothing)."""
    assert cred.name_reason(name) is None
    assert cred.is_env_template(name) is True
    assert cred.withheld_reason(f"deploy/{name}") is None
    assert cred.is_env_template(".env") is False and cred.is_env_template("example.py") is False


# -- places ----------------------------------------------------------------------------------

def _dir_reason(folder: str, what: str) -> str:
    return f"withheld: credential folder {folder}/ ({what})"


@pytest.mark.parametrize("row", cred.DIR_RULES, ids=[d for d, _ in cred.DIR_RULES])
@settings(max_examples=examples(50), deadline=None)
@given(above=FOLDERS, below=FOLDERS,
       name=st.sampled_from(["train.py", "config", "notes.txt", "a.json"]),
       flips=st.lists(st.booleans(), max_size=20), decoration=st.sampled_from(["", ".bak", "~", " (1)", ".old"]))
def test_every_credential_folder_withholds_what_lies_in_it(row: tuple[str, str], above: str, below: str,
                                                          name: str, flips: list[bool], decoration: str) -> None:
    """Every file below a DIR_RULES folder, wherever the folder lies, in any case, a backup of
    the folder too; and the folder itself (a path ending at it)."""
    folder, what = row
    shown = _mixed_case(folder, flips) + decoration
    path = _under(above, _under(shown, _under(below, name)))
    assert cred.withheld_reason(path) == _dir_reason(folder, what), path
    assert cred.place_reason(path) == _dir_reason(folder, what), path
    assert cred.withheld_reason(_under(above, shown)) == _dir_reason(folder, what)
    assert cred.place_reason(_under(above, shown) + "/") == _dir_reason(folder, what)


@pytest.mark.parametrize("folder, what", cred.DIR_RULES, ids=[d for d, _ in cred.DIR_RULES])
def test_a_folder_near_a_credential_folder_ships(folder: str, what: str) -> None:
    """`ssh/`, `.sshd/`, `my.ssh/`: not the folder; and the folder's name inside a file's name."""
    bare = folder.lstrip(".")
    for near in (bare + "x", "my" + folder, folder + "x", folder + "X"):
        assert cred.place_reason(f"proj/{near}/train.py") is None, near
        assert cred.place_reason(f"proj/{near}") is None, near  # the path ends at it
    assert cred.place_reason(f"proj/train{folder}.py") is None


def _suffix_reason(what: str) -> str:
    return f"withheld: credential file ({what})"


@pytest.mark.parametrize("row", cred.SUFFIX_RULES, ids=["/".join(x) for x, _ in cred.SUFFIX_RULES])
@settings(max_examples=examples(50), deadline=None)
@given(above=FOLDERS, flips=st.lists(st.booleans(), max_size=40),
       below=st.sampled_from(["", "x.json", "sub/file"]))
def test_every_credential_place_is_withheld_wherever_it_lies(row: tuple[tuple[str, ...], str], above: str,
                                                            flips: list[bool], below: str) -> None:
    """Every SUFFIX_RULES path, under any folder, in any case; and what lies below it."""
    suffix, what = row
    path = _under(above, _mixed_case("/".join(suffix), flips))
    assert cred.place_reason(path) == _suffix_reason(what), path
    assert cred.withheld_reason(path) == _suffix_reason(what), path
    if below:
        assert cred.place_reason(f"{path}/{below}") == _suffix_reason(what)
        assert cred.withheld_reason(f"{path}/{below}") == _suffix_reason(what)


@pytest.mark.parametrize("suffix, what", cred.SUFFIX_RULES, ids=["/".join(s) for s, _ in cred.SUFFIX_RULES])
def test_a_credential_place_without_its_folder_is_no_place(suffix: tuple[str, ...], what: str) -> None:
    """The place's last part alone in a project folder, and the place with a part left out: not
    that place (the name rules still judge the name)."""
    last = suffix[-1]
    assert cred.place_reason(f"proj/src/{last}") is None
    assert cred.withheld_reason(f"proj/src/{last}") == cred.name_reason(last)
    assert cred.place_reason("proj/" + "/".join(suffix[1:]) + "x") is None
    assert cred.place_reason("proj/" + "/".join(suffix[:-1]) + "/other-" + last) is None


def test_a_decorated_place_part_is_that_part() -> None:
    """A backup of a place's folder or file is the place (`.docker.bak/config.json`)."""
    assert cred.place_reason("h/.docker.bak/config.json") == _suffix_reason("Docker registry credentials")
    assert cred.place_reason("h/.docker/config.json~") == _suffix_reason("Docker registry credentials")
    assert cred.place_reason("h/.Config/GCloud (1)/x") == _suffix_reason("Google Cloud credentials")


# -- content ---------------------------------------------------------------------------------

def _content(what: str) -> str:
    """The full `what` of the one CONTENT_RULES row whose `what` starts with these words."""
    rows = [w for _, _, w in cred.CONTENT_RULES if w == what] or \
        [w for _, _, w in cred.CONTENT_RULES if w.startswith(what)]
    assert len(rows) == 1, (what, rows)
    return rows[0]


def _reason(what: str, how: str = "") -> str:
    return f"withheld: content is a credential ({what}{how})"


SECRET = "Tr41n-Th3-M0d3l"
PEM_BODY = ("MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2Oi7Fj1hS3+DAF3mDpG9TqUQdGJm\n"
            "Zk9x0RmYd0m1qHCY1QZlnzFnA1z1H7kgbM2iDq1vXfFhqCkPcFBq5xlF0rXx+n3P\n")
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----\n"
SA_KEY = ('{"type": "service_account", "project_id": "p", "private_key_id": "k",\n'
          ' "private_key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"}\n')

# (what, a text of the kind, its twin without the secret). Found anywhere in a text of prose.
ANYWHERE: list[tuple[str, str, str]] = [
    ("PEM private key", PEM, PEM.replace("RSA PRIVATE KEY", "PUBLIC KEY")),
    ("PEM private key in an escaped string",
     'KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjEAAAAA\\n-----END OPENSSH PRIVATE KEY-----"\n',
     'KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\\n"\n'),
    ("PuTTY private key", "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: k\nPublic-Lines: 2\n"
                          "AAAAC3NzaC1lZDI1NTE5AAAAIG\nAAAAC3NzaC1lZDI1NTE5AAAAIH\nPrivate-Lines: 1\nAAAAIQ\n",
     "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: k\nPublic-Lines: 2\n"),
    ("JSON key file with a private_key", SA_KEY, SA_KEY.replace("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "")),
    ("Google user credentials", '{"client_id": "c", "refresh_token": "r", "type": "authorized_user"}\n',
     '{"client_id": "c", "type": "user"}\n'),
    ("OAuth client secret", '{"installed": {"client_id": "1.apps", "client_secret": "GOCSPX-AbCdEfGh1234"}}\n',
     '{"installed": {"client_id": "1.apps", "client_secret": ""}}\n'),
    ("Kubernetes config with a token or client key",
     "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: abcdef0123456789xyz\n",
     "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: \n"),
    ("AWS secret access key", "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
                              "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
     "[default]\naws_secret_access_key = <your secret>\n"),
    ("IBM Cloud API key export", '{"name": "k", "createdAt": "2024-03-12T10:14+0000",\n'
                                 ' "apikey": "TestVectorNotARealIbmCloudApiKey0123456789ab"}\n',
     '{"name": "k", "createdAt": "2024-03-12T10:14+0000",\n "apikey": "<key>"}\n'),
    ("AWS root access-key export", "AWSAccessKeyId=AKIAI44QH8DHBF3KP2XY\nAWSSecretKey=je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY\n",
     "AWSAccessKeyId=\nAWSSecretKey=\n"),
    ("Azure service principal: appId, tenant",
     '{"appId": "00000000-0000-4000-8000-000000000000", "displayName": "x",\n'
     ' "password": "Zq48Q~notARealSecretJustATestVector0123", "tenant": "11111111-1111-4111-8111-111111111111"}\n',
     '{"appId": "00000000-0000-4000-8000-000000000000", "displayName": "x",\n'
     ' "password": "$AZURE_PASSWORD", "tenant": "11111111-1111-4111-8111-111111111111"}\n'),
    ("Azure service principal: tenantId",
     '{"clientId": "c", "clientSecret": "Zq48Q~notARealSecretJustATestVector0123",\n'
     ' "tenantId": "11111111-1111-4111-8111-111111111111"}\n',
     '{"clientId": "c", "clientSecret": "${SECRET}",\n "tenantId": "11111111-1111-4111-8111-111111111111"}\n'),
    ("Azure publish profile", f'<publishData><publishProfile profileName="p" userName="$p" userPWD="{SECRET}x" /></publishData>\n',
     '<publishData><publishProfile profileName="p" userName="$p" userPWD="" /></publishData>\n'),
    ("Maven settings with a server password",
     f"<settings><servers><server><id>r</id><password>{SECRET}</password></server></servers></settings>\n",
     "<settings><servers><server><id>r</id><password>${env.PW}</password></server></servers></settings>\n"),
    ("NuGet.Config with a ClearTextPassword",
     f'<configuration><c><add key="ClearTextPassword" value="{SECRET}" /></c></configuration>\n',
     '<configuration><c><add key="ClearTextPassword" value="%PW%" /></c></configuration>\n'),
    ("Composer auth.json with an http-basic password",
     f'{{"http-basic": {{"repo.example": {{"username": "u", "password": "{SECRET}"}}}}}}\n',
     '{"http-basic": {"repo.example": {"username": "u", "password": "%PW%"}}}\n'),
    ("netrc password", f"machine api.example.org\n  login me\n  password {SECRET}\n",
     "machine api.example.org\n  login me\n"),
    ("npm registry token", "//registry.npmjs.org/:_authToken=npm0123456789abcdef\n",
     "//registry.npmjs.org/:_authToken=${NPM_TOKEN}\n"),
    ("package registry password", f"[pypi]\nusername = __token__\npassword = {SECRET}\n",
     "[pypi]\nusername = __token__\npassword = $PYPI\n"),
    ("Docker registry login", '{"auths": {"r.example": {"auth": "dXNlcjpwYXNzd29yZA=="}}}\n',
     '{"auths": {"r.example": {}}}\n'),
    ("WireGuard private key", "[Interface]\nPrivateKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\n",
     "[Interface]\nPublicKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\n"),
    ("Kaggle API token", '{"username": "me", "key": "0123456789abcdef0123456789abcdef"}\n',
     '{"username": "me", "key": ""}\n'),
    ("Modal token", "token_id = 'ak-x'\ntoken_secret = 'as-AbCdEfGh0123456789xyz'\n",
     "token_id = 'ak-x'\ntoken_secret = 'as-'\n"),
    ("W&B API key", "wandb.login(key='0123456789abcdef0123456789abcdef01234567')\n",
     "wandb.login(key=os.environ['WANDB_API_KEY'])\n"),
    ("git credentials (a URL with a password)", "https://me:gh0stPassw0rd@github.com\n",
     "https://github.com\n"),
    ("package index URL with a password", "index-url = https://me:gh0stPassw0rd@pypi.corp.example.net/simple\n",
     "index-url = https://me:${PIP_PASSWORD}@pypi.corp.example.net/simple\n"),
]
# Rows of CONTENT_RULES found by a look anchored at the file's start (a header first in the
# file, every line of a shape): tested after comments (the only thing that may come before).
AT_START: list[tuple[str, str, str]] = [
    ("AWS console access-key export", "Access key ID,Secret access key\nAKIAIOSFODNN7EXAMPLE,"
                                      "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
     "Access key ID,Secret access key\n"),
    ("Alibaba Cloud AccessKey export", "AccessKey ID,AccessKey Secret\nLTAI5tTestVectorNotReal01,TestVectorNotARealSecret000001\n",
     "AccessKey ID,AccessKey Secret\n"),
]
# The rules outside CONTENT_RULES, each with its own reason
OTHER: list[tuple[str, str, str]] = [
    ("PostgreSQL password file (pgpass lines)", f"db.example.com:5432:app:me:{SECRET}\n*:*:*:me:{SECRET}\n",
     "db.example.com:5432:app:me\n"),
    ("s3fs mount credentials: an ACCESS_KEY_ID:SECRET_ACCESS_KEY line; keep the key in the keychain, "
     "gpu secrets set AWS_SECRET_ACCESS_KEY",
     "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n", "AKIAIOSFODNN7EXAMPLE:\n"),
    ("KEY=value settings: DB_PASSWORD on line 2 holds a password or secret key written out; keep it in "
     "the keychain, gpu secrets set DB_PASSWORD, and read it from the environment",
     f"DB_HOST=db\nDB_PASSWORD={SECRET}\n", "DB_HOST=db\nDB_PASSWORD=${DB_PASSWORD}\n"),
]
PROSE = st.lists(st.sampled_from(["the model trains on the data", "", "see docs for more", "epochs 3",
                                  "loss goes down", "  indented line", "a, b, c"]), max_size=30)
COMMENTS = st.lists(st.sampled_from(["# a comment", "", "#", "# the model trains on the data"]), max_size=30)


def _lines(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def test_every_content_rule_has_an_example() -> None:
    whats = [w for w, _, _ in ANYWHERE + AT_START]
    for _, _, what in cred.CONTENT_RULES:
        assert any(what.startswith(w) for w in whats), what


@pytest.mark.parametrize("row", ANYWHERE, ids=[r[0][:40] for r in ANYWHERE])
@settings(max_examples=examples(50), deadline=None)
@given(before=PROSE, after=PROSE, crlf=st.booleans())
def test_a_content_kind_is_found_at_any_offset(row: tuple[str, str, str], before: list[str],
                                               after: list[str], crlf: bool) -> None:
    """Every kind after any prose and before any, with Unix or Windows line ends; its twin
    without the secret in the same place ships."""
    what, text, twin = row
    full = what if "URL with a password" in what else _content(what)

    def at(body: str) -> bytes:
        out = _lines(before) + body + _lines(after)
        return (out.replace("\n", "\r\n") if crlf else out).encode()

    assert cred.content_reason(at(text)) == _reason(full)
    assert cred.content_reason(at(text), size=cred.CONTENT_MAX_FILE) == _reason(full)
    assert cred.content_reason(at(twin)) is None


@pytest.mark.parametrize("row", OTHER, ids=[r[0][:30] for r in OTHER])
@settings(max_examples=examples(50), deadline=None)
@given(before=COMMENTS, after=COMMENTS)
def test_a_content_kind_of_a_whole_file_is_found_after_comments(row: tuple[str, str, str],
                                                                before: list[str], after: list[str]) -> None:
    """pgpass lines, an s3fs line, KEY=value settings: whole-file shapes, with comments and
    blank lines anywhere."""
    what, text, twin = row
    if what.startswith("KEY=value"):  # the line the reason names moves with what is before it
        what = what.replace("line 2", f"line {len(before) + 2}")
    assert cred.content_reason((_lines(before) + text + _lines(after)).encode()) == _reason(what)
    assert cred.content_reason((_lines(before) + twin + _lines(after)).encode()) is None


@pytest.mark.parametrize("what, text, twin", AT_START, ids=[r[0] for r in AT_START])
def test_a_console_export_is_found_by_its_header_first_in_the_file(what: str, text: str, twin: str) -> None:
    """The header first in the file (after a BOM), a key row under it; the header alone ships."""
    for head in (text, "\ufeff" + text, text.replace("\n", "\r\n"), text + "more,rows\n"):
        assert cred.content_reason(head.encode()) == _reason(_content(what)), head
    assert cred.content_reason(twin.encode()) is None


@pytest.mark.parametrize("what, text, twin", AT_START + OTHER[:2], ids=[r[0][:30] for r in AT_START + OTHER[:2]])
def test_a_whole_file_kind_after_prose_is_not_that_kind(what: str, text: str, twin: str) -> None:
    """A README that quotes the kind has its prose first: not the file itself."""
    assert cred.content_reason(("How to write one:\n" + text).encode()) is None


def test_a_secret_at_the_end_of_the_checked_head_is_found() -> None:
    """The whole head is read: a key at its very end (64 KiB of prose before) is found."""
    key = PEM.encode()
    filler = b"the model trains on the data\n"
    head = filler * ((cred.CONTENT_HEAD - len(key)) // len(filler)) + key
    assert len(head) <= cred.CONTENT_HEAD
    assert cred.content_reason(head, size=cred.CONTENT_MAX_FILE) == _reason("PEM private key")


@pytest.mark.parametrize("row", ANYWHERE + AT_START + OTHER, ids=[r[0][:40] for r in ANYWHERE + AT_START + OTHER])
@settings(max_examples=examples(30), deadline=None)
@given(order=st.sampled_from(["le", "be", "bom-le", "bom-be"]), before=PROSE, last_line_end=st.booleans())
def test_a_content_kind_in_utf16_is_found(row: tuple[str, str, str], order: str, before: list[str],
                                          last_line_end: bool) -> None:
    """Windows tools write UTF-16: either byte order, with a BOM or without; the text's last
    character is read too (a file without a final line end)."""
    what, text, twin = row
    full = what if row in OTHER or "URL with a password" in what else _content(what)
    body = text if row in AT_START + OTHER else _lines(before) + text
    if not last_line_end:
        body = body.rstrip("\n")
    codec = {"le": "utf-16-le", "be": "utf-16-be", "bom-le": "utf-16", "bom-be": "utf-16"}[order]
    raw = body.encode(codec)
    if order == "bom-be":
        raw = b"\xfe\xff" + body.encode("utf-16-be")
    assert cred.content_reason(raw) == _reason(full, ", in UTF-16 text")
    assert cred.content_reason(twin.encode(codec)) is None


@pytest.mark.parametrize("text, what", [(PEM, "PEM private key"), (SA_KEY, "JSON key file with a private_key")])
@pytest.mark.parametrize("levels", [1, 2])
def test_a_key_in_a_json_string_is_found(text: str, what: str, levels: int) -> None:
    """A key printed in a notebook's output (escaped once, or twice inside another JSON)."""
    escaped = text
    for _ in range(levels):
        escaped = json.dumps(escaped)[1:-1]
    doc = f'{{"outputs": [{{"text": "{escaped}"}}]}}\n'.encode()
    if what == "PEM private key":
        # an escaped PEM block is its own rule (a key in a string literal of code): found as it
        # is, or once one level of escapes is taken off
        how = "" if levels == 1 else ", in JSON-escaped text"
        assert cred.content_reason(doc) == _reason("PEM private key in an escaped string", how)
    else:
        assert cred.content_reason(doc) == _reason(what, ", in JSON-escaped text")


def test_an_escape_far_from_a_rule_s_word_is_not_looked_through() -> None:
    """Code that uses `"private_key"` and prints `\\n` elsewhere is not an escaped key file."""
    code = b'key = cfg["private_key"]\n' + b"x = 1\n" * 40 + b'print("done\\n")\n'
    assert cred.content_reason(code) is None


@pytest.mark.parametrize("text, what", [(PEM, "PEM private key"), (SA_KEY, "JSON key file with a private_key")])
@pytest.mark.parametrize("wrap", ["plain", "mime", "urlsafe", "after-name"])
@pytest.mark.parametrize("shift", [0, 1, 2])
def test_a_base64_wrapped_key_is_found(text: str, what: str, wrap: str, shift: int) -> None:
    """A key in a CI variable: base64 of it, at any alignment, MIME lines, URL-safe, `NAME=`."""
    blob = base64.b64encode(b"x" * shift + text.encode()).decode()
    if wrap == "mime":
        blob = "\n".join(blob[i:i + 76] for i in range(0, len(blob), 76))
    if wrap == "urlsafe":
        blob = blob.replace("+", "-").replace("/", "_")
    if wrap == "after-name":
        blob = "GCP_KEY=" + blob
    got = cred.content_reason(f"ci:\n  {blob}\n".encode() if wrap != "mime" else (blob + "\n").encode())
    assert got == _reason(what, ", base64-wrapped")


def test_base64_of_ordinary_text_ships() -> None:
    blob = base64.b64encode(b"the model trains on the data " * 10).decode()
    assert cred.content_reason(f"DATA={blob}\n".encode()) is None


def _der(body: bytes) -> bytes:
    return b"\x30" + (bytes([len(body)]) if len(body) < 0x80 else b"\x82" + len(body).to_bytes(2, "big")) + body


@pytest.mark.parametrize("der, what", [
    (_der(b"\x02\x01\x00\x02\x81\x81" + b"\x01" * 129 + b"\x02\x01\x03"), "private key (DER)"),
    (_der(b"\x02\x01\x01\x04\x20" + b"\x01" * 32), "private key (DER)"),
    (_der(b"\x02\x01\x00\x30\x0d" + b"\x06\x09\x2a\x86\x48\x86\xf7\x0d\x01\x01\x01\x05\x00" + b"\x04\x04abcd"),
     "private key (DER)"),
    (_der(b"\x30\x1a\x06\x09\x2a\x86\x48\x86\xf7\x0d\x01\x05\x0d" + b"\x30\x0d" + b"\x00" * 13 + b"\x04\x04abcd"),
     "encrypted PKCS#8 private key (DER)"),
    (_der(b"\x02\x01\x03\x30\x04\x06\x02\x2a\x03"), "PKCS#12 key store (DER)"),
    (b"\xfe\xed\xfe\xed\x00\x00\x00\x02", "Java key store"),
    (b"\xce\xce\xce\xce\x00\x00\x00\x02", "Java key store (JCEKS)"),
    (b"\x03\xd9\xa2\x9a\x67\xfb\x4b\xb5" + b"\0" * 8, "KeePass database"),
    (b"\x03\xd9\xa2\x9a\x65\xfb\x4b\xb5" + b"\0" * 8, "KeePass database"),
])
def test_binary_keys_are_found_and_their_near_twins_ship(der: bytes, what: str) -> None:
    """A DER private key judged whole (its length says where it ends); a key store by its magic."""
    assert cred.content_reason(der) == _reason(what)
    assert cred.content_reason(der, size=len(der)) == _reason(what)
    if der[0] == 0x30:
        assert cred.content_reason(der + b"\r\n") == _reason(what)  # a line end after it
        assert cred.content_reason(der, size=len(der) + 1) is None  # a head of something bigger
        assert cred.content_reason(der + b"\x00") is None  # its length says it ends before
        assert cred.content_reason(der[:1] + bytes([der[1] + 1]) + der[2:]) is None
    else:
        assert cred.content_reason(b"\0" + der) is None


@pytest.mark.parametrize("der", [
    _der(b"\x30\x03\x02\x01\x05" + b"\x02\x01\x00"),  # a certificate's shape: no version INTEGER first
    _der(b"\x02\x01\x02\x02\x01\x00"),  # version 2: no key's
    _der(b"\x02\x01\x00\x05\x00\x00"),  # version 0, then no INTEGER, SEQUENCE or OCTET STRING
    _der(b"\x02\x01\x03\x02\x01\x00"),  # PKCS#12's version, then no SEQUENCE
    _der(b"\x02\x02\x00\x00\x02\x01"),  # a longer INTEGER first
    b"\x30\x03\x02\x01",  # too short to be anything
])
def test_der_that_is_no_private_key_ships(der: bytes) -> None:
    assert cred.content_reason(der) is None


def test_der_length_reads_short_and_long_forms() -> None:
    assert cred._der_length(b"\x30\x05", 1) == (5, 2)
    assert cred._der_length(b"\x30\x81\x90", 1) == (0x90, 3)
    assert cred._der_length(b"\x30\x82\x01\x00", 1) == (256, 4)
    assert cred._der_length(b"\x30\x84\x00\x00\x01\x00", 1) == (256, 6)
    assert cred._der_length(b"\x30\x85\x00\x00\x00\x01\x00", 1) is None  # more than 4 bytes
    assert cred._der_length(b"\x30\x80", 1) is None  # indefinite
    assert cred._der_length(b"\x30\x82\x01", 1) is None  # cut short
    assert cred._der_length(b"\x30", 1) is None


# -- settings files and env templates -------------------------------------------------------

@settings(max_examples=examples(100), deadline=None)
@given(name=st.sampled_from(["DB_PASSWORD", "SECRET_KEY", "api_key", "storePassword", "db.pass", "AUTH_TOKEN"]),
       before=st.lists(st.sampled_from(["HOST=db", "# settings", "", "[db]", "; ini comment", "PORT=5432"]),
                       max_size=20),
       export=st.booleans())
def test_a_settings_file_that_writes_a_secret_out_is_withheld_at_any_line(name: str, before: list[str],
                                                                         export: bool) -> None:
    """Any line of a KEY=value file; the reason names the setting and its line, never the value."""
    line = len(before) + 1
    text = _lines(before) + ("export " if export else "") + f"{name}={SECRET}\n"
    label = name
    keep = name if name.replace("_", "").isalnum() else "NAME"
    assert cred.content_reason(text.encode()) == _reason(
        f"KEY=value settings: {label} on line {line} holds a password or secret key written out; "
        f"keep it in the keychain, gpu secrets set {keep}, and read it from the environment")
    for twin in ("${" + name + "}", "changeme", "<your password>", "", "123456", "os.environ['X']"):
        assert cred.content_reason((_lines(before) + f"{name}={twin}\n").encode()) is None, twin
    assert cred.content_reason((text + "this line is prose\n").encode()) is None  # not a settings file


def test_php_settings_name_the_setting_and_line() -> None:
    php = f"<?php\ndefine( 'DB_NAME', 'wp' );\ndefine( 'DB_PASSWORD', '{SECRET}' );\n".encode()
    assert cred.content_reason(php) == _reason(
        "PHP settings: DB_PASSWORD on line 3 holds a password or secret key written out; keep it in the "
        "keychain, gpu secrets set DB_PASSWORD, and read it with getenv()")
    assert cred.content_reason(php.replace(SECRET.encode(), b"password_here")) is None
    arr = f"<?php\n$cfg['Servers'][$i]['password'] = '{SECRET}';\n".encode()
    assert cred.content_reason(arr) == _reason(
        "PHP settings: password on line 2 holds a password or secret key written out; keep it in the "
        "keychain, gpu secrets set password, and read it with getenv()")
    arrow = f"<?php\nreturn [\n  'db_password' => '{SECRET}',\n];\n".encode()
    assert cred.content_reason(arrow) == _reason(
        "PHP settings: db_password on line 3 holds a password or secret key written out; keep it in the "
        "keychain, gpu secrets set db_password, and read it with getenv()")
    code = b"<?php\nclass Login {\n  function f() { return ['password' => 'Tr41n-Th3-M0d3l']; }\n}\n"
    assert cred.content_reason(code) is None


@pytest.mark.parametrize("text", [b"", b"# comment\n", b"API_KEY=\n", b"export API_KEY=\n", b"API_KEY: \n",
                                  b'API_KEY=""\n', b"API_KEY=''\n", b"API_KEY= # fill in\n", b"\n\n  \n"])
def test_an_env_template_without_values_ships(text: bytes) -> None:
    assert cred.env_template_reason(text, whole=True) is None
    assert cred.content_verdict(".env.example", text, len(text)) is None


@pytest.mark.parametrize("text, label, line", [
    (b"API_KEY=abc\n", "API_KEY", 1),
    (b"# c\nA=\nPASSWORD=#S3cr3t\n", "PASSWORD", 3),
    (b"A=\n\nexport TOKEN=x\n", "TOKEN", 3),
    (b"DB: postgres\n", "DB", 1),
    (b"just a value\n", "a value", 1),
    (b"ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8=1\n", "a value", 1),
])
def test_an_env_template_with_a_value_names_the_setting_and_line(text: bytes, label: str, line: int) -> None:
    reason = (f"withheld: env template sets {label} on line {line} "
              "(a template ships only with empty values)")
    assert cred.env_template_reason(text, whole=True) == reason
    assert cred.content_verdict(".env.example", text, len(text)) == reason
    assert cred.content_verdict("example.env", text, cred.CONTENT_HEAD) == reason


def test_an_env_template_too_big_to_read_whole_is_withheld() -> None:
    head = b"API_KEY=\n" * 10
    assert cred.env_template_reason(head, whole=False) == "withheld: env template too big to check for values"
    assert cred.content_verdict(".env.example", head, cred.CONTENT_HEAD + 1) == \
        "withheld: env template too big to check for values"
    assert cred.content_verdict(".env.example", head, cred.CONTENT_MAX_FILE + 1) == \
        "withheld: env template too big to check for values"
    assert cred.content_verdict("notes.txt", head, cred.CONTENT_HEAD + 1) is None


# -- URLs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, what", [
    ("https://me:gh0stPassw0rd@pypi.corp.example.net/simple", "a URL with a password"),
    ("--index-url http://me:gh0stPassw0rd@pypi.corp.example.net/simple", "a URL with a password"),
    ("pkg @ git+https://me:gh0stPassw0rd@git.example.org/pkg.git", "a URL with a password"),
    ("https://ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8@github.com/o/r.git", "a URL holding a GitHub token"),
    # `localhost` only as the whole host is local
    ("https://me:gh0stPassw0rd@localhost.corp.example.net/simple", "a URL with a password"),
    ("https://me:gh0stPassw0rd@localhost-build.corp.example.net/simple", "a URL with a password"),
])
def test_a_url_with_a_credential(text: str, what: str) -> None:
    assert cred.url_credential(text) == what


@pytest.mark.parametrize("text", [
    "https://pypi.org/simple", "https://me:${PIP_TOKEN}@pypi.corp.example.net/simple",
    "https://me:<token>@pypi.corp.example.net/simple", "https://me:password@pypi.corp.example.net/simple",
    "https://me:***@pypi.corp.example.net/simple", "http://postgres:gh0stPassw0rd@localhost/db",
    "http://me:gh0stPassw0rd@localhost:8080/simple", "https://me:gh0stPassw0rd@localhost",
    "https://me@pypi.corp.example.net/simple", "http://u:gh0stPassw0rd@127.0.0.1:8080/x",
])
def test_a_url_without_a_credential(text: str) -> None:
    assert cred.url_credential(text) is None


def test_a_url_in_a_setting_versus_in_prose() -> None:
    """A URL with a password alone on its line is a git credential store's line; set as an
    index URL it is a package index's; in a sentence (a README) it is still a password."""
    url = b"https://me:gh0stPassw0rd@git.example.org"
    assert cred.content_reason(url + b"/\n") == _reason("git credentials (a URL with a password)")
    for setting in (b"index-url = ", b"extra-index-url=", b"-i ", b"--find-links ", b'"registry": "', b"url: "):
        assert cred.content_reason(setting + url + b"/simple\n") == _reason("package index URL with a password")
    assert cred.content_reason(b"clone it from " + url + b"/r.git and run it\n") == _reason("a URL with a password")


# -- the verdict cache and what is read ---------------------------------------------------------

def test_needs_content_check_reads_small_files_and_every_template() -> None:
    assert cred.needs_content_check("a.txt", 0) is True
    assert cred.needs_content_check("a.txt", cred.CONTENT_MAX_FILE) is True
    assert cred.needs_content_check("a.txt", cred.CONTENT_MAX_FILE + 1) is False
    assert cred.needs_content_check(".env.example", cred.CONTENT_MAX_FILE + 1) is True


def test_a_big_file_is_judged_by_name_only() -> None:
    """Above CONTENT_MAX_FILE the head is not judged (the name rules still apply)."""
    key = PEM.encode()
    assert cred.content_verdict("a.txt", key, cred.CONTENT_MAX_FILE) == _reason("PEM private key")
    assert cred.content_verdict("a.txt", key, cred.CONTENT_MAX_FILE + 1) is None


def test_the_content_key_is_the_bytes_and_whether_they_are_all() -> None:
    a, b = b"some bytes\n", b"some bytez\n"
    assert cred.content_key(a, len(a)) == cred.content_key(a, len(a))
    assert cred.content_key(a, len(a)) != cred.content_key(b, len(b))
    assert cred.content_key(a, len(a)) != cred.content_key(a, len(a) + 1)  # a head, not the file
    assert cred.content_key(a, len(a) + 1) == cred.content_key(a, len(a) + 100)
    assert cred.content_key(a, len(a)).endswith("w" + cred.CONTENT_RULES_ID)
    assert cred.content_key(a, len(a) + 1).endswith("h" + cred.CONTENT_RULES_ID)


def test_the_verdict_cache_is_keyed_by_content_and_wholeness(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh verdict is learned once (clean as ''), then remembered by its key: the same bytes
    under another name reuse it; a DER key's bytes as the head of a bigger file are judged again
    (wholeness is part of the key)."""
    monkeypatch.setattr(cred, "_MEMO", {})
    learned: list[tuple[str, str]] = []
    der = _der(b"\x02\x01\x01\x04\x20" + b"\x01" * 32)
    note = lambda k, r: learned.append((k, r))  # noqa: E731
    assert cred.content_verdict("k.bin", der, len(der), learned=note) == _reason("private key (DER)")
    assert learned == [(cred.content_key(der, len(der)), _reason("private key (DER)"))]
    assert cred.content_verdict("other.bin", der, len(der), learned=note) == _reason("private key (DER)")
    assert len(learned) == 1  # remembered, not scanned again
    assert cred.content_verdict("k.bin", der, len(der) + 10, learned=note) is None
    assert learned[1] == (cred.content_key(der, len(der) + 10), "")
    clean = b"print('hi')\n"
    assert cred.content_verdict("a.py", clean, len(clean), learned=note) is None
    assert learned[2] == (cred.content_key(clean, len(clean)), "")
    assert cred._MEMO[cred.content_key(clean, len(clean))] == ""


def test_a_known_verdict_is_taken_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache file's verdicts (`known`) are used by key without a scan, and remembered."""
    monkeypatch.setattr(cred, "_MEMO", {})
    learned: list[tuple[str, str]] = []
    text = b"harmless\n"
    key = cred.content_key(text, len(text))
    assert cred.content_verdict("a.txt", text, len(text), known={key: "withheld: told"},
                                learned=lambda k, r: learned.append((k, r))) == "withheld: told"
    assert learned == [] and cred._MEMO[key] == "withheld: told"
    monkeypatch.setattr(cred, "_MEMO", {})
    key = cred.content_key(PEM.encode(), len(PEM))
    assert cred.content_verdict("a.txt", PEM.encode(), len(PEM), known={key: ""}) is None
    # a key handed in is the key used
    assert cred.content_verdict("b.txt", PEM.encode(), len(PEM), key="given") == _reason("PEM private key")
    assert cred._MEMO["given"] == _reason("PEM private key")


def test_the_in_process_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cred, "_MEMO", {})
    monkeypatch.setattr(cred, "MEMO_CAP", 3)
    for i in range(3):
        cred.remember_verdict(f"k{i}", "")
    assert len(cred._MEMO) == 3
    cred.remember_verdict("k3", "withheld: x")
    assert cred._MEMO == {"k3": "withheld: x"}
    cred.remember_verdict("k4", "")
    assert cred._MEMO == {"k3": "withheld: x", "k4": ""}


def test_an_env_template_with_a_value_is_withheld_whatever_the_cache_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The template rule comes before the cache: a clean verdict of the bytes does not let a
    template that sets a value through."""
    monkeypatch.setattr(cred, "_MEMO", {})
    text = b"API_KEY=abc\n"
    key = cred.content_key(text, len(text))
    assert cred.content_verdict(".env.sample", text, len(text), known={key: ""}) == (
        "withheld: env template sets API_KEY on line 1 (a template ships only with empty values)")
    assert cred.content_verdict("notes.txt", text, len(text), known={key: ""}) is None


# -- the edges of the URL, base64 and UTF-16 looks -------------------------------------------

GIT_URL = b"https://me:gh0stPassw0rd@git.example.org"


@pytest.mark.parametrize("text, expected", [
    # alone on its line, whatever the lines around it hold
    (b"first line\nsecond line\n" + GIT_URL + b"\nlast line\n", "git credentials (a URL with a password)"),
    (b"\n" + GIT_URL + b"/\n", "git credentials (a URL with a password)"),
    (b"prose\n  " + GIT_URL + b" \t\r\n", "git credentials (a URL with a password)"),
    (b"prose\n" + GIT_URL, "git credentials (a URL with a password)"),  # no final line end
    (GIT_URL + b"//\n", "git credentials (a URL with a password)"),
    # a path after it is no store line (the store keeps the bare URL; only blanks and `/` are
    # trimmed), and words around it are prose: a URL with a password all the same
    (GIT_URL + b"/X\n", "a URL with a password"),
    (b"prose\n" + GIT_URL + b"/X/\r\n", "a URL with a password"),
    (GIT_URL + b"/simple\n", "a URL with a password"),
    (b"prose\n" + GIT_URL + b" x", "a URL with a password"),
    (b"intro\n" + GIT_URL + b" is the remote\n", "a URL with a password"),
    (b"see " + GIT_URL + b"\n", "a URL with a password"),
    (b"first\nsee " + GIT_URL + b"\n", "a URL with a password"),
    (b"## Setup\n\n    git clone " + GIT_URL + b"/org/repo.git\n", "a URL with a password"),
    # a store line or a setting is said as what it is, wherever the prose one lies
    (b"see " + GIT_URL + b"/x\n" + GIT_URL + b"\n", "git credentials (a URL with a password)"),
    # no password written out: a placeholder, a variable, an example or loopback host
    (b"see https://user:password@git.example.org/x\n", None),
    (b"see `index-url = https://me:pw@pypi.corp/simple`\n", None),  # docs' own abbreviation
    (b"see https://me:${GIT_TOKEN}@git.example.org/x\n", None),
    (b"see https://me:gh0stPassw0rd@example.com/x\n", None),
    (b"see https://me:gh0stPassw0rd@localhost:8080/x\n", None),
    # set as an index URL after other lines; the setting's word 60 characters back at most
    (b"[global]\ntimeout = 3\nindex-url = " + GIT_URL + b"/simple\n", "package index URL with a password"),
    (b"x--index-url" + b" " * 49 + GIT_URL + b"/simple\n", "package index URL with a password"),
    (b"x--index-url" + b" " * 50 + GIT_URL + b"/simple\n", "a URL with a password"),
])
def test_a_url_with_a_password_by_its_line(text: bytes, expected: str | None) -> None:
    """A git-credential store's line is the URL alone (blanks and a final `/` around it); an
    index setting is its word within the 60 characters before the URL; anywhere else it is a
    URL with a password, withheld as well (a README's clone line gives the job the password)."""
    assert cred.content_reason(text) == (_reason(expected) if expected else None)


@pytest.mark.parametrize("text, what", [(PEM, "PEM private key"), (SA_KEY, "JSON key file with a private_key")])
@pytest.mark.parametrize("context", ["words-after", "crlf-mime", "quoted", "two-blobs", "padding-before",
                                     "name-glued", "last-line", "one-space-indent"])
def test_a_base64_wrapped_key_in_context(text: str, what: str, context: str) -> None:
    """The blob is cut out of what is around it: words after it on its line, CRLF MIME lines,
    quotes, another blob or `=` padding before it, a name glued to it, no final line end."""
    blob = base64.b64encode(text.encode()).decode()
    other = base64.b64encode(b"the model trains on the data, and only the data " * 2).decode()
    doc = {
        "words-after": f"secret: {blob} is the key, do not share it\n",
        "crlf-mime": "\r\n".join(blob[i:i + 76] for i in range(0, len(blob), 76)) + "\r\n",
        "quoted": f'{{"key": "{blob}", "other": "value here"}}\n',
        "two-blobs": f"A: {other}\nB: {blob}\n",
        "padding-before": f"A=x==\nB={blob} trailing words\n",
        "name-glued": f"export KEY_B64={blob}\n",
        "last-line": f"first line\nkey {blob}",
        "one-space-indent": f" {blob}\n",
    }[context]
    assert cred.content_reason(doc.encode()) == _reason(what, ", base64-wrapped")


SA_ONE_LINE = json.dumps({"type": "service_account", "project_id": "p",
                          "private_key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"})
PYPIRC = f"[pypi]\nusername = __token__\npassword = {SECRET}\n"
PUTTY = next(text for what, text, _ in ANYWHERE if what == "PuTTY private key")
NOTEBOOK_HEAD = ('{\n "cells": [\n  {\n   "cell_type": "code",\n   "metadata": {},\n'
                 '   "outputs": [\n    {\n     "name": "stdout",\n     "output_type": "stream",\n     "text": "')


@pytest.mark.parametrize("text, levels, what", [
    (SA_ONE_LINE, 1, "JSON key file with a private_key"),
    (SA_ONE_LINE, 2, "JSON key file with a private_key"),
    (SA_KEY, 2, "JSON key file with a private_key"),
    (PUTTY, 1, "PuTTY private key"),
    (PUTTY, 2, "PuTTY private key"),
    (PEM, 2, "PEM private key in an escaped string"),
])
def test_an_escaped_credential_deep_in_a_notebook_is_found(text: str, levels: int, what: str) -> None:
    """A notebook's output cell, its words a long way into the file: escaped once or twice,
    with only quotes escaped (a key file on one line) or only line ends (a key file's lines)."""
    escaped = text
    for _ in range(levels):
        escaped = json.dumps(escaped)[1:-1]
    doc = (NOTEBOOK_HEAD + escaped + '"\n    }\n   ]\n  }\n ]\n}\n').encode()
    assert cred.content_reason(doc) == _reason(what, ", in JSON-escaped text")


@pytest.mark.parametrize("order", ["plain-then-escaped", "escaped-then-plain", "plain-escaped-plain"])
def test_an_escaped_key_is_found_among_plain_mentions_of_its_word(order: str) -> None:
    """Code that mentions `private_key` without escapes, before or after a key printed escaped:
    each mention is looked at, not only the first."""
    plain = 'key = cfg["private_key"]  # read from the keychain\n' + "x = 1\n" * 20
    escaped = 'print("' + json.dumps(SA_ONE_LINE)[1:-1] + '")\n' + "y = 2\n" * 20
    doc = {"plain-then-escaped": plain + escaped, "escaped-then-plain": escaped + plain,
           "plain-escaped-plain": plain + escaped + plain}[order]
    assert cred.content_reason(doc.encode()) == _reason("JSON key file with a private_key", ", in JSON-escaped text")


@pytest.mark.parametrize("name", [".ｅｎｖ.example", ".e\u200bnv.sample", "ＥＮＶ.template"])
def test_a_template_whose_name_reads_as_env_only_once_folded(name: str) -> None:
    """`is_env_template` looks at the name as it reads, so such a template is judged as one."""
    assert cred.is_env_template(name) is True
    assert cred.content_verdict(name, b"API_KEY=abc\n", 12) == (
        "withheld: env template sets API_KEY on line 1 (a template ships only with empty values)")


def test_the_content_key_is_the_blake2b_of_the_bytes() -> None:
    """The key a verdict is kept under across runs (the gate's hash cache): changing its form
    drops every cached verdict, so it is pinned."""
    import hashlib
    head = b"some bytes\n"
    assert cred.content_key(head, len(head)) == (
        hashlib.blake2b(head, digest_size=20).hexdigest() + "w" + cred.CONTENT_RULES_ID)


@pytest.mark.parametrize("der, what", [
    # a whole DER key whose last byte is a line end's (it is the key's byte, not a line end)
    (_der(b"\x02\x01\x01\x04\x20" + b"\x01" * 31 + b"\x0a"), "private key (DER)"),
    (_der(b"\x02\x01\x00\x02\x81\x81" + b"\x01" * 129 + b"\x02\x01\x0d"), "private key (DER)"),
])
def test_a_der_key_ending_in_a_line_end_byte_is_a_key(der: bytes, what: str) -> None:
    assert cred.content_reason(der) == _reason(what)


@pytest.mark.parametrize("der", [
    # a certificate whose TBS length bytes (0x01 0x30) read like a version and a SEQUENCE
    _der(b"\x30\x82\x01\x30" + b"\xa0" * 0x130 + b"\x30\x03\x06\x01\x00"),
    # a length written in more bytes than it needs, leaving a version with nothing after it
    b"\x30\x83\x00\x00\x03\x02\x01\x00",
])
def test_der_shapes_that_only_look_like_a_key_ship(der: bytes) -> None:
    assert cred.content_reason(der) is None


def test_a_config_printed_as_a_notebook_s_list_of_lines_is_found() -> None:
    """nbformat keeps an output's text as a list of lines: each line starts a line again, so a
    rule anchored at a line's start (a .pypirc's `[pypi]`) finds it."""
    lines = ",\n      ".join(json.dumps(line) for line in PYPIRC.splitlines(keepends=True))
    doc = (NOTEBOOK_HEAD[:-1] + "[\n      " + lines + "\n     ]\n    }\n   ]\n  }\n ]\n}\n").encode()
    assert cred.content_reason(doc) == _reason("package registry password", ", in JSON-escaped text")
    assert cred.content_reason(doc.replace(SECRET.encode(), b"$PYPI_TOKEN")) is None


@pytest.mark.parametrize("text, what", [(PEM, "PEM private key"), (SA_KEY, "JSON key file with a private_key"),
                                        (ANYWHERE[-1][1], "package index URL with a password")])
def test_a_text_credential_in_a_file_with_nul_bytes_is_found(text: str, what: str) -> None:
    """A NUL makes the file look binary (UTF-16 and the binary looks are tried), but a text
    credential already found stays found."""
    for doc in (text.encode() + b"\0\0\0\0", b"\0" + text.encode()):
        assert cred.content_reason(doc) == _reason(what)


def test_a_url_read_with_its_undecodable_bytes_is_judged() -> None:
    """A requirements line read with surrogateescape (a byte that is not UTF-8) is judged, not
    a crash: the password in it is still found."""
    line = "https://me:gh0stPassw0rd@pypi.corp.example.net/simple#\udcff"
    assert cred.url_credential(line) == "a URL with a password"
    assert cred.url_credential("https://pypi.org/simple#\udcff") is None


# -- YAML and JSON settings ------------------------------------------------------------------

_YAML_SAID = ("YAML settings: {n} on line {l} holds a password or secret key written out; keep it in the "
              "keychain, gpu secrets set {n}, and read it from the environment")
_JSON_SAID = ("JSON settings: {n} holds a password or secret key written out; keep it in the keychain, "
              "gpu secrets set {n}, and read it from the environment")


@pytest.mark.parametrize("text, expected", [
    (b"password: Hunter2Secret!\n", _YAML_SAID.format(n="password", l=1)),
    (b"# db\ndb:\n  host: db.corp.net\n  password: 'Hunter2Secret!'  # rotate\n", _YAML_SAID.format(n="password", l=4)),
    (b"---\nservices:\n  db:\n    environment:\n      POSTGRES_PASSWORD: Wq8zLm3Np0\n",
     _YAML_SAID.format(n="POSTGRES_PASSWORD", l=5)),
    (b"- name: db\n  secret_key: \"q8Zp3LmN0vXw\"\n", _YAML_SAID.format(n="secret_key", l=2)),
    (b"'api_token': sk9f8a7s6d5f4g3h2j1k\n", _YAML_SAID.format(n="api_token", l=1)),
    (b'{"password": "Hunter2Secret!"}\n', _JSON_SAID.format(n="password")),
    (b'  [{"db": {"user": "me", "secret_key": "q8Zp3LmN0vXw"}}]', _JSON_SAID.format(n="secret_key")),
])
def test_a_yaml_or_json_settings_file_that_writes_a_secret_out_is_withheld(text: bytes, expected: str) -> None:
    """A config.yaml, a compose file, a settings.json: the KEY=value rule's names and values,
    in a file of that shape, at any depth."""
    assert cred.content_reason(text) == f"withheld: content is a credential ({expected})"
    assert b"Hunter2" not in expected.encode() and b"q8Zp3" not in expected.encode()


@pytest.mark.parametrize("text", [
    b"password: ${DB_PASSWORD}\n",  # a reference
    b"spring:\n  datasource:\n    password: ${DB_PASSWORD:fallback}\n",
    b"password: changeme\napi_key: <your key>\ntoken: YOUR_TOKEN_HERE\n",  # placeholders
    b"tokenizer:\n  pad_token: \"<pad>\"\n  eos_token: \"</s>\"\n  bos_token: \"[CLS]\"\n  max_token: 2048\n",
    b"password:\n  min_length: 12\n  require_digit: true\n",  # a section named for passwords
    b"import os\npassword: str = \"Hunter2Secret!\"\n",  # code, not a mapping: other rules judge it
    b"key: |\n  free text\npassword: Hunter2Secret!\n",  # a block of free text: not judged as a mapping
    b'{"password": "<your password>", "token": "${TOKEN}"}',
    b'{"password_min_length": 12, "notes": "password: Hunter2Secret!"}',  # a value, not a key
    b'{"password": "Hunter2Secret!"',  # not JSON, and not a YAML mapping either
])
def test_a_yaml_or_json_file_without_a_secret_written_out_ships(text: bytes) -> None:
    assert cred.content_reason(text) is None


# -- connection strings of any scheme ------------------------------------------------------------

@pytest.mark.parametrize("text", [
    b'DATABASE_URL = "postgres://app:Hunter2Secret@db.corp.net/app"\n',
    b"DATABASE_URL=postgresql+psycopg://app:Hunter2Secret@10.0.0.5:5432/app\n",
    b'engine = create_engine("mysql+pymysql://root:Hunter2Secret@mysql.corp.net/app")\n',
    b'client = MongoClient("mongodb+srv://me:Hunter2Secret@cluster0.abcde.mongodb.net/db")\n',
    b"CACHE = 'redis://:Hunter2Secret@cache.corp.net:6379/0'\n",  # redis: no user, a password
    b"broker_url: amqp://worker:Hunter2Secret@rabbit.corp.net:5672//\n",
    b"see ftp://me:Hunter2Secret@files.corp.net/x in the notes\n",
])
def test_a_connection_string_with_a_password_is_withheld_whatever_its_scheme(text: bytes) -> None:
    """`postgres://`, `mysql+pymysql://`, `mongodb+srv://`, `redis://`, `amqp://`, `ftp://`: a
    password written out in any scheme's URL, wherever it stands, in a file of any kind."""
    assert cred.content_reason(text) == _reason("a database or service URL with a password")
    assert cred.url_credential(text.decode()) == "a URL with a password"


@pytest.mark.parametrize("text", [
    b'url = "postgres://postgres:postgres@db:5432/app"\n',  # a compose file's default
    b'x = "mysql://root:root@mysql/app"\n',
    b'c = "amqp://guest:guest@rabbit:5672//"\n',
    b'u = "postgresql://scott:tiger@localhost/test"\n',  # loopback
    b'u = f"postgres://{user}:{password}@{host}/db"\n',  # references
    b'u = "postgres://%(user)s:%(pw)s@db/x"\n',
    b'u = "postgres://app:${DB_PASSWORD}@db.corp.net/app"\n',
    b'u = "postgres://app:settings.db.password@db.corp.net/app"\n',  # a reference by its dotted name
    b'u = "postgres://app:cfg[db_pw]@db.corp.net/app"\n',
    b"git+ssh://git@github.com/org/repo.git\n",  # a user, no password
    b"s3://bucket/key:abc@x\n",  # no user-info: a path that holds ':' and '@'
])
def test_a_connection_string_without_a_password_written_out_ships(text: bytes) -> None:
    assert cred.content_reason(text) is None
