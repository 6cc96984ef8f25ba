"""Bad input gets a clear error and exit status 2: never a traceback, a hang or a blow-up.

What a user (or an agent, or someone who can edit the project) could feed the tool: file names
longer than the OS allows, folders whose names look like Rich markup, YAML nested thousands
deep or built to expand to gigabytes, values megabytes long, and values that only fail once a
job is on its target. Most cases run through the installed `gpu` command, the way a person
meets them; the rest, and the property tests, call `build_request` (the one door every front
goes through) and the YAML loader directly.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.config import safeyaml
from core.config.request import DataSpec, JobRequest, build_request
from core.config.schema import MAX_COMMAND_BYTES, MAX_HOURS, SCHEMA, text_bytes
from core.errors import UserError, shorten
from core.secrets import tokens
from tests.conftest import gpu_exe, gpu_json, make_git_project, run_gpu, write_user_config

TRAIN = "print('training')\n"
LONG_NAME = "a" * 300  # one path component over NAME_MAX (255 bytes)
MESSAGE_BOUND = 3200  # what + where + fix, each clipped to 1000 characters
PROPERTY = settings(max_examples=examples(100), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "proj"
    p.mkdir()
    (p / "train.py").write_text(TRAIN)
    (p / "corpus").mkdir()
    (p / "corpus" / "a.txt").write_text("a\n")
    return p


def assert_clear_error(proc: subprocess.CompletedProcess, *says: str) -> None:
    """Exit 2, one `error:` message with a fix, the words a user needs, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.startswith("error: ") and "fix:" in proc.stderr, proc.stderr[-3000:]
    assert len(proc.stderr) < MESSAGE_BOUND, len(proc.stderr)
    for s in says:
        assert s in proc.stderr, proc.stderr


def no_jobs(cwd: Path) -> bool:
    return gpu_json("jobs", cwd=cwd)["jobs"] == []


# -- file names the OS cannot hold ---------------------------------------------------------


@pytest.mark.parametrize("argv,where", [
    ([f"{LONG_NAME}.py"], "argument SCRIPT"),
    (["train.py", "--data", f"x={LONG_NAME}"], "argument --data"),
    (["train.py", "--data", f"corpus/{LONG_NAME}/b"], "argument --data"),
    (["train.py", "--project-dir", f"/tmp/{LONG_NAME}"], "argument --project-dir"),
], ids=["script", "data", "data-deep", "project-dir"])
def test_cli_a_path_part_over_255_bytes_is_a_clear_error(home: Path, project: Path, argv: list[str],
                                                          where: str) -> None:
    proc = run_gpu("submit", *argv, "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert_clear_error(proc, where, "longer than 255 bytes", "… (")
    assert no_jobs(project)


def test_cli_bundle_of_a_project_dir_over_255_bytes(home: Path, project: Path) -> None:
    assert_clear_error(run_gpu("bundle", "--project-dir", f"/tmp/{LONG_NAME}", cwd=project),
                       "argument --project-dir", "longer than 255 bytes")


def test_cli_a_target_key_path_over_255_bytes(home: Path, project: Path) -> None:
    """The user config's paths (an SSH key, known_hosts) meet the same rule, when saved."""
    proc = run_gpu("targets", "add", "ssh", "box", "--host", "h", "--key", f"/k/{LONG_NAME}", "--no-probe")
    assert_clear_error(proc, "targets.box.key", "longer than 255 bytes")


def test_cli_a_script_path_over_255_bytes_in_gpu_yaml(home: Path, project: Path) -> None:
    (project / "gpu.yaml").write_text(f"hours: 1\nscript: sub/{LONG_NAME}.py\n")
    assert_clear_error(run_gpu("submit", "--wait-s", "0", cwd=project), "gpu.yaml:2:", "255 bytes")


@pytest.mark.slow  # runs the supervisor: end to end
def test_cli_a_long_argument_is_passed_on_not_taken_for_a_path(home: Path, tmp_path: Path) -> None:
    """A 300-byte argument (a prompt, a JSON blob) is no file name: the job gets it unchanged.

    The check that warns about paths that do not ship used to stat it and die of ENAMETOOLONG.
    """
    project = make_git_project(tmp_path / "proj", {"train.py": TRAIN})
    doc = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", "--verbose", "--",
                   LONG_NAME, f"--prompt={LONG_NAME}", cwd=project)
    assert doc["submitted"] is True
    assert doc["job"]["request"]["args"] == [LONG_NAME, f"--prompt={LONG_NAME}"]
    assert not doc["bundle"].get("warnings")


# -- names that look like Rich markup ------------------------------------------------------


@pytest.mark.slow  # runs the supervisor: end to end
def test_cli_project_folder_named_like_markup(home: Path, tmp_path: Path) -> None:
    """`proj [/x]` is a legal folder name; Rich read it as a closing tag and the CLI died."""
    project = make_git_project(tmp_path / "proj [/x]", {"train.py": TRAIN, "ign/a.txt": "a\n"},
                               gitignore="ign/\n")
    wide = {"COLUMNS": "1000"}  # no wrapping, so the path shows in one piece
    proc = run_gpu("submit", "train.py", "--hours", "0.1", "--wait-s", "0", "--include", "ign/*",
                   "--name", "m", cwd=project, env=wide)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"outputs: {project.resolve()}/runs/" in proc.stdout
    status = run_gpu("status", "last", cwd=project, env=wide)
    assert status.returncode == 0 and "[/x]" in status.stdout, status.stderr[-3000:]
    listing = gpu_json("bundle", "--include", "ign/*", "--list", cwd=project)
    assert "ign/a.txt" in listing["list"] and listing["root"] == str(project.resolve())
    shown = run_gpu("bundle", cwd=project, env=wide)
    assert shown.returncode == 0 and f"root {project.resolve()}" in shown.stdout, shown.stderr[-3000:]


# -- YAML built to hurt ---------------------------------------------------------------------


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The "billion laughs": each level repeats the one before `width` times."""
    lines = ["script: train.py", "args:", '  - &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"  - &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def run_limited(*args: str, cwd: Path, memory: int = 512 << 20, timeout: float = 30) -> subprocess.CompletedProcess:
    """`gpu` with its address space capped: a blow-up shows as a failure, not a swapping host."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([gpu_exe(), *args], cwd=cwd, env=dict(os.environ), capture_output=True,
                          text=True, timeout=timeout, preexec_fn=cap)


