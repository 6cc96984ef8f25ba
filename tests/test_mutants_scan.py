"""A secret's shape anywhere in an env value, not only at its start (issue 40: the two kinds of
`python bench/mutation.py --module scan` that survived, `.search` -> `.match`: a URL carrying a
credential after other words, and a key-shaped value under an API name whose first character
is a letter)."""

from __future__ import annotations

import pytest

from core.secrets.scan import env_problem, value_evidence

URL = "https://mirror.example/simple?access_token=Zq8vN3kP0wR7tY2u"


@pytest.mark.parametrize("value", [URL, f"mirror {URL}", f"--index-url {URL} --pre", f"a,b,{URL}"])
def test_a_url_carrying_a_credential_is_found_wherever_it_stands(value: str) -> None:
    assert value_evidence(value) == "a URL that carries a credential (access_token=)"
    assert env_problem("PIP_ARGS", value) == \
        "the value of PIP_ARGS looks like a URL that carries a credential (access_token=)"


@pytest.mark.parametrize("value", ["abcdefghij12345678", "project-alpha-2024-x", "1bcdefghijklmnopq"])
def test_a_key_shaped_value_under_an_api_name_whatever_it_starts_with(value: str) -> None:
    assert env_problem("API_ID", value) == \
        "the name API_ID has the word part 'API' and its value is shaped like a key (or an id)"


def test_an_api_name_with_a_value_of_letters_only_or_digits_only_passes() -> None:
    assert env_problem("API_ID", "abcdefghijklmnopqr") is None
    assert env_problem("API_ID", "12345678901234567") is None
