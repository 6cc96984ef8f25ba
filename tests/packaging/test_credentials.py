"""Credential files never ship, checked as an attacker would: look in the packed tarball.

Names are not enough: hard links under innocent names (to the user's own ~/.ssh/id_rsa, to a
withheld project file), keys under any name (content), a symlinked folder reached by include,
a nested repository's own .gitignore. And the edges of the walk: a home-folder project, a huge
folder outside git, non-UTF-8 file names, a project folder named `proj [/x]`.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from core.errors import UserError
from core.packaging import objects
from core.packaging.bundle import build, make_bundle
from core.packaging.listing import ProjectTooBroad, list_project
from core.packaging.local_data import list_data
from tests.conftest import gpu_json, make_git_project, run_gpu, run_in_terminal, gpu_exe
from tests.packaging.test_bundle import commit_all, marker, members, raw_tar, write

TRAIN = "print('training')\n"


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake home folder (HOME) holding the user's own credentials, each with a marker."""
    h = tmp_path / "userhome"
    for rel in HOME_CREDENTIAL_FILES:
        write(h / rel, marker(f"~/{rel}"))
    monkeypatch.setenv("HOME", str(h))
    return h


# The user's own credential files, at the places their tools keep them.
HOME_CREDENTIAL_FILES = [
    ".ssh/id_rsa",
    ".ssh/id_ed25519",
    ".aws/credentials",
    ".kaggle/kaggle.json",
    ".netrc",
    ".config/gcloud/application_default_credentials.json",
    ".config/gcloud/credentials.db",
    ".azure/msal_token_cache.json",
    ".docker/config.json",
    ".kube/config",
    ".config/gh/hosts.yml",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    ".pgpass",
    ".vault-token",
    ".cache/huggingface/token",
]


def withheld(bundle_or_listing) -> dict[str, str]:
    items = bundle_or_listing.withheld if hasattr(bundle_or_listing, "withheld") else \
        [e for e in bundle_or_listing.summary().get("left_out", []) if e["reason"] != "ignored by git"]
    return {e["path"]: e["reason"] for e in items}


def assert_not_shipped(bundle, rel: str, secret: str, why: str = "withheld") -> None:
    """Not a member, its bytes nowhere in the tarball, and named in left_out with the reason."""
    assert rel not in members(bundle), sorted(members(bundle))
    assert secret.encode() not in raw_tar(bundle)
    reasons = withheld(bundle)
    assert rel in reasons, bundle.summary().get("left_out")
    assert why in reasons[rel], reasons[rel]
    assert secret not in reasons[rel]


# -- every name family, table-driven --------------------------------------------------------

# One or more spellings of every family: case, prefixes and suffixes included.
CREDENTIAL_NAMES = [
    # dotenv, every variant
    ".env", ".ENV", ".envrc", "prod.env", ".env-backup", ".env~", ".env.local", ".env.bak",
    "config/.Env.Production", "docker.env", "..env.swp", "#.env#",
    # secrets files
    "secrets.yaml", "Secrets.JSON", ".secrets", "secrets.toml", "conf/prod-secrets.yml", "secret.txt",
    # SSH and deploy keys
    "id_rsa", "ID_RSA.bak", "keys/id_ed25519_deploy", "backup-id_ecdsa", "deploy_key",
    "Deploy-Key.pub", "github_deploy_key", "ssh_host_ed25519_key",
    # key stores by extension
    "server.PEM", "tls/server.key", "cert.p12", "cert.pfx", "release.jks", "app.keystore",
    "AuthKey_ABC123.p8", "putty.ppk",
    # Terraform
    "terraform.tfstate", "infra/terraform.tfstate.backup", "prod.tfstate", ".terraformrc",
    # Kubernetes
    ".kube/config", "deploy/.KUBE/config", "kubeconfig", "prod.kubeconfig.yaml",
    # databases, package registries, git, netrc
    ".pgpass", ".my.cnf", ".npmrc", ".pypirc", ".netrc", "_netrc", ".git-credentials",
    ".gitcookies",
    # cloud CLIs
    ".aws/credentials", ".AWS/config", "credentials", "credentials.json", "credentials.csv",
    "admin_accessKeys.csv", ".docker/config.json", ".dockercfg",
    "gcloud/application_default_credentials.json", ".config/gcloud/credentials.db",
    "client_secret_1234.apps.googleusercontent.com.json", "service-account-prod.json",
    ".azure/msal_token_cache.json", "accessTokens.json", ".s3cfg", ".boto", ".databrickscfg",
    "rclone.conf", ".config/gh/hosts.yml",
    # ML platforms
    "kaggle.json", "Kaggle (1).json", ".kaggle/anything.txt", ".modal.toml", ".huggingface/token",
    # Vault, web servers, password stores, GnuPG, histories
    ".vault-token", ".vault_pass", "htpasswd", ".htpasswd", "vault.kdbx", "office.ovpn",
    ".gnupg/private-keys-v1.d/abc.key", "secring.gpg", ".bash_history", ".psql_history",
]

# Ordinary project files whose names brush against the families: they must ship.
ORDINARY_NAMES = [
    "keys.py", "tokenizer.json", "environment.yml", "env.py", "envs.py", "secret_sauce.py",
    "deploy_keys.py", "credentials.py", "auth/credentials_helper.py", "keyboard.py",
    "key_points.npy", "kube.py", "rsa.py", "test_rsa.py", "monkey.txt", "token.py",
    "config.json", "settings.yaml", ".venv.cfg", "environments/prod.yaml", "netrc_parser.py",
    "password_reset.html", "src/secrets_manager/client.py", "pem.py", "docs/keys.md",
]


def _write_family_project(project: Path) -> None:
    for rel in CREDENTIAL_NAMES:
        write(project / rel, marker(rel))
    for rel in ORDINARY_NAMES:
        write(project / rel, f"ordinary {rel}\n")
    write(project / "train.py", TRAIN)