def test_cli_alias_bomb_in_gpu_yaml_is_refused_fast_and_small(home: Path, project: Path) -> None:
    (project / "gpu.yaml").write_text(alias_bomb())
    started = time.monotonic()
    proc = run_limited("submit", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert time.monotonic() - started < 10
    assert_clear_error(proc, "gpu.yaml:", "expands to more than")
    assert no_jobs(project)


def test_cli_alias_bomb_in_the_user_config(home: Path, project: Path) -> None:
    write_user_config("targets:\n  box:\n    kind: local\n    gpus:\n" + "".join(
        f"      - &g{i} [" + ",".join([f"*g{i - 1}"] * 9) + "]\n" if i else '      - &g0 {name: T4}\n'
        for i in range(9)))
    started = time.monotonic()
    proc = run_limited("targets", cwd=project)
    assert time.monotonic() - started < 10
    assert_clear_error(proc, "user-config.yaml:", "expands to more than")


@pytest.mark.parametrize("depth", [40, 5000])
def test_cli_args_nested_deep_in_gpu_yaml(home: Path, project: Path, depth: int) -> None:
    (project / "gpu.yaml").write_text("script: train.py\nargs: " + "[" * depth + "]" * depth + "\n")
    assert_clear_error(run_gpu("submit", "--wait-s", "0", cwd=project),
                       "gpu.yaml:2:", "nested more than 32 levels")


def test_cli_a_gpu_yaml_that_is_a_fifo_does_not_hang(home: Path, project: Path) -> None:
    os.mkfifo(project / "gpu.yaml")
    assert_clear_error(run_gpu("submit", "train.py", "--wait-s", "0", cwd=project, timeout=30),
                       "gpu.yaml", "not a regular file")


def test_cli_a_gpu_yaml_over_1_mib(home: Path, project: Path) -> None:
    (project / "gpu.yaml").write_text("script: train.py\n# " + "x" * (1 << 20) + "\n")
    assert_clear_error(run_gpu("submit", "--wait-s", "0", cwd=project), "gpu.yaml", "larger than 1024 KiB")


def test_cli_a_long_value_is_quoted_short(home: Path, project: Path) -> None:
    (project / "gpu.yaml").write_text("script: train.py\nhours: '" + "x" * 100_000 + "'\n")
    proc = run_gpu("submit", "--wait-s", "0", cwd=project)
    assert_clear_error(proc, "gpu.yaml:2:", "hours must be a number", "… (100000 chars)")
    assert len(proc.stderr) < 600


# -- values that used to fail only on the target -------------------------------------------

CLI_LATE = [
    # (id, gpu.yaml or None, arguments, words in the message)
    ("data-dotdot", None, ["--data", "..=corpus"], ["argument --data", "data name '..'"]),
    ("data-dotdot-bare", None, ["--data", ".."], ["argument --data", "data name '..'"]),
    ("data-empty-name", None, ["--data", "=corpus"], ["empty NAME"]),
    ("data-no-path", None, ["--data", "x="], ["has no PATH"]),
    ("data-dot-name", "script: train.py\ndata: {.: corpus}\n", [], ["gpu.yaml:2:", "data name '.'"]),
    ("hf-no-name", None, ["--data", "hf://datasets/acme"], ["hf://datasets/OWNER/NAME"]),
    ("hf-dotdot", None, ["--data", "hf://datasets/acme/tiny/../x"], ["hf://datasets/OWNER/NAME"]),
    ("hf-space", None, ["--data", "hf://datasets/acme/ti ny"], ["hf://datasets/OWNER/NAME"]),
    ("hf-empty-name", None, ["--data", "hf://datasets/acme/"], ["hf://datasets/OWNER/NAME"]),
    ("hf-bad-revision", None, ["--data", "hf://datasets/acme/tiny@a..b"], ["hf://datasets/OWNER/NAME"]),
    ("hf-dash-name", "script: train.py\ndata: [hf://datasets/acme/ti--ny]\n", [],
     ["gpu.yaml:2:", "hf://datasets/OWNER/NAME"]),
    ("hours-over", None, ["--hours", "721"], ["argument --hours", "at most 720"]),
    ("hours-huge", None, ["--hours", "1e309"], ["argument --hours", "at most 720"]),
    ("args-nul", "script: train.py\nargs: [\"a\\0b\"]\n", [], ["gpu.yaml:2:", "NUL"]),
    ("env-nul", "script: train.py\nenv: {A: \"a\\0b\"}\n", [], ["gpu.yaml:2:", "NUL"]),
    ("args-total", None, ["--", *["x" * 30_000] * 5], ["more than 128 KiB"]),
    ("arg-too-long", None, ["--", "x" * 40_000], ["at most 32 KiB"]),
    ("request-id-long", None, ["--request-id", "r" * 129], ["argument --request-id", "at most 128"]),
    ("request-id-bidi", "script: train.py\nrequest_id: \"a\\u202eb\"\n", [], ["gpu.yaml:2:", "printable"]),
    ("gpu-markup", None, ["--gpu", "[/x]"], ["argument --gpu", "GPU type"]),
    ("vram-huge", None, ["--vram-gb", "1e7"], ["argument --vram-gb", "at most 1000000"]),
    ("wait-huge", None, ["--wait-s", "1e9"], ["argument --wait-s", "at most 3600"]),
    ("name-newline", "script: train.py\nname: \"x\\n\"\n", [], ["gpu.yaml:2:", "name must be"]),
    ("provider-newline", "script: train.py\nprovider: \"local\\n\"\n", [], ["gpu.yaml:2:", "provider must be"]),
]


@pytest.mark.parametrize("text,argv,says", [c[1:] for c in CLI_LATE], ids=[c[0] for c in CLI_LATE])
def test_cli_refuses_at_submit_what_would_fail_on_the_target(home: Path, project: Path, text: str | None,
                                                            argv: list[str], says: list[str]) -> None:
    if text is not None:
        (project / "gpu.yaml").write_text(text)
    script = [] if text is not None else ["train.py"]
    proc = run_gpu("submit", *script, "--hours", "0.1", *argv, cwd=project)
    assert_clear_error(proc, *says)


def test_a_data_name_is_never_a_path_of_its_own(project: Path) -> None:
    for item in ("..=corpus", ".=corpus", "..", "a/b=corpus", "=corpus", " =corpus", "x=", "/"):
        with pytest.raises(UserError):
            DataSpec.parse(item, project, "here")


@pytest.mark.parametrize("uri,name,parts", [
    ("hf://datasets/acme/tiny", "tiny", ("acme", "tiny", None, None)),
    ("hf://datasets/acme/tiny@v1.0", "tiny", ("acme", "tiny", "v1.0", None)),
    ("hf://datasets/acme/tiny/train/a.csv", "a.csv", ("acme", "tiny", None, "train/a.csv")),
    ("hf://datasets/acme/tiny@refs%2Fpr%2F1/train", "train", ("acme", "tiny", "refs/pr/1", "train")),
    ("hf://datasets/acme/a.b_c-d/sub [dir] 2/x_1.csv", "x_1.csv", ("acme", "a.b_c-d", None, "sub [dir] 2/x_1.csv")),
])
def test_hf_uris_of_the_documented_form_are_taken_apart(project: Path, uri: str, name: str,
                                                        parts: tuple) -> None:
    """Submit downloads repo OWNER/NAME at the revision (decoded), limited to the path."""
    from core.config.request import parse_hf

    spec = DataSpec.parse(uri, project, "here")
    assert (spec.name, spec.kind, spec.source, spec.origin) == (name, "hf", uri, None)
    hf = parse_hf(spec.source)
    assert (hf["owner"], hf["repo"], hf["revision"], hf["path"]) == parts


@pytest.mark.parametrize("uri", [
    "hf://datasets/acme", "hf://datasets/acme/", "hf://datasets//tiny",
    "hf://datasets/acme/tiny@", "hf://datasets/acme/tiny@a b", "hf://datasets/acme/tiny//x",
    "hf://datasets/acme/tiny/./x", "hf://datasets/acme/tiny/x/..",
    "hf://datasets/-acme/tiny", "hf://datasets/acme/tiny/a\nb", "hf://datasets/acme/tiny/a\\b",
    # an empty part, a climb out, spaces where the Hub allows none
    "hf://datasets//", "hf://datasets/acme//x", "hf://datasets/../tiny", "hf://datasets/acme/..",
    "hf://datasets/acme/tiny/..", "hf://datasets/acme/tiny/a/../../b", "hf://datasets/ac me/tiny",
    "hf://datasets/acme/tiny @main", " hf://datasets/acme/ti ny", "hf://datasets/acme/tiny@ma in",
    # names the Hub refuses: `--`, `..`, or a last `-` or `.`
    "hf://datasets/acme/ti--ny", "hf://datasets/ac..me/tiny", "hf://datasets/acme/tiny-",
    "hf://datasets/acme/tiny.",
    # revisions git refuses, also once decoded
    "hf://datasets/acme/tiny@-x", "hf://datasets/acme/tiny@a..b", "hf://datasets/acme/tiny@v1.lock",
    "hf://datasets/acme/tiny@a;b", "hf://datasets/acme/tiny@a%00b", "hf://datasets/acme/tiny@a%20b",
    "hf://datasets/acme/tiny@refs%2F%2Fpr", "hf://datasets/acme/tiny@main%2F", "hf://datasets/acme/tiny@a%2F..%2Fb",
    "hf://datasets/acme/tiny@$(id)", "hf://models/acme/tiny", "hf://acme/tiny",
])
def test_malformed_hf_uris_are_refused_at_submit(project: Path, uri: str) -> None:
    with pytest.raises(UserError) as err:
        build_request(project, {"script": "train.py", "data": [uri]})
    assert "hf://datasets/OWNER/NAME" in err.value.message()


@pytest.mark.parametrize("overrides,says", [
    ({"hours": MAX_HOURS + 1}, "at most 720"),
    ({"hours": math.nan}, "at most 720"),
    ({"hours": 10 ** 400}, "at most 720"),
    ({"vram_gb": 10 ** 400}, "at most 1000000"),
    ({"wait_s": math.inf}, "at most 3600"),
    ({"cpus": 10 ** 6}, "from 1 to 10000"),
    ({"time_minutes": 10 ** 9}, "from 1 to 43200"),
    ({"request_id": "x" * 129}, "at most 128"),
    ({"request_id": "a\u202eb"}, "printable"),
    ({"request_id": 10 ** 5000}, "request_id must be"),
    ({"args": ["a", 10 ** 5000]}, "args must be"),
    ({"args": ["\ud800"]}, "unpaired surrogate"),
    ({"args": "a 'b"}, "a shell can split"),
    ({"args": ["x"] * 1001}, "at most 1000 entries"),
    ({"env": {"A": "1" * 40_000}}, "at most 32 KiB"),
    ({"env": {f"V{i}": "x" * 30_000 for i in range(5)}}, "more than 128 KiB"),
    ({"include": [f"{LONG_NAME}/*"]}, "longer than 255 bytes"),
    ({"include": ["a\x00b"]}, "NUL"),
    ({"gpu": "T4\n"}, "GPU type"),
    ({"name": "job\n"}, "name must be"),
    ({"provider": "local\n"}, "provider must be"),
    ({"secrets": ["HF_TOKEN\n"]}, "secret name"),
    ({"partition": "gpu\n"}, "partition must be"),
    ({"script": "x" * 40_000}, "at most 32 KiB"),
])
def test_every_front_gets_the_same_bounds(project: Path, overrides: dict, says: str) -> None:
    """What the CLI, gpu.yaml or an MCP caller pass all go through build_request's checks."""
    with pytest.raises(UserError) as err:
        build_request(project, {"script": "train.py", **overrides})
    assert says in err.value.message(), err.value.message()
    assert len(err.value.message()) < MESSAGE_BOUND


def test_the_largest_allowed_request_still_builds(project: Path) -> None:
    """The bounds are limits, not taste: a request just under them is fine."""
    args = ["y" * 30_000] * 3 + ["z" * 1000]
    req = build_request(project, {"script": "train.py", "args": args, "hours": MAX_HOURS,
                                  "wait_s": 3600, "request_id": "r" * 128,
                                  "data": ["hf://datasets/acme/tiny@main/a/b.csv", "c=corpus"]})
    assert req.args == args and req.hours == MAX_HOURS and len(req.request_id) == 128
    assert [d.name for d in req.data] == ["b.csv", "c"]
    from core.config.request import parse_hf

    hf = parse_hf(req.data[0].source)
    assert (hf["owner"], hf["repo"], hf["revision"], hf["path"]) == ("acme", "tiny", "main", "a/b.csv")


@pytest.mark.parametrize("argv,says", [
    (["logs", "last", "--tail", "-3"], "argument --tail: -3 is below 0"),
    (["jobs", "--limit", "-1"], "argument --limit: -1 is below 0"),
    (["jobs", "--limit", "x" * 5000], "is not a whole number"),
])
def test_cli_counts_below_zero_are_usage_errors(home: Path, argv: list[str], says: str) -> None:
    proc = run_gpu(*argv)
    assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr) < 600


