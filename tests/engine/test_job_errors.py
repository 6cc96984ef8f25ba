"""A failed job says why: its own error as its reason everywhere, and a missed file named.

Real jobs on the local target (the launcher, the sandbox, the supervisor) fail the way a
script fails; what a person reads (`gpu status`, its --json, job.json) and what an agent reads
(MCP gpu_status over stdio) must carry the script's exception, not "exited with status 1".
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.engine.failure import error_text, missing_path, shown_error
from core.packaging.report import _joined_paths
from core.runtime.textsafe import printable
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state
from tests.props import examples


# -- the error as found in a log's last lines ------------------------------------------------


TRACEBACK = """[gpu-router] attempt 1: running train.py
step 1 loss 2.3
Traceback (most recent call last):
  File "/job/code/train.py", line 3, in <module>
    raise ValueError("bad lr")
    ^^^^^^^^^^^^^^^^^^^^^^^^^^
ValueError: bad lr
[gpu-router] attempt 1: exited with status 1
"""


def test_the_last_exception_of_a_traceback_is_the_error() -> None:
    assert error_text(TRACEBACK.splitlines()) == "ValueError: bad lr"
    chained = ("Traceback (most recent call last):\n  File \"a.py\", line 2\n    open('x')\n"
               "FileNotFoundError: [Errno 2] No such file or directory: 'x'\n\n"
               "During handling of the above exception, another exception occurred:\n\n"
               "Traceback (most recent call last):\n  File \"a.py\", line 4\n    raise RuntimeError('w')\n"
               "RuntimeError: wrapped\n")
    assert error_text(chained.splitlines()) == "RuntimeError: wrapped"
    # a SyntaxError of the script itself has no "Traceback" header
    assert error_text(['  File "x.py", line 1', "    def (", "        ^",
                       "SyntaxError: invalid syntax"]) == "SyntaxError: invalid syntax"


def test_without_a_traceback_the_last_lines_are_the_error() -> None:
    lines = ["[gpu-router] attempt 1: running run.sh", "one", "two", "", "cat: x: No such file or directory",
             "three", "[gpu-router] attempt 1: exited with status 1"]
    assert error_text(lines) == "two | cat: x: No such file or directory | three"
    # an earlier attempt's traceback is not this attempt's error
    earlier = TRACEBACK.splitlines()[:-1] + ["[gpu-router] attempt 2: running train.py", "out of patience"]
    assert error_text(earlier) == "out of patience"
    assert error_text(["[gpu-router] attempt 1: running a.py", "", "[gpu-router] done"]) is None


def test_a_missing_path_is_found_in_the_error() -> None:
    assert missing_path("FileNotFoundError: [Errno 2] No such file or directory: 'data/train.bin'") == "data/train.bin"
    assert missing_path("cat: data/x.txt: No such file or directory") == "data/x.txt"
    assert missing_path("ValueError: bad lr") is None


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=60), max_size=8))
def test_whatever_the_log_holds_the_error_is_one_printable_line(lines: list[str]) -> None:
    text = shown_error(["Traceback (most recent call last):", '  File "x"', *lines])
    if text is None:
        return
    assert "\n" not in text and "\x1b" not in text and "\x9b" not in text
    assert printable(text) == text


def test_a_secret_in_the_error_is_masked() -> None:
    from core.secrets.names import NameMask

    mask = NameMask("job", {"HF_TOKEN": "hf_s3cretvalue42"})
    lines = ["Traceback (most recent call last):", '  File "x"',
             "PermissionError: token hf_s3cretvalue42 refused (aGZfczNjcmV0dmFsdWU0Mg==)"]
    text = shown_error(lines, mask)
    assert text.startswith("PermissionError: token [secret] refused")
    assert "hf_s3cretvalue42" not in text and "aGZfczNjcmV0dmFsdWU0Mg" not in text


def test_paths_joined_from_literals_are_seen() -> None:
    src = ("import os\nfrom pathlib import Path\ndataset = 'openwebtext'\n"
           "data_dir = os.path.join('data', dataset)\n"
           "def get_batch():\n    return open(os.path.join(data_dir, 'train.bin'))\n"
           "meta = Path('data') / 'meta.pkl'\nval = f'{data_dir}/val.bin'\n"
           "words = ', '.join(['a', 'b'])\n")
    found = _joined_paths(src)
    assert {"data/openwebtext/train.bin", "data/meta.pkl", "data/openwebtext/val.bin"} <= set(found)
    assert "a, b" not in found and _joined_paths("def (") == []


# -- real jobs that fail ------------------------------------------------------------------


async def _mcp_status(short: str) -> dict:
    from tests.tui.mcp.test_mcp import call, session

    async with session() as s:
        return await call(s, "gpu_status", job=short)


@pytest.mark.slow
def test_a_raised_exception_is_the_reason_everywhere(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {
        "train.py": "print('step 1', flush=True)\nraise ValueError('bad lr')\n",
        "ansi.py": "raise RuntimeError('\\x1b[31mred\\x1b[0m \\x1b]0;pwned\\x07 \\x9b2J end')\n",
    })
    bad = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
    ansi = gpu_json("submit", "ansi.py", "--hours", "0.1", "--wait-s", "0", "--name", "ansi", cwd=project)["job"]
    doc = wait_state(bad["short_id"], {"done", "failed"}, timeout=120)
    assert doc["state"] == "failed" and doc["exit_code"] == 1
    assert doc["reason"] == "exited with status 1: ValueError: bad lr"
    saved = json.loads((Path(doc["outputs_dir"]) / "job.json").read_text())
    assert "ValueError: bad lr" in saved["job"]["reason"]
    assert "ValueError: bad lr" in run_gpu("status", bad["short_id"]).stdout
    assert asyncio.run(_mcp_status(bad["short_id"]))["reason"] == doc["reason"]

    doc = wait_state(ansi["short_id"], {"done", "failed"}, timeout=120)
    assert doc["state"] == "failed" and doc["reason"].startswith("exited with status 1: RuntimeError: red")
    assert doc["reason"].endswith("end") and "pwned" not in doc["reason"]
    assert not any(c in doc["reason"] for c in "\x1b\x07\x9b")
    human = run_gpu("status", ansi["short_id"]).stdout
    assert "RuntimeError: red" in human and "\x1b]0" not in human and "\x9b" not in human


NANO = """import os
dataset = 'shakespeare_char'
data_dir = os.path.join('data', dataset)

