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


# --- the rest of scan.py's rules, edge by edge (the mutmut survivors of `--module scan`) -------

import base64  # noqa: E402

from core.errors import UserError  # noqa: E402
from core.secrets import scan  # noqa: E402

TOKEN = "hf_" + "Zq8pL2mN4xR7vT1wY6sK9cB3dF5gH0jA"  # a Hugging Face token's shape
RANDOM = "Zq8pL2mN4xR7vT1wY6sK9cB3"  # 24 characters, mixed case and digits, 4.58 bits each
AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # AWS's documented example secret key
VOUCH = ("; if it is not a secret, say so: --not-secret {n} (or not_secret: [{n}] in gpu.yaml), shown in "
         "the plan (an agent's job is then held for you)")


def _env_fix(name: str, vouch: bool) -> str:
    return (f"store it in the keychain with `gpu secrets set {name}` and list {name} under `secrets:` in "
            f"gpu.yaml (or pass --secret {name}); the job then reads it from its environment"
            + (VOUCH.format(n=name) if vouch else ""))


def _args_fix(name: str) -> str:
    named = " (NAME: a name of yours for it, e.g. HF_TOKEN)" if name == "NAME" else ""
    return (f"store it in the keychain with `gpu secrets set {name}`{named} and list {name} under `secrets:` "
            f"in gpu.yaml (or pass --secret {name}); the job then reads it from its environment "
            f"(os.environ[{name!r}]), not from its arguments")


def _refusal(call, *args, **kwargs) -> tuple[str, str | None, str | None] | None:
    try:
        call(*args, **kwargs)
    except UserError as e:
        return e.what, e.where, e.fix
    return None


@pytest.mark.parametrize("value, random", [
    (RANDOM, True), (RANDOM[:-1], False),  # 24 characters at least
    ("Zq8pL2mN4x/R7vT1wY6sK9cB3dF", False),  # a '/' inside: a path
    ("Zq8pL2mN4x=R7vT1wY6s/K9cB3dF", True), ("aB3x/Y9kLmN0pQ+rS7tU1vW2", True),  # ... unless base64 says key
    (f"/{RANDOM}/", True),  # a '/' at the edges only
    ("Zq8p_L2mN4x-R7vT1.wY6sK9cB3", False), ("Zq8p_L2mN4xR7vT1.wY6sK9cB3dF", True),  # separators: > 10%
    ("Zq8pL2mN4x:R7vT1wY6sK9cB3dF", True),
    ("ZQ8PL2MN4XR7VT1WY6SK9CB3DF", False), ("zq8pl2mn4xr7vt1wy6sk9cb3df", False),  # mixed: all three
    ("ZQpLmNxRvTwYsKcBdFgHjAqWeR", False),
    ("0123456789abcdef" * 2, True), ("0123456789abcdef0123456789abcde", False),  # hex: 32 at least
    ("ABCDEF0123456789" * 2, True),
    ("aB3" * 8, False),  # entropy under 3.5 bits
    (f"short;{RANDOM}", True), (f"x {RANDOM}", True), (f"{RANDOM},x", True), ("a b c", False),
])
def test_looks_random_at_each_of_its_edges(value: str, random: bool) -> None:
    assert scan.looks_random(value) is random


@pytest.mark.parametrize("value, key", [
    (AWS, True), (AWS + "A", False), (AWS[:-1], False),  # exactly 40 characters
    (f'AWS="{AWS}"', True), (f"key:{AWS}", True), (f"x={AWS}", True), (f"'{AWS}'", True), (f"a,{AWS}", True),
    (f"a;{AWS}", True), (f"a {AWS}", True),
    (AWS[:-1] + "/", True),  # a '/' inside and one at the end
    ("/" + AWS.replace("/", "")[:38] + "/", False),  # '/' at the edges only
    (AWS.upper(), False), (AWS.lower(), False),  # both cases
    (AWS[:-1] + "-", False),
    ("data/ImageNet2012/train/images/class0001", False),  # words: a path
])
def test_looks_like_aws_secret_at_each_of_its_edges(value: str, key: bool) -> None:
    assert scan.looks_like_aws_secret(value) is key


