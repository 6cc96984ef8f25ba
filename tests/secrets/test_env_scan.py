"""`env` refuses what looks like a secret, by name word part or by value, wherever it is written."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.config.request import build_request
from core.errors import UserError
from core.secrets.scan import env_problem

FAST = settings(max_examples=examples(100), deadline=None)
# A value between the two kinds: not plainly a setting (a number, a word, a path), not shaped like
# a key. Under such a value, and only there, the name decides.
SOME = "hunter2x"
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
    assert env_problem(name, SOME) is not None, name
    if words and (lower or "camel" not in seps[:len(words) - 1]):  # the same name without that part is
        # an ordinary one (an upper-case word "camel"-joined runs into the next: RUN_TOKENIZERSX)
        ordinary = _join([p.lower() if lower else p for p in words], seps)
        assert env_problem(ordinary, SOME) is None, ordinary


@FAST
@given(prefix=st.sampled_from(PREFIXES),
       body=st.text(string.ascii_letters + string.digits, min_size=36, max_size=48),
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
    assert env_problem(name, SOME) is not None


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "KEYBOARD_LAYOUT", "XKB_KEYMAP",
                                  "GIT_AUTHOR_NAME", "NUM_KEYPOINTS", "WANDB_MODE"])
def test_an_allowed_word_clears_only_itself(name: str) -> None:
    assert env_problem(name, SOME) is None
    for extra in ("_PASSPHRASE", "_OAUTH", "Credentials", ".pwd"):
        assert env_problem(name + extra, SOME) is not None, name + extra


def _project(tmp_path: Path, yaml_text: str) -> Path:
    project = tmp_path / "p"
    project.mkdir()
    (project / "a.py").write_text("print(1)\n")
    (project / "gpu.yaml").write_text(yaml_text)
    return project


@pytest.mark.parametrize("yaml_text, line", [
    ("script: a.py\nenv:\n  MODE: fast\n  SEED: '7'\n  DB_PASSWORD: hunter2\n", 5),
    ("script: a.py\nenv:\n  - MODE=fast\n  - HF_TOKEN=abc123xyz\n", 4),
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


# -- second round: whole-word secret names, ordinary ML names, webhooks, AWS secret keys ------

# Names real training jobs set (PyTorch, HF, W&B, NCCL, MPI, JAX); none may be refused.
BENIGN_NAMES = [
    "BATCH_SIZE", "LR", "EPOCHS", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "WANDB_MODE",
    "HF_HUB_OFFLINE", "SPINE", "OPTION", "OPTIONS", "OPTIMIZER", "SPINE_DEPTH", "PIN_MEMORY",
    "I_MPI_PIN_DOMAIN", "I_MPI_PIN_PROCESSOR_LIST", "NCCL_DEBUG", "NCCL_P2P_DISABLE", "MASTER_ADDR",
    "MASTER_PORT", "WORLD_SIZE", "LOCAL_RANK", "PYTHONHASHSEED", "TOKENIZERS_PARALLELISM",
    "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE", "XLA_FLAGS", "JAX_PLATFORMS", "MKL_NUM_THREADS",
    "NUM_WORKERS", "WARMUP_STEPS", "WEIGHT_DECAY", "GRAD_ACCUM", "MAX_SEQ_LEN", "DROPOUT",
    "SCHEDULER", "NUM_KEYPOINTS", "SEED", "RUN_NAME", "DATA_DIR", "OUTPUT_DIR", "CKPT_DIR",
    "PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "ACCELERATE_MIXED_PRECISION",
    "DEEPSPEED_ZERO_STAGE", "PINN_LAYERS", "COOKIECUTTER_DIR", "SASS_PATH", "DSNAME", "PWM_FREQ",
    "TOPK", "SPINNER", "SNAPSHOT_EVERY", "EMBED_DIM", "STEP_SIZE", "MODEL_NAME", "COMPILE",
]
SECRET_WORDS = ["PW", "PIN", "PINCODE", "JWT", "BEARER", "COOKIE", "DSN", "SAS", "OTP", "TOTP",
                "MFA", "WEBHOOK", "CONN_STR", "CONNECTION_STRING"]
PINNING = {"MEMORY", "THREADS", "CPU", "MPI", "DOMAIN", "PROCESSOR", "NUMA", "GPU", "CORES", "NODE"}


@FAST
@given(names=st.lists(st.sampled_from(BENIGN_NAMES), min_size=1, max_size=3),
       case=st.sampled_from([str.upper, str.lower]))
def test_ordinary_ml_names_are_never_refused(names: list[str], case) -> None:
    name = case("_".join(names))
    assert env_problem(name, "1") is None, name


@FAST
@given(word=st.sampled_from(SECRET_WORDS), around=st.lists(st.sampled_from(BENIGN_NAMES), max_size=2),
       data=st.data(), case=st.sampled_from([str.upper, str.lower]))
def test_a_secret_word_as_a_whole_part_is_refused(word: str, around: list[str], data, case) -> None:
    parts = list(around)
    parts.insert(data.draw(st.integers(0, len(parts))), word)
    name = case("_".join(parts))
    if word == "PIN" and PINNING & set("_".join(parts).split("_")):
        return  # PIN beside a word of pinning is pinning (PIN_MEMORY)
    why = env_problem(name, SOME)
    assert why is not None and "looks like a secret" in why, name


@pytest.mark.parametrize("value, what", [
    ("https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/abcdefghijklmnopqrstuvwx", "Slack"),
    ("https://discord.com/api/webhooks/123456789012345678/" + "a" * 68, "Discord"),
    ("https://acme.webhook.office.com/webhookb2/1234abcd-12ab@5678/IncomingWebhook/abcdef0123456789", "Teams"),
    ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS secret access key"),
    ("Kx9/pQ2+vL7mN4/rT8sW1zY6bC3dF5gH0jA2eU4i", "AWS secret access key"),
    ("AIzaSyA-1234567890abcdefghijklmnopqrstu", "Google API key"),
])
def test_webhooks_vendor_tokens_and_aws_secret_keys_are_refused(value: str, what: str) -> None:
    why = env_problem("NOTIFY", value)
    assert why is not None and what in why, (value, why)


@pytest.mark.parametrize("value", [
    "data/ImageNet2012/train/Class001/images1", "runs/Exp12/Checkpoints/Model/Step1000AB0",
    "meta-llama/Llama-2-7b-hf", "/scratch/user/cache", "cosine", "bf16", "0.0003",
    "https://huggingface.co/datasets/imagenet-1k",
])
def test_paths_and_settings_of_that_shape_are_not_aws_keys(value: str) -> None:
    assert env_problem("WHERE", value) is None


def test_a_refused_webhook_says_where_it_should_go(tmp_path: Path) -> None:
    project = _project(tmp_path, "script: a.py\nenv:\n  MODE: fast\n  SLACK_URL: "
                                 "https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/abcdefghijklmnopqrstuvwx\n")
    with pytest.raises(UserError) as err:
        build_request(project, {})
    assert "Slack" in err.value.what and err.value.where.endswith("gpu.yaml:4")
    assert "gpu secrets set SLACK_URL" in err.value.fix and "secrets:" in err.value.fix
    assert "abcdefghijklmnop" not in err.value.message()
