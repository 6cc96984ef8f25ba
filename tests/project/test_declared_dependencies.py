"""Every third-party module core/ and tui/ import is a distribution pyproject.toml declares, and
every distribution it declares is imported (or says why not).

Why: the kaggle target imported `kagglesdk` while pyproject.toml declared `kaggle`, which only
happened to pull it in; a release of `kaggle` that dropped or re-pinned it would have broken the
target with nothing declared to blame. The imports are read from the code with ast (nested and
`importlib.import_module("...")` ones too, nothing is imported to check) and mapped to their
distributions with importlib.metadata.packages_distributions(), as installed here.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# where setuptools finds the project's own top-level modules (pyproject.toml's packages.find)
RUNTIME = ROOT / "core" / "runtime"
OWN_ROOTS = (ROOT, RUNTIME)
# declared but imported by no module, each with why it is declared anyway
# what the job-side runtime (core/runtime, run on the target in the job's own Python) reaches of
# the job's own packages: the job's, not gpu-router's, so never declared
JOB_PACKAGES = {
    "wandb": "the job's own wandb, followed by core/runtime/gpu/wandb_hook.py when its script imports it",
}
# scripts run by another Python than gpu-router's, with what they import there: never declared
OTHER_VENV = {
    ROOT / "core" / "providers" / "skypilot" / "adapter.py": {
        "sky": "SkyPilot's own venv runs the adapter (core/providers/skypilot/venv.py); gpu-router never imports it",
    },
}
NOT_IMPORTED = {
    "plotext": "textual-plotext's plotext, pinned <6 here: plotext 6 is an incompatible rewrite "
               "(DESIGN.md, Known pitfalls)",
}


def _norm(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    """The distributions of [project].dependencies (not the test or bench extras: core/ and tui/
    run without them)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_norm(re.match(r"[A-Za-z0-9._-]+", dep).group()) for dep in project["dependencies"]}


def _dynamic(node: ast.Call) -> str | None:
    """The module of `importlib.import_module("a.b")` or of an f-string one ("a.{x}"): its text
    up to the first placeholder."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value)
    return None


def _own(top: str, path: Path) -> bool:
    """A project module: under a setuptools root, or beside the importing file (the job-side
    runtime runs as scripts from its own folder)."""
    return any((d / top).is_dir() or (d / f"{top}.py").is_file() for d in (*OWN_ROOTS, path.parent))


def third_party_imports() -> dict[str, list[str]]:
    """Top-level third-party module -> where core/ and tui/ import it (path:line)."""
    found: dict[str, list[str]] = {}
    for pkg in ("core", "tui"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                elif isinstance(node, ast.Call):
                    names = [n for n in [_dynamic(node)] if n]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if not top or top == "__future__" or top in sys.stdlib_module_names or _own(top, path):
                        continue
                    if top in JOB_PACKAGES and RUNTIME in path.parents:
                        continue
                    if top in OTHER_VENV.get(path, {}):
                        continue
                    found.setdefault(top, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_third_party_import_is_a_declared_distribution() -> None:
    dists = packages_distributions()
    want = declared()
    imports = third_party_imports()
    assert {"kagglesdk", "modal", "mcp", "yaml", "detect_secrets"} <= set(imports)  # the walk sees them
    undeclared = []
    for top, where in sorted(imports.items()):
        owners = [_norm(d) for d in dists.get(top, [])]
        if not owners:
            undeclared.append(f"{top} (imported at {where[0]}) is not installed: no distribution to declare")
        elif not set(owners) & want:
            undeclared.append(f"{top} (imported at {where[0]}) comes from {', '.join(owners)}, "
                              "which pyproject.toml does not declare")
    assert not undeclared, ("declare in [project].dependencies, with a tested range:\n"
                            + "\n".join(undeclared))


def test_every_declared_distribution_is_imported_or_says_why_not() -> None:
    dists = packages_distributions()
    imported = {_norm(d) for top in third_party_imports() for d in dists.get(top, [])}
    unused = sorted(want for want in declared() - imported if want not in NOT_IMPORTED)
    assert not unused, (f"declared in pyproject.toml but imported nowhere in core/ or tui/: {unused} "
                        "(drop them, or say why in NOT_IMPORTED)")
    assert set(NOT_IMPORTED) <= declared()  # a reason for a distribution no longer declared is stale