@pytest.mark.parametrize("segment, readable", [
    ("ImageNet2012", True), ("exp_lr3e-4_bs32_seed1", True), ("Llama-2-7b-hf", True),
    ("Zq8pL2mN4xR7vT1", True), ("Zq8pL2mN4xR7vT1w", False),  # short: under 16
    ("aaaaaaaaaaaaaaaaaaaa", True), ("checkpointsTrainedModel", True), (TOKEN[3:], False),
])
def test_a_path_segment_is_readable_by_its_rule(segment: str, readable: bool) -> None:
    assert scan._readable(segment) is readable


@pytest.mark.parametrize("url, key", [
    ("https://h/x?sig=abcdefgh", "sig"), ("https://h/x?sig=abcdefg", None),  # 8 characters at least
    ("https://h/x#access_token=abcdefgh", "access_token"), ("https://h/x?code=12345678", "code"),
    ("https://h/x?apikey=12345678", "apikey"), ("https://h/x?APIKEY=12345678", "APIKEY"),
    ("https://h/x?page=12345678", None), ("https://h/x?X-Amz-Signature=12345678", "X-Amz-Signature"),
    ("https://h/x?a=1&token=&sig=abcdefgh", "sig"), ("https://h/x?token=", None),
    ("http://[::1/x?a=b", "an unreadable URL"),
])
def test_a_url_parameter_carries_a_credential_by_its_rule(url: str, key: str | None) -> None:
    assert scan._url_credential(url) == key


@pytest.mark.parametrize("name, value, what", [
    ("X", "", "empty"), ("X", "  ", "empty"), ("X", "3e-4", "a number"), ("X", "224x224", "a number"),
    ("X", "0, 1", "a number"), ("X", "v2.1.0rc1", "a version"), ("X", "2024-01-02T10:11:12Z", "a date"),
    ("X", " 1.2.3 ", "a version"),
    ("X", "<pad>", "a tokenizer's special token"), ("X", "[CLS]", "a tokenizer's special token"),
    ("DB_PASSWORD", "none", "a short word"), ("DB_PASSWORD", "Bearer", "a short word"),
    ("DB_PASSWORD", "changeme", None), ("DB_PASSWORD", "bf16", None), ("SENHA", "changeme", None),
    ("PASSWORD_FILE", "changeme", "a short word"),  # the noun is FILE
    ("API_KEY", "changeme", "a short word"), ("", "changeme", "a short word"),
    ("X", "https://example.com/x", "a URL without credentials"), ("X", "https://example.com/x?sig=abcdefgh12", None),
    ("X", "./data/ImageNet2012/train", "a path"), ("X", "~/models", "a path"), ("X", "/data/x/", "a path"),
    ("X", f"/data/{TOKEN[3:]}", None),  # a segment that is no word
    ("MODEL_SHA", "abcdef1234567", "a digest under a name that says so"),
    ("MODEL_SHA", "sha256:abcdef1", "a digest under a name that says so"),
    ("RUN_UUID", "12345678-1234-1234-1234-123456789abc", "a digest under a name that says so"),
    ("API_KEY_ID", "0123456789abcdef0123456789abcdef01234567", "a digest under a name that says so"),
    ("ID_KEY", "abcdef1234567", None),  # the noun is the key
    ("API_KEY", "abcdef1234567", None), ("X", "abcdef1234567", None), ("DB_PASSWORD", "abcdef1234567", None),
])
def test_plain_value_names_what_a_value_is(name: str, value: str, what: str | None) -> None:
    assert scan.plain_value(name, value) == what


