"""Credential files by content and kind, not only by name (issue 39, item 3), measured on the
corpora of bench/corpora/credential_files (item 6): console key exports, settings files that
write a password or secret key out (dotenv, `.flaskenv`, `.properties`, mount credentials,
INI, PHP), DER keys by their structure. Ordinary files beside them (templates, sample configs,
docs that mention `password=`, training data, DER certificates) ship."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from core.packaging import credentials as cred
from core.packaging.listing import list_project
from tests.packaging.test_bundle import write

pytestmark = pytest.mark.quick

REPO = Path(__file__).resolve().parents[2]


def _bench():
    """bench/credential_files.py, imported as the benches import it (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_credential_files", REPO / "bench" / "credential_files.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_corpora_every_credential_refused_and_no_ordinary_file(home: Path) -> None:
    """The figures' target: recall 1.0 (no credential kind missed), precision 1.0 (no
    ordinary file refused), on every sample of the corpora."""
    figures = _bench().measure()
    assert len(figures.credentials) >= 30 and len(figures.ordinary) >= 40
    assert not figures.missed, f"credential files that would ship: {figures.missed}"
    assert not figures.false_refusals, f"ordinary files refused: {figures.false_refusals}"
    assert figures.recall == 1.0 and figures.precision == 1.0


def _reason(tmp_path: Path, rel: str, content: str | bytes) -> str | None:
    project = tmp_path / "p"
    write(project / "train.py", "print('training')\n")
    path = project / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    listing = list_project(project)
    reasons = {w["path"]: w["reason"] for w in listing.withheld}
    assert "train.py" in listing.entries
    return reasons.get(rel)


SECRET = "Tr41n-Th3-M0d3l"

# (file, content, what the reason names): each kind under a name that says nothing
KINDS = [
    ("exports/keys.csv", "Access key ID,Secret access key\nAKIAIOSFODNN7EXAMPLE,"
                         "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n", "AWS console access-key export"),
    ("exports/user.csv", "User name,Password,Access key ID,Secret access key,Console login link\n"
                         "bob,,AKIAI44QH8DHBF3KP2XY,je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY,https://x\n",
     "AWS console access-key export"),
    ("exports/root.txt", "AWSAccessKeyId=AKIAI44QH8DHBF3KP2XY\nAWSSecretKey=je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY\n",
     "AWS root access-key export"),
    ("cloud/sp.json", '{"appId": "00000000-0000-4000-8000-000000000000", "displayName": "x",\n'
                      ' "password": "Zq48Q~notARealSecretJustATestVector0123", '
                      '"tenant": "11111111-1111-4111-8111-111111111111"}\n', "Azure service principal"),
    (".flaskenv", f"FLASK_APP=app.py\nSECRET_KEY={SECRET}\n", "SECRET_KEY on line 2"),
    ("android/local.properties", f"sdk.dir=/opt/android\nstorePassword={SECRET}\nkeyPassword={SECRET}\n",
     "storePassword on line 2"),
    ("share/creds.txt", f"username=alice\npassword={SECRET}\ndomain=LAB\n", "password on line 2"),
    ("conf/strings.properties", f"login.forgot_password=Forgot password?\ndb.password={SECRET}\n", "db.password on line 2"),
    ("conf/app.ini", f"[db]\nhost = db\nroot password = {SECRET}\n", "root password on line 3"),
    ("conf/worker.sh", f"# env\nexport DB_HOST=db\nexport DB_PASSWORD='{SECRET}'\n", "DB_PASSWORD on line 3"),
    ("site/wp-config.php", f"<?php\ndefine( 'DB_NAME', 'wp' );\ndefine( 'DB_PASSWORD', '{SECRET}' );\n",
     "DB_PASSWORD on line 3"),
    ("site/salts.php", "<?php\ndefine('AUTH_KEY', 'Zk;8+Q|t]n$1@Fv!xG^<e0W#)4rLc~MuD9h&S{2yP_mJ]bT.oK');\n",
     "AUTH_KEY on line 2"),
    ("site/pma.php", f"<?php\n$cfg['Servers'][$i]['password'] = '{SECRET}';\n", "password on line 2"),
    ("exports/ram.csv", "AccessKey ID,AccessKey Secret\nLTAI5tTestVectorNotReal01,TestVectorNotARealSecret000001\n",
     "Alibaba Cloud AccessKey export"),
    ("exports/ibm.json", '{"name": "k", "description": "", "createdAt": "2024-03-12T10:14+0000",\n'
                         ' "apikey": "TestVectorNotARealIbmCloudApiKey0123456789ab"}\n', "IBM Cloud API key export"),
    ("share/s3.txt", "bucket:AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n", "s3fs mount credentials"),
    ("build/settings.xml", f"<settings><servers><server><id>r</id><password>{SECRET}</password></server></servers></settings>\n",
     "Maven settings with a server password"),
    ("build/nuget.config", f'<configuration><packageSourceCredentials><f><add key="ClearTextPassword" value="{SECRET}" />'
                           "</f></packageSourceCredentials></configuration>\n", "NuGet.Config with a ClearTextPassword"),
    ("build/auth.json", f'{{"http-basic": {{"repo.example": {{"username": "u", "password": "{SECRET}"}}}}}}\n',
     "Composer auth.json with an http-basic password"),
]


@pytest.mark.parametrize("rel,content,names", KINDS, ids=[k[0] for k in KINDS])
def test_each_kind_is_refused_by_content_with_its_rule_and_what_to_do(home: Path, tmp_path: Path,
                                                                    rel: str, content: str, names: str) -> None:
    reason = _reason(tmp_path, rel, content)
    assert reason is not None, f"{rel} would ship"
    assert reason.startswith("withheld: content is a credential (") and names in reason, reason
    assert "keychain" in reason and "\n" not in reason, reason  # what to do, in one line
    assert SECRET not in reason and "wJalr" not in reason and "Zq48Q" not in reason


@pytest.mark.parametrize("rel", [".smbcredentials", ".smbcredentials_nas", "mnt/.smbcreds",
                                 "accessKeys.csv", "accessKeys (1).csv", ".passwd-s3fs"])
def test_names_that_are_credentials_alone(home: Path, tmp_path: Path, rel: str) -> None:
    """Caught by name, whatever they hold (even an empty template of the kind)."""
    assert cred.name_reason(rel.rpartition("/")[2]) is not None
    reason = _reason(tmp_path, rel, "anything\n")
    assert reason and reason.startswith("withheld: credential file ("), reason


# What an ordinary project holds near those kinds: it ships.
ORDINARY = [
    (".flaskenv", "FLASK_APP=app.py\nFLASK_DEBUG=1\n"),
    ("local.properties", "## This file must *NOT* be checked into Version Control Systems\nsdk.dir=/opt/android\n"),
    ("gradle.properties", "MYAPP_UPLOAD_STORE_PASSWORD=*****\nMYAPP_UPLOAD_KEY_PASSWORD=*****\n"),
    ("config.php", "<?php\ndefine('SITE_NAME', 'Courses');\ndefine('DB_PASSWORD', getenv('DB_PASSWORD'));\n"),
    ("wp-config-sample.php", "<?php\ndefine( 'DB_PASSWORD', 'password_here' );\n"
                             "define( 'AUTH_KEY',         'put your unique phrase here' );\n"),
    ("lang/en/auth.php", "<?php\nreturn [\n    'password' => 'The provided password is incorrect.',\n];\n"),
    ("data/train.csv", "x,y,label\n0.1,0.2,cat\n0.3,0.4,dog\n"),
    ("data/passwords.csv", "password,strength\nkzde5577,1\nAVYq1lDE4MgAZfNt,2\n"),
    ("README.md", "Write `password=` and your password in ~/.smbcredentials:\n\n    username=<you>\n"
                  "    password=<your password>\n"),
    ("creds.example", "username=\npassword=\n"),
    ("template.ini", "[db]\npassword = <your password>\nsecret = ${DB_SECRET}\n"),
    ("settings.properties", "spring.datasource.password=${DB_PASSWORD}\njwt.secret=%(secret)s\n"),
    ("config.py", "SECRET_KEY = os.environ['SECRET_KEY']\nPASSWORD = os.environ.get('DB_PASSWORD')\n"),
    ("constants.py", 'PASSWORD_MIN_LENGTH = 8\nPAD_TOKEN = "<pad>"\nMAX_TOKENS = 512\nSECRET_KEY = "dev"\n'),
    ("messages_de.properties", "login.password=Passwort\nlogin.secret=Geheimnis\nlogin.user=Benutzer\n"),
    ("aws.md", "Your download:\n\nAccess key ID,Secret access key\nAKIAIOSFODNN7EXAMPLE,"
               "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"),
    ("docker-compose.yml", "services:\n  db:\n    environment:\n      POSTGRES_PASSWORD: mysecretpassword\n"),
    ("env.sh", "export PWD=/home/alice/project\nexport OLDPWD=/home/alice\n"),
    ("entry_points.txt", "[keyring.backends]\nlibsecret = keyring.backends.libsecret\n"),
    ("lang/ja/auth.php", "<?php\nreturn [\n    'password' => 'パスワードが正しくありません。',\n];\n"),
    ("settings.xml", "<settings><servers><server><password>${env.REPO_PASSWORD}</password></server></servers></settings>\n"),
    ("NuGet.Config", '<configuration><add key="ClearTextPassword" value="%FEED_PASSWORD%" /></configuration>\n'),
]


@pytest.mark.parametrize("rel,content", ORDINARY, ids=[o[0] for o in ORDINARY])
def test_ordinary_files_near_the_kinds_ship(home: Path, tmp_path: Path, rel: str, content: str) -> None:
    assert _reason(tmp_path, rel, content) is None


def _der(kind: str) -> bytes:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=1024) if kind.startswith("rsa") \
        else ec.generate_private_key(ec.SECP256R1())
    fmt = ser.PrivateFormat.PKCS8 if kind.endswith("pkcs8") else ser.PrivateFormat.TraditionalOpenSSL
    return key.private_bytes(ser.Encoding.DER, fmt, ser.NoEncryption())