# -- the top-level error handler -----------------------------------------------------------


def inject(tmp_path: Path, body: str) -> dict[str, str]:
    """Env for `gpu` whose `gpu jobs` runs `body` instead: a bug planted from outside."""
    site = tmp_path / "inject"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import tui.cli.jobs\n"
        "def _planted(args):\n" + "".join(f"    {line}\n" for line in body.splitlines()) +
        "tui.cli.jobs.cmd_jobs = _planted\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def test_cli_internal_error_is_one_line_and_a_log(home: Path, tmp_path: Path) -> None:
    env = inject(tmp_path, "raise RuntimeError('planted bug\\nsecond line ' + 'x' * 5000)")
    proc = run_gpu("jobs", env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    log = home / "errors.log"
    assert lines[0].startswith("error: internal error: RuntimeError: planted bug second line")
    assert str(log) in lines[0] and "GPU_ROUTER_DEBUG=1" in lines[0] and len(lines[0]) < 600
    assert "Traceback" in log.read_text() and "planted bug" in log.read_text()

    as_json = run_gpu("jobs", "--json", env=env)
    doc = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and doc["error"].startswith("internal error: RuntimeError")
    assert str(log) in doc["fix"]

    debug = run_gpu("jobs", env={**env, "GPU_ROUTER_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "planted bug" in debug.stderr


def test_cli_ctrl_c_exits_130_without_a_traceback(home: Path, tmp_path: Path) -> None:
    proc = run_gpu("jobs", env=inject(tmp_path, "raise KeyboardInterrupt"))
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr[-3000:]


def test_cli_user_error_keeps_exit_2_and_its_parts(home: Path, tmp_path: Path) -> None:
    env = inject(tmp_path, "from core.errors import UserError\n"
                           "raise UserError('bad \\x1b]52;c;aGk=\\x07 thing', where='here', fix='do that')")
    proc = run_gpu("jobs", env=env)
    assert proc.returncode == 2 and proc.stderr == "error: here: bad  thing\n  fix: do that\n"
    doc = json.loads(run_gpu("jobs", "--json", env=env).stdout)
    # machine output is filtered like the terminal's: an agent reading it gets no control codes
    assert doc == {"error": "bad  thing", "where": "here", "fix": "do that"}


# -- the error-value shortener -------------------------------------------------------------

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=200)
    | st.binary(max_size=100) | st.builds(pow, st.just(10), st.just(4400))
    | st.builds(str.__mul__, st.just("z"), st.just(100_000)),
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=20), inner, max_size=6)
    | st.tuples(inner, inner),
    max_leaves=15)


