"""The env gate judges name and value together: a value shaped like a secret is refused under any
name, a value that cannot be one passes under any name, and only between the two does the name
decide (core/secrets/scan.py `env_problem`)."""

from __future__ import annotations

import random
import string

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.runtime.tokenshapes import PREFIXES
from core.secrets.scan import DIGEST_PARTS, env_problem

FAST = settings(max_examples=examples(200), deadline=None)

WORDS = ["MAX", "NEW", "TOKENS", "KEY", "FRAMES", "AUTH", "MODE", "PASS", "AT", "K", "HF", "REVISION",
         "GIT", "COMMIT", "DATASET", "SHA256", "DB", "PASSWORD", "SECRET", "API", "RUN", "ID", "SENHA",
         "NUM", "TOKEN", "PRIVATE", "CERT", "SIGNATURE", "SALT", "HMAC", "X", "PATH", "URL", "DIR"]
names = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map("_".join)
digest_names = st.tuples(names, st.sampled_from(sorted(DIGEST_PARTS))).map("_".join)
# A key is drawn as its issuer draws it, at random: a seed, not a string hypothesis may shrink to
# `aaaa/aaaa` (which no issuer hands out and which is as much a path as a key).
keys_rng = st.integers(0, 2**32 - 1).map(random.Random)