def get_batch():
    return open(os.path.join(data_dir, 'train.bin'), 'rb').read()

print(len(get_batch()))
"""  # nanoGPT's way of naming its data (train.py), without numpy


@pytest.mark.slow
def test_a_git_ignored_data_file_is_named_with_the_fix(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "nano", {
        "train.py": NANO,
        "data/shakespeare_char/prepare.py": "# makes train.bin\n",
    }, gitignore="*.bin\n")
    (project / "data" / "shakespeare_char" / "train.bin").write_bytes(b"\0" * 64)
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    hint = sub["bundle"]["hint"]  # said at submit, before anything runs
    assert "train.py refers to data/shakespeare_char/train.bin, which did not ship (ignored by git)" in hint
    doc = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert doc["state"] == "failed"
    reason = doc["reason"]
    assert "FileNotFoundError" in reason and "data/shakespeare_char/train.bin" in reason
    assert ("data/shakespeare_char/train.bin exists in the project but did not ship (ignored by git): "
            "add it to `include:` in gpu.yaml, or pass it as data (`--data train.bin=data/shakespeare_char/train.bin`"
            in reason), reason


# -- a GPU asked for where no target has one -------------------------------------------------


def test_plan_for_a_gpu_with_only_the_cpu_names_the_ways_forward(home: Path, tmp_path: Path) -> None:
    from tests.conftest import write_user_config

    write_user_config("targets:\n  local: {kind: local, gpus: []}\n")
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n"})
    proc = run_gpu("plan", "train.py", "--gpu", "T4", "--json", cwd=project)
    assert proc.returncode == 2
    err = json.loads(proc.stdout or proc.stderr)
    assert "local has no GPU" in err["error"]
    fix = err["fix"]
    assert "`gpu targets add kaggle kaggle`" in fix and "2x T4" in fix  # Kaggle has T4s
    assert "`gpu targets add modal modal --gpu T4`" in fix
    assert "`gpu targets add ssh NAME --host HOST`" in fix
    # only the kinds that have the GPU are named: Kaggle has no A100
    a100 = json.loads(run_gpu("plan", "train.py", "--gpu", "A100", "--json", cwd=project).stdout or "{}")
    assert "kaggle" not in a100["fix"] and "--gpu A100-40GB" in a100["fix"] and "gpu targets add ssh" in a100["fix"]
    # pinned to this machine, the pin is the cause: no tour of other targets
    pinned = json.loads(run_gpu("plan", "train.py", "--gpu", "T4", "--provider", "local", "--json",
                                cwd=project).stdout or "{}")
    assert "gpu targets add" not in pinned["fix"]