@PROPERTY
@given(values)
def test_shorten_is_bounded_for_any_value(value: object) -> None:
    text = shorten(value)
    assert len(text) <= 80 + len(" (10000 items)") + 2, text


@settings(max_examples=examples(30), deadline=None)
@given(st.integers(min_value=81, max_value=200_000))
def test_shorten_names_the_full_length_of_a_long_string(n: int) -> None:
    assert shorten("q" * n).endswith(f"… ({n} chars)")


def test_user_error_parts_are_clipped() -> None:
    err = UserError("w" * 50_000, where="/p/" + "d" * 5000 + "/gpu.yaml:7", fix="f" * 50_000)
    assert len(err.message()) < MESSAGE_BOUND
    assert err.where.endswith("/gpu.yaml:7")  # the line number survives the cut


# -- property: any gpu.yaml gives a request or a UserError ---------------------------------

_TOKENS = ["script: ", "train.py", "args: ", "env: ", "data: ", "hours: ", "name: ", "include: ",
           "request_id: ", "gpu: ", "[", "]", "{", "}", ", ", ": ", "- ", "\n", "  ", "&a ", "*a",
           "&b ", "*b", "<<: ", "? ", "!!binary ", "!!python/object/apply:os.system ", "!foo ",
           "!!str ", "!!int ", "!!timestamp ", "1e999", ".nan", "-.inf", "2001-13-45", "1:2:3:4",
           "0x" + "f" * 80, "'", '"', '"\\0"', '"\\ud800"', "|\n", ">\n", "---\n", "...\n", "~",
           "%YAML 1.1\n", "# c\n", "\t", "corpus", "x=corpus", "hf://datasets/a/b", "..", LONG_NAME,
           "\u202e", "\x85", "[/x]", "0", "-1", "720", "true"]