def test_check_env_refuses_the_first_secret_saying_which_step_and_where() -> None:
    env = {"LR": "3e-4", "DB_PASSWORD": "changeme", "HF": TOKEN}
    assert _refusal(scan.check_env, env, "gpu.yaml:3") == (
        "the name DB_PASSWORD looks like a secret's (it has the word part 'PASSWORD') and its value is not "
        "plainly a setting (a number, a word, a path, a URL): secrets may not be passed in env",
        "gpu.yaml:3", _env_fix("DB_PASSWORD", vouch=True))
    places = {"LR": "gpu.yaml:2", "HF": "gpu.yaml:9"}
    assert _refusal(scan.check_env, {"LR": "3e-4", "HF": TOKEN}, places) == (
        "the value of HF looks like a Hugging Face token: secrets may not be passed in env",
        "gpu.yaml:9", _env_fix("HF", vouch=False))
    assert _refusal(scan.check_env, {"MY_VAL": RANDOM}, places) == (
        "the value of MY_VAL looks like a key (long and random): secrets may not be passed in env",
        "env", _env_fix("MY_VAL", vouch=True))
    assert _refusal(scan.check_env, {TOKEN: "1"}) == (
        "the name of an env entry looks like a Hugging Face token: secrets may not be passed in env",
        "env", _env_fix("NAME", vouch=False))
    assert _refusal(scan.check_env, {"API_ID": "abcdefghij12345678"}, "argument --env") == (
        "the name API_ID has the word part 'API' and its value is shaped like a key (or an id): secrets "
        "may not be passed in env", "argument --env", _env_fix("API_ID", vouch=True))


def test_check_env_passes_what_a_person_vouched_for_but_never_a_token() -> None:
    assert _refusal(scan.check_env, {"DB_PASSWORD": "changeme", "LR": "1"}, plain={"DB_PASSWORD"}) is None
    assert _refusal(scan.check_env, {"MY_VAL": RANDOM}, plain=frozenset({"MY_VAL"})) is None
    assert _refusal(scan.check_env, {"HF": TOKEN}, plain={"HF"})[0] == \
        "the value of HF looks like a Hugging Face token: secrets may not be passed in env"
    assert _refusal(scan.check_env, {}) is None


@pytest.mark.parametrize("args, i, flag", [
    (["--k=v"], 0, ("--k", "v")), (["--k="], 0, ("--k", "")), (["--k"], 0, None), (["v"], 0, None),
    (["--k", "v"], 1, ("--k", "v")), (["-k", "v"], 1, ("-k", "v")), (["--k=1", "v"], 1, None),
    (["a", "v"], 1, None),
])
def test_an_argument_is_a_flag_s_value_when_it_follows_or_joins_one(args, i, flag) -> None:
    assert scan._flag_value(args, i) == flag


@pytest.mark.parametrize("flag, name", [
    ("--hf-token", "HF_TOKEN"), ("-x", "X"), ("--a.b--c", "A_B_C"), ("--_secret_", "SECRET"), (None, "NAME"),
    ("--", "NAME"), ("--9lives", "NAME"), ("--" + "a" * 64, "A" * 64), ("--" + "a" * 65, "NAME"),
    ("--api key", "API_KEY"), ("--token2", "TOKEN2"),
])
def test_a_flag_names_the_environment_variable_its_secret_would_have(flag: str | None, name: str) -> None:
    assert scan._env_name_of(flag) == name


def test_check_args_names_the_argument_by_its_place_and_the_variable_to_use() -> None:
    assert _refusal(scan.check_args, ["--lr", "3", "--hf-token", TOKEN], "argument args") == (
        "entry 4 of args (the value of '--hf-token') looks like a Hugging Face token: secrets may not be "
        "passed in args", "argument args", _args_fix("HF_TOKEN"))
    assert _refusal(scan.check_args, ["--api-key", RANDOM], "x") == (
        "entry 2 of args (the value of '--api-key') looks like a key (long and random): secrets may not be "
        "passed in args", "x", _args_fix("API_KEY"))
    assert _refusal(scan.check_args, [f"--api-key={RANDOM}"], "x", field="the script line") == (
        "entry 1 of the script line (the value of '--api-key') looks like a key (long and random): secrets "
        "may not be passed in the script line", "x", _args_fix("API_KEY"))
    assert _refusal(scan.check_args, ["train.py", TOKEN], "x") == (
        "entry 2 of args looks like a Hugging Face token: secrets may not be passed in args", "x", _args_fix("NAME"))
    # the token is the flag itself: named by its place alone
    assert _refusal(scan.check_args, [f"--{TOKEN}=x"], "x") == (
        "entry 1 of args looks like a Hugging Face token: secrets may not be passed in args", "x", _args_fix("NAME"))