@pytest.mark.parametrize("kind", ["rsa", "rsa-pkcs8", "ec", "ec-pkcs8"])
def test_der_keys_under_bare_names(home: Path, tmp_path: Path, kind: str) -> None:
    reason = _reason(tmp_path, "key.der", _der(kind))
    assert reason and "private key (DER)" in reason


def test_der_key_encrypted_with_a_pkcs5_v1_scheme(home: Path, tmp_path: Path) -> None:
    """`openssl pkcs8 -topk8 -v1 PBE-MD5-DES` (PBES1, OID 1.2.840.113549.1.5.3): still a key."""
    corpus = REPO / "bench" / "corpora" / "credential_files" / "credentials" / "der-keys" / "legacy_pbe.der"
    data = corpus.read_bytes()
    assert b"\x06\x09\x2a\x86\x48\x86\xf7\x0d\x01\x05\x03" in data[:24]
    reason = _reason(tmp_path, "material/blob", data)
    assert reason and "encrypted PKCS#8 private key (DER)" in reason


def test_secret_words_are_detect_secrets_keyword_list() -> None:
    """The settings rule's names come from the maintained rule set: kept equal to it."""
    keyword = pytest.importorskip("detect_secrets.plugins.keyword")
    assert cred.SECRET_WORDS == keyword.DENYLIST