@pytest.mark.parametrize("source", ["tracked", "untracked", "outside git", "included"])
def test_every_credential_name_family_is_withheld(home: Path, tmp_path: Path, source: str) -> None:
    """Each family (case-insensitive, with prefixes and backup suffixes) stays home, by every
    path a file can take into the bundle; ordinary files with similar names ship."""
    project = tmp_path / "p"
    include: list[str] = []
    if source == "outside git":
        _write_family_project(project)
    else:
        gitignore = "*\n!.gitignore\n!train.py\n" if source == "included" else ""
        make_git_project(project, {"train.py": TRAIN}, gitignore=gitignore)
        _write_family_project(project)
        if source == "tracked":
            subprocess.run(["git", "-C", str(project), "add", "-f", "-A"], check=True)
        if source == "included":
            include = ["**"]
    bundle = make_bundle(project, include=include)
    names = members(bundle)
    data = raw_tar(bundle)
    reasons = withheld(bundle)
    leaked = [rel for rel in CREDENTIAL_NAMES if rel in names or marker(rel).encode() in data]
    assert not leaked, f"credential files shipped: {leaked}"
    unreported = [rel for rel in CREDENTIAL_NAMES if "withheld" not in reasons.get(rel, "")]
    assert not unreported, f"withheld but not reported: {unreported}"
    dropped = [rel for rel in ORDINARY_NAMES if rel not in names]
    assert not dropped, f"ordinary files withheld: {dropped} ({[reasons.get(r) for r in dropped]})"


# -- env templates: the explicit rule --------------------------------------------------------


TEMPLATES = [".env.example", ".env.sample", ".env.template", "example.env", ".env.local.example",
             "conf/.ENV.Dist", "prod.env.example"]


def test_env_templates_without_values_ship(home: Path, tmp_path: Path) -> None:
    """A template that only names variables ships as is (the job's README needs it); the
    real `.env` beside it does not."""
    text = "# copy to .env and fill in\nAPI_KEY=\nexport DB_URL=\nEMPTY=\"\"\n\n"
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, ".env": marker(".env"),
                                                **{name: text for name in TEMPLATES}})
    bundle = make_bundle(project)
    with tarfile.open(objects.archive(bundle.hash), "r:gz") as tar:
        for name in TEMPLATES:
            assert tar.extractfile(name).read() == text.encode(), name
    assert_not_shipped(bundle, ".env", marker(".env"))


@pytest.mark.parametrize("name", [".env.example", "example.env", ".env.sample"])
def test_env_template_with_a_value_is_withheld(home: Path, tmp_path: Path, name: str) -> None:
    """A "template" holding a real value is an env file: withheld, the value never shown."""
    value = "sk-live-" + "9" * 24
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN,
                                                name: f"# comment\nOK=\nAPI_KEY={value}\n"})
    bundle = make_bundle(project)
    assert_not_shipped(bundle, name, value, why="API_KEY on line 3")
    doc = gpu_json("bundle", "--list", cwd=project)
    assert value not in json.dumps(doc)


# -- content: a key is a key under any name --------------------------------------------------


def _pem_keys() -> dict[str, str]:
    """Real private keys of every PEM kind, made here (cryptography is asyncssh's dependency)."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    dsa_key = dsa.generate_private_key(key_size=1024)
    ed_key = ed25519.Ed25519PrivateKey.generate()
    pw = ser.BestAvailableEncryption(b"pw")

    def pem(key, fmt, enc=ser.NoEncryption()) -> str:
        return key.private_bytes(ser.Encoding.PEM, fmt, enc).decode()

    body = "lQOYBGXyZ0sBCADc3Vr9Q0mR1oXhX9+LkQm2b0Jp8Zc5nJQ1a5c2b7o7lJmY1Q7y9Hk3c\nZ5c2b7o7lJmY1Q7y9Hk3cAA==\n"
    return {
        "RSA": pem(rsa_key, ser.PrivateFormat.TraditionalOpenSSL),
        "RSA (encrypted, Proc-Type headers)": pem(rsa_key, ser.PrivateFormat.TraditionalOpenSSL, pw),
        "EC": pem(ec_key, ser.PrivateFormat.TraditionalOpenSSL),
        "DSA": pem(dsa_key, ser.PrivateFormat.TraditionalOpenSSL),
        "OPENSSH": pem(ed_key, ser.PrivateFormat.OpenSSH),
        "PKCS#8": pem(rsa_key, ser.PrivateFormat.PKCS8),
        "ENCRYPTED": pem(ec_key, ser.PrivateFormat.PKCS8, pw),
        "PGP": f"-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n{body}=Xk3c\n"
               "-----END PGP PRIVATE KEY BLOCK-----\n",
        "CRLF": pem(rsa_key, ser.PrivateFormat.PKCS8).replace("\n", "\r\n"),
    }


@pytest.fixture(scope="module")
def pem_keys() -> dict[str, str]:
    return _pem_keys()


def _credential_documents(keys: dict[str, str]) -> dict[str, str]:
    """Credential files that are not PEM blocks, as their tools write them."""
    sa = {"type": "service_account", "project_id": "p", "private_key_id": "abc",
          "private_key": keys["PKCS#8"], "client_email": "x@p.iam.gserviceaccount.com"}
    return {
        "service-account JSON": json.dumps(sa, indent=2),
        "gcloud user credentials": json.dumps({"type": "authorized_user", "client_id": "1.apps",
                                               "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty",
                                               "refresh_token": "1//0gLk"}),
        "kubeconfig with a token": "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
                                   "    server: https://k\nusers:\n- name: u\n  user:\n"
                                   "    token: eyJhbGciOiJSUzI1NiIsImtpZCI6IiJ9.eyJpc3Mi\n",
        "kubeconfig with a client key": "apiVersion: v1\nclusters: []\nusers:\n- name: u\n  user:\n"
                                        "    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVk\n"
                                        "kind: Config\n",
        "AWS credentials copy": "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
                                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
        "netrc copy": "machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n",
        "PuTTY key": "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: k\n"
                     "Public-Lines: 2\nAAAAC3NzaC1lZDI1NTE5AAAAIB\nAAAA\nPrivate-Lines: 1\nAAAAIQ==\n",
    }


@pytest.mark.parametrize("kind", ["RSA", "RSA (encrypted, Proc-Type headers)", "EC", "DSA",
                                  "OPENSSH", "PKCS#8", "ENCRYPTED", "PGP", "CRLF"])
@pytest.mark.parametrize("source", ["tracked", "outside git"])
def test_private_key_under_an_innocent_name_is_withheld(home: Path, tmp_path: Path,
                                                        pem_keys: dict, kind: str, source: str) -> None:
    key = pem_keys[kind]
    files = {"train.py": TRAIN, "notes.txt": "see below\n" + key, "weights/readme": key}
    if source == "tracked":
        project = make_git_project(tmp_path / "p", files)
    else:
        project = tmp_path / "p"
        for rel, text in files.items():
            write(project / rel, text)
    bundle = make_bundle(project)
    secret_line = key.strip().splitlines()[-2]  # a line of the key's body
    for rel in ("notes.txt", "weights/readme"):
        assert_not_shipped(bundle, rel, secret_line, why="content is a credential")
    assert "train.py" in members(bundle)


@pytest.mark.parametrize("kind", ["service-account JSON", "gcloud user credentials",
                                  "kubeconfig with a token", "kubeconfig with a client key",
                                  "AWS credentials copy", "netrc copy", "PuTTY key"])
def test_credential_documents_under_innocent_names_are_withheld(home: Path, tmp_path: Path,
                                                                pem_keys: dict, kind: str) -> None:
    text = _credential_documents(pem_keys)[kind]
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "conf/settings.yaml": text})
    bundle = make_bundle(project)
    assert "conf/settings.yaml" not in members(bundle)
    assert text.encode() not in raw_tar(bundle)
    assert "content is a credential" in withheld(bundle)["conf/settings.yaml"]


def test_code_that_mentions_keys_ships(home: Path, tmp_path: Path, pem_keys: dict) -> None:
    """Talking about keys is not holding one: parsers, certificates, public keys, manifests
    ship; the real key and service-account file beside them do not."""
    files = {
        "train.py": TRAIN,
        "pem_parser.py": 'HEADER = "-----BEGIN RSA PRIVATE KEY-----\\n"\nFOOTER = "-----END"\n',
        "docs/setup.md": "Paste your key:\n\n    -----BEGIN OPENSSH PRIVATE KEY-----\n    ...\n",
        "cert.txt": "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----\n",
        "authorized.txt": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq user@host\n",
        "k8s/deploy.yaml": "apiVersion: apps/v1\nkind: Deployment\nspec:\n  password: ${DB_PASSWORD}\n",
        "settings.json": '{"private_key": "", "client_secret": "${SECRET}"}\n',
    }
    keys = {"key.txt": pem_keys["OPENSSH"],
            "sa.json": _credential_documents(pem_keys)["service-account JSON"]}
    project = make_git_project(tmp_path / "p", {**files, **keys})
    bundle = make_bundle(project)
    assert set(members(bundle)) == set(files)
    assert set(withheld(bundle)) == set(keys)


# -- identity: hard links under innocent names ----------------------------------------------


@pytest.mark.parametrize("cred", HOME_CREDENTIAL_FILES)
def test_hard_link_to_a_home_credential_is_withheld(home: Path, user_home: Path, tmp_path: Path,
                                                    cred: str) -> None:
    """`notes.txt` -> ~/.ssh/id_rsa (content not recognisable as a key): withheld by identity."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    os.link(user_home / cred, project / "notes.txt")
    commit_all(project)
    bundle = make_bundle(project)
    assert_not_shipped(bundle, "notes.txt", marker(f"~/{cred}"), why=f"hard link to ~/{cred}")
    assert "train.py" in members(bundle)