def test_check_args_guesses_randomness_only_for_a_secret_s_flag() -> None:
    assert _refusal(scan.check_args, ["--run-id", RANDOM], "x") is None
    assert _refusal(scan.check_args, [RANDOM], "x") is None
    assert _refusal(scan.check_args, ["--token", "short"], "x") is None
    assert _refusal(scan.check_args, ["--lr=3", "--seed", "1"], "x") is None
    assert _refusal(scan.check_args, [], "x") is None


def test_texts_yields_every_string_keys_too_to_a_depth_of_six() -> None:
    assert list(scan._texts("a")) == ["a"]
    assert list(scan._texts(["a", ("b", 3), {"k": "v", "n": [None, "w"]}])) == ["a", "b", "k", "v", "n", "w"]
    assert list(scan._texts({1: "v"})) == ["v"]
    six = [[[[[["deep"]]]]]]  # the string inside the sixth list
    assert list(scan._texts(six)) == ["deep"]
    assert list(scan._texts([six])) == []
    assert list(scan._texts({"a": {"b": {"c": {"d": {"e": "deep"}}}}})) == ["a", "b", "c", "d", "e", "deep"]
    assert list(scan._texts({"a": {"b": {"c": {"d": {"e": {"f": "x"}}}}}})) == ["a", "b", "c", "d", "e", "f", "x"]
    assert list(scan._texts({"a": {"b": {"c": {"d": {"e": {"f": {"g": "x"}}}}}}})) == ["a", "b", "c", "d", "e", "f"]
    assert list(scan._texts(7)) == []


def _where(key: str) -> str:
    return f"gpu.yaml {key}"


def test_check_request_text_refuses_a_secret_in_any_field_but_env() -> None:
    fix = ("store it in the keychain with `gpu secrets set NAME` (NAME: a name of yours for it, e.g. HF_TOKEN) "
           "and list NAME under `secrets:` in gpu.yaml (or pass --secret NAME); the job then reads it from its "
           "environment")
    assert _refusal(scan.check_request_text, {"env": {"A": TOKEN}, "name": "ok", "outputs": ["a", {"k": TOKEN}]},
                    _where) == ("outputs holds what looks like a Hugging Face token: secrets may not be passed in "
                                "outputs", "gpu.yaml outputs", fix)
    assert _refusal(scan.check_request_text, {"env": {"A": TOKEN}}, _where) is None
    assert _refusal(scan.check_request_text, {"args": "--token " + TOKEN}, _where) == (
        "args holds what looks like a Hugging Face token: secrets may not be passed in args", "gpu.yaml args", fix)
    assert _refusal(scan.check_request_text, {"script": ["train.py", TOKEN]}, _where) == (
        "script holds what looks like a Hugging Face token: secrets may not be passed in script",
        "gpu.yaml script", fix)
    assert _refusal(scan.check_request_text, {"name": "a", "gpu": "h100", "sweep": {"lr": [1, 2]}}, _where) is None


