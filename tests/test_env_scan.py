"""`env` refuses what looks like a secret, by name word part or by value, wherever it is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.config.request import build_request
from core.errors import UserError
from core.secrets.scan import env_problem

FAST = settings(max_examples=100, deadline=None)
STEMS = ["PASS", "PWD", "SECRET", "TOKEN", "KEY", "CRED", "AUTH"]
ORDINARY = ["RUN", "MODE", "CUDA", "VISIBLE", "DEVICES", "OMP", "NUM", "THREADS", "HF", "HOME",
            "WANDB", "PROJECT", "SEED", "LR", "PUBLIC", "SHARED", "OPEN", "TOKENIZERS", "KEYBOARD",
            "AUTHOR", "NAME", "URL", "DIR", "X"]
PREFIXES = ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "npm_", "xoxb-", "xoxp-",
            "xoxa-", "sk_live_", "rk_live_", "sk_test_", "hf_", "sk-", "sk-proj-", "sk-ant-api03-"]
KEY_KINDS = ["", "RSA ", "EC ", "DSA ", "OPENSSH ", "ENCRYPTED ", "PGP "]

letters = st.text(st.characters(min_codepoint=0x41, max_codepoint=0x5A), max_size=4)


def _join(parts: list[str], seps: list[str]) -> str:
    out = parts[0]
    for part, sep in zip(parts[1:], seps):
        out += part.capitalize() if sep == "camel" else sep + part
    return out


@FAST
@given(data=st.data(), stem=st.sampled_from(STEMS), around=st.tuples(letters, letters),
       words=st.lists(st.sampled_from(ORDINARY), max_size=3), lower=st.booleans())
def test_a_name_with_a_secret_word_part_is_refused_whatever_else_it_says(data, stem, around, words,
                                                                         lower) -> None:
    part = around[0] + stem + around[1]
    parts = list(words)
    parts.insert(data.draw(st.integers(0, len(parts))), part)
    parts = [p.lower() if lower else p for p in parts]
    seps = data.draw(st.lists(st.sampled_from(["_", "-", ".", "camel"]), min_size=len(parts),
                              max_size=len(parts)))
    name = _join(parts, seps)
    if part.upper() in {"TOKENIZER", "TOKENIZERS", "KEYBOARD", "KEYMAP", "AUTHOR", "AUTHORS",
                        "KEYPOINT", "KEYPOINTS"}:
        return  # the allowed ordinary words
    assert env_problem(name, "1") is not None, name
    if words:  # the same name without that part is an ordinary one
        ordinary = _join([p.lower() if lower else p for p in words], seps)
        assert env_problem(ordinary, "1") is None, ordinary


@FAST
@given(prefix=st.sampled_from(PREFIXES),
       body=st.text(st.characters(categories=["Lu", "Ll", "Nd"]).filter(str.isascii),
                    min_size=36, max_size=48),
       before=st.sampled_from(["", "Bearer ", "x=", "token: "]))
def test_well_known_token_values_are_refused_under_any_name(prefix: str, body: str, before: str) -> None:
    assert env_problem("RUN_NAME", before + prefix + body) is not None


@FAST
@given(kind=st.sampled_from(KEY_KINDS),
       body=st.text(st.characters(min_codepoint=0x41, max_codepoint=0x5A), max_size=40))
def test_private_key_blocks_of_any_kind_are_refused(kind: str, body: str) -> None:
    block = f"-----BEGIN {kind}PRIVATE KEY{' BLOCK' if kind == 'PGP ' else ''}-----\n{body}\n"
    assert "private key" in (env_problem("CONFIG", block) or "")


@FAST
@given(scheme=st.sampled_from(["postgres", "https", "redis", "mongodb+srv", "amqp"]),
       user=st.text(st.characters(min_codepoint=0x61, max_codepoint=0x7A), max_size=8),
       password=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E)
                        .filter(lambda c: c not in "/@?#"), min_size=1, max_size=12))
def test_urls_with_a_password_are_refused(scheme: str, user: str, password: str) -> None:
    assert "password" in (env_problem("DATABASE_URL", f"{scheme}://{user}:{password}@db.internal/x") or "")


@pytest.mark.parametrize("name", ["DB_PASSWORD", "apiKey", "MY_AUTH_HEADER", "GITHUB_TOKEN",
                                  "AWS_SECRET_ACCESS_KEY", "PUBLIC_KEY_URL", "public_token", "dbPwd",
                                  "SSH_PASSPHRASE", "GCP_CREDENTIALS_JSON", "TOKENIZERS_SECRET",
                                  "KEYBOARD_TOKEN", "OAUTH_CLIENT", "myAPIToken"])
def test_examples_of_secret_names(name: str) -> None:
    assert env_problem(name, "x") is not None


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "KEYBOARD_LAYOUT", "XKB_KEYMAP",
                                  "GIT_AUTHOR_NAME", "NUM_KEYPOINTS", "WANDB_MODE"])
def test_an_allowed_word_clears_only_itself(name: str) -> None:
    assert env_problem(name, "x") is None
    for extra in ("_PASSPHRASE", "_OAUTH", "Credentials", ".pwd"):
        assert env_problem(name + extra, "x") is not None, name + extra


def _project(tmp_path: Path, yaml_text: str) -> Path:
    project = tmp_path / "p"
    project.mkdir()
    (project / "a.py").write_text("print(1)\n")
    (project / "gpu.yaml").write_text(yaml_text)
    return project


@pytest.mark.parametrize("yaml_text, line", [
    ("script: a.py\nenv:\n  MODE: fast\n  SEED: '7'\n  DB_PASSWORD: hunter2\n", 5),
    ("script: a.py\nenv:\n  - MODE=fast\n  - HF_TOKEN=abc\n", 4),
    ("script: a.py\nenv: {MODE: fast, URL: 'postgres://u:pw@db/x'}\n", 2),
    ("# comment\nscript: a.py\nenv:\n  MODE: fast\n  NOTE: ghp_abcdefghijklmnopqrstuvwxyz0123\n", 5),
])
def test_gpu_yaml_env_refusal_names_file_and_line(tmp_path: Path, yaml_text: str, line: int) -> None:
    project = _project(tmp_path, yaml_text)
    with pytest.raises(UserError) as err:
        build_request(project, {})
    assert err.value.where == f"{project / 'gpu.yaml'}:{line}"
    assert "gpu secrets set" in err.value.fix and "looks like" in err.value.what
    assert "hunter2" not in err.value.message() and "ghp_abc" not in err.value.message()


def test_an_env_argument_is_blamed_on_the_argument(tmp_path: Path) -> None:
    project = _project(tmp_path, "script: a.py\nenv: {MODE: fast}\n")
    with pytest.raises(UserError) as err:
        build_request(project, {"env": ["MODE=slow", "X=sk_live_abcdefghijklmnop"]})
    assert err.value.where == "argument --env" and "Stripe" in err.value.what