@pytest.mark.parametrize("source", ["tracked", "untracked", "outside git", "included"])
def test_hard_links_in_every_source(home: Path, user_home: Path, tmp_path: Path, source: str) -> None:
    """The issue's two: `notes.txt` -> id_rsa, `backup.txt` -> .aws/credentials."""
    project = tmp_path / "p"
    if source == "outside git":
        write(project / "train.py", TRAIN)
    else:
        make_git_project(project, {"train.py": TRAIN},
                         gitignore="*.txt\n" if source == "included" else "")
    os.link(user_home / ".ssh/id_rsa", project / "notes.txt")
    os.link(user_home / ".aws/credentials", project / "backup.txt")
    if source == "tracked":
        commit_all(project)
    bundle = make_bundle(project, include=["*.txt"] if source == "included" else [])
    assert_not_shipped(bundle, "notes.txt", marker("~/.ssh/id_rsa"), why="hard link")
    assert_not_shipped(bundle, "backup.txt", marker("~/.aws/credentials"), why="hard link")


def test_hard_link_into_a_symlinked_home_credential_folder(home: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Dotfile managers link ~/.aws to the real folder: its files are still the user's."""
    h = tmp_path / "userhome"
    write(h / "dotfiles" / "aws" / "credentials", marker("aws"))
    (h / ".aws").symlink_to(h / "dotfiles" / "aws")
    monkeypatch.setenv("HOME", str(h))
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    os.link(h / "dotfiles" / "aws" / "credentials", project / "backup.txt")
    assert_not_shipped(make_bundle(project), "backup.txt", marker("aws"), why="hard link to ~/.aws/credentials")


@pytest.mark.parametrize("ignored", [False, True])
def test_hard_link_to_a_withheld_project_file_is_withheld(home: Path, tmp_path: Path,
                                                          ignored: bool) -> None:
    """`notes.txt` is the same file as the project's `.env` (tracked, or git-ignored); two
    names of an ordinary file both ship."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "a.txt": "same\n"},
                               gitignore=".env\n" if ignored else "")
    write(project / "config" / ".env", marker(".env"))
    os.link(project / "config" / ".env", project / "notes.txt")
    (project / "sub").mkdir()
    os.link(project / "config" / ".env", project / "sub" / "zz.txt")
    os.link(project / "a.txt", project / "sub" / "b.txt")
    write(project / ".env.example", f"TOKEN={marker('template')}\n")  # a template with a value
    os.link(project / ".env.example", project / "sub" / "example.txt")
    commit_all(project)
    bundle = make_bundle(project)
    for rel in ("notes.txt", "sub/zz.txt"):
        assert_not_shipped(bundle, rel, marker(".env"), why="hard link to config/.env")
    assert_not_shipped(bundle, "sub/example.txt", marker("template"), why="hard link to .env.example")
    assert {"a.txt", "sub/b.txt", "train.py"} <= set(members(bundle))


@pytest.mark.slow  # submits: the supervisor starts for the job
def test_cli_list_agrees_with_the_tarball(home: Path, user_home: Path, tmp_path: Path,
                                          pem_keys: dict) -> None:
    """`gpu bundle --list --json` is exactly what the stored tarball holds; every withheld
    file is in left_out as withheld, and no secret is printed."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "lib/a.py": "a\n",
                                                ".env": marker(".env"), "k.txt": pem_keys["EC"]})
    os.link(user_home / ".ssh/id_rsa", project / "notes.txt")
    nested = make_git_project(project / "vendor", {"v.py": "v\n"}, gitignore="out/\n")
    write(nested / "out" / "gen.py", "generated\n")
    doc = gpu_json("bundle", "--list", cwd=project)
    assert not list(home.glob("bundles/*.json"))  # `gpu bundle` is a dry run: the submit stores it
    gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    from core.packaging import objects

    shipped = sorted(row[0] for row in objects.entries(doc["hash"]))
    assert sorted(doc["list"]) == shipped and doc["files"] == len(shipped)
    assert {"train.py", "lib/a.py", "vendor/v.py"} <= set(shipped)
    assert not {".env", "k.txt", "notes.txt", "vendor/out/gen.py"} & set(shipped)
    reasons = {e["path"]: e["reason"] for e in doc["left_out"]}
    for rel in (".env", "k.txt", "notes.txt"):
        assert reasons[rel].startswith("withheld:")
    out = json.dumps(doc)
    assert marker(".env") not in out and marker("~/.ssh/id_rsa") not in out
    assert pem_keys["EC"].splitlines()[1] not in out