def test_check_request_text_holds_args_and_the_script_line_as_arguments() -> None:
    assert _refusal(scan.check_request_text, {"args": ["--token", TOKEN]}, _where) == (
        "entry 2 of args (the value of '--token') looks like a Hugging Face token: secrets may not be passed "
        "in args", "gpu.yaml args", _args_fix("TOKEN"))
    assert _refusal(scan.check_request_text, {"script": "train.py --token " + TOKEN}, _where) == (
        "entry 3 of the script line (the value of '--token') looks like a Hugging Face token: secrets may not "
        "be passed in the script line", "gpu.yaml script", _args_fix("TOKEN"))
    assert _refusal(scan.check_request_text, {"script": "train.py 'unclosed " + TOKEN}, _where) == (
        "entry 1 of the script line looks like a Hugging Face token: secrets may not be passed in the script "
        "line", "gpu.yaml script", _args_fix("NAME"))
    # the random guess only for a secret's flag: a run id in the script line passes
    assert _refusal(scan.check_request_text, {"script": f"train.py --api-key {RANDOM}"}, _where)[0] == (
        "entry 3 of the script line (the value of '--api-key') looks like a key (long and random): secrets "
        "may not be passed in the script line")
    assert _refusal(scan.check_request_text, {"script": f"train.py --run {RANDOM}", "args": ["--run", RANDOM]},
                    _where) is None
    assert _refusal(scan.check_request_text, {"name": f"x {RANDOM}"}, _where) is None


def test_a_base64_aws_key_in_an_argument_is_not_a_false_find() -> None:
    # the value's base64 is no token: only the AWS shape itself is
    assert scan.text_problem(base64.b64encode(b"plain words here").decode()) is None
    assert scan.text_problem(f"--secret-key {AWS}") == "an AWS secret access key"


def test_the_spans_an_error_message_masks_are_the_table_s_and_aws_keys() -> None:
    assert scan._table_spans(f"key {AWS} x") == [(4, 44, "an AWS secret access key")]
    assert scan._table_spans(f"t={TOKEN}") == [(2, 37, "a Hugging Face token")]
    assert scan._table_spans(f"key {AWS}A x") == []  # 41 characters: no AWS key
    assert scan._table_spans("plain words") == []


def test_entropy_in_bits_per_character() -> None:
    assert scan._entropy("aabb") == 1.0 and scan._entropy("abcd") == 2.0 and scan._entropy("a") == 0


def test_value_evidence_finds_the_url_that_carries_a_credential_among_several() -> None:
    assert scan.value_evidence("https://a/x?page=123456789 https://b/y?sig=abcdefgh1") == \
        "a URL that carries a credential (sig=)"
    assert scan.value_evidence("https://u:pw@host/x") == "a URL with a password"
    assert scan.value_evidence("https://a/x?page=123456789") is None


def test_a_weak_word_is_said_as_written_and_the_value_judged_without_blanks() -> None:
    assert scan.env_problem("api_id", " abcdefghij12345678 ") == \
        "the name api_id has the word part 'api' and its value is shaped like a key (or an id)"


@pytest.mark.parametrize("name, part", [
    ("dbConnStr", "Conn_Str"), ("MY_2FA_SEED", "2_FA"), ("PIN_MEMORY", None), ("SPINE_DEPTH", None),
    ("TOKENIZERS_SECRET", "SECRET"), ("apiKey", "Key"), ("DB_PIN", "PIN"), ("AUTHOR_NAME", None),
])
def test_the_secret_word_part_of_a_name_is_said_as_written(name: str, part: str | None) -> None:
    assert scan.secret_name_part(name) == part


def test_name_parts_split_on_separators_and_case() -> None:
    assert scan.name_parts("myAPIToken") == ["my", "API", "Token"]
    assert scan.name_parts("db.pass-word__x2") == ["db", "pass", "word", "x", "2"]


# --- the rerun's survivors (bench/README.md: scan 527 / 577 with the tests above) --------------

def test_the_flag_s_variable_name_keeps_upper_case_and_the_letter_x() -> None:
    assert scan._env_name_of("--HF-Token") == "HF_TOKEN"
    assert scan._env_name_of("--MAX") == "MAX"
    assert scan._env_name_of("--X_") == "X"


def test_a_flag_s_value_is_the_first_after_its_first_equals_sign_and_never_wraps_around() -> None:
    assert scan._flag_value(["--k=a=b"], 0) == ("--k", "a=b")
    assert scan._flag_value(["v", "--k"], 0) is None  # the first argument follows no flag