yamlish = st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join)

leaf = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
        | st.sampled_from(["train.py", "corpus", "x=corpus", "hf://datasets/a/b@v/c", "..", LONG_NAME,
                           "a\x00b", "[/x]", "T4\n", 1e300, 10 ** 80, "\ud800"]))
nested = st.recursive(leaf, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6) | st.sampled_from(list(SCHEMA)), inner, max_size=4),
                      max_leaves=12)
documents = st.dictionaries(st.sampled_from(list(SCHEMA)) | st.text(max_size=6), nested, max_size=6)


def _dump(doc: dict) -> bytes:
    return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")


gpu_yaml_bytes = st.one_of(yamlish.map(lambda t: t.encode("utf-8", "surrogatepass")),
                           documents.map(_dump), st.binary(max_size=300))


@pytest.fixture(scope="module")
def fuzz_project() -> Path:
    with tempfile.TemporaryDirectory(prefix="gpu-bad-input-") as d:
        p = Path(d) / "proj"
        (p / "corpus").mkdir(parents=True)
        (p / "train.py").write_text(TRAIN)
        yield p


def assert_valid(req: JobRequest) -> None:
    """What every request that build_request returns can be trusted to hold."""
    assert req.script and "\x00" not in req.script
    assert req.hours is None or 0 < req.hours <= MAX_HOURS
    assert 0 <= req.wait_s <= 3600
    size = sum(text_bytes(a) + 1 for a in [req.script, *req.args])
    size += sum(text_bytes(f"{k}={v}") + 1 for k, v in req.env.items())
    assert size <= MAX_COMMAND_BYTES
    assert all(d.name not in (".", "..") and "/" not in d.name for d in req.data)