def test_a_file_turned_into_a_key_while_packing_is_not_shipped(home: Path, tmp_path: Path,
                                                               pem_keys: dict) -> None:
    """The packer judges the bytes it packs: listed clean, rewritten before packing, refused."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "notes.txt": "clean\n"})
    listing = list_project(project)
    assert "notes.txt" in listing.entries
    (project / "notes.txt").write_text(pem_keys["RSA"])
    with pytest.raises(UserError, match="notes.txt changed while packing"):
        build(listing)
    assert not list((home / "bundles").glob("*.json"))
    assert pem_keys["RSA"].encode() not in b"".join(p.read_bytes() for p in (home / "objects").rglob("*") if p.is_file())


# -- places: symlinked folders, case, nested repositories -----------------------------------


@pytest.mark.parametrize("folder,inside", [(".ssh", "config"), (".ssh", "known_hosts"),
                                           (".aws", "config"), (".kube", "cache.json")])
def test_include_through_a_symlinked_credential_folder(home: Path, tmp_path: Path,
                                                       folder: str, inside: str) -> None:
    """`keys -> .ssh` inside the project: `include keys/config` is `.ssh/config`, withheld."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN}, gitignore=f"{folder}/\n")
    write(project / folder / inside, marker(inside))
    (project / "keys").symlink_to(folder)
    for pattern in (f"keys/{inside}", "keys"):
        bundle = make_bundle(project, include=[pattern])
        rel = f"keys/{inside}" if pattern != "keys" else "keys"
        assert_not_shipped(bundle, rel, marker(inside), why="credential folder")


def test_credential_folders_match_any_case(home: Path, tmp_path: Path) -> None:
    """`.SSH/` is `.ssh/` on macOS's file system, and to a person."""
    files = {".SSH/config": marker("a"), ".Aws/credentials": marker("b"), "x/.KUBE/config": marker("c")}
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, **files})
    bundle = make_bundle(project)
    for rel in files:
        assert_not_shipped(bundle, rel, files[rel], why="credential folder")


@pytest.mark.parametrize("outer", ["git", "outside git", "included"])
def test_nested_repository_ships_by_its_own_gitignore(home: Path, tmp_path: Path, outer: str) -> None:
    """A folder with its own .git (untracked by the outer repo, or pulled in by include):
    its .gitignore and .git/info/exclude decide what ships from it."""
    project = tmp_path / "p"
    if outer == "outside git":
        write(project / "train.py", TRAIN)
        base = "vendor/lib"
    else:
        make_git_project(project, {"train.py": TRAIN},
                         gitignore="third_party/\n" if outer == "included" else "")
        base = "third_party/lib" if outer == "included" else "vendor/lib"
    nested = make_git_project(project / base, {"src.py": "s\n", "deep/keep.py": "k\n"},
                              gitignore="build/\n*.log\n")
    write(nested / "build" / "gen.py", "generated\n")
    write(nested / "run.log", "log\n")
    write(nested / "scratch.tmp", "tmp\n")
    (nested / ".git" / "info").mkdir(exist_ok=True)
    (nested / ".git" / "info" / "exclude").write_text("*.tmp\n")
    write(nested / "untracked.py", "u\n")
    include = ["third_party"] if outer == "included" else []
    bundle = make_bundle(project, include=include)
    shipped = {n.removeprefix(base + "/") for n in members(bundle) if n.startswith(base + "/")}
    assert shipped == {".gitignore", "src.py", "deep/keep.py", "untracked.py"}
    if outer != "included":
        groups = {e["path"] for e in bundle.summary()["left_out"] if e["reason"] == "ignored by git"}
        assert f"{base}/build/" in groups