@pytest.mark.parametrize("segment, readable", [
    ("Zq8pL2mN4_R7vT1wY6s-", False),  # separators exactly 10%: not more
    ("Zq8pL2mN4xR7vT1wY6s-", False),  # one separator in 20
    ("Abcdefgh1Q2W3E4R", True),  # words exactly half
    ("a1B2c3D4e1F2g3H4", False),  # exactly 3.5 bits a character: not under
])
def test_a_path_segment_at_the_exact_edges_of_readable(segment: str, readable: bool) -> None:
    assert scan._readable(segment) is readable


def test_a_forty_character_run_is_an_aws_span_only_when_shaped_like_one(monkeypatch) -> None:
    assert scan._table_spans("a" * 40) == []

    def unreadable():
        raise RuntimeError("detect-secrets is missing")

    monkeypatch.setattr(scan, "_text_rules", unreadable)  # the formats still hold
    assert scan._table_spans(f"k {AWS}") == [(2, 42, "an AWS secret access key")]


def test_a_key_of_a_mapping_is_one_level_deeper() -> None:
    assert list(scan._texts({((((("s",),),),),): 1})) == ["s"]
    assert list(scan._texts({(((((("s",),),),),),): 1})) == []


def test_every_field_after_args_or_the_script_line_is_still_read() -> None:
    for first in ({"args": ["ok"]}, {"script": "train.py"}, {"env": {"A": "1"}}):
        assert _refusal(scan.check_request_text, {**first, "name": TOKEN}, _where)[0] == \
            "name holds what looks like a Hugging Face token: secrets may not be passed in name", first


def test_an_api_name_with_an_upper_case_key_shaped_value_is_refused() -> None:
    assert scan.env_problem("API_ID", "ABCDEFGHIJ12345678") == \
        "the name API_ID has the word part 'API' and its value is shaped like a key (or an id)"


def test_aws_key_edges_a_slash_before_x_and_lower_case_only() -> None:
    edge = AWS.replace("/", "")[:37] + "/XX"
    assert len(edge) == 40 and scan.looks_like_aws_secret(edge) is True
    assert scan.looks_like_aws_secret("wj4lrxu7nfem1/k7md3ng/bpxrf1cy3x4mpl3k3y") is False  # no upper case


@pytest.mark.parametrize("value, random", [
    ("Zq8pL2mN4xR7vT1wY6sK9cB3/X", False),  # a '/' inside, before an X
    ("XZq8XpL2XmN4XxR7vT1wY6sK9c", True),  # X is no separator
    ("Zq8_pL2mN4x-R7vT1wY6s.K9cB3dF5", True),  # separators exactly 10%: not more
    ("a_b_c_d_e_f_g_h_i_j_k_l_m_n_o," + RANDOM, True),  # a readable token, then a key
    ("abcdEFGH" * 2 + "1234" * 4, True),  # exactly 3.5 bits a character
])
def test_looks_random_at_its_exact_edges(value: str, random: bool) -> None:
    assert scan.looks_random(value) is random


def test_a_short_word_under_a_secret_word_that_is_no_password_s_passes() -> None:
    assert scan.plain_value("MY_JWT", "changeme") == "a short word"
    assert scan.plain_value("X", "/data/Zq8pL2mN4xR7vT1X") is None  # its last segment is no word


@pytest.mark.parametrize("value", [
    "A1b2A1b2A1/b2A1b2A1b2A1/b2A1b2A1b2A1b2A1",  # no words, 2.2 bits a character: few words decide
    # ("Abcd123456/" * 3 + "Abcd123" was the case here: its parts read as names, a path now)
    "JackdawsLoveMyBig/SphinxOfQuartz2W8K1vXz",  # mostly words, yet at a key's entropy (5.05 bits)
])
def test_an_aws_key_by_few_words_or_by_a_key_s_entropy(value: str) -> None:
    assert len(value) == 40 and scan.looks_like_aws_secret(value) is True