# -- the settings rule as a property: any shape of KEY=value file, any secret's name -------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from tests.props import examples  # noqa: E402

SECRET_NAMES = ["DB_PASSWORD", "storePassword", "keyPassword", "password", "pass", "API_KEY", "apiKey",
                "SECRET_KEY", "JWT_SECRET", "client_secret", "AUTH_TOKEN", "spring.datasource.password",
                "MYAPP_UPLOAD_STORE_PASSWORD", "AWS_SECRET_ACCESS_KEY", "NONCE_SALT", "smtp_pwd"]
ORDINARY_NAMES = ["DB_HOST", "sdk.dir", "FLASK_APP", "username", "PASSWORD_MIN_LENGTH", "TOKEN_EXPIRY",
                  "SECRET_KEY_FILE", "keyAlias", "storeFile", "server.port", "bypass", "OLDPWD"]
# a value written out: letters and a digit or a symbol, 8 to 40 characters, no placeholder word
# (not one that reads as a dotted module or class path, `boto3.session.Session`: the rule takes
# those for a reference to a backend, a hasher, a setting; a draw found `AAA0.A.A`)
written = st.from_regex(r"[A-Za-z]{3}[0-9][A-Za-z0-9!#%+,./:=?@^_~-]{4,36}", fullmatch=True).filter(
    lambda v: not any(w in v.lower() for w in ("your", "here", "example", "xxxx", "todo", "tbd", "test",
                                              "change", "replace", "fill", "insert", "..."))
    and not re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){2,}(?::[A-Za-z_][\w.]*)?", v, re.ASCII))
