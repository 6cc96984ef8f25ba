"""The request: gpu.yaml read first, arguments win, and every mistake named by file, line and key.

Most cases go through `build_request` (fast); a few go through the installed `gpu` command to
check what a user sees there: exit status 2, the message on stderr, and no job created.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config.request import JobRequest, build_request, read_project_file
from core.config.schema import SCHEMA
from core.errors import UserError
from tests.conftest import gpu_json, make_git_project, run_gpu

TRAIN = "print('training')\n"


# -- helpers -------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A plain project folder with a script and a small data folder."""
    p = tmp_path / "proj"
    p.mkdir()
    (p / "train.py").write_text(TRAIN)
    (p / "run.sh").write_text("echo hi\n")
    (p / "corpus").mkdir()
    (p / "corpus" / "a.txt").write_text("a\n")
    return p


def gpu_yaml(project: Path, text: str) -> Path:
    path = project / "gpu.yaml"
    path.write_text(text)
    return path


def error_for(project: Path, text: str | None, overrides: dict | None = None) -> UserError:
    """The UserError build_request raises for this gpu.yaml (None: no file) and arguments."""
    if text is not None:
        gpu_yaml(project, text)
    with pytest.raises(UserError) as err:
        build_request(project, overrides or {})
    return err.value


# -- reading and merging -------------------------------------------------------------------


def test_gpu_yaml_is_read(project: Path) -> None:
    gpu_yaml(project, """\
# every field a project may set
script: train.py
args: [--lr, 0.1, --epochs, 3]
env: {MODE: fast, DEBUG: true, SEED: 7}
secrets: [HF_TOKEN]
include: ["data/*.png"]
data: [corpus=corpus, hf://datasets/acme/tiny]
hours: 0.5
gpu: T4
vram_gb: 16
provider: local
name: my-run
request_id: 42
smoke: true
wait_s: 0
verbose: false
""")
    req = build_request(project, {})
    assert req.script == "train.py"
    assert req.args == ["--lr", "0.1", "--epochs", "3"]
    assert req.env == {"MODE": "fast", "DEBUG": "true", "SEED": "7"}
    assert req.secrets == ["HF_TOKEN"] and req.include == ["data/*.png"]
    assert [(d.name, d.kind) for d in req.data] == [("corpus", "path"), ("tiny", "hf")]
    assert req.data[0].source == str((project / "corpus").resolve())
    assert (req.hours, req.gpu, req.vram_gb, req.provider, req.name) == (0.5, "T4", 16.0, "local", "my-run")
    assert (req.request_id, req.smoke, req.wait_s, req.verbose) == ("42", True, 0.0, False)
    assert req.project_dir == str(project.resolve())


def test_arguments_win_env_merges_lists_append(project: Path) -> None:
    """What the user types now beats the file; env and the lists combine instead."""
    gpu_yaml(project, """\
script: train.py
hours: 2
name: from-file
env: {A: "1", B: "2"}
include: [models/*.pt]
secrets: [HF_TOKEN]
args: [--lr, "0.1"]
data: [corpus=corpus]
""")
    (project / "extra").mkdir()
    req = build_request(project, {
        "hours": 0.25, "name": "from-cli", "env": ["B=3", "C=4"], "include": ["data/*.png", "models/*.pt"],
        "secrets": ["WANDB_API_KEY"], "args": ["--lr", "0.5"], "data": ["extra=extra"],
        "gpu": None, "script": None})
    assert req.hours == 0.25 and req.name == "from-cli"
    assert req.env == {"A": "1", "B": "3", "C": "4"}
    assert req.include == ["models/*.pt", "data/*.png"]  # appended, no duplicate
    assert req.secrets == ["HF_TOKEN", "WANDB_API_KEY"]
    assert req.args == ["--lr", "0.5"]
    assert [d.name for d in req.data] == ["corpus", "extra"]
    assert req.script == "train.py" and req.gpu is None  # None means "not given"


def test_empty_arguments_keep_the_files_args(project: Path) -> None:
    gpu_yaml(project, "script: train.py\nargs: --steps 5\n")
    assert build_request(project, {"args": []}).args == ["--steps", "5"]


def test_no_gpu_yaml_arguments_alone(project: Path) -> None:
    req = build_request(project, {"script": "train.py", "hours": 1, "args": ["--x", "1"]})
    assert (req.script, req.hours, req.args) == ("train.py", 1.0, ["--x", "1"])


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty_gpu_yaml_is_no_settings(project: Path, text: str) -> None:
    gpu_yaml(project, text)
    assert read_project_file(project)[0] == {}
    assert build_request(project, {"script": "train.py"}).script == "train.py"