@PROPERTY
@given(text=gpu_yaml_bytes, overrides=st.sampled_from([{}, {"script": "train.py"}]))
@example(text=b"\x00", overrides={})
@example(text=b"\xff\xfe", overrides={})
@example(text=alias_bomb().encode(), overrides={})
@example(text=b"args: " + b"[" * 3000, overrides={"script": "train.py"})
@example(text=b"script: train.py\nhours: 2001-13-45\n", overrides={})
@example(text=b"script: train.py\nhours: 1:2:3:4:5:6:7:8:9:1:2:3:4:5:6:7:8:9:1:2:3:4:5:6:7:8:9:1\n", overrides={})
@example(text=b"script: train.py\nargs: [" + b"a" * 300 + b"]\ndata: [x=" + b"a" * 300 + b"]\n", overrides={})
def test_any_gpu_yaml_gives_a_request_or_a_user_error(fuzz_project: Path, text: bytes,
                                                      overrides: dict) -> None:
    (fuzz_project / "gpu.yaml").write_bytes(text)
    try:
        req = build_request(fuzz_project, overrides)
    except UserError as err:
        assert len(err.message()) < MESSAGE_BOUND
    else:
        assert_valid(req)


@PROPERTY
@given(overrides=documents)
@example(overrides={"hours": 10 ** 400})
@example(overrides={"data": ["x=" + LONG_NAME]})
@example(overrides={"script": LONG_NAME + ".py"})
def test_any_arguments_give_a_request_or_a_user_error(fuzz_project: Path, overrides: dict) -> None:
    """The MCP server and the CLI pass values straight in: same outcome, whatever they are."""
    (fuzz_project / "gpu.yaml").unlink(missing_ok=True)
    try:
        req = build_request(fuzz_project, {"script": "train.py", **overrides})
    except UserError as err:
        assert len(err.message()) < MESSAGE_BOUND
    else:
        assert_valid(req)


