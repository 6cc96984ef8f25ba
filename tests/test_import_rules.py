"""core/ is the engine: it never imports textual or anything under tui/."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "core"
FORBIDDEN = ("textual", "tui", "textual_plotext", "plotext")


def test_no_core_module_imports_the_ui() -> None:
    offenders = []
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in FORBIDDEN:
                    offenders.append(f"{path.relative_to(CORE.parent)}:{node.lineno} imports {name}")
    assert offenders == []


def test_importing_all_of_core_loads_no_ui_module() -> None:
    mods = [f"core.{p.relative_to(CORE).with_suffix('').as_posix().replace('/', '.')}"
            for p in CORE.rglob("*.py") if p.name != "__init__.py" and "runtime" not in p.parts]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in mods) +
            "bad = [m for m in sys.modules if m.split('.')[0] in %r]\nprint(bad)" % (FORBIDDEN,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=CORE.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