def test_no_script_anywhere_says_how_to_give_one(project: Path) -> None:
    err = error_for(project, "hours: 1\n")
    assert "no script" in err.what and "gpu submit train.py" in err.fix


def test_missing_project_dir(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        build_request(tmp_path / "nope", {"script": "train.py"})


# -- bad files: file, line, key, what is allowed -------------------------------------------

BAD_FILES = [
    # (id, gpu.yaml, line, text in the message, text in the fix)
    ("unknown-key", "script: train.py\nhours: 1\nhuors: 2\n", 3,
     ["unknown key 'huors'", "did you mean 'hours'"], "allowed keys: script"),
    ("unknown-key-no-match", "script: train.py\nzzzzzz: 1\n", 2, ["unknown key 'zzzzzz'"], "allowed keys"),
    ("hours-text", "script: train.py\nname: x\nhours: abc\n", 3, ["hours must be a number", "'abc'"], "hours:"),
    ("hours-negative", "script: train.py\nhours: -1\n", 2, ["hours must be", "above 0", "-1"], "above 0"),
    ("hours-zero", "script: train.py\nhours: 0\n", 2, ["hours must be", "above 0"], "hours:"),
    ("hours-nan", "script: train.py\nhours: .nan\n", 2, ["hours must be", "finite"], "hours:"),
    ("hours-inf", "script: train.py\nhours: .inf\n", 2, ["hours must be", "finite"], "hours:"),
    ("hours-bool", "script: train.py\nhours: true\n", 2, ["hours must be a number"], "hours:"),
    ("args-mapping", "script: train.py\n\nargs: {a: 1}\n", 3, ["args must be a list of strings"], "args:"),
    ("smoke-text", "script: train.py\nsmoke: \"yes\"\n", 2, ["smoke must be true or false", "'yes'"], "smoke:"),
    ("name-bad", "script: train.py\nname: \"my job!\"\n", 2, ["name must be", "'my job!'"], "name:"),
    ("env-bad-name", "script: train.py\nenv: {my-var: 1}\n", 2, ["env must be", "my-var"], "env:"),
    ("env-nested", "script: train.py\nenv: {A: [1]}\n", 2, ["env must be"], "env:"),
    ("vram-text", "script: train.py\nvram_gb: lots\n", 2, ["vram_gb must be a number"], "vram_gb:"),
    ("script-missing", "hours: 1\nscript: nope.py\n", 2, ["script 'nope.py' does not exist"], "check the name"),
    ("script-absolute", "script: /usr/bin/x.py\n", 1, ["absolute path"], "relative"),
    ("script-outside", "script: ../elsewhere.py\n", 1, ["outside the project"], "move it"),
    ("script-bad-quotes", "script: \"bash 'run.sh\"\n", 1, ["cannot be split"], "quotes"),
    ("data-missing", "script: train.py\nhours: 1\ndata: [corpus=corpus, x=nope]\n", 3,
     ["data 'x=nope'", "does not exist"], "NAME=PATH"),
    ("data-bad-hf", "script: train.py\ndata: [hf://models/x]\n", 2, ["hf://datasets/"], "hf://datasets/"),
    ("secret-bad-name", "script: train.py\nsecrets: [my-token]\n", 2, ["secret name 'my-token'"], "HF_TOKEN"),
    ("duplicate-key", "script: train.py\nhours: 1\nhours: 2\n", 3, ["'hours' appears twice", "line 2"], None),
    ("invalid-yaml", "script: train.py\nhours: 1\n  name: x\n", 3, ["not valid YAML"], "indentation"),
    ("invalid-yaml-tab", "script: train.py\n\tname: x\n", 2, ["not valid YAML"], "indentation"),
    ("not-a-mapping", "- train.py\n- hours\n", 1, ["must be a mapping"], "allowed keys"),
    ("scalar", "train.py\n", 1, ["must be a mapping"], "allowed keys"),
    ("python-tag", "script: train.py\nhours: !!python/object/apply:os.system [ls]\n", 2,
     ["not valid YAML"], None),
]


@pytest.mark.parametrize("text,line,says,fix", [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_bad_gpu_yaml_names_file_line_and_key(project: Path, text: str, line: int, says: list[str],
                                              fix: str | None) -> None:
    (project.parent / "elsewhere.py").write_text(TRAIN)
    err = error_for(project, text)
    assert err.where == f"{project.resolve() / 'gpu.yaml'}:{line}", err.message()
    for s in says:
        assert s in err.what, err.message()
    if fix:
        assert fix in err.fix, err.message()
    assert err.message().startswith(f"{project.resolve() / 'gpu.yaml'}:{line}: ")


def test_every_schema_key_says_what_is_allowed() -> None:
    """The fix of a wrong-type error is the key's own description: none may be empty."""
    for key, (_, allowed) in SCHEMA.items():
        assert allowed.strip(), key


# -- bad arguments: named as arguments, not as the file ------------------------------------


@pytest.mark.parametrize("overrides,where,says", [
    ({"hours": 0}, "argument --hours", "above 0"),
    ({"hours": -2.0}, "argument --hours", "above 0"),
    ({"hours": float("nan")}, "argument --hours", "finite"),
    ({"hours": float("inf")}, "argument --hours", "finite"),
    ({"wait_s": -1}, "argument --wait-s", "0 or more"),
    ({"name": "my job!"}, "argument --name", "name must be"),
    ({"env": ["NOEQUALS"]}, "argument --env", "NAME=value"),
    ({"data": ["x=nope"]}, "argument --data", "does not exist"),
    ({"secrets": ["bad-name"]}, "argument --secret", "secret name 'bad-name'"),
])
def test_bad_argument_is_named_as_the_argument(project: Path, overrides: dict, where: str, says: str) -> None:
    """Even when gpu.yaml sets the same key, a bad argument is blamed on the argument."""
    gpu_yaml(project, "script: train.py\nhours: 1\nname: ok\ndata: [corpus=corpus]\nsecrets: [HF_TOKEN]\n")
    err = error_for(project, None, overrides)
    assert err.where == where, err.message()
    assert says in err.message()


def test_bad_file_value_still_blamed_on_the_file_when_arguments_add(project: Path) -> None:
    gpu_yaml(project, "script: train.py\ndata: [x=nope]\nsecrets: [bad-name]\n")
    err = error_for(project, None, {"data": ["corpus=corpus"], "secrets": ["HF_TOKEN"]})
    assert err.where.endswith("gpu.yaml:2") and "x=nope" in err.what


# -- the command a job runs ----------------------------------------------------------------


@pytest.mark.parametrize("script,args,argv", [
    ("train.py", ["--lr", "0.1"], ["train.py", "--lr", "0.1"]),
    ("python train.py", ["--x"], ["python", "train.py", "--x"]),
    ("bash run.sh --fast", ["--x"], ["bash", "run.sh", "--fast", "--x"]),
    ("python -c 'print(1 + 1)'", [], ["python", "-c", "print(1 + 1)"]),
    ("./run.sh", [], ["./run.sh"]),
])
def test_command_python_script_or_shell_line(script: str, args: list[str], argv: list[str]) -> None:
    """A .py value is one script run by python; anything else is split like a shell would."""
    assert JobRequest(project_dir="/p", script=script, args=args).command() == argv


def test_a_script_path_with_a_space_is_still_a_python_script(project: Path) -> None:
    (project / "sub dir").mkdir()
    (project / "sub dir" / "train.py").write_text("print(1)\n")
    req = build_request(project, {"script": "sub dir/train.py"})
    assert req.is_python_file() and req.command() == ["sub dir/train.py"]


def test_command_line_script_is_accepted_without_a_file(project: Path) -> None:
    req = build_request(project, {"script": "bash run.sh --fast", "args": ["x y"]})
    assert req.command() == ["bash", "run.sh", "--fast", "x y"]


def test_args_string_is_split_like_a_shell(project: Path) -> None:
    gpu_yaml(project, "script: train.py\nargs: --name 'two words' --n 3\n")
    assert build_request(project, {}).command() == ["train.py", "--name", "two words", "--n", "3"]


# -- through the `gpu` command -------------------------------------------------------------

CLI_BAD = [
    ("unknown-key", "script: train.py\nhours: 1\nhuors: 2\n", 3, "did you mean 'hours'"),
    ("hours-text", "script: train.py\nhours: abc\n", 2, "hours must be a number"),
    ("script-missing", "hours: 1\nname: x\nscript: nope.py\n", 3, "does not exist"),
    ("invalid-yaml", "script: train.py\nhours: [1, 2\n", 3, "not valid YAML"),
    ("data-missing", "script: train.py\ndata: [x=nope]\n", 2, "does not exist"),
]


@pytest.mark.parametrize("text,line,says", [c[1:] for c in CLI_BAD], ids=[c[0] for c in CLI_BAD])
def test_cli_bad_gpu_yaml_exits_2_and_creates_no_job(home: Path, project: Path, text: str, line: int,
                                                    says: str) -> None:
    gpu_yaml(project, text)
    proc = run_gpu("submit", "--wait-s", "0", cwd=project)
    assert proc.returncode == 2, proc.stderr
    assert f"gpu.yaml:{line}: " in proc.stderr and says in proc.stderr
    assert "fix:" in proc.stderr and "Traceback" not in proc.stderr
    assert gpu_json("jobs", cwd=project)["jobs"] == []


def test_cli_bad_gpu_yaml_json_error(home: Path, project: Path) -> None:
    """With --json the error is also a document an agent can read."""
    gpu_yaml(project, "script: train.py\nsmoke: \"yes\"\n")
    proc = run_gpu("submit", "--wait-s", "0", "--json", cwd=project)
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["where"].endswith("gpu.yaml:2") and "smoke" in doc["error"] and doc["fix"]
    assert gpu_json("jobs", cwd=project)["jobs"] == []


@pytest.mark.parametrize("value", ["nan", "0", "-1"])
def test_cli_bad_hours_argument_exits_2(home: Path, project: Path, value: str) -> None:
    proc = run_gpu("submit", "train.py", f"--hours={value}", "--wait-s", "0", cwd=project)
    assert proc.returncode == 2 and "argument --hours" in proc.stderr
    assert gpu_json("jobs", cwd=project)["jobs"] == []


@pytest.mark.slow  # runs the supervisor: end to end
def test_cli_submit_reads_gpu_yaml_and_arguments_win(home: Path, tmp_path: Path) -> None:
    """A real submit: gpu.yaml's settings arrive, --hours and --name override, env merges."""
    project = make_git_project(tmp_path / "proj", {
        "train.py": TRAIN,
        "gpu.yaml": "script: train.py\nhours: 2\nname: from-file\nenv: {A: '1', B: '2'}\n"})
    doc = gpu_json("submit", "--hours", "0.25", "--name", "from-cli", "--env", "B=3",
                   "--wait-s", "0", "--verbose", cwd=project)
    job = doc["job"]
    assert doc["submitted"] is True
    assert job["name"] == "from-cli" and job["hours"] == 0.25
    assert job["request"]["script"] == "train.py"
    assert job["request"]["env"] == {"A": "1", "B": "3"}
    assert [j["id"] for j in gpu_json("jobs", cwd=project)["jobs"]] == [job["id"]]


def test_every_flag_an_error_tells_the_user_to_pass_exists() -> None:
    """The fix text of each UserError names only flags the `gpu` command really has (once an
    error said --script, which never existed)."""
    import argparse
    import ast
    import re

    from tui.cli import build_parser

    flags: set[str] = set()

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            flags.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(build_parser())
    root = Path(__file__).resolve().parents[2]
    named: dict[str, str] = {}
    for path in [*root.glob("core/**/*.py"), *root.glob("tui/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg != "fix":
                    continue
                for part in ast.walk(kw.value):
                    if isinstance(part, ast.Constant) and isinstance(part.value, str):
                        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", part.value):
                            named.setdefault(flag, f"{path.relative_to(root)}:{node.lineno}")
    assert named, "the scan found no fix text at all"
    unknown = {flag: where for flag, where in named.items() if flag not in flags}
    assert unknown == {}


@pytest.mark.parametrize("name", ["GPU_ROUTER_OUTPUT_DIR", "GPU_ROUTER_CHECKPOINT_GENERATIONS", "gpu_router_data_dir"])
def test_a_job_never_names_gpu_router_s_own_variables(project: Path, name: str) -> None:
    """The launcher reads the job's folders from GPU_ROUTER_* (the sandbox makes them
    writable): a job's env setting one could point a writable bind at any folder."""
    for text, overrides in ((f"script: train.py\nenv: {{{name}: /root/.ssh}}\n", None),
                            ("script: train.py\n", {"env": {name: "/root/.ssh"}})):
        err = error_for(project, text, overrides)
        assert name in err.what and "gpu-router's own" in err.what