def _random(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


# -- a value shaped like a secret: refused whatever its name -------------------------------

@FAST
@given(name=names | digest_names, prefix=st.sampled_from(PREFIXES), rng=keys_rng)
def test_a_vendor_token_is_refused_under_any_name(name: str, prefix, rng: random.Random) -> None:
    start, shortest, what = prefix
    value = start + _random(rng, string.ascii_letters + string.digits, shortest + rng.randint(0, 20))
    why = env_problem(name, value)
    assert why is not None and what in why, (name, value, why)
    assert value not in why


@FAST
@given(name=names | digest_names, rng=keys_rng)
def test_an_aws_secret_access_key_is_refused_under_any_name(name: str, rng: random.Random) -> None:
    """40 characters of base64 as AWS draws them, a `/` among them (the shape a path also has)."""
    value = _random(rng, string.ascii_letters + string.digits + "+/", 39)
    cut = rng.randrange(1, 39)
    value = value[:cut] + "/" + value[cut:]
    assert env_problem(name, value) is not None, (name, value)


@FAST
@given(name=names | digest_names, rng=keys_rng,
       param=st.sampled_from(["sig", "token", "access_token", "X-Amz-Signature", "api_key", "apikey"]),
       where=st.sampled_from(["?", "#"]))
def test_a_url_that_carries_a_credential_is_refused_under_any_name(name: str, rng: random.Random, param: str,
                                                                  where: str) -> None:
    value = f"https://data.example.com/shard-0001.tar{where}v=2&{param}={_random(rng, string.ascii_letters, 16)}"
    why = env_problem(name, value)
    assert why is not None and "credential" in why, (name, value, why)


@FAST
@given(name=names | digest_names, rng=keys_rng)
def test_a_long_random_key_is_refused_under_any_name_but_a_hex_digest_under_a_digest_name(
        name: str, rng: random.Random) -> None:
    value = _random(rng, string.ascii_letters + string.digits, 40)
    if not any(c.isdigit() for c in value) or value.isalpha():
        value = value[:-1] + "7"
    assert env_problem(name, value) is not None, (name, value)


# -- a value that cannot be a secret: accepted whatever its name ----------------------------

numbers = st.one_of(st.integers(-10**12, 10**12).map(str), st.floats(allow_nan=False, allow_infinity=False).map(repr),
                    st.sampled_from(["3e-4", "0.0003", "1e-5", ".5", "0,1,2,3", "224x224"]))
booleans = st.sampled_from(["true", "false", "True", "FALSE", "yes", "no", "on", "off", "1", "0"])
segments = st.lists(st.sampled_from(["data", "runs", "exp_2024", "ckpt", "hf", "cache", "ImageNet2012", "train",
                                     "Llama-3.1-8B", "shard-00001.tar", "tmpa8f3k2j9", "Class001"]),
                   min_size=1, max_size=5)
paths = (st.tuples(st.sampled_from(["/", "./", "../", "~/"]), segments).map(lambda t: t[0] + "/".join(t[1]))
         | segments.filter(lambda parts: len(parts) > 1).map("/".join))  # a relative path has a slash
urls = paths.map(lambda p: "https://huggingface.co/" + p.lstrip("./~"))


@FAST
@given(name=names, value=numbers | booleans | paths | urls)
@example(name="MAX", value="/hf/cache/cache/ImageNet2012/tmpa8f3k2j9")  # 40 characters: taken for an AWS key once
def test_a_number_boolean_path_or_plain_url_passes_under_any_name(name: str, value: str) -> None:
    assert env_problem(name, value) is None, (name, value)


@FAST
@given(name=digest_names, n=st.sampled_from([7, 8, 12, 32, 40, 64, 128]), rng=keys_rng,
       upper=st.booleans())
def test_a_hex_digest_under_a_name_that_says_hash_commit_revision_or_id_passes(
        name: str, n: int, rng: random.Random, upper: bool) -> None:
    value = _random(rng, "0123456789abcdef", n)
    assert env_problem(name, value.upper() if upper else value) is None, (name, value)


# -- the reported cases ---------------------------------------------------------------------

@pytest.mark.parametrize("name, value", [
    ("MAX_NEW_TOKENS", "256"), ("MAX_TOKENS", "2048"), ("NUM_TOKENS", "512"), ("KEY_FRAMES", "8"),
    ("AUTH_MODE", "none"), ("HF_REVISION", "3f8a2b1c9d0e4f5a6b7c8d9e0f1a2b3c4d5e6f70"),
    ("GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567"),
    ("DATASET_SHA256", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    ("PASS_AT_K", "10"), ("TOKEN_TYPE", "bearer"), ("API_VERSION", "2023-05-15"), ("RUN_ID", "7f3e9a1b"),
    ("WANDB_RUN_ID", "01234567-89ab-cdef-0123-456789abcdef"), ("KEY_PATH", "/run/keys/deploy.pem"),
])
def test_reported_false_refusals_pass(name: str, value: str) -> None:
    assert env_problem(name, value) is None


@pytest.mark.parametrize("name, value", [
    ("SENHA", "Tr0ub4dor&3"), ("KENNWORT", "hunter2x"), ("SIGNATURE", "a1b2c3d4e5"), ("HMAC_SALT", "pepper42x"),
    ("CERT", "MIIBkTCB+wIJ"), ("PRIV", "z9y8x7w6"), ("CONTRASENA", "Abc123!x"), ("MOT_DE_PASSE", "s3cr3t!"),
    ("ORG", "api_org_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"),
    ("CONFIG", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("HEROKU_API", "01234567-89ab-cdef-0123-456789abcdef"),
    ("DB_PASSWORD", "hunter2"), ("DB_PASS", "changeme"), ("HF_TOKEN", "abc123xyz"),
])
def test_reported_misses_are_refused(name: str, value: str) -> None:
    why = env_problem(name, value)
    assert why is not None and "\n" not in why
    assert value not in why  # the refusal names the rule, never the value


def test_a_refusal_by_name_says_what_would_pass() -> None:
    why = env_problem("DB_PASSWORD", "hunter2")
    assert "word part 'PASSWORD'" in why and "not plainly a setting" in why


# -- a person vouches for one setting: not_secret -------------------------------------------

def _plain_project(tmp_path, yaml_text: str = ""):
    from tests.conftest import make_git_project

    files = {"a.py": "import os\nprint('value', os.environ['DB_PASSWORD'])\n"}
    if yaml_text:
        files["gpu.yaml"] = yaml_text
    return make_git_project(tmp_path / "p", files)


def test_a_person_vouches_for_a_setting_and_the_plan_shows_it(home, tmp_path) -> None:
    """At a terminal (a person): the plan shows the vouched name and holds nothing for it. Its
    JSON (`--json` is an agent's door) shows it too, bound by the digest, and held."""
    import json

    from core.planning.plan import digest
    from tests.conftest import gpu_exe, pty_session

    project = _plain_project(tmp_path)
    argv = [gpu_exe(), "plan", "a.py", "--hours", "0.1", "--env", "DB_PASSWORD=hunter2",
            "--not-secret", "DB_PASSWORD"]
    status, out = pty_session(argv, lambda _: None, cwd=project)
    text = out.decode(errors="replace")
    assert status == 0 and "not secret" in text and "DB_PASSWORD" in text, text
    assert "passes DB_PASSWORD in env as not secret" not in text  # a person's word holds nothing
    status, out = pty_session([*argv, "--json"], lambda _: None, cwd=project)
    assert status == 0, out
    plan = json.loads(out.decode())["plan"]
    assert plan["not_secret"] == ["DB_PASSWORD"] and plan["env"] == {"DB_PASSWORD": "hunter2"}
    assert [h["rule"] for h in plan["holds"]].count("not_secret") == 1  # --json: an agent's
    assert digest({k: v for k, v in plan.items() if k != "not_secret"}) != plan["digest"]  # it binds


def test_an_agents_not_secret_holds_the_job_for_a_person(home, tmp_path) -> None:
    from tests.conftest import gpu_json

    project = _plain_project(tmp_path, "script: a.py\nenv:\n  DB_PASSWORD: hunter2\nnot_secret: [DB_PASSWORD]\n")
    doc = gpu_json("submit", "--hours", "0.1", "--wait-s", "5", cwd=project)  # no terminal: an agent's
    assert doc["job"]["state"] == "awaiting_approval", doc
    said = doc["guidance"]["tell_user"]
    assert "passes DB_PASSWORD in env as not secret" in said and "hunter2" not in said


@pytest.mark.parametrize("env, plain, said", [
    ("X=ghp_abcdefghijklmnopqrstuvwxyz0123", "X", "GitHub token"),  # a secret's shape: never vouched
    ("X=-----BEGIN PRIVATE KEY-----", "X", "private key"),
    ("A=hunter2x", "B", "not an env entry"),
])
def test_not_secret_never_passes_a_secrets_shape_and_names_only_env(home, tmp_path, env, plain, said) -> None:
    from tests.conftest import run_gpu

    project = _plain_project(tmp_path)
    proc = run_gpu("plan", "a.py", "--hours", "0.1", "--env", env, "--not-secret", plain, cwd=project)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert "ghp_abc" not in proc.stderr


def test_a_refusal_by_name_offers_not_secret(home, tmp_path) -> None:
    from tests.conftest import run_gpu

    project = _plain_project(tmp_path)
    proc = run_gpu("plan", "a.py", "--hours", "0.1", "--env", "DB_PASSWORD=hunter2", cwd=project)
    assert proc.returncode == 2 and "--not-secret DB_PASSWORD" in proc.stderr, proc.stderr
    assert "hunter2" not in proc.stderr


def test_what_the_target_installs_and_what_a_person_vouched_for_bind_the_digest() -> None:
    """A person's approval is of a digest: the optional dependency groups installed (extras) and
    the env names vouched as not secret change what runs, so they change the digest; absent, the
    digest is what it was."""
    from core.planning.plan import digest

    base = {"bundle_hash": "b", "command": ["a.py"], "env": {"A": "x"}, "target": "local", "gpu": "cpu",
            "hours": 1}
    plain = digest(base)
    assert digest({**base, "extras": [], "not_secret": []}) == plain
    seen = {plain, digest({**base, "extras": ["train"]}), digest({**base, "extras": ["eval"]}),
            digest({**base, "not_secret": ["A"]})}
    assert len(seen) == 4