# a value that is not: a reference, a placeholder, empty, a language's message
not_written = st.sampled_from(["", "${DB_PASSWORD}", "$DB_PASSWORD", "<your password>", "password_here",
                               "*****", "%(password)s", "{{ vault_password }}", "os.environ['X']",
                               "env('DB_PASSWORD')", "/run/secrets/db", "changeme", "Passwort",
                               "Forgot your password?", "@db.password@", "put your unique phrase here"])
line_shape = st.sampled_from(["{k}={v}", "{k} = {v}", "export {k}={v}", "{k}='{v}'", '{k}="{v}"', "{k}={v} # note"])
header = st.sampled_from(["", "# settings\n", "[database]\n", "## generated file\n\n", "; ini\n"])


@settings(max_examples=examples(150), deadline=None)
@given(header=header, shape=line_shape, name=st.sampled_from(SECRET_NAMES), value=written,
       others=st.lists(st.tuples(st.sampled_from(ORDINARY_NAMES), written), max_size=4), at=st.integers(0, 4))
def test_a_settings_file_that_writes_a_secret_out_is_withheld(header: str, shape: str, name: str, value: str,
                                                              others: list, at: int) -> None:
    lines = [shape.format(k=k, v=v) for k, v in others]
    lines.insert(min(at, len(lines)), shape.format(k=name, v=value))
    text = (header + "\n".join(lines) + "\n").encode()
    reason = cred.content_reason(text)
    assert reason and f"{name} on line" in reason, (text, reason)
    assert value not in reason


@settings(max_examples=examples(150), deadline=None)
@given(header=header, shape=line_shape, name=st.sampled_from(SECRET_NAMES), value=not_written,
       others=st.lists(st.tuples(st.sampled_from(ORDINARY_NAMES), written), max_size=4))
def test_a_settings_file_without_a_secret_written_out_ships(header: str, shape: str, name: str, value: str,
                                                            others: list) -> None:
    lines = [shape.format(k=k, v=v) for k, v in others] + [shape.format(k=name, v=value)]
    text = (header + "\n".join(lines) + "\n").encode()
    assert cred.content_reason(text) is None, text


@settings(max_examples=examples(100), deadline=None)
@given(name=st.sampled_from(SECRET_NAMES), value=written,
       prose=st.sampled_from(["Set it up like this:\n\n", "The mount needs two lines:\n", "Example\n=======\n\n"]))
def test_prose_that_shows_a_setting_ships(name: str, value: str, prose: str) -> None:
    """A README or a doc page that shows the line: not the KEY=value shape (its prose first)."""
    text = f"{prose}    {name}={value}\n\nThen run the job.\n".encode()
    assert cred.content_reason(text) is None or "settings" not in cred.content_reason(text)
