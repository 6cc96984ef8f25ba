"""The submit path's start: what `gpu submit --json` loads and does before it answers.

An agent calls `gpu submit` in a loop, and most of each call used to be the interpreter
importing libraries this path never uses. These tests pin the module set of a warm submit (a
future top-level import of a heavy library fails here, by name, not by a timing), that the
`gpu` parser built for one command reads exactly as the whole one, and that a remembered
YAML parse equals a fresh one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import make_git_project, write_user_config
from tests.props import examples

from core.errors import UserError

# never on a local-target submit's path: each is a library another command or target needs
# (the dashboard, ssh and the other targets' code, keychain, Hugging Face, notifications, MCP),
# or a standard module a former import pulled in for nothing (asyncio with ssl and logging;
# PyYAML once the files' parse is remembered)
HEAVY = ("yaml", "asyncio", "ssl", "logging", "concurrent.futures", "ctypes", "difflib", "uuid",
         "platform", "gzip", "textual", "rich", "pydantic", "jsonschema", "asyncssh", "keyring",
         "huggingface_hub", "apprise", "aiosqlite", "mcp", "httpx", "tui.show.render", "tui.dash",
         "core.transport", "core.providers.remoteprobe", "core.providers.kaggle",
         "core.providers.modal", "core.providers.slurm", "core.providers.pbs")

SUBMIT = r"""
import json, sys
from tui.cli import main
code = main(sys.argv[2:])
json.dump(sorted(sys.modules), open(sys.argv[1], "w"))
sys.exit(code)
"""


def _submit(project: Path, tmp_path: Path, run: str) -> tuple[dict, set[str]]:
    mods = tmp_path / f"modules-{run}.json"
    out = subprocess.run([sys.executable, "-c", SUBMIT, str(mods), "submit", "a.py", "--json",
                          "--wait-s", "0", "--env", f"RUN={run}"],
                         cwd=project, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), set(json.loads(mods.read_text()))


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_warm_submit_imports_no_heavy_module(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {
        "a.py": "print('hi')\n",
        "gpu.yaml": "script: a.py\nhours: 0.1\nenv:\n  MODE: fast\n",
        "pkg/util.py": "X = 1\n"})
    write_user_config("rules:\n  agent_max_hours: 0.5\n")
    for f in (project / "a.py", project / "gpu.yaml", project / "pkg" / "util.py"):
        os.utime(f, (f.stat().st_mtime - 60,) * 2)  # edited a minute ago: the hash cache trusts a stat then
    first, _ = _submit(project, tmp_path, "1")  # parses, hashes, packs, probes: fills the caches
    second, mods = _submit(project, tmp_path, "2")
    assert first["submitted"] and second["submitted"]
    assert second["job"]["id"] != first["job"]["id"]
    assert second["bundle"]["files"] == first["bundle"]["files"] == 3
    loaded = sorted(m for m in HEAVY if m in mods)
    assert not loaded, f"a warm `gpu submit --json` imported {loaded}: import them where they are used"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_a_parser_built_for_one_command_reads_as_the_whole_one() -> None:
    from tui import cli

    whole = cli.build_parser()
    for name, full in _subparsers(whole).items():
        alone = cli.build_parser(only=name)
        assert alone.format_help() == whole.format_help()
        assert _subparsers(alone)[name].format_help() == full.format_help(), name
    assert cli.build_parser(only="subit").format_help() == whole.format_help()
    args = cli.build_parser(only="submit").parse_args(["submit", "x.py", "--hours", "2", "--json"])
    assert (args.script, args.hours, args.json, args.func) == ("x.py", 2.0, True, cli.submit.cmd_submit)


def test_a_mistyped_command_is_still_named(capsys: pytest.CaptureFixture[str]) -> None:
    from tui import cli

    with pytest.raises(SystemExit):
        cli.main(["subit", "a.py"])
    assert "did you mean `gpu submit`?" in capsys.readouterr().err


READ = r"""
import json, sys
from pathlib import Path
from core.config.request import read_project_file
values, lines, _ = read_project_file(Path(sys.argv[1]))
print(json.dumps({"values": values, "lines": lines, "yaml": "yaml" in sys.modules}))
"""


def _read(project: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", READ, str(project)], capture_output=True, text=True,
                         timeout=60, env={**os.environ})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_remembered_gpu_yaml_reads_the_same_without_pyyaml(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "gpu.yaml").write_text("# settings\nscript: train.py\nhours: 1.5\nenv:\n  A: '1'\n  B: two\n"
                                      "include: ['data/*.py']\n")
    first, second = _read(project), _read(project)
    assert first["yaml"] and not second["yaml"]
    assert first["values"] == second["values"] == {
        "script": "train.py", "hours": 1.5, "env": {"A": "1", "B": "two"}, "include": ["data/*.py"]}
    assert first["lines"] == second["lines"] == {"script": 2, "hours": 3, "env": 4, "env:A": 5,
                                                 "env:B": 6, "include": 7}
    (project / "gpu.yaml").write_text("script: train.py\nhours: 3\n")  # edited: read afresh
    third = _read(project)
    assert third["yaml"] and third["values"] == {"script": "train.py", "hours": 3.0}


def test_a_broken_gpu_yaml_is_refused_every_time_with_its_first_mistake(home: Path, tmp_path: Path) -> None:
    from core.config.request import read_project_file

    project = tmp_path / "p"
    project.mkdir()
    (project / "gpu.yaml").write_text("script: a.py\nhours: -1\nbogus: 1\n")
    for _ in range(2):
        with pytest.raises(UserError) as err:
            read_project_file(project)
        assert "hours must be" in err.value.message() and "gpu.yaml:2" in err.value.message()
    (project / "gpu.yaml").write_text("script: a.py\nbogus: 1\nhours: -1\n")
    with pytest.raises(UserError, match="unknown key 'bogus'"):
        read_project_file(project)
    (project / "gpu.yaml").write_text("script: a.py\nhours: 2\n")
    assert read_project_file(project)[0] == {"script": "a.py", "hours": 2.0}
    (project / "gpu.yaml").write_text("script: a.py\nhours: 2\nhours: 3\n")
    with pytest.raises(UserError, match="appears twice"):
        read_project_file(project)


_scalars = (st.none() | st.booleans() | st.integers(-10**20, 10**20)
            | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
            | st.dates(min_value=datetime.date(1900, 1, 1), max_value=datetime.date(2100, 1, 1)))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=6) | st.integers(-5, 5) | st.booleans(), inner,
                                         max_size=4), max_leaves=12)


@settings(max_examples=examples(100), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=_values)
def test_a_remembered_parse_is_the_fresh_parse_type_for_type(home: Path, doc) -> None:
    """Remembered or not, the value is the very one PyYAML builds: an int stays an int (not
    True, not 1.0), an int key stays one, a date stays a date (such a file is parsed afresh)."""
    import yaml

    from core.config import safeyaml, yamlfile

    text = yaml.safe_dump({"v": doc})
    path = home / "some.yaml"
    fresh = safeyaml.load(text, str(path))
    for _ in range(2):  # the first may parse (and keep), the second may answer from memory
        got = yamlfile.remembered(path, text, "test/1", lambda t: safeyaml.load(t, str(path)))
        assert repr(got) == repr(fresh)


def test_the_git_root_is_asked_once_and_a_new_repository_is_seen_at_once(tmp_path: Path) -> None:
    """A submit asks `git rev-parse` once per folder (the command line and the listing share
    the answer), yet a `git init` or a removed `.git` between two asks is never missed."""
    import shutil

    from core.config.gitroot import find_root

    asked: list[list[str]] = []

    def hook(event: str, args: tuple) -> None:
        if event == "subprocess.Popen" and "rev-parse" in list(args[1] or []):
            asked.append(list(args[1]))

    sys.addaudithook(hook)  # stays for the session; it only counts this test's folders
    outer = tmp_path / "outer"
    inner = outer / "sub" / "inner"
    inner.mkdir(parents=True)

    def ask(folder: Path) -> tuple[Path, bool]:
        return find_root(folder)

    def count() -> int:
        return sum(1 for a in asked if str(tmp_path) in " ".join(a))

    assert ask(inner) == (inner, False) and ask(inner) == (inner, False)
    assert count() == 1  # the second answer was the first one's
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    assert ask(inner) == (outer.resolve(), True) and count() == 2
    assert ask(inner) == (outer.resolve(), True) and count() == 2
    subprocess.run(["git", "init", "-q", str(inner)], check=True)  # a nested repository
    assert ask(inner) == (inner.resolve(), True) and count() == 3
    shutil.rmtree(inner / ".git")
    assert ask(inner) == (outer.resolve(), True) and count() == 4
    shutil.rmtree(outer / ".git")
    assert ask(inner) == (inner, False) and count() == 5