@PROPERTY
@given(text=gpu_yaml_bytes)
@example(text=b"targets: [1, 2]\n")
@example(text=b"1: x\na: y\n")
def test_any_user_config_gives_a_config_or_a_user_error(fuzz_project: Path, text: bytes) -> None:
    from core.config import user as userconfig

    path = fuzz_project / "user-config.yaml"
    path.write_bytes(text.replace(b"script: ", b"targets: ").replace(b"args: ", b"rules: "))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPU_ROUTER_CONFIG", str(path))
        try:
            cfg = userconfig.load()
        except UserError as err:
            assert len(err.message()) < MESSAGE_BOUND
        else:
            assert "local" in cfg.targets


@settings(max_examples=examples(60), deadline=None)
@given(levels=st.integers(1, 12), width=st.integers(1, 12))
def test_any_alias_chain_loads_small_or_is_refused_quickly(levels: int, width: int) -> None:
    """Each alias costs what it repeats: a chain loads exactly when its expansion fits."""
    size = 10  # the first list and its nine strings
    expanded = 4 + 1 + size  # the mapping, two keys, train.py, the args list and its first item
    for _ in range(1, levels):
        size = 1 + width * size
        expanded += size
    started = time.monotonic()
    try:
        value = safeyaml.load(alias_bomb(levels, width), "gpu.yaml")
    except UserError as err:
        assert "expands to more than" in err.what and expanded > safeyaml.MAX_NODES
    else:
        assert expanded <= safeyaml.MAX_NODES and len(value["args"]) == levels
    assert time.monotonic() - started < 2


# -- a token pasted into the wrong place is never repeated ---------------------------------

HF = "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH"  # a Hugging Face token's shape


def assert_unsaid(err: UserError, *secrets: str) -> None:
    """Neither the message nor the JSON form shows the token."""
    text = err.message() + json.dumps(err.to_json())
    for secret in secrets:
        assert secret not in text, text


@pytest.mark.parametrize("key", ["hours", "vram_gb", "smoke", "ship", "network", "restart", "gpu",
                                 "provider", "name", "wait_s", "cpus", "partition", "container",
                                 "request_id", "checkpoint", "include", "outputs", "modules",
                                 "extras", "secrets", "data", "sweep", "kill_rules", "max_retries"])
def test_a_token_in_any_key_is_refused_and_never_echoed(project: Path, key: str) -> None:
    """`hours: hf_...` once printed `hours must be a number (got 'hf_...')`; and a key whose
    format a token fits (gpu, provider, name) took it, to be stored and shown in the plan."""
    value = {"sweep": {"LR": [HF]}}.get(key, HF)
    (project / "gpu.yaml").write_text(f"script: train.py\n{key}: {json.dumps(value)}\n")
    with pytest.raises(UserError) as err:
        build_request(project, {})
    assert_unsaid(err.value, HF)
    assert err.value.where.endswith("gpu.yaml:2"), err.value.where
    (project / "gpu.yaml").unlink()
    for given in (value, [value], {"k": value}):
        with pytest.raises(UserError) as err:
            build_request(project, {"script": "train.py", key: given})
        assert_unsaid(err.value, HF)


