"""A secret's shape anywhere in a value is refused, and the refusal names the shape (issue 40).

The env and args gates (core/secrets/scan.py: `env_problem`, `text_problem`, `args_problem`,
`check_env`, `check_args`) and the masker of what an error quotes (core/runtime/tokenshapes.py)
look for each shape anywhere in a value: at its start, in its middle, at its end, after
`Bearer `, after `key=`, inside `DSN=...`. A gate that looked only at the start of a value
(`pattern.match` for `pattern.search`) let `--note "x -----BEGIN OPENSSH PRIVATE KEY-----"`
through; here every shape is put in every place, and the words naming it are asserted.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import UserError
from core.runtime import tokenshapes
from core.secrets import scan

JWT = ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
# (a value of the shape, the words a refusal names it by)
SHAPES = {
    "private key": ("-----BEGIN OPENSSH PRIVATE KEY-----", "a private key block"),
    "rsa key": ("-----BEGIN RSA PRIVATE KEY-----", "a private key block"),
    "putty key": ("PuTTY-User-Key-File-3: ssh-ed25519", "a private key block"),
    "aws": ("AKIAIOSFODNN7EXAMPLE", "an AWS access key"),
    "aws session": ("ASIAIOSFODNN7EXAMPLE", "an AWS access key"),
    "url": ("postgres://me:pw4Xq9@db.example.com/x", "a URL with a password"),
    "jwt": (JWT, "a JSON web token"),
}
# where in a value the shape sits
PLACES = {
    "alone": "{}",
    "start": "{} is what the job needs",
    "middle": "x {} y",
    "end": "the note says {}",
    "bearer": "Bearer {}",
    "key=": "key={}",
    "DSN=": "DSN={}",
    "quoted": "'{}'",
}
CASES = [(s, p) for s in SHAPES for p in PLACES]


def _value(shape: str, place: str) -> str:
    return PLACES[place].format(SHAPES[shape][0])


@pytest.mark.parametrize("shape, place", CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_the_env_gate_refuses_a_shape_anywhere_and_names_it(shape: str, place: str) -> None:
    value, words = _value(shape, place), SHAPES[shape][1]
    assert scan.env_problem("NOTE", value) == f"the value of NOTE looks like {words}"
    # a person's not_secret never skips a shape (step 1 of the rule)
    assert scan.env_problem("NOTE", value, plain={"NOTE"}) == f"the value of NOTE looks like {words}"
    with pytest.raises(UserError) as err:
        scan.check_env({"EPOCHS": "3", "NOTE": value}, where="gpu.yaml:4")
    assert f"the value of NOTE looks like {words}: secrets may not be passed in env" in str(err.value)


@pytest.mark.parametrize("shape, place", CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_the_args_gate_refuses_a_shape_anywhere_and_names_it(shape: str, place: str) -> None:
    value, words = _value(shape, place), SHAPES[shape][1]
    assert scan.text_problem(value) == words
    found = scan.args_problem(["--epochs", "3", "--note", value])
    assert found is not None and found[:2] == (3, words), found
    with pytest.raises(UserError) as err:
        scan.check_args(["--epochs", "3", "--note", value], where="argument")
    said = str(err.value)
    flag = "" if value.startswith("-") else " (the value of '--note')"  # a key block reads as a flag
    assert f"entry 4 of args{flag} looks like {words}: secrets may not be passed in args" in said, said
    assert SHAPES[shape][0] not in str(err.value)  # named by its place, never by its value


@pytest.mark.parametrize("shape, place", CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_what_an_error_quotes_is_masked_wherever_the_shape_sits(shape: str, place: str) -> None:
    value, words = _value(shape, place), SHAPES[shape][1]
    masked = tokenshapes.mask(value, table=False)
    assert f"[hidden: {words}]" in masked, masked
    assert SHAPES[shape][0] not in masked


_filler = st.text(alphabet=st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters=" =:,"),
                  max_size=20).map(lambda s: s.strip())


@given(shape=st.sampled_from(sorted(SHAPES)), before=_filler, after=_filler)
def test_any_text_around_a_shape_leaves_it_refused(shape: str, before: str, after: str) -> None:
    """For any words before and after (space-separated from it), the shape is still found."""
    secret, words = SHAPES[shape]
    value = " ".join(p for p in (before, secret, after) if p)
    assert scan.env_problem("NOTE", value) == f"the value of NOTE looks like {words}"
    assert scan.text_problem(value) == words
    assert f"[hidden: {words}]" in tokenshapes.mask(value, table=False)


def test_the_issue_s_examples() -> None:
    assert scan.args_problem(["--note", "x -----BEGIN OPENSSH PRIVATE KEY-----"])[1] == "a private key block"
    assert scan.env_problem("AUTH", f"Bearer {JWT}") == "the value of AUTH looks like a JSON web token"
    assert scan.env_problem("CFG", "key=AKIAIOSFODNN7EXAMPLE") == "the value of CFG looks like an AWS access key"
    assert scan.env_problem("DB", "DSN=postgres://me:pw@db.example.com/app") == \
        "the value of DB looks like a URL with a password"