def test_a_deeper_nested_repository_keeps_its_own_rules(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    outer = make_git_project(project / "a", {"x.py": "x\n"}, gitignore="*.bin\n")
    inner = make_git_project(outer / "b", {"y.py": "y\n"}, gitignore="cache/\n")
    write(outer / "w.bin", "w")
    write(inner / "cache" / "c.py", "c\n")
    write(inner / "z.bin", "z")  # ignored by a's rules, but b is its own repository
    names = set(members(make_bundle(project)))
    assert {"a/x.py", "a/b/y.py", "a/b/z.bin"} <= names
    assert not {"a/w.bin", "a/b/cache/c.py"} & names


# -- home folder and huge folders ------------------------------------------------------------


def test_home_folder_project_is_refused_for_an_agent(home: Path, user_home: Path) -> None:
    write(user_home / "train.py", TRAIN)
    for cmd in (["bundle"], ["submit", "train.py", "--hours", "0.1"], ["plan", "train.py", "--hours", "0.1"]):
        proc = run_gpu(*cmd, "--json", cwd=user_home)
        assert proc.returncode == 2, proc.stderr
        err = json.loads(proc.stdout)
        assert "home folder" in err["error"] and err["where"] == str(user_home.resolve())
        assert "--allow-large-project" in err["fix"] and "git init" in err["fix"]
    assert not (home / "bundles").exists() or not list((home / "bundles").iterdir())
    assert gpu_json("jobs")["jobs"] == []


def test_home_folder_project_with_the_flag_still_withholds_credentials(home: Path,
                                                                       user_home: Path) -> None:
    write(user_home / "train.py", TRAIN)
    doc = gpu_json("bundle", "--list", "--allow-large-project", cwd=user_home)
    assert "train.py" in doc["list"]
    for rel in HOME_CREDENTIAL_FILES:
        assert rel not in doc["list"]


@pytest.mark.parametrize("answer,status", [("y", 0), ("n", 2), ("", 2)])
def test_home_folder_project_asks_a_person(home: Path, user_home: Path, answer: str,
                                           status: int) -> None:
    write(user_home / "train.py", TRAIN)
    code, out = run_in_terminal([gpu_exe(), "bundle", "--list"], answer, cwd=user_home)
    assert "home folder" in out and "Ship it anyway? [y/N]" in out
    assert code == status, out
    assert not list(home.glob("bundles/*.json"))  # a dry run stores nothing, yes or no
    if status == 0:
        assert "train.py" in out
    else:
        assert "nothing was shipped" in out


def test_git_repository_at_home_is_refused(home: Path, user_home: Path) -> None:
    """A dotfiles repository at ~ makes ~ the bundle root of a project below it."""
    make_git_project(user_home, {".bashrc": "x\n"})
    write(user_home / "work" / "train.py", TRAIN)
    with pytest.raises(ProjectTooBroad, match="home folder"):
        list_project(user_home / "work")
    with pytest.raises(ProjectTooBroad, match="holds your home folder"):
        list_project(user_home.parent)


def test_huge_folder_outside_git_is_refused_unless_allowed(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    for i in range(5_001):
        (project / f"f{i}.txt").touch()
    proc = run_gpu("bundle", "--json", cwd=project)
    assert proc.returncode == 2
    err = json.loads(proc.stdout)
    assert "not a git repository" in err["error"] and "5,000" in err["error"]
    assert "--allow-large-project" in err["fix"]
    assert gpu_json("bundle", "--allow-large-project", cwd=project)["files"] == 5_002
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    assert gpu_json("bundle", cwd=project)["files"] == 5_002  # git decides: no question


def test_big_bytes_outside_git_are_refused(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    with open(project / "big.bin", "wb") as f:
        f.truncate(1_100_000_000)  # sparse: costs nothing
    with pytest.raises(ProjectTooBroad, match="GB"):
        list_project(project)
    assert "big.bin" in list_project(project, allow_large=True).entries


def test_project_inside_a_credential_folder_is_refused(home: Path, tmp_path: Path) -> None:
    project = tmp_path / ".aws" / "proj"
    write(project / "train.py", TRAIN)
    with pytest.raises(UserError, match="inside a credential folder"):
        list_project(project, allow_large=True)


# -- names that are not UTF-8, folders named like markup --------------------------------------


NON_UTF8 = [b"caf\xe9.py", b"d\xff/x.py", b"\xfe\xfd data.csv"]


@pytest.mark.parametrize("git_project", [True, False])
def test_non_utf8_names_ship_with_their_bytes(home: Path, tmp_path: Path, git_project: bool) -> None:
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    for raw in NON_UTF8:
        path = os.fsencode(project) + b"/" + raw
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(raw)
    with open(os.fsencode(project) + b"/\xff.env", "wb") as f:
        f.write(marker("env").encode())
    if git_project:
        subprocess.run(["git", "init", "-q", str(project)], check=True)
        commit_all(project)
    bundle = make_bundle(project)
    with tarfile.open(objects.archive(bundle.hash), "r:gz") as tar:
        got = {os.fsencode(m.name): tar.extractfile(m).read() for m in tar.getmembers()}
    assert {raw: raw for raw in NON_UTF8}.items() <= got.items()
    assert b"\xff.env" not in got and marker("env").encode() not in raw_tar(bundle)
    doc = gpu_json("bundle", "--list", cwd=project)
    assert sorted(os.fsencode(n) for n in doc["list"]) == sorted(got)
    dest = tmp_path / "untar"  # the remote targets unpack with GNU tar
    dest.mkdir()
    subprocess.run(["tar", "-xzf", str(objects.archive(bundle.hash)), "-C", str(dest)], check=True, capture_output=True)
    assert (os.fsencode(dest) + b"/d\xff/x.py") and open(os.fsencode(dest) + b"/d\xff/x.py", "rb").read() == b"d\xff/x.py"


def test_non_utf8_data_path_plans(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    data = os.fsencode(tmp_path) + b"/d\xe9ta"
    os.makedirs(data + b"/sub\xff")
    with open(data + b"/sub\xff/x\xfe.csv", "wb") as f:
        f.write(b"1,2\n")
    doc = gpu_json("plan", "train.py", "--hours", "0.1", "--data", f"d={os.fsdecode(data)}",
                   cwd=project)
    assert len(doc["plan"]["data"]["d"]) == 64


def test_project_folders_named_like_markup_or_globs(home: Path, tmp_path: Path) -> None:
    """`proj [/x]`, `exp[1]`, `v*2`: the project's own path is literal in include globs and
    paths; only the glob the user wrote is a glob."""
    for folder in ("proj [/x]", "exp[1]", "v*2", "a?b"):
        repo = make_git_project(tmp_path / "repo" / folder.replace("/", "_"),
                                {f"{folder}/train.py": TRAIN, "other.py": "o\n"}, gitignore="data/\n")
        project = repo / folder
        write(project / "data" / "a.png", "png")
        write(project / "data" / "b.csv", "csv")
        doc = gpu_json("bundle", "--list", "--include", "data/*.png", "--project-dir", str(project))
        assert {f"{folder}/data/a.png", f"{folder}/train.py", "other.py"} <= set(doc["list"]), folder
        assert f"{folder}/data/b.csv" not in doc["list"]
    alone = tmp_path / "proj [" / "x]"
    write(alone / "train.py", TRAIN)
    write(alone / "data" / "c.png", "png")
    assert set(gpu_json("bundle", "--list", "--include", "data/*.png", cwd=alone)["list"]) == {
        "train.py", "data/c.png"}


# -- data sets go through the same judge ------------------------------------------------------


def test_data_that_is_a_credential_is_refused(home: Path, user_home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    for source in (user_home / ".ssh", user_home / ".ssh" / "id_rsa", user_home / ".aws" / "credentials",
                   user_home / ".config" / "gcloud"):
        proc = run_gpu("plan", "train.py", "--hours", "0.1", "--data", f"k={source}", "--json",
                       cwd=project)
        assert proc.returncode == 2, (source, proc.stdout, proc.stderr)
        assert "credential" in json.loads(proc.stdout)["error"]
    link = tmp_path / "innocent.csv"
    os.link(user_home / ".kaggle" / "kaggle.json", link)
    with pytest.raises(UserError, match="hard link to ~/.kaggle/kaggle.json"):
        list_data(link, "d")


def test_credentials_inside_a_data_folder_are_not_uploaded(home: Path, user_home: Path,
                                                           tmp_path: Path, pem_keys: dict) -> None:
    from core.providers.remotecache import _pack_dir

    data = tmp_path / "dataset"
    write(data / "a.csv", "1,2\n")
    write(data / "sub" / "b.csv", "3,4\n")
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    clean = gpu_json("plan", "train.py", "--hours", "0.1", "--data", f"d={data}", cwd=project)
    write(data / ".env", marker("data/.env"))
    write(data / "sub" / "notes.txt", pem_keys["OPENSSH"])
    os.link(user_home / ".ssh" / "id_ed25519", data / "copy.csv")
    doc = gpu_json("plan", "train.py", "--hours", "0.1", "--data", f"d={data}", cwd=project)
    assert doc["plan"]["data"]["d"] == clean["plan"]["data"]["d"]  # only the clean files count
    warning = [w for w in doc["bundle"]["warnings"] if w.startswith("data d:")]
    assert warning and all(n in warning[0] for n in (".env", "sub/notes.txt", "copy.csv"))
    archive = _pack_dir(list_data(data, "d"))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            assert sorted(tar.getnames()) == ["a.csv", "sub/b.csv"]
    finally:
        archive.unlink()


def test_a_rule_across_a_data_folder_s_own_path_holds(home: Path, tmp_path: Path) -> None:
    """`--data d=~/.local/share`: the desktop keyring rule (.local/share/keyrings) reads the
    data folder's whole path, not only its own name."""
    share = tmp_path / ".local" / "share"
    write(share / "keyrings" / "login.keyring", marker("keyring"))
    write(share / "fonts" / "a.txt", "x\n")
    got = list_data(share, "d")
    assert got.files == ["fonts/a.txt"], got.files
    assert [w["path"] for w in got.withheld] == ["keyrings/login.keyring"]


# -- second round: content verdicts cached by content, ordinary content still ships -----------

def test_content_verdicts_are_reused_by_content_under_other_paths(home: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the project (new paths, inodes and mtimes) is read but not scanned again, and
    the packer's second look at the bytes it packed costs a hash, not a scan."""
    import shutil

    from core.packaging import credentials

    scans: list[int] = []
    real = credentials.content_reason
    monkeypatch.setattr(credentials, "content_reason",
                        lambda head, size=None: scans.append(len(head)) or real(head, size))
    first = tmp_path / "first"
    files = {f"src/m{i}.py": f"x = {i}\n" for i in range(40)}
    files["notes.txt"] = "push with ghp_" + "A1b2" * 9 + "\n"
    for rel, text in files.items():
        write(first / rel, text)
    credentials._MEMO.clear()
    listing = list_project(first)
    assert "notes.txt" not in listing.entries and len(scans) == len(files)
    scans.clear()
    build(listing)
    assert scans == [], "the packer scanned again what the listing had judged"

    credentials._MEMO.clear()  # as a new process would start
    second = tmp_path / "second"
    shutil.copytree(first, second)
    listing = list_project(second)
    assert scans == [], f"{len(scans)} files scanned again though their content was judged before"
    reasons = {w["path"]: w["reason"] for w in listing.withheld}
    assert "GitHub token" in reasons["notes.txt"] and "src/m0.py" in listing.entries


@pytest.mark.parametrize("text", [
    # code and data that look near a credential and are not one
    "DATABASE_URL = 'postgres://postgres:postgres@localhost:5432/app'\n",
    "see https://user:password@example.com for the format\n",
    "model = hf_AutoModel\nclass NormalizationLayerBlock: pass\nweights = state['NormalizationLayerBlock.weight.running_mean_of_the_batch']\n",
    "index-url = https://user:$PIP_TOKEN@pypi.corp.example/simple\n",
    "sha = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'\nts = 1700000000\n",
    "def connect(self):\n    self._auth = token\n    return 'BEGIN RSA PRIVATE KEY is parsed here'\n",
    "tokenizer = AutoTokenizer.from_pretrained(name, token=os.environ['HF_TOKEN'])\n",
])
def test_ordinary_code_near_a_credential_ships(home: Path, tmp_path: Path, text: str) -> None:
    write(tmp_path / "p" / "app.py", text)
    listing = list_project(tmp_path / "p")
    assert "app.py" in listing.entries, listing.withheld


def test_public_keys_and_certificates_in_der_ship(home: Path, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pub = key.public_key().public_bytes(ser.Encoding.DER, ser.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "server_pub.der").write_bytes(pub)
    (tmp_path / "p" / "a.py").write_text("print(1)\n")
    assert "server_pub.der" in list_project(tmp_path / "p").entries


def test_flaskenv_ships_and_tokenizer_files_ship(home: Path, tmp_path: Path) -> None:
    """Deliberate: Flask documents .flaskenv as public and committed; tokenizers are data."""
    for rel in (".flaskenv", "tokenizer.json", "special_tokens_map.json", "added_tokens.json",
                "wgan_config.conf", "mcp_server.py", "results-2024.json"):
        write(tmp_path / "p" / rel, "FLASK_APP=app.py\n")
    listing = list_project(tmp_path / "p")
    assert {".flaskenv", "tokenizer.json", "wgan_config.conf", "mcp_server.py"} <= set(listing.entries)


def test_vendor_documented_example_keys_ship_and_real_shaped_ones_do_not(home: Path, tmp_path: Path) -> None:
    """AWS's own docs use AKIAIOSFODNN7EXAMPLE: a README quoting it ships; any other key id not."""
    write(tmp_path / "p" / "README.md", "export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n")
    write(tmp_path / "p" / "notes.md", "export AWS_ACCESS_KEY_ID=AKIAI44QH8DHBF3KP2XY\n")
    listing = list_project(tmp_path / "p")
    assert "README.md" in listing.entries and "notes.md" not in listing.entries


# -- third round: names as they read, our own providers' tokens, notebooks, home places --------

def _reasons(listing) -> dict[str, str]:
    return {w["path"]: w["reason"] for w in listing.withheld}


TOKEN = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7dEf0hIj3kLm6n"


@pytest.mark.parametrize("text,label", [
    (f"OPENAI_API_KEY=\n{TOKEN}\n", "a value on line 2"),  # a bare value: no name to show
    (f"  {TOKEN} and more\n", "a value on line 1"),
    (f"# keys\n{TOKEN}=1\n", "a value on line 2"),  # a `name` that is itself a token
    ("DB_HOST=\nDB_PASSWORD=#S3cr3tPassw0rd!\n", "DB_PASSWORD on line 2"),  # bash reads `#S3cr3t...`
    ("A=''#S3cr3tPassw0rd\n", "A on line 1"),
    (f"export OPENAI_API_KEY: {TOKEN}\n", "OPENAI_API_KEY on line 1"),
])
def test_env_template_reason_names_a_variable_never_a_value(home: Path, tmp_path: Path, text: str,
                                                            label: str) -> None:
    write(tmp_path / "p" / ".env.example", text)
    write(tmp_path / "p" / "train.py", TRAIN)
    listing = list_project(tmp_path / "p")
    reason = _reasons(listing)[".env.example"]
    assert f"sets {label} " in reason, reason
    for secret in (TOKEN, "S3cr3t"):
        assert not any(secret[i:i + 6] in reason for i in range(len(secret) - 5)), reason


def test_env_template_comments_need_white_space_before_them(home: Path, tmp_path: Path) -> None:
    """`NAME= # fill in` and `NAME=""  # x` set nothing (bash and dotenv agree): it ships."""
    text = "# copy to .env\nA= # fill in\nB=\"\"\t# x\nC=''  #\nexport D=\n\n"
    write(tmp_path / "p" / ".env.example", text)
    assert ".env.example" in list_project(tmp_path / "p").entries


# Names as a file system shows them and a person reads them: a newline inside, trailing white
# space or dots (Windows drops them), zero-width and other format characters, fullwidth letters.
DECORATED_NAMES = [".env\n_", ".pgpass ", "kaggle.json.", "id_rsa ", "id_rsa\t", ".netrc.", ".netrc. .",
                   "kaggle\u200b.json", ".\u200benv", "\ufeffid_rsa", ".en\u00adv", ".\uff45nv",
                   "\uff4b\uff41\uff47\uff47\uff4c\uff45.json", "id_rsa\u200d", ".ssh\u200b/config",
                   ".aws./config", "\uff0essh/known_hosts"]


@pytest.mark.parametrize("rel", DECORATED_NAMES, ids=ascii)
def test_names_are_judged_as_they_read(home: Path, tmp_path: Path, rel: str) -> None:
    write(tmp_path / "p" / rel, "plain text, nothing recognisable\n")
    write(tmp_path / "p" / "train.py", TRAIN)
    listing = list_project(tmp_path / "p")
    assert rel not in listing.entries
    assert _reasons(listing)[rel].startswith("withheld: credential"), listing.withheld


def test_a_decorated_template_is_still_a_template(home: Path, tmp_path: Path) -> None:
    """`.ｅnv.example ` reads `.env.example`: judged as a template (values), not shipped unread."""
    write(tmp_path / "p" / ".\uff45nv.example ", "API_KEY=sk-live-123456789012345678901234\n")
    write(tmp_path / "p" / "example.env\u200b", "API_KEY=\n")
    listing = list_project(tmp_path / "p")
    assert "sets API_KEY on line 1" in _reasons(listing)[".\uff45nv.example "]
    assert "example.env\u200b" in listing.entries


KAGGLE = '{"username":"alice","key":"0123456789abcdef0123456789abcdef"}\n'
PROVIDER_TOKENS = {
    "kaggle_api.json": KAGGLE, "kaggle-1.json": KAGGLE, "kaggle.json.txt": KAGGLE,
    "conf/kaggle.txt": '{\n  "key": "0123456789ABCDEF0123456789abcdef",\n  "username": "bob"\n}\n',
    "modal.toml": '[default]\ntoken_id = "ak-abcdefghijklmnopqrstuv"\ntoken_secret = "as-abcdefghijklmnopqrstuv"\n',
    "deploy/modal.env": "MODAL_TOKEN_ID=ak-abcdefghijklmnopqrstuv\nMODAL_TOKEN_SECRET=as-abcdefghijklmnopqrstuv\n",
    "db.txt": "# prod\ndb.example.com:5432:prod:alice:S3cr3tPassw0rd\n*:*:*:bob:hunter2 hunter2\n",
    "conf/pg.conf": "db:5432:app:app:S3cr3tPassw0rd\n",
    "run.py": 'import wandb\nwandb.login(key="0123456789abcdef0123456789abcdef01234567")\n',
    "setup.sh": "export WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567\n",
    "job.py": 'import os\nos.environ["WANDB_API_KEY"] = "0123456789abcdef0123456789abcdef01234567"\n',
    "conf/run.yaml": "env:\n  WANDB_API_KEY: '0123456789abcdef0123456789abcdef01234567'\n",
}
PROVIDER_LOOKALIKES = {  # the same words in ordinary code and data: they ship
    "users.json": '[{"username": "alice", "key": "value"}, {"username": "bob", "id": 3}]\n',
    "index.json": '{"username": "alice", "role": "admin", "key": "0123456789abcdef0123456789abcdef", "n": 1}\n',
    "hashes.json": '{"key": "0123456789abcdef0123456789abcdef"}\n',
    "modal_app.py": "import modal\ntoken_secret = os.environ['MODAL_TOKEN_SECRET']\n",
    "log.txt": "10:20:30:40:50\nchr1:12345:A:G:rs1\nroot:x:0:0:root:/root:/bin/bash\n",
    "mixed.txt": "db.example.com:5432:prod:alice:pw\nand then some prose\n",
    "train_wb.py": 'import os, wandb\nwandb.login(key=os.environ["WANDB_API_KEY"])\nrun = wandb.init(id="0123456789abcdef0123456789abcdef01234567")\n',
    "README.md": "Set WANDB_API_KEY to your key (40 hex digits), e.g. WANDB_API_KEY=<your key>\n",
    "pgpass.py": "def parse(line):\n    host, port, db, user, password = line.split(':')\n",
}


def test_our_own_providers_tokens_are_withheld_under_any_name(home: Path, tmp_path: Path) -> None:
    """Kaggle's key, Modal's token secret, a pgpass file, a W&B key: withheld whatever the file
    is called; ordinary code and data using the same words ship."""
    files = {"train.py": TRAIN, **PROVIDER_TOKENS, **PROVIDER_LOOKALIKES}
    for rel, text in files.items():
        write(tmp_path / "p" / rel, text)
    listing = list_project(tmp_path / "p")
    reasons = _reasons(listing)
    assert not set(PROVIDER_TOKENS) & set(listing.entries), sorted(listing.entries)
    assert all(reasons[rel].startswith("withheld:") for rel in PROVIDER_TOKENS)
    assert set(PROVIDER_LOOKALIKES) <= set(listing.entries), {r: reasons.get(r) for r in PROVIDER_LOOKALIKES}


@pytest.mark.parametrize("name", [".kaggle.json", "pgpass.txt", "prod.pgpass", ".pgpass.conf"])
def test_provider_credential_names(home: Path, tmp_path: Path, name: str) -> None:
    write(tmp_path / "p" / name, "not recognisable\n")
    listing = list_project(tmp_path / "p")
    assert "credential file" in _reasons(listing)[name]


def _notebook(*outputs: str) -> str:
    """A Jupyter notebook (nbformat 4) whose cells printed these texts, as Jupyter saves it."""
    cells = [{"cell_type": "code", "execution_count": i, "metadata": {}, "source": ["!cat key\n"],
              "outputs": [{"output_type": "stream", "name": "stdout", "text": text.splitlines(True)}]}
             for i, text in enumerate(outputs, 1)]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


@pytest.mark.parametrize("kind", ["OPENSSH", "RSA", "service account", "service account, compact",
                                  "service account in a JSON string", "Kaggle key echoed", "netrc"])
def test_keys_printed_in_a_notebook_are_withheld(home: Path, tmp_path: Path, pem_keys: dict, kind: str) -> None:
    """nbformat stores each output line as a JSON string: `\\n` escaped, a printed JSON key
    file's own escapes escaped again. The same text as key.txt is withheld, so is the notebook."""
    sa = json.loads(_credential_documents(pem_keys)["service-account JSON"])
    text = {"OPENSSH": pem_keys["OPENSSH"], "RSA": "key:\n" + pem_keys["RSA"],
            "service account": json.dumps(sa, indent=1),
            "service account, compact": json.dumps(sa),
            "service account in a JSON string": json.dumps({"GOOGLE_CREDENTIALS": json.dumps(sa)}),
            "Kaggle key echoed": f"!echo '{KAGGLE.strip()}' > ~/.kaggle/kaggle.json\n",
            "netrc": "machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n"}[kind]
    write(tmp_path / "p" / "explore.ipynb", _notebook("hello\n", text))
    write(tmp_path / "p" / "plain.ipynb", _notebook("hello\n", "print('\\n'.join(lines))\n"))
    write(tmp_path / "p" / "train.py", TRAIN)
    listing = list_project(tmp_path / "p")
    assert "explore.ipynb" not in listing.entries, listing.withheld
    assert "content is a credential" in _reasons(listing)["explore.ipynb"]
    assert "plain.ipynb" in listing.entries


# Credential places in a home folder the identity check must know: session caches named
# `cache` (~/.aws/sso/cache), tool sign-ins the place rules know, histories, app folders.
HOME_PLACES = [".aws/sso/cache/5f1e2d.json", ".aws/cli/cache/abc.json", ".codex/auth.json",
               ".dbt/profiles.yml", ".fly/config.yml", ".zsh_history", ".zhistory", ".bash_history",
               ".supabase/access-token", ".local/share/com.vercel.cli/auth.json",
               "Library/Application Support/com.vercel.cli/auth.json", "Library/Keychains/login.keychain-db",
               ".config/google-chrome/Default/Login Data", ".mozilla/firefox/x.default/key4.db",
               ".config/rclone/rclone.conf", ".config/sops/age/keys.txt", ".config/anything/secrets.json",
               ".config/gcloud/legacy_credentials/a@b.c/adc.json"]


@pytest.mark.parametrize("place", HOME_PLACES)
def test_hard_link_to_any_home_credential_place_is_withheld(home: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, place: str) -> None:
    h = tmp_path / "userhome"
    write(h / place, marker(place))
    write(h / ".kube" / "cache" / "discovery" / "x.json", "{}\n")  # bulky, not walked
    monkeypatch.setenv("HOME", str(h))
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    os.link(h / place, project / "notes.txt")
    listing = list_project(project)
    assert "notes.txt" not in listing.entries
    assert f"hard link to ~/{place}" in _reasons(listing)["notes.txt"]


# What a home folder holds beyond the classic dotfiles: app tokens, keychains, browser profiles,
# histories. Shipping the home folder (--allow-large-project) withholds all of them.
HOME_STORES = [".supabase/access-token", ".local/share/com.vercel.cli/auth.json",
               "Library/Keychains/login.keychain-db", "Library/Keychains/ABCD-1234/keychain-2.db",
               ".config/google-chrome/Default/Cookies", ".config/google-chrome/Default/Login Data",
               ".config/google-chrome/Profile 1/Web Data", ".config/chromium/Default/Cookies",
               ".config/BraveSoftware/Brave-Browser/Default/Login Data",
               ".config/microsoft-edge/Default/Cookies", ".mozilla/firefox/x.default/key4.db",
               ".mozilla/firefox/x.default/logins.json",
               "Library/Application Support/Google/Chrome/Default/Cookies",
               "Library/Application Support/Firefox/Profiles/x.default/logins.json",
               ".zhistory", ".zsh_history", ".histfile", ".Rhistory", ".node_repl_history",
               ".ipython/profile_default/history.sqlite", ".viminfo", ".lesshst",
               ".local/share/nvim/shada/main.shada"]


def test_home_folder_project_withholds_app_and_browser_stores(home: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    h = tmp_path / "userhome"
    for rel in HOME_STORES:
        write(h / rel, marker(rel))
    write(h / "train.py", TRAIN)
    write(h / "notes" / "history.md", "ordinary\n")
    monkeypatch.setenv("HOME", str(h))
    listing = list_project(h, allow_large=True)
    shipped = set(listing.entries)
    assert "train.py" in shipped and "notes/history.md" in shipped
    assert not shipped & set(HOME_STORES), sorted(shipped & set(HOME_STORES))


def test_home_search_walks_credential_places_before_anything_else(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A home folder's bulk (a data folder, an app's many files) does not use up the search
    before the credential places are walked."""
    from core.packaging import credentials
    from core.packaging.gate import home_credential_ids

    h = tmp_path / "userhome"
    for i in range(60):
        write(h / "data" / f"f{i}.txt", "x\n")
        write(h / ".config" / "bigapp" / f"f{i}.json", "{}\n")
    key = write(h / ".aws" / "sso" / "cache" / "0a1b.json", marker("sso"))
    monkeypatch.setattr(credentials, "HOME_WALK_CAP", len(credentials.HOME_CREDENTIALS) + 20)
    found = home_credential_ids(h)
    assert found[(key.stat().st_dev, key.stat().st_ino)] == "~/.aws/sso/cache/0a1b.json"
