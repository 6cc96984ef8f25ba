"""The one list of what a credential looks like: by name, by place, and by content.

Credential files never ship, included or not. This module holds the rules and nothing else;
`core.packaging.gate` applies them (with the identity check for hard links) to every path that
could ship, so an addition here reaches every path at once. Keep additions here, one family a
line, each with a comment saying what it is.

Names are matched case-insensitively (macOS and Windows file systems do not care about case,
and neither does a person renaming `ID_RSA`) against the file's own name after its backup and
editor decorations are taken off (`.env~`, `id_rsa.bak`, `kaggle (1).json`, `..env.swp`), so a
copy of a credential is a credential.

Deliberate exceptions (false positives cost a job its code, so each is a decision):
- an env *template* (`.env.example`, `.env.sample`, `.env.template`, `.env.dist`, `example.env`
  ...) ships only while it sets no values: every line is a comment, blank, or `NAME=` with an
  empty value. A template with a value is withheld like any `.env` file.
- code and ordinary data whose names merely contain a word: `keys.py`, `tokenizer.json`,
  `environment.yml`, `env.py`, `secret_sauce.py`, `deploy_keys.py`, `credentials.py` ship.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import unicodedata
from typing import Any, Callable

from core.secrets import tokens

# -- names ---------------------------------------------------------------------------------

# What a copy, a backup or an editor adds to a name; taken off (repeatedly) before matching.
_DECORATION = re.compile(
    r"(?:~|#|\.(?:bak|backup|bck|old|orig|save|sav|prev|copy|tmp|temp|sw[a-p]|\d{1,3})"
    r"|[-_ ](?:backup|bak|old|orig|copy|\d{1,3})| ?\(\d{1,3}\))\Z")
_DECORATION_PREFIX = re.compile(r"\A(?:\.#|#)")
_COPY_BEFORE_EXT = re.compile(r"\A(.+?)(?: ?\(\d{1,3}\)| copy(?: \d{1,3})?|[-_]copy)(\.[^.]+)\Z", re.DOTALL)
# What a file system or a person's typing adds without changing what a name reads as: trailing
# white space and dots (Windows and SMB drop them; `kaggle.json.`), and, outside ASCII, format
# characters (zero-width space and joiners, soft hyphen, BOM) and compatibility forms (`.ｅnv`
# in fullwidth letters). `_normal` takes them off; every name rule sees both forms.
_TRAILING = re.compile(r"[\s.]+\Z")
# Anything a decoration could have added (a cheap look before taking decorations off).
_MAYBE_DECORATED = re.compile(r"[~#() ]|\.(?:bak|backup|bck|old|orig|save|sav|prev|copy|tmp|temp|sw[a-p]|\d)"
                              r"|[-_ ](?:backup|bak|old|orig|copy|\d)")

# Files that hold data, as opposed to code, for families that allow any prefix before a word.
_DATA_EXT = r"(?:json|ya?ml|toml|ini|cfg|conf|env|txt|properties|xml|csv|db|sqlite3?)"

# (regex over the undecorated, lower-cased file name; what it is). One family a line.
NAME_RULES: tuple[tuple[str, str], ...] = (
    # dotenv: `.env` and every variant (`.envrc`, `.env.local`, `.env-backup`), `prod.env`,
    # `prod.env.local`; templates are handled by ENV_TEMPLATE below
    (r"\.env.*", "dotenv file"),
    (r".+\.env(?:\.(?!(?:py|pyi|ipynb|js|ts|md|rst)$).+)?", "dotenv file"),
    # SSH private and public keys (`id_rsa`, `backup-id_ed25519_deploy`, `deploy_rsa`), host keys
    (r"(?:.*[._-])?id_(?:rsa|dsa|ecdsa|ed25519|xmss)(?:_sk)?(?:[._-].*)?", "SSH key"),
    (r".+[_-](?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?", "SSH key"),
    (r"ssh_host_.*key(?:\.pub)?", "SSH host key"),
    # deploy keys (GitHub/GitLab deploy keys)
    (r"(?:.*[._-])?deploy[_-]?key(?:\.pub|\.pem|\.txt)?", "deploy key"),
    # key and certificate stores by extension: PEM, PKCS#8/#12, Java, PuTTY, Apple .p8
    (r".+\.(?:pem|key|p12|pfx|pkcs12|p8|jks|keystore|bks|ppk)", "private key or key store"),
    (r"\.keystore|keystore\.properties", "Java key store"),
    # netrc: machine/login/password triples (curl, git, pip, wandb)
    (r"[._]?netrc", "netrc credentials"),
    # git credential stores
    (r"\.git-credentials|\.gitcookies", "git credentials"),
    # databases: PostgreSQL, MySQL client passwords
    (rf"(?:.+[._-])?\.?pgpass(?:\.{_DATA_EXT})?|\.my\.cnf|\.mylogin\.cnf", "database password file"),
    # package registries: npm, PyPI, RubyGems, Cargo
    (r"\.npmrc|\.pypirc", "package registry token"),
    # cloud CLIs: AWS (IAM console downloads too), Google Cloud, Azure, Oracle, DigitalOcean
    (r"(?:.*[._-])?credentials(?:\.(?:json|csv|db|ya?ml|toml|ini|cfg|conf|txt|xml))?",
     "cloud credentials"),
    (r"(?:.+_)?accesskeys\.csv", "AWS console access-key export"),
    (r"\.?passwd-s3fs", "s3fs mount credentials"),
    (r"application_default_credentials\.json|access_tokens\.db|adc\.json", "Google Cloud credentials"),
    (r"client_secrets?(?:[._-].*)?\.json", "OAuth client secret"),
    (r"(?:.*[._-])?service[_-]?account(?:[._-].*)?\.json", "cloud service-account key"),
    (r"accesstokens\.json|msal_token_cache\.(?:json|bin)|azureprofile\.json", "Azure credentials"),
    (r"\.s3cfg|\.boto|\.databrickscfg|rclone\.conf", "cloud storage credentials"),
    # Kubernetes
    (r"(?:.*[._-])?kubeconfig(?:\.(?:ya?ml|json|conf|txt))?", "Kubernetes config"),
    # Docker registry logins
    (r"\.dockercfg", "Docker registry credentials"),
    # HashiCorp: Vault tokens, Terraform state (holds every secret it created) and CLI tokens
    (r"\.vault-token|\.?vault[_-]pass(?:word)?(?:\.txt)?", "Vault token"),
    (r".+\.tfstate", "Terraform state"),
    (r"\.terraformrc|terraform\.rc|credentials\.tfrc\.json", "Terraform token"),
    # ML platforms: Kaggle, Modal, Hugging Face
    (r"\.?kaggle\.json", "Kaggle API token"),
    (r"\.modal\.toml", "Modal token"),
    # secrets files: `secrets.yaml`, `.secrets`, `secrets.py` (a module of that name shadows
    # the standard library's anyway), `prod-secrets.json`, `secret.txt`
    (r"\.?secrets(?:\..+)?", "secrets file"),
    (rf"(?:.+[._-])?secrets?\.{_DATA_EXT}", "secrets file"),
    # web server password files
    (r"\.?htpasswd(?:\.(?:txt|conf))?|\.?htdigest", "web server password file"),
    # password managers and VPN profiles (they embed keys)
    (r".+\.kdbx?|.+\.ovpn", "password database or VPN profile"),
    # GnuPG secret keyrings
    (r"secring\.gpg|secring\.kbx", "GnuPG secret keyring"),
    # OAuth token caches: google-auth quickstart flows (`token.json`, `token.pickle`), gcloud's
    # databases, Azure CLI service principals, Firebase and GitHub Copilot sign-ins
    (r"token\.(?:json|pickle|pkl)|(?:.+[._-])?oauth[._-]?tokens?\.(?:json|pickle|pkl|db)", "OAuth token cache"),
    (r"service_principal_entries\.json|msal_http_cache\.bin|firebase-tools\.json", "OAuth token cache"),
    # cloud console key exports: GCP service-account keys (`project-1a2b3c4d5e6f.json`),
    # Firebase admin SDK keys, AWS root keys, Azure publish settings and SDK auth files
    (r".+-[0-9a-f]{12}\.json", "Google Cloud service-account key export"),
    (r".*firebase-adminsdk.*\.json", "Firebase admin key"),
    (r"rootkey\.csv", "AWS root access keys"),
    (r".+\.publishsettings|.+\.azureauth", "Azure credentials"),
    # VPN and network configs: WireGuard (`wg0.conf`), NetworkManager, IPsec, Wi-Fi
    (r"wg(?:\d+|[-_][0-9a-z_-]+)?\.conf|.+\.nmconnection|ipsec\.secrets|wpa_supplicant\.conf", "VPN or network credentials"),
    # SMB/CIFS mount credentials (`mount -t cifs -o credentials=~/.smbcredentials`: username=,
    # password= lines); `.cifs-credentials` is a `credentials` name above
    (r"\.?smbcred(?:ential)?s?(?:[._-][a-z0-9_.-]*)?", "SMB mount credentials"),
    # package-manager rc files that hold tokens (.npmrc and .pypirc above)
    (r"\.yarnrc(?:\.yml)?|\.sentryclirc|ngrok\.yml", "package registry or service token"),
    # MCP client configs: their servers' `env` holds API keys (Claude, Cursor, VS Code, Windsurf, Cline)
    (r"\.?mcp\.json|mcp_config\.json|(?:cline_)?mcp_settings\.json|claude_desktop_config\.json"
     r"|\.claude\.json", "MCP client config"),
    # framework dev-variable files: Cloudflare Wrangler (`.dev.vars`, `.dev.vars.staging`),
    # Azure Functions, Firebase runtime config, Rails and SOPS encrypted YAML (`config/master.key`
    # is a .key above). Deliberately not: `.flaskenv`, which Flask documents as public and committed
    # (judged by content instead: one that writes a secret key out is withheld, `_settings_what`)
    (r"\.dev\.vars(?:\..+)?|local\.settings\.json|\.runtimeconfig\.json"
     r"|.+\.ya?ml\.enc", "framework secrets file"),
    # shell, REPL and editor histories: tokens typed on command lines. Any dotfile named for a
    # history (`.bash_history`, `.zhistory`, `.Rhistory`, `.histfile`, `.node_repl_history`),
    # fish's, less's and vim's
    (r"\.[a-z0-9_.-]*hist(?:ory|file)(?:[._-][a-z0-9_-]*)?|fish_history|\.lesshst|\.viminfo",
     "shell history"),
    # macOS keychains (`login.keychain-db`; their folder is a SUFFIX_RULE)
    (r".+\.keychain(?:-db)?", "macOS keychain"),
    # browser password, cookie and key stores by their own names (Chrome's `Login Data`,
    # Firefox's `key4.db`, `cookies.sqlite`); their profile folders are SUFFIX_RULES
    (r"login data(?: for account)?|key[34]\.db|signons\.sqlite|cookies\.sqlite", "browser password or cookie store"),
)

# An env file meant as a template: it may ship while it sets no value (see the module doc).
ENV_TEMPLATE = re.compile(
    r"(?:\.env(?:[._-][a-z0-9]+)*|.+\.env|env)[._-](?:example|sample|template|tmpl|tpl|dist|defaults?)"
    r"|(?:example|sample|template)\.env", re.DOTALL)

# (folder name anywhere in the path, what it holds): everything inside is withheld
DIR_RULES: tuple[tuple[str, str], ...] = (
    (".ssh", "SSH keys"),
    (".aws", "AWS credentials"),
    (".kaggle", "Kaggle credentials"),
    (".gnupg", "GnuPG keys"),
    ("private-keys-v1.d", "GnuPG keys"),
    (".mozilla", "Firefox profiles (saved passwords, cookies)"),
    (".thunderbird", "Thunderbird profiles (saved passwords)"),
    (".azure", "Azure credentials"),
    (".kube", "Kubernetes credentials"),
    (".oci", "Oracle Cloud credentials"),
    (".password-store", "pass password store"),
    (".secrets", "secrets folder"),
    (".envs", "dotenv folder"),
    (".credentials", "OAuth credentials folder"),  # googleapis quickstarts: ~/.credentials/*.json
    (".cloudflared", "Cloudflare tunnel credentials"),
)

# (path suffix of two or more parts, what it is): the folder's well-known credential files
SUFFIX_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".huggingface", "token"), "Hugging Face token"),
    (("huggingface", "token"), "Hugging Face token"),
    (("huggingface", "stored_tokens"), "Hugging Face tokens"),
    ((".docker", "config.json"), "Docker registry credentials"),
    ((".config", "gcloud"), "Google Cloud credentials"),
    (("gcloud", "legacy_credentials"), "Google Cloud credentials"),
    ((".config", "gh", "hosts.yml"), "GitHub CLI token"),
    (("gh", "hosts.yml"), "GitHub CLI token"),
    ((".config", "hub"), "GitHub hub token"),
    ((".cargo", "credentials"), "Cargo registry token"),
    ((".gem", "credentials"), "RubyGems token"),
    ((".m2", "settings.xml"), "Maven credentials"),
    ((".m2", "settings-security.xml"), "Maven credentials"),
    ((".gradle", "gradle.properties"), "Gradle signing and repository credentials"),
    ((".config", "doctl"), "DigitalOcean token"),
    ((".local", "share", "keyrings"), "desktop keyring"),
    ((".composer", "auth.json"), "Composer registry tokens"),
    (("composer", "auth.json"), "Composer registry tokens"),
    (("pypoetry", "auth.toml"), "Poetry registry credentials"),
    ((".nuget", "nuget", "nuget.config"), "NuGet credentials"),
    ((".codex", "auth.json"), "Codex sign-in"),
    (("github-copilot", "hosts.json"), "GitHub Copilot token"),
    (("github-copilot", "apps.json"), "GitHub Copilot token"),
    ((".cursor", "mcp.json"), "MCP client config"),
    ((".snowflake", "connections.toml"), "Snowflake credentials"),
    ((".dbt", "profiles.yml"), "dbt database credentials"),
    ((".fly", "config.yml"), "Fly.io token"),
    ((".wrangler", "config"), "Cloudflare Wrangler token"),
    ((".circleci", "cli.yml"), "CircleCI token"),
    (("sops", "age", "keys.txt"), "SOPS age keys"),
    ((".supabase", "access-token"), "Supabase token"),
    (("com.vercel.cli", "auth.json"), "Vercel token"),
    ((".vercel", "auth.json"), "Vercel token"),
    ((".now", "auth.json"), "Vercel token"),
    ((".ipython", "profile_default", "history.sqlite"), "IPython history"),
    (("nvim", "shada"), "Neovim history"),
    # macOS keychains; browser profile stores (saved passwords, cookies, session tokens):
    # Chrome, Chromium, Brave, Edge, Vivaldi, Opera on Linux and macOS, Firefox on macOS
    # (Linux's .mozilla is a DIR_RULE)
    (("library", "keychains"), "macOS keychains"),
    ((".config", "google-chrome"), "browser profile"),
    ((".config", "google-chrome-beta"), "browser profile"),
    ((".config", "google-chrome-unstable"), "browser profile"),
    ((".config", "chromium"), "browser profile"),
    ((".config", "bravesoftware"), "browser profile"),
    ((".config", "microsoft-edge"), "browser profile"),
    ((".config", "microsoft-edge-beta"), "browser profile"),
    ((".config", "vivaldi"), "browser profile"),
    ((".config", "opera"), "browser profile"),
    (("snap", "chromium"), "browser profile"),
    (("application support", "google", "chrome"), "browser profile"),
    (("application support", "chromium"), "browser profile"),
    (("application support", "bravesoftware"), "browser profile"),
    (("application support", "microsoft edge"), "browser profile"),
    (("application support", "vivaldi"), "browser profile"),
    (("application support", "firefox"), "browser profile"),
)

# Never shipped, but not secrets: git's own folder.
NEVER_DIRS: frozenset[str] = frozenset({".git"})

# Every name a rule above can match holds one of these (lower-cased, and outside any
# decoration): a cheap first look, so the 20,000 ordinary names of a big tree cost a few
# substring tests each. tests/packaging/test_credentials_props.py checks it against every rule.
NAME_KEYWORDS: tuple[str, ...] = (
    "env", "id_", "rsa", "dsa", "ed25519", "deploy", "ssh_host", ".pem", ".key", ".p12", ".pfx",
    ".pkcs12", ".p8", ".jks", "keystore", ".bks", ".ppk", "netrc", "credential", "gitcookies",
    "pgpass", ".my.cnf", "mylogin", "npmrc", "pypirc", "accesskeys", "access_tokens", "adc.json",
    "client_secret", "account", "accesstokens", "msal_token", "azureprofile", "s3cfg", ".boto",
    "databrickscfg", "rclone", "kubeconfig", "dockercfg", "vault", "tfstate", "terraform",
    "kaggle", ".modal", "secret", "htpasswd", "htdigest", ".kdb", ".ovpn", "secring", "history",
    "token", "service_principal", "msal_http", "firebase", ".json", "rootkey", "publishsettings",
    "azureauth", "wg", "nmconnection", "wpa_supplicant", "yarnrc", "sentryclirc", "ngrok", "mcp",
    "claude", ".dev.vars", "local.settings", "runtimeconfig", ".yml.enc", ".yaml.enc",
    "hist", "lesshst", "viminfo", "keychain", "login data", "key3.db", "key4.db", "signons",
    "cookies.sqlite", "smbcred", "passwd-s3fs",
)


@functools.cache
def _name_regex() -> re.Pattern[str]:
    """NAME_RULES as one regex, compiled at the first name with a keyword in it (most
    projects' files have none: `might_be_credential_name`), not at every submit's import."""
    return re.compile("|".join(f"(?P<n{i}>{rx})" for i, (rx, _) in enumerate(NAME_RULES)), re.DOTALL)


_DIRS = {d: what for d, what in DIR_RULES}
_SUFFIX_HEADS = frozenset(s[0] for s, _ in SUFFIX_RULES)
_SUFFIX_TAILS = frozenset(s[-1] for s, _ in SUFFIX_RULES)


_KEYWORDS = re.compile("|".join(re.escape(k) for k in NAME_KEYWORDS))


_ASCII_TRAILING = " \t\n\r\x0b\x0c."


def _normal(lowered: str) -> str:
    """A lower-cased name as it reads: compatibility forms folded (NFKC), format characters
    (Unicode Cf) dropped, trailing white space and dots taken off. The name itself (the same
    object) for the common plain-ASCII name, at the cost of two tests."""
    if lowered.isascii():
        if lowered[-1:] not in _ASCII_TRAILING:
            return lowered
    else:
        lowered = "".join(c for c in unicodedata.normalize("NFKC", lowered)
                          if unicodedata.category(c) != "Cf").lower()
    return _TRAILING.sub("", lowered) or lowered


def might_be_credential_name(name: str) -> bool:
    """False when no name rule can match (no keyword in the name, as written or as it reads):
    the common case."""
    lowered = name.lower()
    if _KEYWORDS.search(lowered) is not None:
        return True
    plain = _normal(lowered)
    return plain is not lowered and _KEYWORDS.search(plain) is not None


def name_variants(name: str, hidden: bool = True) -> list[str]:
    """The lower-cased name, the form it reads as (`_normal`), and each form of those without
    backup, copy and editor decorations: the one place every name rule's input is made.

    `id_rsa.bak~` gives id_rsa.bak~, id_rsa.bak, id_rsa; `kaggle (1).json` gives kaggle.json;
    a hidden copy of a name, `.token.json` or `.rootkey.csv`, gives the name (hiding a file is
    what a person does to a credential, not what makes it safe; only a rule that withholds
    reads that form: `hidden=False` leaves it out where a name would ship, as a template);
    vim's swap file of `.env` is `..env.swp`, of `id_rsa` `.id_rsa.swp` (un-hidden, then
    without `.swp`); `kaggle\u200b.json `
    reads as kaggle.json. Matched whole (fullmatch, and `.` matches a newline: `.env\n_` is a
    dotenv file, not `.env` followed by something else)."""
    first = name.lower()
    seen = [first]
    plain = _normal(first)
    if plain != first:
        seen.append(plain)
    todo = list(seen)
    while todo:
        current = todo.pop()
        forms = [_DECORATION_PREFIX.sub("", current), _DECORATION.sub("", current),
                 _COPY_BEFORE_EXT.sub(r"\1\2", current), _TRAILING.sub("", current)]
        for form in forms:
            if form and form not in seen:
                seen.append(form)
                todo.append(form)
    return seen + _unhidden(seen) if hidden else seen


def _unhidden(written: list[str]) -> list[str]:
    """The forms of the hidden names among `written` without their dot, after every form as
    written (`.git-credentials~` is git's before `*-credentials`): `.token.json` gives
    token.json, `..env` .env and env."""
    out: list[str] = []
    for form in written:
        if form.startswith(".") and len(form) > 1:
            out += [v for v in name_variants(form[1:]) if v not in written and v not in out]
    return out


def name_reason(name: str) -> str | None:
    """Why a file of this name is a credential, or None (templates are judged by content)."""
    if not might_be_credential_name(name):
        return None
    written = name_variants(name, hidden=False)
    if any(ENV_TEMPLATE.fullmatch(v) for v in written):
        return None
    for plain in written + _unhidden(written):
        m = _name_regex().fullmatch(plain)
        if m is not None:
            what = NAME_RULES[int(m.lastgroup[1:])][1]
            return f"withheld: credential file ({what})"
    return None


def is_env_template(name: str) -> bool:
    """An env template: it ships only if it sets no value (`env_template_reason`)."""
    lowered = name.lower()
    return (("env" in lowered or "env" in _normal(lowered))
            and any(ENV_TEMPLATE.fullmatch(v) for v in name_variants(name, hidden=False)))


def withheld_reason(relpath: str) -> str | None:
    """Why `relpath` (relative or absolute, `/`-separated) must not ship by name or place."""
    folder, _, name = relpath.rstrip("/").rpartition("/")
    return _folder_reason(folder) or _last_part_reason(folder, name) or name_reason(name)


def place_reason(path: str) -> str | None:
    """Why a path is in a credential place (a credential folder, a tool's credential file),
    judged on its folders only: a project folder named `secrets` is not itself withheld."""
    folder, _, name = path.rstrip("/").rpartition("/")
    return _folder_reason(folder) or _last_part_reason(folder, name)


@functools.lru_cache(maxsize=16384)
def _folder_reason(folder: str) -> str | None:
    """The place rules over a folder path (cached: a tree's files share few folders)."""
    forms = [_part_forms(p) for p in folder.split("/") if p]
    for part in forms:
        for form in part:
            what = _DIRS.get(form)
            if what is not None:
                return f"withheld: credential folder {form}/ ({what})"
    return _suffix_reason(forms)


@functools.lru_cache(maxsize=65536)
def _part_forms(part: str) -> frozenset[str]:
    """A path part lower-cased, with and without decorations (`.ssh.bak` is `.ssh`)."""
    lowered = part.lower()
    if not _MAYBE_DECORATED.search(lowered) and _normal(lowered) is lowered:
        return frozenset((lowered,))
    return frozenset(name_variants(part))


def _last_part_reason(folder: str, name: str) -> str | None:
    """The place rules that end at the last part: a folder named `.ssh`, `.docker/config.json`."""
    last = _part_forms(name)
    for form in last:
        what = _DIRS.get(form)
        if what is not None:
            return f"withheld: credential folder {form}/ ({what})"
    if not last.isdisjoint(_SUFFIX_TAILS):
        return _suffix_reason([_part_forms(p) for p in folder.split("/") if p] + [last])
    return None


def _suffix_reason(forms: list[frozenset[str]]) -> str | None:
    if not any(not f.isdisjoint(_SUFFIX_HEADS) for f in forms):
        return None
    for suffix, what in SUFFIX_RULES:
        n = len(suffix)
        for i in range(len(forms) - n + 1):
            if all(suffix[j] in forms[i + j] for j in range(n)):
                return f"withheld: credential file ({what})"
    return None


# -- content -------------------------------------------------------------------------------

CONTENT_MAX_FILE = 1 << 20  # files up to 1 MiB are read; bigger ones are judged by name only
CONTENT_HEAD = 64 << 10  # and of those, at most the first 64 KiB

# A password that is only a placeholder, and hosts that are only local (in examples and READMEs):
# `localhost` only as the whole host name (`localhost.corp.example.net` is some other machine).
_NOT_PLACEHOLDER = (rb"(?!(?:password|passwd|pass|pwd|pw|secret|token|changeme|username|user|x+|\*+)@)"
                    rb"(?![$<{%*])")
_NOT_LOCAL = rb"(?!localhost(?![A-Za-z0-9.-])|127\.|0\.0\.0\.0|example\.|\[::1\])"

# (a word the text must hold, lower-cased; regexes that must all match; what it is). One kind
# a line. The word is a cheap first look (bytes.find runs at memory speed; a regex over 64 KiB
# of ordinary text costs far more), so most files are cleared without a regex.
CONTENT_RULES: tuple[tuple[bytes, tuple[bytes, ...], str], ...] = (
    # PEM private keys of any kind: RSA, EC, DSA, OPENSSH, ENCRYPTED, plain PKCS#8, SSH2, PGP
    # blocks; a BEGIN line, optional headers (Proc-Type, Version), then a line of base64.
    # A quoted "-----BEGIN ... KEY-----\n" literal in code has no real line break: not a key.
    (b"private key", (rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[ \t]*\r?\n"
                      rb"(?:[A-Za-z][A-Za-z0-9-]*:[^\n]*\r?\n)*(?:[ \t]*\r?\n)?[ \t]*"
                      rb"[A-Za-z0-9+/=]{4,}[ \t]*\r?$",), "PEM private key"),
    (b"private key", (rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:\\r)?\\n"
                      rb"(?:[A-Za-z][A-Za-z0-9-]*:[^\\\n]*(?:\\r)?\\n)*(?:(?:\\r)?\\n)?[A-Za-z0-9+/=]{4,}",),
     "PEM private key in an escaped string"),
    # PuTTY private keys
    (b"putty-user-key-file-", (rb"PuTTY-User-Key-File-\d+:[^\n]*\n(?:[^\n]*\n){0,6}Private-Lines:",),
     "PuTTY private key"),
    # Google service-account (and any JSON) key: a "private_key" with a value
    (b'"private_key"', (rb"\"private_key\"\s*:\s*\"(?:\\[rnt]|\s)*(?:-----BEGIN|[A-Za-z0-9+/=\\]{40,})",),
     "JSON key file with a private_key"),
    # Google user credentials (gcloud application-default login)
    (b"authorized_user", (rb"\"type\"\s*:\s*\"authorized_user\"",), "Google user credentials"),
    # OAuth client secrets
    (b'"client_secret"', (rb"\"client_secret\"\s*:\s*\"[A-Za-z0-9_-]{12,}\"",), "OAuth client secret"),
    # kubeconfig with a token or a client key
    (b"kind:", (rb"^kind:[ \t]*[\"']?Config[\"']?[ \t]*\r?$",
                rb"^[ \t]*-?[ \t]*(?:token|client-key-data|id-token|refresh-token|access-token"
                rb"|password):[ \t]*[\"']?[A-Za-z0-9._~+/=:-]{8,}"),
     "Kubernetes config with a token or client key"),
    # AWS shared credentials (a copy of ~/.aws/credentials under another name)
    (b"aws_secret_access_key", (rb"(?i)^[ \t]*aws_secret_access_key[ \t]*[=:][ \t]*[\"']?[A-Za-z0-9/+=]{30,}",),
     "AWS secret access key"),
    # AWS console key exports, by their structure whatever their name and values (AWS's own
    # documented example key is still an export): the IAM console's `accessKeys.csv` and a new
    # user's `credentials.csv` (a header naming both columns, first in the file, and a row with a
    # key id (detect-secrets' AWSKeyDetector shape) and a 40-character secret), and the old root
    # `rootkey.csv` (AWSAccessKeyId= and AWSSecretKey= lines). A README quoting the CSV has its
    # prose first
    (b"secret access key", (rb"(?i)\A(?:\xef\xbb\xbf)?(?:[\"']?[a-z ]+[\"']?,)*[\"']?access key id[\"']?,"
                            rb"[\"']?secret access key[\"']?[ \t]*(?:,[^\r\n]*)?\r?$",
                            rb"^[^\r\n]*(?<![A-Z0-9])(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}[\"']?,"
                            rb"[\"']?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])"),
     "AWS console access-key export: a key row under `Access key ID,Secret access key`; delete "
     "the file and keep the key in the keychain, gpu secrets set AWS_SECRET_ACCESS_KEY"),
    # Alibaba Cloud's RAM console download (`AccessKey.csv`: AccessKey ID,AccessKey Secret) and
    # IBM Cloud's (`apikey.json`: name, createdAt, apikey)
    (b"accesskey secret", (rb"(?i)\A(?:\xef\xbb\xbf)?(?:[\"']?[a-z ]+[\"']?,)*[\"']?accesskey ?id[\"']?,"
                           rb"[\"']?accesskey ?secret[\"']?[ \t]*(?:,[^\r\n]*)?\r?$",
                           rb"^[^\r\n]*(?<![A-Za-z0-9])LTAI[A-Za-z0-9]{12,24}[\"']?,[\"']?[A-Za-z0-9]{30}(?![A-Za-z0-9])"),
     "Alibaba Cloud AccessKey export: a key row under `AccessKey ID,AccessKey Secret`; delete the "
     "file and keep the secret in the keychain, gpu secrets set NAME"),
    (b"apikey", (rb'"apikey"\s*:\s*"[A-Za-z0-9_-]{40,}"', rb'"createdAt"\s*:'),
     "IBM Cloud API key export: an apikey with its createdAt, as the console downloads it; keep "
     "the key in the keychain, gpu secrets set NAME"),
    (b"awssecretkey", (rb"(?i)^[ \t]*AWSAccessKeyId[ \t]*=[ \t]*(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}[ \t]*\r?$",
                       rb"(?i)^[ \t]*AWSSecretKey[ \t]*=[ \t]*[A-Za-z0-9/+]{40}[ \t]*\r?$"),
     "AWS root access-key export: AWSAccessKeyId= and AWSSecretKey= lines; delete the file and "
     "keep the key in the keychain, gpu secrets set AWS_SECRET_ACCESS_KEY"),
    # Azure service principals as the CLI prints them (`az ad sp create-for-rbac`: appId,
    # password, tenant; `--sdk-auth`: clientId, clientSecret, tenantId), and an App Service
    # publish profile's deployment password
    (b'"password"', (rb'"appId"\s*:\s*"[0-9A-Fa-f-]{36}"', rb'"password"\s*:\s*"[^"\s$<{]{16,}"',
                     rb'"tenant"\s*:\s*"[0-9A-Fa-f-]{36}"'),
     "Azure service principal: appId, tenant and its password as az ad sp create-for-rbac prints "
     "them; keep the password in the keychain, gpu secrets set AZURE_CLIENT_SECRET"),
    (b'"clientsecret"', (rb'"clientSecret"\s*:\s*"[^"\s$<{]{16,}"', rb'"tenantId"\s*:\s*"[0-9A-Fa-f-]{36}"'),
     "Azure service principal: tenantId and its clientSecret as --sdk-auth prints them; keep the "
     "secret in the keychain, gpu secrets set AZURE_CLIENT_SECRET"),
    (b"userpwd", (rb"<publishProfile\b", rb'\buserPWD="[^"\s$<{]{8,}"'),
     "Azure publish profile: a publishProfile with its userPWD deployment password; keep the "
     "password in the keychain, gpu secrets set NAME, not the profile"),
    # build tools' server passwords: Maven settings.xml (<server> ... <password>), NuGet.Config
    # (ClearTextPassword), Composer auth.json (http-basic)
    (b"<password>", (rb"<servers>", rb"(?s)<server>(?:(?!</server>).){0,600}?<password>\s*(?![$%{]|\s*<)[^<\s]{6,}\s*</password>"),
     "Maven settings with a server password: keep it in the keychain, gpu secrets set NAME, and "
     "write ${env.NAME} there"),
    (b"cleartextpassword", (rb'(?i)<add\s+key\s*=\s*"ClearTextPassword"\s+value\s*=\s*"(?![$%])[^"]{6,}"',),
     "NuGet.Config with a ClearTextPassword: keep it in the keychain, gpu secrets set NAME, and "
     "write %NAME% there"),
    (b"http-basic", (rb'"http-basic"\s*:\s*\{', rb'"password"\s*:\s*"(?![$%{])[^"\s]{6,}"'),
     "Composer auth.json with an http-basic password: keep it in the keychain, gpu secrets set "
     "NAME, and pass it as COMPOSER_AUTH"),
    # netrc entries with a password
    (b"password", (rb"^[ \t]*machine[ \t]+\S+\s+(?:login[ \t]+\S+\s+)?password[ \t]+\S+",),
     "netrc password"),
    # npm scoped auth lines (`//registry.npmjs.org/:_authToken=...`, `:_password=`, `:_auth=`)
    (b":_", (rb"(?i)^[ \t]*//[^\s]+:_(?:authtoken|auth|password)[ \t]*=[ \t]*[\"']?[^\s$\"'{]{8,}",),
     "npm registry token"),
    # .pypirc with a password under an index section
    (b"password", (rb"(?i)^\[(?:pypi|testpypi|distutils|server-login)\]",
                   rb"(?i)^[ \t]*password[ \t]*[=:][ \t]*[^\s$<{]\S{3,}"),
     "package registry password"),
    # docker config.json logins
    (b'"auths"', (rb"\"auth\"\s*:\s*\"[A-Za-z0-9+/=]{8,}\"",), "Docker registry login"),
    # WireGuard configs: an [Interface] with its PrivateKey (a VPN's key)
    (b"privatekey", (rb"(?i)^[ \t]*\[Interface\]", rb"(?i)^[ \t]*PrivateKey[ \t]*=[ \t]*[A-Za-z0-9+/]{42,43}="),
     "WireGuard private key"),
    # Kaggle API token (kaggle.json under any name): an object of exactly a username and a key
    # (32 hex digits, or a KGAT_ access token), either order
    (b"username", (rb'\{\s*"(?:username"\s*:\s*"[^"\\\r\n]{1,100}"\s*,\s*"key"\s*:\s*"'
                     rb'(?:[0-9a-fA-F]{32}|KGAT_[A-Za-z0-9_-]{16,})"'
                     rb'|key"\s*:\s*"(?:[0-9a-fA-F]{32}|KGAT_[A-Za-z0-9_-]{16,})"\s*,\s*"username"\s*:\s*"'
                     rb'[^"\\\r\n]{1,100}")\s*\}',),
     "Kaggle API token"),
    # Modal token secret (.modal.toml under any name, MODAL_TOKEN_SECRET=): `as-` and its body
    (b"token_secret", (rb"(?i)token_secret[\"']?[ \t]*[=:][ \t]*[\"']?as-[A-Za-z0-9]{17,}",), "Modal token"),
    # W&B API key (40 hex digits) set as WANDB_API_KEY (env files, YAML, os.environ, setdefault)
    # or passed to wandb.login(key=...)
    (b"wandb", (rb"(?i)(?:wandb_api_key[\"'\]]*[ \t]*[=:,]|wandb\.login\([^)]{0,200}?\bkey[ \t]*=)"
                rb"[ \t]*[\"']?[0-9a-f]{40}(?![0-9A-Za-z])",), "W&B API key"),
)

# A PostgreSQL password file under any name: every line that is not blank or a comment is
# host:port:database:user:password with a host that reads as one (`*`, localhost, a dotted
# name or address, or any name on PostgreSQL's or PgBouncer's port) and a password.
_PGPASS_LINE = (rb"(?:(?:\*|localhost|[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+):(?:\*|\d{2,5})"
                rb"|[A-Za-z0-9_.-]+:(?:543\d|6432)):[^\s:#]+:[^\s:#]+:[^\r\n]*[^\s]")
_PGPASS_FIRST = re.compile(rb"(?:[ \t]*(?:#[^\n]*)?\r?\n)*" + _PGPASS_LINE + rb"[ \t]*\r?(?:\n|\Z)")
_PGPASS_FULL = re.compile(rb"(?:[ \t]*(?:#[^\n]*)?|" + _PGPASS_LINE + rb"[ \t]*)\r?")


# s3fs mount credentials (`~/.passwd-s3fs`) under any name: the file opens (after comments)
# with ACCESS_KEY_ID:SECRET_ACCESS_KEY, optionally after a bucket name. One anchored look.
_S3FS = re.compile(rb"(?:[ \t]*(?:#[^\n]*)?\r?\n)*[ \t]*(?:[a-z0-9][a-z0-9.-]{1,62}:)?"
                   rb"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}:[A-Za-z0-9/+]{40}[ \t]*\r?(?:\n|\Z)")


def _pgpass_what(head: bytes) -> str | None:
    """A file of pgpass lines (and comments), whatever its name."""
    if _PGPASS_FIRST.match(head) is None:  # one anchored look: an ordinary file fails at once
        return None
    if all(_PGPASS_FULL.fullmatch(line) for line in head.split(b"\n")):
        return "PostgreSQL password file (pgpass lines)"
    return None


# -- settings files that write a password or a secret key out -------------------------------
#
# Two shapes, judged by content whatever the file's name:
# - KEY=value settings: dotenv and `.flaskenv`, Java/Android `.properties` (`storePassword=`),
#   mount credentials (`.smbcredentials`: username=, password=), INI and flat TOML, shell
#   `export` lines, a Python settings module of bare assignments. Every line must be blank, a
#   comment (`#`, `;`, `!`), a `[section]` or an assignment with `=`, so prose, code and YAML
#   (a README that shows `password=`, a compose file's `POSTGRES_PASSWORD: example`) are not
#   this shape at all.
# - PHP settings, in a file that opens with `<?php`: `define('DB_PASSWORD', '...')`
#   (wp-config.php), and where it declares no class or function (a settings file, not code)
#   `$cfg['...']['password'] = '...';` and `'password' => '...'`.
# A line counts when its name ends in a password or secret-key word (detect-secrets'
# KeywordDetector list, SECRET_WORDS, plus tokens, salts and WordPress's keys) and its value
# is written out: not empty, not a reference (`${DB_PASSWORD}`, `$VAR`, `%(x)s`, `{{ x }}`,
# `<your password>`, `os.environ[...]`, `env('X')`, a path), not a placeholder
# (`password_here`, `put your unique phrase here`, `*****`, `changeme`), not a sentence (a
# language file's 'The provided password is incorrect.'), and, as detect-secrets filters its
# keyword findings, holding a letter and not a run like `abcdef`. The first look costs a file
# one `=` search and one anchored match that code and prose fail on their first line or so
# (PHP files: a `define` search and a look for declarations): about 1% of the content check.

# detect-secrets' KeywordDetector.DENYLIST (plugins/keyword.py, 1.5.0; tests check it against
# the installed one): a name holding one of these is a password's or a secret's name.
SECRET_WORDS: tuple[str, ...] = (
    "api_?key", "auth_?key", "service_?key", "account_?key", "db_?key", "database_?key",
    "priv_?key", "private_?key", "client_?key", "db_?pass", "database_?pass", "key_?pass",
    "password", "passwd", "pwd", "secret", "contraseña", "contrasena",
)
# Ours: detect-secrets lets any word follow (`password_min_length`); here the name must END in
# the word, with these endings too. Short words only after a separator (`db_pass`, not
# `bypass`; `db_pwd`, not `oldpwd`).
_SECRET_TAIL = (r"(?:" + "|".join(w for w in SECRET_WORDS if w not in ("pwd",)) +
                r"|passphrase|secret[_.-]?(?:access[_.-]?)?key(?:[_.-]?base)?|(?:encryption|signing|master|hmac)[_.-]?key"
                r"|(?:logged[_.-]?in|nonce)[_.-]?key|token|(?:\A|[_. -])(?:pass|pwd|pw|salt))\Z")
_SECRET_NAME = re.compile(_SECRET_TAIL, re.IGNORECASE)
# a word every name `_SECRET_NAME` takes holds (lower-cased): a YAML or JSON file without one
# (and without a `\u` escape, which could spell one in a JSON key) names no secret, and is not
# parsed (`_mapping_what`: parsing every JSON file cost half again of its content check)
_KEY_WORDS = (b"key", b"pass", b"pw", b"secret", b"token", b"salt", b"contrase")
_NOT_SECRET_NAMES = frozenset({"pwd", "oldpwd", "wp_cache_key_salt"})

# A line that is not of a KEY=value file (blank, `#`/`;`/`!` comment, `[section]`, `NAME=...`):
# a file without one is that shape. One search, which code and prose end on their first lines.
_NOT_FLAT = re.compile(rb"^(?![ \t]*(?:[#;!]|\[\[?[^\]\n]*\]\]?[ \t]*\r?$|\r?$"
                       rb"|(?:export[ \t]+)?[A-Za-z_][A-Za-z0-9_.\- \t]*=))", re.MULTILINE)
# A line that is not of a YAML mapping (blank, comment, document marker, list item, `key:` with
# or without a value on the line): a file without one is that shape (`_mapping_what`).
_NOT_YAML = re.compile(rb"^(?![ \t]*(?:#|-(?:[ \t]|\r?$)|\r?$|---|\.\.\.(?:[ \t]|\r?$)"
                       rb"|[\"']?[A-Za-z_][A-Za-z0-9_.\-]*[\"']?[ \t]*:(?:[ \t]|\r?$)))", re.MULTILINE)
_YAML_SECRET = re.compile(rb"^[ \t]*(?:-[ \t]+)?[\"']?([A-Za-z_][A-Za-z0-9_.\-]*)[\"']?[ \t]*:[ \t]+([^\r\n]*)",
                          re.MULTILINE)
_FLAT_SECRET = re.compile(rb"^[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_.\- ]*?)[ \t]*=([^\r\n]*)",
                          re.MULTILINE)
# PHP: define('NAME', 'value'); $var[...]['name'] = 'value'; 'name' => 'value'
_PHP_STRING = rb"""(?:'((?:\\.|[^'\\\n])*)'|"((?:\\.|[^"\\\n])*)")"""
_PHP_DEFINE = re.compile(rb"""\bdefine\s*\(\s*['"]([A-Za-z_][A-Za-z0-9_]*)['"]\s*,\s*""" + _PHP_STRING + rb"""\s*\)""",
                         re.IGNORECASE)
_PHP_ASSIGN = re.compile(
    rb"""\$([A-Za-z_][A-Za-z0-9_]*)((?:\[[^\]\n]*\])*)\s*=\s*""" + _PHP_STRING + rb"""\s*;"""
    rb"""|['"]([A-Za-z_][A-Za-z0-9_.-]*)['"]\s*=>\s*""" + _PHP_STRING + rb"""(?=\s*[,\])])""")
# PHP code, not settings: a file that declares a class, interface, trait, enum or function (a
# controller's `'password' => '--password='.$x`, a factory's fixtures) is judged by define() only.
_PHP_CODE = re.compile(rb"^[ \t]*(?:(?:abstract|final|readonly|public|protected|private|static)[ \t]+)*"
                       rb"(?:class|interface|trait|enum|function)[ \t]+[a-z_]", re.MULTILINE)
_PHP_LAST_KEY = re.compile(rb"""\[\s*['"]([^'"\]]*)['"]\s*\]\s*\Z""")

# A value that is not written out: a reference or template, a path, or a placeholder.
_REFERENCE = re.compile(
    rb"\$[A-Za-z_{(]|\$2[aby]?\$\d\d\$"  # $VAR, ${VAR}, $(cmd); a bcrypt hash (a factory's)
    rb"|<[^<>]*>\Z|\[[^\[\]]*\]\Z|\{[^{}]*\}\Z|\*+\Z|@[\w.-]+@\Z|%[\w.-]+%\Z"  # <yours>, [UNK], {x}, *****, @x@, %X%
    rb"|(?:/|~/|\./|\.\./)\S*\Z"  # a path to where the secret is
    rb"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){2,}(?::[A-Za-z_][\w.]*)?\Z"  # a module or class: keyring.backends.libsecret
    rb"|.*(?:\$\{|\{\{|%\(|\$\(|os\.environ|getenv|process\.env)"
    rb"|[\w.-]+[\[(].*[\])]\Z", re.DOTALL)  # detect-secrets' indirect reference: env('X'), cfg['x']
_PLACEHOLDER_WORDS = frozenset({
    b"password", b"passwd", b"passphrase", b"secret", b"token", b"changeme", b"changeit",
    b"change_me", b"change-me", b"admin", b"administrator", b"root", b"guest", b"username",
    b"testing", b"example", b"sample", b"dummy", b"default", b"development", b"production",
    b"android", b"minioadmin", b"postgres", b"notasecret", b"unknown", b"undefined",
    b"required", b"optional", b"disabled", b"enabled"})
_PLACEHOLDER = re.compile(
    rb"(?:password|passwd|pass|secret|test|demo|admin|root|user|qwerty|letmein|welcome)[\d!@#$%^&*._-]*\Z"
    rb"|(?:dev|development|default|debug|local|test|testing|sample|dummy|fake|insecure)[ _-]?(?:secret[ _-]?)?"
    rb"(?:key|secret|password|passwd|pass|token)\Z"
    rb"|.*(?:your|_here|-here| here\Z|changeme|change[_ -]me|placeholder|unique phrase|example|replace[_ -]?(?:me|this|with)"
    rb"|fill[_ -]?in|xxxx|\*\*\*|\.\.\.|todo|tbd)", re.DOTALL)
# A word of a sentence: a value of two or more is a language file's message ('The :attribute
# is incorrect.', 'Forgot password?'), not a password
_PROSE_WORD = re.compile(r"[:(\"'“‘]?[^\W\d_][^\W\d_'’.-]*(?:['’.-][^\W\d_]+)*[,;:)\"'”’!?.]*")
_SEQUENCES = (b"ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/",
              b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLMNOPQRSTUVWXYZ+/",
              b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ" * 2, b"0123456789" * 2,
              b"0123456789ABCDEF" * 2, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ=/")  # detect-secrets'
SETTING_MIN = 6  # characters of a value that counts (keytool's shortest store password)


def _secret_name(name: bytes) -> bool:
    text = name.decode("utf-8", "replace").strip()
    return (_SECRET_NAME.search(text) is not None and text.lower() not in _NOT_SECRET_NAMES)


def _written_out(value: bytes) -> bool:
    """A setting's value (all after its `=`) is a password or key written out, not a reference
    or a placeholder."""
    quoted = _QUOTED.match(value.strip())
    if quoted:
        v = quoted.group(2).strip()
    else:  # a comment after white space (`KEY= # fill in`), as dotenv and INI read it: `KEY=#x` sets #x
        v = re.sub(rb"[ \t]+[#;].*\Z", b"", value).strip()
    if len(v) < SETTING_MIN or _REFERENCE.match(v):
        return False
    lowered = v.lower()
    if lowered in _PLACEHOLDER_WORDS or _PLACEHOLDER.match(lowered):
        return False
    if not any(65 <= c <= 90 or 97 <= c <= 122 for c in v):  # no letter: `123456`, `******`
        return False
    if any(v.upper() in seq for seq in _SEQUENCES):
        return False
    text = v.decode("utf-8", "replace")
    if any(c.isalpha() and not c.isascii() for c in text):  # a language's words: 'パスワード', 'Kennwörter'
        return False
    words = text.split()
    if len(words) >= 2 and (all(_PROSE_WORD.fullmatch(w) for w in words)  # 'Forgot password?'
                            or sum(len(w) > 1 and re.sub(r"['’-]", "", w).isalpha() for w in words) >= 2):  # 'E-mail / Password'
        return False
    word = re.sub(r"(?<=[A-Za-z])['’-](?=[A-Za-z])", "", text.strip(" :.!?…*()[]\"'“”‘’"))
    if word.isalpha():  # a word (`Passwort`, `Mot-de-passe` in a language bundle), unless it reads as random
        return len(word) >= 24 or (len(word) >= 10 and not word.islower() and not word[1:].islower()
                                   and not word.isupper())
    return True


_QUOTED = re.compile(rb"""(["'`])(.*?)\1(?:[ \t]+[#;].*)?\Z""", re.DOTALL)


def _first(*values: bytes | None) -> bytes | None:
    return next((v for v in values if v is not None), None)


def _label(name: bytes) -> str:
    text = name.decode("utf-8", "replace").strip()[:64]
    return "a setting" if tokens.value_token(text) else text


def _keep(label: str) -> str:
    """What to do instead, naming the variable where the setting's name can be one."""
    name = label if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", label) else "NAME"
    return f"keep it in the keychain, gpu secrets set {name}"


def _settings_what(head: bytes, lowered: bytes) -> str | None:
    """A KEY=value settings file or a PHP settings file that writes a password or secret key
    out (see above), or None."""
    found: list[tuple[bytes, bytes | None, int]] = []  # (name, value, offset)
    php = lowered[:256].lstrip().startswith(b"<?php")
    if php and (b"define(" in lowered or b"define (" in lowered):
        found += [(m.group(1), _first(m.group(2), m.group(3)), m.start()) for m in _PHP_DEFINE.finditer(head)]
    if php and _PHP_CODE.search(lowered) is None:
        for m in _PHP_ASSIGN.finditer(head):
            if m.group(1) is not None:
                last = _PHP_LAST_KEY.search(m.group(2))
                found.append((last.group(1) if last else m.group(1), _first(m.group(3), m.group(4)), m.start()))
            else:
                found.append((m.group(5), _first(m.group(6), m.group(7)), m.start()))
    for name, value, start in sorted(found, key=lambda f: f[2]):
        if _secret_name(name) and _written_out(b"'" + (value or b"") + b"'"):
            line, label = head.count(b"\n", 0, start) + 1, _label(name)
            return (f"PHP settings: {label} on line {line} holds a password or secret key written "
                    f"out; {_keep(label)}, and read it with getenv()")
    text = head if len(head) < CONTENT_HEAD else head[:head.rfind(b"\n") + 1]  # a whole last line
    if text.startswith(b"\xef\xbb\xbf"):  # a BOM (Windows editors' INI and .properties)
        text = text[3:]
    if b":" in text and (any(w in lowered for w in _KEY_WORDS) or b"\\u" in head):
        what = _mapping_what(text, whole=len(head) < CONTENT_HEAD)
        if what is not None:
            return what
    if b"=" not in text or _NOT_FLAT.search(text) is not None:
        return None
    return _secret_line(text, _FLAT_SECRET, "KEY=value")


def _secret_line(text: bytes, lines: re.Pattern, kind: str) -> str | None:
    """The first `name`/`value` pair of `lines` (groups 1 and 2) that writes a secret out, said
    with its line and what to do instead; None if no pair does."""
    for m in lines.finditer(text):
        if _secret_name(m.group(1)) and _written_out(m.group(2)):
            line, label = text.count(b"\n", 0, m.start()) + 1, _label(m.group(1))
            return (f"{kind} settings: {label} on line {line} holds a password or secret key "
                    f"written out; {_keep(label)}, and read it from the environment")
    return None


def _mapping_what(text: bytes, whole: bool) -> str | None:
    """A YAML or JSON settings file that writes a password or secret key out (`password:
    Hunter2!` in a config.yaml, `{"db": {"password": "..."}}` in a settings.json), judged by the
    names and values the KEY=value rule judges; or None.

    Only a file of that shape: YAML where every line is a comment, a list item, a document
    marker or `key:` (a block of free text, code or a flow mapping makes it something else, and
    it is left to the other rules), JSON where the whole text parses as an object or array."""
    stripped = text.lstrip()
    if stripped[:1] in (b"{", b"[") and whole:
        try:
            doc = json.loads(stripped.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            doc = None
        if doc is not None:
            for name, value in _json_strings(doc):
                if _secret_name(name.encode()) and _written_out(b"'" + value.encode() + b"'"):
                    label = _label(name.encode())
                    return (f"JSON settings: {label} holds a password or secret key written out; "
                            f"{_keep(label)}, and read it from the environment")
            return None
    if _NOT_YAML.search(text) is not None:
        return None
    return _secret_line(text, _YAML_SECRET, "YAML")


def _json_strings(doc: Any, depth: int = 0):
    """(key, string value) of every object in a JSON document, depth first (64 levels at most)."""
    if depth > 64:
        return
    if isinstance(doc, dict):
        for key, value in doc.items():
            if isinstance(value, str):
                yield str(key), value
            else:
                yield from _json_strings(value, depth + 1)
    elif isinstance(doc, list):
        for item in doc:
            yield from _json_strings(item, depth + 1)


# Gate words of rules whose value is itself a run of 20 or more base64 characters (a Kaggle or
# W&B key): looked for only in a text that holds such a run (`_TOKEN_RUN`), which ordinary prose
# and most code do not: two searches a file spared.
_RUN_GATES = frozenset({b"username", b"wandb"})

# The rules by word, each word looked for once, and the words behind a shorter gate word they
# share ("private" for three of them): a file without the gate word costs one search, not three.
_GATES = (b"private", b"secret", b"auth", b"putty", b"password")


@functools.cache
def _content_rules() -> tuple[tuple[bytes, tuple[tuple[bytes, tuple], ...]], ...]:
    """CONTENT_RULES grouped and compiled at the first file whose content is read (a warm
    submit reads none: its verdicts are remembered by the hash cache)."""
    by_word: dict[bytes, list] = {}
    for word, rxs, what in CONTENT_RULES:
        by_word.setdefault(word, []).append((tuple(re.compile(rx, re.MULTILINE) for rx in rxs), what))
    by_gate: dict[bytes, list] = {}
    for word, rules in by_word.items():
        gate = next((g for g in _GATES if g in word), word)
        by_gate.setdefault(gate, []).append((word, tuple(rules)))
    return tuple((gate, tuple(words)) for gate, words in by_gate.items())



# A URL with a password: a git-credential store line (`https://user:token@host` alone on its
# line), or a package index, registry or git URL set in a config (pip.conf, uv.toml, .condarc,
# requirements.txt). Placeholders (`password`, `$TOKEN`, `<token>`, `***`) and local hosts
# (`postgres:postgres@localhost` in a README) are not credentials.
_URL_WITH_PASSWORD = re.compile(rb"https?://[^\s:/@\"'<>]+:" + _NOT_PLACEHOLDER
                                + rb"[^\s/@\"'<>]+@" + _NOT_LOCAL + rb"[^\s/\"'<>]*")
# Any other scheme's URL with a password: a database or service connection string
# (`postgres://app:pw@db.corp.net/app`, `mongodb+srv://`, `redis://:pw@host`, `amqp://`, `ftp://`),
# in settings.py, a notebook, a compose file. Its password group is judged like a setting's value
# (`_dsn_password`): a default such as `postgres:postgres@db` or `root:root@mysql` is none.
_DSN_WITH_PASSWORD = re.compile(rb"(?<![A-Za-z0-9+.-])(?!https?://)[A-Za-z][A-Za-z0-9+.-]{1,30}://[^\s:/@\"'<>]*:"
                                + _NOT_PLACEHOLDER + rb"([^\s/@\"'<>]+)@" + _NOT_LOCAL + rb"[^\s/\"'<>]*")
_URL_SETTING = re.compile(rb"(?i)(?:(?:index[-_]url|find[-_]links|extra[-_]index|registry|channel_alias"
                          rb"|\burl)[\"']?[ \t]*[=:][ \t]*[\"']?"
                          # pip's own option syntax in a requirements file: `--index-url URL`, `-i URL`
                          rb"|(?:^|\s)(?:--(?:extra-)?index-url|--find-links|-[if])[ \t]+)(?:git\+)?$")


def _url_password_what(head: bytes) -> str | None:
    """A written-out password in an http(s) URL to another machine, anywhere in the text: a
    git credential store's line (the URL alone on it), an index setting, or any other place
    (`git clone https://me:pw@host/org/repo` in a README gives the job the password just the
    same). Placeholders (`user:password@`, `${TOKEN}`), loopback and example hosts are none."""
    found = None
    for m in _URL_WITH_PASSWORD.finditer(head):
        line_start = head.rfind(b"\n", 0, m.start()) + 1
        line_end = head.find(b"\n", m.end())
        before = head[line_start:m.start()]
        after = head[m.end():len(head) if line_end == -1 else line_end]
        if not before.strip() and not after.strip(b" \t\r/"):
            return "git credentials (a URL with a password)"
        if _URL_SETTING.search(before[-60:]):
            return "package index URL with a password"
        found = found or "a URL with a password"
    if found is None and _dsn_with_password(head):
        return "a database or service URL with a password"
    return found


def _dsn_with_password(text: bytes) -> bool:
    """A connection string of `text` has its password written out: not a default or
    placeholder word (`postgres`, `root`, `admin`, `secret`, `changeme`) nor a reference
    (`%(pw)s`, `{pw}`)."""
    for m in _DSN_WITH_PASSWORD.finditer(text):
        password = m.group(1)
        lowered = password.lower()
        if not (lowered in _PLACEHOLDER_WORDS or _PLACEHOLDER.match(lowered) or _REFERENCE.match(password)):
            return True
    return False

def url_credential(text: str) -> str | None:
    """What credential a URL (or a line holding URLs: an index option, a requirement) carries,
    or None: a password in it (`https://user:pw@host`), or a vendor token anywhere in it.

    The one judge of URLs in dependency settings (core.packaging.requirements asks it for each
    index option and requirement), with the same rules the bundle's content check applies to
    files, so a placeholder (`https://user:${PIP_TOKEN}@host`, filled in by pip on the target
    from a keychain secret) passes and a written-out password does not."""
    raw = text.encode("utf-8", "surrogateescape")
    if _URL_WITH_PASSWORD.search(raw) or _dsn_with_password(raw):
        return "a URL with a password"
    token = tokens.find_token(raw)
    return f"a URL holding {token}" if token else None


# An env template line that sets nothing: blank, comment, or NAME= with an empty value. A `#`
# starts a comment only at the line's start or after white space, as bash and dotenv read it:
# `PASSWORD=#S3cr3t` sets `#S3cr3t`, `PASSWORD= # fill in` sets nothing.
_EMPTY_ASSIGNMENT = re.compile(
    rb"\s*(?:#.*|(?:export\s+)?[A-Za-z_][A-Za-z0-9_.-]*[ \t]*[=:][ \t]*(?:\"\"|'')?(?:[ \t]+#.*)?[ \t]*)?\Z",
    re.DOTALL)
# The variable a template line sets, named only when the line reads NAME= or NAME: (else the
# line has no name to show: its first word may be the value itself).
_ASSIGNED_NAME = re.compile(rb"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]{0,63})[ \t]*[=:]")

# Binary key stores by their first bytes: Java (JKS, JCEKS), KeePass (kdbx and kdb).
BINARY_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xfe\xed\xfe\xed", "Java key store"),
    (b"\xce\xce\xce\xce", "Java key store (JCEKS)"),
    (b"\x03\xd9\xa2\x9a\x67\xfb\x4b\xb5", "KeePass database"),
    (b"\x03\xd9\xa2\x9a\x65\xfb\x4b\xb5", "KeePass database"),
)
# Encrypted PKCS#8 keys start SEQUENCE { SEQUENCE { OID of a PKCS#5 scheme (PBES2, or PBES1's
# pbeWithMD5AndDES-CBC and kin, which `openssl pkcs8 -v1` still writes) or a PKCS#12 PBE, ... } ... }
_ENCRYPTED_KEY_OIDS = (b"\x06\x09\x2a\x86\x48\x86\xf7\x0d\x01\x05",  # pkcs-5 (1.2.840.113549.1.5.*)
                       b"\x06\x0a\x2a\x86\x48\x86\xf7\x0d\x01\x0c\x01")  # pkcs-12PbeIds
# Text a base64 blob of a credential holds: a key's PEM armour, a key file's JSON field.
_WRAPPED = (b"PRIVATE KEY", b'"private_key"', b'"service_account"', b'"refresh_token"')
_B64_CHARS = bytes(0x62 if chr(i).isascii() and (chr(i).isalnum() or chr(i) in "+/=-_")
                   else 0x20 for i in range(256))


def _b64_markers(text: bytes) -> list[bytes]:
    """What `text` looks like inside base64 at each of the three alignments (standard and
    URL-safe alphabets): only the characters that `text` alone decides."""
    out = []
    for i in range(3):
        enc = base64.b64encode(b"\0" * i + text + b"\0\0\0")
        core_chars = enc[-(-4 * i // 3):(4 * (i + len(text))) // 3]
        out += [core_chars, core_chars.replace(b"+", b"-").replace(b"/", b"_")]
    return out


_B64_RUN = b"b" * 64  # a wrapped key is longer (MIME lines are 76)
_TOKEN_RUN = b"b" * tokens.RUN_MIN
_WRAPPED_MARKERS = tuple(dict.fromkeys(m for t in _WRAPPED for m in _b64_markers(t)))

# JSON string escapes, and the seam between two strings of a list of lines (nbformat stores a
# cell's text and outputs as ["line\n", "line\n"]): a notebook's printed key, or a key file held
# in a JSON string (once or twice), read as the text it is. Taken off with bytes.replace (C
# speed); `\uXXXX` is left (a key's characters are ASCII, and JSON writers leave them so).
_JSON_LINE_SEAM = re.compile(rb'\\n"[ \t]*\r?\n?[ \t]*,[ \t]*\r?\n?[ \t]*"')
_JSON_LIST_OPEN = re.compile(rb'\[\s*"')  # the first line starts a line too
_JSON_ESCAPES = ((b'\\"', b'"'), (b"\\n", b"\n"), (b"\\r", b"\r"), (b"\\t", b"\t"), (b"\\/", b"/"))
JSON_UNESCAPE_LEVELS = 2
ESCAPE_NEAR = 64  # bytes either side of a rule's word where an escape makes the view worth it
ESCAPE_LOOKS = 16  # occurrences of a word looked at


def json_unescaped(text: bytes) -> bytes:
    """`text` with one level of JSON string escapes taken off, and the strings of a list of
    lines joined (`["a\\n",\n  "b"]` reads `[\na\nb"]`). An escaped backslash stays one backslash:
    `\\\\n` is `\\n`, the next level's newline."""
    text = _JSON_LIST_OPEN.sub(b"[\n", _JSON_LINE_SEAM.sub(rb"\\n", text))
    hold = b"\0\1\0" if b"\0\1\0" not in text else None
    if hold:
        text = text.replace(b"\\\\", hold)
    for escaped, char in _JSON_ESCAPES:
        text = text.replace(escaped, char)
    return text.replace(hold, b"\\") if hold else text


# Changes to the content rules change this id, so cached verdicts are taken again.
CONTENT_RULES_ID = hashlib.sha256(repr((CONTENT_RULES, ENV_TEMPLATE.pattern, CONTENT_MAX_FILE,
                                        CONTENT_HEAD, BINARY_MAGIC, _URL_WITH_PASSWORD.pattern, _DSN_WITH_PASSWORD.pattern,
                                        _URL_SETTING.pattern, _WRAPPED, tokens.DETECT_SECRETS_PLUGINS,
                                        tokens.SUPPLEMENT, tokens.detect_secrets_version(),
                                        _EMPTY_ASSIGNMENT.pattern, _PGPASS_LINE, _JSON_ESCAPES,
                                        _JSON_LINE_SEAM.pattern, _JSON_LIST_OPEN.pattern,
                                        JSON_UNESCAPE_LEVELS, ESCAPE_NEAR, ESCAPE_LOOKS,
                                        sorted(_RUN_GATES), _SECRET_TAIL, sorted(_NOT_SECRET_NAMES),
                                        _NOT_FLAT.pattern, _FLAT_SECRET.pattern, _PHP_DEFINE.pattern, _PHP_ASSIGN.pattern, _PHP_CODE.pattern,
                                        _REFERENCE.pattern, sorted(_PLACEHOLDER_WORDS),
                                        _PLACEHOLDER.pattern, _PROSE_WORD.pattern, _QUOTED.pattern, SETTING_MIN,
                                        _ENCRYPTED_KEY_OIDS, _S3FS.pattern, 5))
                                  .encode()).hexdigest()[:16]


def content_reason(head: bytes, size: int | None = None) -> str | None:
    """Why these first bytes of a file are a credential, whatever the file's name, or None.

    `size` is the file's whole size (None: `head` is the whole file). Judged: the text rules
    and vendor tokens; the same over the text again when it is UTF-16 (with or without a BOM,
    either byte order); the same over the text JSON-unescaped, once or twice, when it holds JSON
    escapes (a notebook's output cell, a key file inside a JSON string); a DER private key or a
    binary key store; base64 that wraps a key."""
    mask = head.translate(_B64_CHARS)
    lowered = head.lower()
    gated: list[int] = []
    what = _text_what(head, lowered, mask, gated=gated)
    binary = b"\0" in head  # JSON text holds no NUL; UTF-16 text and binaries do
    if what is None and gated and not binary:
        what = _escaped_what(head, lowered, gated)
    if what is None and binary:
        what = _utf16_what(head)
    if what is None:
        what = _binary_what(head, len(head) if size is None else size)
    if what is None and mask.find(_B64_RUN) != -1:  # base64 long enough to hold a key
        what = _wrapped_what(head)
    return f"withheld: content is a credential ({what})" if what else None


def _text_what(head: bytes, lowered: bytes, mask: bytes | None = None,
               gated: list[int] | None = None) -> str | None:
    """The text rules and vendor tokens over `head`; `mask` is `head` through _B64_CHARS;
    `gated` is told which groups of rules had their gate word in the text."""
    mask = head.translate(_B64_CHARS) if mask is None else mask
    has_run = mask.find(_TOKEN_RUN) != -1
    for group, (gate, words) in enumerate(_content_rules()):
        if (has_run or gate not in _RUN_GATES) and gate in lowered:
            if gated is not None:
                gated.append(group)
            for word, rules in words:
                if word in lowered:
                    for regexes, what in rules:
                        if all(rx.search(head) for rx in regexes):
                            return what
    if b"://" in lowered:
        what = _url_password_what(head)
        if what:
            return what
    what = _pgpass_what(head)
    if what:
        return what
    if _S3FS.match(head):
        return ("s3fs mount credentials: an ACCESS_KEY_ID:SECRET_ACCESS_KEY line; keep the key in "
                "the keychain, gpu secrets set AWS_SECRET_ACCESS_KEY")
    what = _settings_what(head, lowered)
    if what:
        return what
    # every vendor token is a run of 20 or more base64 characters (its own run is narrower)
    if not has_run:
        return None
    return tokens.find_token(head, lowered)


def _escaped_what(head: bytes, lowered: bytes, gated: list[int]) -> str | None:
    """The text rules over `head` JSON-unescaped, up to JSON_UNESCAPE_LEVELS times (a
    service-account key printed in a notebook is escaped twice): only while escapes remain, only
    when an escape stands next to a rule's word (escapes hide a rule's structure, never its
    word; `gated`: the groups whose gate word `_text_what` found), and only CONTENT_RULES:
    vendor tokens and URLs were looked for in `head` itself (an escape does not hide them)."""
    words = _view_words()
    if not any(_escaped_near(head, lowered, word) for group in gated for word in words[group]):
        return None
    groups = _content_rules()
    view = head
    for _ in range(JSON_UNESCAPE_LEVELS):
        view = json_unescaped(view)
        lowered = view.lower()
        for group in gated:  # only the rules whose words the text holds
            for word, rules in groups[group][1]:
                if word in lowered:
                    for regexes, what in rules:
                        if all(rx.search(view) for rx in regexes):
                            return f"{what}, in JSON-escaped text"
        if b"\\n" not in view and b'\\"' not in view:
            return None
    return None


def _escaped_near(head: bytes, lowered: bytes, word: bytes) -> bool:
    """A JSON escape (`\\n`, `\\"`) next to one of the first occurrences of `word`: a rule's
    text that is escaped (a notebook's printed key, an escaped key file), not code that merely
    uses the word somewhere and `\\n` somewhere else."""
    pos = lowered.find(word)
    for _ in range(ESCAPE_LOOKS):
        if pos == -1:
            return False
        near = head[max(0, pos - ESCAPE_NEAR):pos + len(word) + ESCAPE_NEAR]
        if b"\\n" in near or b'\\"' in near:
            return True
        pos = lowered.find(word, pos + len(word))
    return False


@functools.cache
def _view_words() -> tuple[tuple[bytes, ...], ...]:
    """CONTENT_RULES' words without their quotes (`"private_key"` is `\\"private_key\\"` escaped),
    by their group in `_content_rules` (whose gate words hold no quote, so an escaped text
    finds them)."""
    groups = _content_rules()
    assert not any(b'"' in gate for gate, _ in groups), "a gate word with a quote: see _escaped_what"
    return tuple(tuple(dict.fromkeys(w.replace(b'"', b"") for w, _ in words)) for _, words in groups)


def _utf16_what(head: bytes) -> str | None:
    """The text rules over `head` read as UTF-16: a BOM says the byte order; without one, both
    are tried (ASCII in UTF-16 is every other byte NUL, LE or BE by the side)."""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        orders = ["utf-16"]
    else:
        orders = ["utf-16-le", "utf-16-be"]
    for order in orders:
        text = head[:len(head) & ~1].decode(order, "replace").encode("utf-8", "replace")
        what = _text_what(text, text.lower())
        if what:
            return f"{what}, in UTF-16 text"
    return None


def _der_length(data: bytes, i: int) -> tuple[int, int] | None:
    """(length, index after it) of the DER length at data[i], or None."""
    if i >= len(data):
        return None
    first = data[i]
    if first < 0x80:
        return first, i + 1
    n = first & 0x7F
    if not 1 <= n <= 4 or i + 1 + n > len(data):
        return None
    return int.from_bytes(data[i + 1:i + 1 + n], "big"), i + 1 + n


def _binary_what(head: bytes, size: int) -> str | None:
    """A key store by its magic, or a whole file that is one DER private key: PKCS#1 (RSA),
    DSA, SEC1 (EC), PKCS#8 (any algorithm, encrypted or not), PKCS#12. Public keys and
    certificates do not start with a version INTEGER and are not matched."""
    for magic, what in BINARY_MAGIC:
        if head.startswith(magic):
            return what
    if len(head) < 8 or head[0] != 0x30 or size != len(head):
        return None
    outer = _der_length(head, 1)
    if outer is None or outer[1] + outer[0] != len(head.rstrip(b"\r\n")) and outer[1] + outer[0] != len(head):
        return None
    i = outer[1]
    if head[i] == 0x30 and any(oid in head[i:i + 16] for oid in _ENCRYPTED_KEY_OIDS):
        return "encrypted PKCS#8 private key (DER)"
    if head[i:i + 2] != b"\x02\x01" or i + 3 >= len(head):
        return None
    version, following = head[i + 2], head[i + 3]
    if version in (0, 1) and following in (0x02, 0x30, 0x04):
        return "private key (DER)"
    if version == 3 and following == 0x30:
        return "PKCS#12 key store (DER)"
    return None


def _wrapped_what(head: bytes) -> str | None:
    """A credential wrapped in base64 (a service-account JSON or a PEM key in a CI variable,
    MIME-wrapped or not): the blob around a marker is decoded and judged as text."""
    flat = head.replace(b"\n", b"").replace(b"\r", b"") if b"\n" in head else head  # MIME lines
    for marker in _WRAPPED_MARKERS:
        hit = flat.find(marker)
        if hit == -1:
            continue
        mask = flat.translate(_B64_CHARS)
        start = mask.rfind(b" ", 0, hit) + 1
        start = max(start, flat.rfind(b"=", start, hit) + 1)  # `NAME=` or padding: not this blob
        end = mask.find(b" ", hit)
        blob = flat[start:len(flat) if end == -1 else end]
        blob = blob.replace(b"-", b"+").replace(b"_", b"/")
        for shift in range(4):  # a word glued in front shifts the alignment
            part = blob[shift:]
            try:
                decoded = base64.b64decode(part[:len(part) & ~3] or b"", validate=False)
            except ValueError:
                continue
            what = _text_what(decoded, decoded.lower())
            if what:
                return f"{what}, base64-wrapped"
    return None


def env_template_reason(head: bytes, whole: bool) -> str | None:
    """Why an env template may not ship: it sets a value (named by line, never shown)."""
    if not whole:
        return "withheld: env template too big to check for values"
    for number, line in enumerate(head.splitlines(), 1):
        if not _EMPTY_ASSIGNMENT.match(line):
            return (f"withheld: env template sets {_assigned_label(line)} on line {number} "
                    "(a template ships only with empty values)")
    return None


def _assigned_label(line: bytes) -> str:
    """`NAME` for a line `NAME=...` or `NAME: ...`, else 'a value': never any part of a value
    (a name that is itself a token is not shown either)."""
    m = _ASSIGNED_NAME.match(line)
    if m is None:
        return "a value"
    name = m.group(1).decode("ascii")
    return "a value" if tokens.value_token(name) else name


# Verdicts by content within this process: the packer's second look at the bytes it packed
# costs one hash, not a scan (the gate also keeps them across runs, `FileHashCache`).
_MEMO: dict[str, str] = {}
MEMO_CAP = 200_000


def content_key(head: bytes, size: int) -> str:
    """The key of a content verdict: the bytes judged, whether they are the whole file (a DER
    key is judged whole), and the rules' id."""
    whole = "w" if size == len(head) else "h"
    return f"{hashlib.blake2b(head, digest_size=20).hexdigest()}{whole}{CONTENT_RULES_ID}"


def content_verdict(name: str, head: bytes, size: int, known: dict[str, str] | None = None,
                    learned: Callable[[str, str], None] | None = None,
                    key: str | None = None) -> str | None:
    """Why a file with this name, first bytes and size is withheld for what it holds, or None.

    One rule for the listing and for the packer, which re-checks the bytes it actually packed.
    The name-free part is cached by content: `known` holds verdicts by `content_key` (from the
    cache file), `learned(key, reason)` is told each fresh one ('' when clean); `key` is the
    `content_key` when the caller has it already."""
    if is_env_template(name):
        reason = env_template_reason(head, whole=size <= CONTENT_HEAD)
        if reason:
            return reason
    if size > CONTENT_MAX_FILE:
        return None
    key = key or content_key(head, size)
    reason = _MEMO.get(key)
    if reason is None and known is not None:
        reason = known.get(key)
    if reason is None:
        reason = content_reason(head, size) or ""
        if learned is not None:
            learned(key, reason)
    remember_verdict(key, reason)
    return reason or None


def remember_verdict(key: str, reason: str) -> None:
    """Note a verdict by content key for this process ('' when clean): the listing's, handed
    to the packer's helper processes with each file, so the bytes they pack are not scanned
    again when they are the bytes judged."""
    if len(_MEMO) >= MEMO_CAP:
        _MEMO.clear()
    _MEMO[key] = reason


def needs_content_check(name: str, size: int) -> bool:
    """Only small files (and env templates) are read, so packing stays fast."""
    return size <= CONTENT_MAX_FILE or is_env_template(name)


# -- identity: where the user's own credentials live -----------------------------------------

# Paths under the home folder holding credentials (files, or folders walked for their files).
# A project file that is a hard link to one of them (same st_dev and st_ino) is withheld,
# whatever its name. These are looked at first; then the home folder is searched by the rules
# above (`home_walk`, used by core.packaging.gate.home_credential_ids), so a rule added above
# reaches the identity check too. Folders are walked to HOME_WALK_CAP entries in all,
# credential folders first, nearest first.
HOME_CREDENTIALS: tuple[str, ...] = (
    ".ssh", ".aws", ".kaggle", ".gnupg", ".azure", ".kube", ".oci", ".password-store",
    ".docker/config.json", ".dockercfg",
    ".config/gcloud", ".config/gh/hosts.yml", ".config/hub", ".config/doctl",
    ".config/rclone/rclone.conf", ".local/share/keyrings",
    ".netrc", "_netrc", ".git-credentials", ".gitcookies", ".pgpass", ".my.cnf", ".mylogin.cnf",
    ".npmrc", ".pypirc", ".gem/credentials", ".cargo/credentials", ".cargo/credentials.toml",
    ".m2/settings.xml", ".m2/settings-security.xml", ".gradle/gradle.properties",
    ".vault-token", ".terraformrc", ".terraform.d/credentials.tfrc.json",
    ".s3cfg", ".boto", ".databrickscfg", ".modal.toml",
    ".huggingface", ".cache/huggingface/token", ".cache/huggingface/stored_tokens",
    ".env", ".secrets",
)
HOME_WALK_CAP = 20_000
# Where the rules' places live in a home folder: the home folder itself and its apps' folders
# (XDG's config, data and cache folders; macOS's) are searched for entries the rules withhold,
# and so is each folder directly in an apps' folder (`.config/rclone/rclone.conf`).
HOME_APP_ROOTS: tuple[str, ...] = (".config", ".local/share", ".cache", "Library/Application Support")
HOME_ROOTS: tuple[str, ...] = ("", *HOME_APP_ROOTS)
# Folders never walked: many files, never secret. By exact name anywhere: gcloud's logs, and a
# browser profile's caches (a lower-case `cache` is walked: ~/.aws/sso/cache and ~/.aws/cli/cache
# hold session credentials); and by path under the home folder.
HOME_SKIP_DIRS = frozenset({"logs", "__pycache__", "Cache", "Code Cache", "GPUCache", "Service Worker",
                            "GrShaderCache", "ShaderCache", "DawnCache", "DawnGraphiteCache",
                            "DawnWebGPUCache", "IndexedDB", "blob_storage", "cache2", "startupCache",
                            "Crashpad", "optimization_guide_model_store"})
HOME_SKIP_PATHS = frozenset({".kube/cache", ".kube/http-cache"})
# Folder names a SUFFIX_RULES place passes through (`.config`, `gh`, `application support`).
_SUFFIX_PARTS = frozenset(part for suffix, _ in SUFFIX_RULES for part in suffix[:-1])


def home_walk(rel: str, is_dir: bool) -> str | None:
    """How the home identity search treats `rel` (a `/`-separated path under the home folder):
    'all' (a credential file, or a credential folder: all its files), 'look' (a folder a place
    may be below: its entries are judged one by one), or None (not a credential: left)."""
    if withheld_reason(rel):
        return "all"
    if not is_dir or rel in HOME_SKIP_PATHS:
        return None
    parent, _, name = rel.rpartition("/")
    if parent in HOME_APP_ROOTS or not _part_forms(name).isdisjoint(_SUFFIX_PARTS):
        return "look"
    return None