def test_a_variable_named_name_gets_the_vouching_hint_like_any_other() -> None:
    """NAME is also the placeholder a refusal says for a token pasted as a name; a real
    variable called NAME refused by randomness may still be vouched for."""
    assert _refusal(scan.check_env, {"NAME": RANDOM}) == (
        "the value of NAME looks like a key (long and random): secrets may not be passed in env",
        "env", _env_fix("NAME", vouch=True))


def test_a_run_that_is_half_words_at_a_low_entropy_is_no_aws_key() -> None:
    value = "Abcdefghij" + "1Q1Q1Q1Q1Q" + "Abcdefghij" + "/Q1Q1Q1Q1" + "Q"  # 20 of 40 in words, 3.3 bits
    assert len(value) == 40 and scan.looks_like_aws_secret(value) is False


@pytest.mark.parametrize("value, key", [
    ("/hf/cache/cache/ImageNet2012/tmpa8f3k2j9", False),  # found by hypothesis: a path, not a key
    ("hf/ImageNet2012/ImageNet2012/tmpa8f3k2j9", False),  # relative: three parts or more, read as names
    ("/data/ImageNet2012/ImageNet2012/Class001", False),
    ("Jackdaws/LoveMy/Big/Sphinx/OfQuartz2W8K1", False),  # five parts, 23 of 40 characters names
    ("JackdawsLoveMyBig/SphinxOfQuartz2W8K1vXz", True),  # two parts: no path, words at a key's entropy
    ("wJalrXUtnF/EMI/K7MDENG/bPxRfiCYEXAMPLEKE", True),  # AWS's documented example key: its parts read as no names
    ("Zq8pL2mN4x/R7vT1wY6sK/9cB3dF5hJ0kQ2nW4eR", True),  # three random parts
])
def test_a_key_shaped_token_whose_parts_read_as_names_is_a_path(value: str, key: bool) -> None:
    """A path of exactly a key's length, with both cases and few long words, was refused as an
    AWS secret access key (`--env MAX=/hf/cache/cache/ImageNet2012/tmpa8f3k2j9`); three parts or
    more, half the characters in parts that read as names, make it a path."""
    assert len(value) == 40 and scan.looks_like_aws_secret(value) is key


@pytest.mark.parametrize("value, key", [
    ("/ImageNet2012/ImageNet2012/tmpa8f3k2j9xq", False),  # three parts: the fewest a path has
    ("ImageNet2012/Zq8pL2mN4xR7vT1wY6/tmpa8f3k", False),  # 20 of 40 characters in names: exactly half
    ("ImageNet2012/Zq8pL2mN4xR7vT1wY6s/tmpa8f3", True),  # 19 of 40: under half, a key
    ("hf/ImageNet2012/cache1/Zq8pL2mN4xR7vT1wY", False),  # a two-letter part is a name: 20 of 40
    ("hf/ImageNet2012/cache/Zq8pL2mN4xR7vT1wY6", True),  # 19 of 40 with it
    ("data/Zq8pL2mN4xR7vT1wY6sK9c/ImageNet2012", True),  # 16 of 40: a third is not half
])
def test_a_path_by_its_parts_and_half_its_characters_at_the_edges(value: str, key: bool) -> None:
    """A key-shaped token reads as a path with three parts or more and at least half of its
    characters in parts of two or more that read as names; one character under half is a key."""
    assert len(value) == 40 and scan.looks_like_aws_secret(value) is key


def test_an_aws_key_with_a_few_words_at_a_low_entropy_and_one_in_lower_case_only() -> None:
    """Two parts (no path): words under half decide at 3.4 bits a character; lower case alone
    is no AWS key, whatever else it has."""
    few_words = "Abcd123456Abcd123456/Abcd123456Abcd12345"  # 16 of 40 in words
    assert len(few_words) == 40 and scan.looks_like_aws_secret(few_words) is True
    lower = "wj4lrxu7nfem1k7md3ng/bpxrf1cy3x4mpl3k3y+"
    assert len(lower) == 40 and scan.looks_like_aws_secret(lower) is False
    assert scan.looks_like_aws_secret(lower.replace("w", "W", 1)) is True