@pytest.mark.parametrize("yaml_line,names", [
    ('args: ["--hf-token", "%s"]' % HF, "HF_TOKEN"),
    ("args: --hf-token %s --lr 3e-4" % HF, "HF_TOKEN"),
    ('args: ["--api-key=%s"]' % HF, "API_KEY"),
    ('args: ["%s"]' % HF, "NAME"),
    ('args: ["--token", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4"]', "TOKEN"),  # random, named a secret
    ('args: ["--db", "postgres://me:hunter2pass@db.example/app"]', "DB"),
    ("script: python train.py --hf-token %s" % HF, "HF_TOKEN"),
    ('args: ["--%s=1"]' % HF, "NAME"),
    ("env: {%s: '1'}" % HF, "NAME"),
])
def test_a_token_in_args_is_refused_like_one_in_env(project: Path, yaml_line: str, names: str) -> None:
    """args are stored with the job, printed in `gpu plan` and on the target's process list:
    a token there is refused as in env, with the way to pass it as a secret instead."""
    text = yaml_line if yaml_line.startswith("script:") else f"script: train.py\n{yaml_line}"
    (project / "gpu.yaml").write_text(text + "\n")
    with pytest.raises(UserError) as err:
        build_request(project, {})
    assert "secrets may not be passed in" in err.value.what, err.value.what
    assert f"gpu secrets set {names}" in err.value.fix and "secrets:" in err.value.fix
    assert_unsaid(err.value, HF, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4", "hunter2pass")


def test_a_token_in_the_arguments_after_dashes_is_refused(project: Path) -> None:
    with pytest.raises(UserError) as err:
        build_request(project, {"script": "train.py", "args": ["--lr", "1", "--hf-token", HF]})
    assert err.value.where == "arguments after --" and "entry 4 of args" in err.value.what
    assert_unsaid(err.value, HF)


def test_ordinary_arguments_still_build(project: Path) -> None:
    """A commit sha, a run id, a token count and folders named with a vendor's prefix are not
    secrets (the short prefix forms an env value is refused by are not used for args)."""
    args = ["--revision", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4", "--max-new-tokens", "512",
            "--run-id", "550e8400e29b41d4a716446655440000", "--tokenizer", "meta-llama/Llama-3.1-8B",
            "--cache", "hf_cache", "--lr=3e-4", "--key-frames", "8",
            "--output_dir", "runs/hf_finetune_llama_experiment_3", "--base", "sk-learn-classifier-baseline"]
    req = build_request(project, {"script": "train.py", "args": args, "name": "sk-small",
                                  "sweep": {"SEED": [1, 2]}})
    assert req.args == args


def test_cli_plan_never_prints_a_token(home: Path, project: Path) -> None:
    (project / "gpu.yaml").write_text(f"script: train.py\nhours: {HF}\n")
    proc = run_gpu("plan", cwd=project)
    assert_clear_error(proc, "hours must be a number", "[hidden: a Hugging Face token]")
    assert HF not in proc.stderr + proc.stdout
    (project / "gpu.yaml").write_text(f'script: train.py\nargs: ["--hf-token", "{HF}"]\n')
    for argv in (["plan"], ["plan", "--json"], ["plan", "train.py", "--", "--hf-token", HF]):
        proc = run_gpu(*argv, cwd=project)
        assert proc.returncode == 2 and HF not in proc.stderr + proc.stdout, proc.stdout + proc.stderr
        assert "gpu secrets set HF_TOKEN" in proc.stderr


_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _prefixed(prefix: str, least: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=_ALNUM, min_size=least, max_size=least + 30).map(lambda body: prefix + body)


# a vendor token of every prefix the env check knows, an AWS key id, a JWT, a key block
secret_values = st.one_of(
    st.sampled_from(tokens.PREFIXES).flatmap(lambda p: _prefixed(p[0], p[1]).map(lambda t: (t, len(p[0])))),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", min_size=16, max_size=16).map(lambda b: ("AKIA" + b, 4)),
    st.tuples(*[st.text(alphabet=_ALNUM, min_size=12, max_size=40)] * 3).map(
        lambda p: ("eyJ" + ".".join(p), 3)),
    st.text(alphabet=_ALNUM + "+/", min_size=64, max_size=200).map(
        lambda b: (f"-----BEGIN RSA PRIVATE KEY-----\n{b}\n-----END RSA PRIVATE KEY-----", 31)),
)
around = st.text(max_size=120)
seps = st.sampled_from([" ", "\n", "'", '"', ",", "/", ":", "=", "(", "\t", "[", "|"])


@PROPERTY
@given(secret=secret_values, before=around, after=around, sep=seps, sep2=seps)
@example(secret=(HF, 3), before="w" * 60, after="", sep=" ", sep2=" ")  # the cut one: shown in part
@example(secret=(HF, 3), before="\x1b[", after="", sep="/", sep2=" ")  # a sequence that eats its start
def test_no_error_text_shows_a_token_shaped_value(secret: tuple[str, int], before: str, after: str,
                                                   sep: str, sep2: str) -> None:
    """The one formatter of a user's value in a message (`shorten`), and UserError's own
    parts, whatever else the value holds: no token, and no start of one, is shown."""
    token, prefix = secret
    value = before + sep + token + sep2 + after
    start = token[:prefix + 8]  # the token's prefix and the first characters of its body
    texts = [shorten(value), shorten([1, value]), shorten({"k": value, value: 2}), shorten((value,)),
             UserError(f"hours must be a number (got {value})", where=value, fix=value).message(),
             json.dumps(UserError(value).to_json())]
    for text in texts:
        assert token not in text, text
        assert start not in text or start in before + after, text
