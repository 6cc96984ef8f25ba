"""The house rules of the layout, read from the code with ast (nothing is imported to check).

- core/ is the engine: it never imports textual or anything under tui/ (and a run of every
  core module loads no UI module);
- no import cycle anywhere in core/ or tui/, counting imports inside functions too;
- no two packages of core/ import each other, however indirectly (the package graph is acyclic,
  imports inside functions counted), and each package sits on a floor (FLOORS, bottom up) and
  imports only packages on floors below its own;
- providers never import tui/; the transport never imports a provider;
- tui/ reaches the engine through its public functions: no core.providers or core.transport;
- tui/ stands in rooms, one per front (tui.cli, tui.mcp, tui.dash, tui.warm) and tui.show, what
  they all show: a front imports its own room, tui.show and the engine, never another front
  but through a door named in DOORS with its reason; tui.show imports no front;
- the job-side runtime (core/runtime, shipped to every target) imports only the standard
  library and itself;
- `ls core/` reads as a table of contents: a dozen entries at most.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core"
FORBIDDEN = ("textual", "tui", "textual_plotext", "plotext")


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in ("core", "tui"):
        for path in (ROOT / pkg).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            mods[name] = path
    return mods


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in the file, nested ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                keep = len(parts) - node.level + (1 if path.name == "__init__.py" else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names if f"{base}.{a.name}" in MODULES]
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name resolves to its longest known prefix)."""
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        for _, target in _imports(mod, path):
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != mod and not mod.startswith(target + "."):
                edges[mod].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


# The floors of core/, bottom up (README, Architecture). A package imports only packages on the
# floors below its own; two on one floor import neither the other. A new package is given a floor
# here, where what it imports and what imports it put it.
FLOORS: list[tuple[str, ...]] = [
    ("runtime",),           # what runs beside the job on its target: the standard library only
    ("errors", "paths"),    # the error every layer raises; where state lives
    ("display",),           # text shown to people
    ("jobs",),              # the job record: the store, the state table, events, metrics
    ("secrets",),           # secret values: keychain, names index, env scan, launch-time read
    ("config",),            # the job request and the user config, kill rules as read
    ("packaging",),         # what ships and what comes home (bundle, safe unpacking, checkpoints)
    ("transport",),         # commands and files over the local shell or SSH
    ("providers",),         # one class per target kind, the registry, accounts
    ("planning",),          # plan, router, policy, usage, the kill rules' judge
    ("engine",),            # service, supervisor, approvals and the PIN, fetch, cache GC
]


def _package(mod: str) -> str | None:
    """core.X.Y and core.X -> X (a subpackage, or errors / paths); core itself and tui -> None."""
    parts = mod.split(".")
    return parts[1] if parts[0] == "core" and len(parts) > 1 else None


PACKAGES = {p for p in map(_package, MODULES) if p is not None}


def _package_imports() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) package pairs of core/, each with the lines that make it, imports
    inside functions included (one a function hides is still a door between two rooms)."""
    out: dict[tuple[str, str], list[str]] = {}
    for mod, path in MODULES.items():
        src = _package(mod)
        if src is None:
            continue
        for line, target in _imports(mod, path):
            dst = _package(target)
            if dst in PACKAGES and dst != src:
                out.setdefault((src, dst), []).append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    return out


def _floor_breaches(edges: dict[tuple[str, str], list[str]], floors: list[tuple[str, ...]]) -> list[str]:
    """Every import of a package on the importer's own floor or one above, and every package
    without a floor."""
    level = {pkg: i for i, floor in enumerate(floors) for pkg in floor}
    bad = [f"package {p} has no floor in FLOORS" for p in sorted({p for e in edges for p in e} - set(level))]
    for (src, dst), where in sorted(edges.items()):
        if src in level and dst in level and level[dst] >= level[src]:
            bad += [f"{w} (floor {level[src]} {src} -> floor {level[dst]} {dst})" for w in where]
    return bad


def _offenders(prefix: str, banned: tuple[str, ...]) -> list[str]:
    out = []
    for mod, path in MODULES.items():
        if mod == prefix or mod.startswith(prefix + "."):
            for line, target in _imports(mod, path):
                if any(target == b or target.startswith(b + ".") for b in banned):
                    out.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    return sorted(set(out))


def test_no_import_cycle_in_core_or_tui() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    """The check above can fail: a made-up graph with a cycle is caught."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_two_packages_of_core_import_each_other_however_indirectly() -> None:
    edges = _package_imports()
    graph: dict[str, set[str]] = {}
    for src, dst in edges:
        graph.setdefault(src, set()).add(dst)
        graph.setdefault(dst, set())
    knots = _cycles(graph)
    doors = [w for knot in knots for (src, dst), where in sorted(edges.items())
             if src in knot and dst in knot for w in where]
    assert knots == [], doors


def test_every_package_of_core_imports_only_the_floors_below_it() -> None:
    assert PACKAGES == {p for floor in FLOORS for p in floor}, "give each package of core/ one floor"
    assert _floor_breaches(_package_imports(), FLOORS) == []


def test_the_floor_check_can_fail() -> None:
    """An import upward, one sideways on a floor, and a package left off the floors are named."""
    floors = [("low",), ("mid", "side"), ("top",)]
    edges = {("top", "low"): ["t.py:1 imports core.low"], ("low", "top"): ["l.py:2 imports core.top"],
             ("mid", "side"): ["m.py:3 imports core.side"], ("new", "low"): ["n.py:4 imports core.low"]}
    assert _floor_breaches(edges, floors) == [
        "package new has no floor in FLOORS",
        "l.py:2 imports core.top (floor 0 low -> floor 2 top)",
        "m.py:3 imports core.side (floor 1 mid -> floor 1 side)",
    ]


def test_the_record_is_a_floor_below_providers_and_engine() -> None:
    """The knots issue 21 found, named: providers and engine, config and planning, config and
    packaging, secrets and config, secrets and engine, planning and engine (each one way now)."""
    edges = _package_imports()
    assert ("providers", "engine") not in edges
    assert ("config", "planning") not in edges and ("config", "packaging") not in edges
    assert ("secrets", "engine") not in edges and ("secrets", "config") not in edges
    assert ("planning", "engine") not in edges


def test_no_core_module_imports_the_ui() -> None:
    assert _offenders("core", FORBIDDEN) == []


def test_providers_do_not_import_the_ui() -> None:
    assert _offenders("core.providers", ("tui", "textual")) == []


def test_the_transport_imports_no_provider() -> None:
    assert _offenders("core.transport", ("core.providers",)) == []


def test_tui_reaches_the_engine_only_through_its_public_functions() -> None:
    assert _offenders("tui", ("core.providers", "core.transport")) == []


# The rooms of tui/: one per front, and what every front shows (the terminal, the tables and
# panels, the error log). A front reaches the engine and tui.show, never another front, but
# through one of the DOORS below: (importer, imported module) and why that front must start or
# reach the other. Nothing else of tui/ may sit outside a room (LOOSE, each with its reason).
FRONTS = ("tui.cli", "tui.mcp", "tui.dash", "tui.warm")
SHARED = "tui.show"
DOORS: dict[tuple[str, str], str] = {
    ("tui.cli.fronts", "tui.dash.app"): "`gpu dash`, and `gpu` alone at a terminal, open the dashboard",
    ("tui.cli.fronts", "tui.mcp.server"): "`gpu mcp` serves the MCP tools on stdin/stdout",
    ("tui.cli.daemon", "tui.warm.wire"): "`gpu daemon --status/--stop` shows and stops the warm server",
    ("tui.warm.launcher", "tui.cli"): "the console script runs the command here when the warm server does not",
    ("tui.warm.server", "tui.cli"): "the warm server builds submit's parser once; its children run tui.cli.main",
}
LOOSE = {
    "tui": "the package: a docstring only",
}


def _room(mod: str) -> str | None:
    """tui.X.Y and tui.X -> tui.X; anything outside tui/ -> None."""
    parts = mod.split(".")
    return ".".join(parts[:2]) if parts[0] == "tui" and len(parts) > 1 else None


def _reached() -> dict[str, list[tuple[int, str]]]:
    """Module of tui/ -> (line, project module) for each module an import statement loads, nested
    ones included: `from a import b` reaches a.b where that is a module, else a."""
    out: dict[str, list[tuple[int, str]]] = {}
    for mod, path in MODULES.items():
        if mod != "tui" and not mod.startswith("tui."):
            continue
        got = out.setdefault(mod, [])
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                base = node.module or ""
                if node.level:
                    parts = mod.split(".")
                    keep = len(parts) - node.level + (1 if path.name == "__init__.py" else 0)
                    base = ".".join(parts[:keep] + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in MODULES:
                    name = name.rpartition(".")[0]
                if name and name != mod:
                    got.append((node.lineno, name))
    return out


def _front_crossings(reached: dict[str, list[tuple[int, str]]],
                     doors: dict[tuple[str, str], str]) -> tuple[list[str], set[tuple[str, str]]]:
    """Every import from one room of tui/ into another that the rules do not allow, and the
    doors that were used. A front may import its own room, tui.show and what is not tui/; a
    door lets exactly one module of a front import exactly one module of another. tui.show
    imports no front; a loose module only through a door."""
    bad: list[str] = []
    used: set[tuple[str, str]] = set()
    for mod, imports in sorted(reached.items()):
        src = _room(mod)
        for line, target in imports:
            dst = _room(target)
            if dst is None and target != "tui":
                continue  # the engine, the standard library, a third-party package
            if dst == src or (dst == SHARED and src != SHARED):
                continue
            if (mod, target) in doors:
                used.add((mod, target))
                continue
            bad.append(f"{mod}:{line} imports {target} ({src or mod} -> {dst or target})")
    return bad, used


def test_a_front_never_imports_another_front_but_through_a_named_door() -> None:
    bad, _ = _front_crossings(_reached(), DOORS)
    assert bad == []


def test_every_door_between_fronts_is_still_used() -> None:
    """A door no import uses any more is closed: the list names the doors there are."""
    _, used = _front_crossings(_reached(), DOORS)
    assert used == set(DOORS)


def test_tui_holds_only_its_rooms() -> None:
    rooms = {*FRONTS, SHARED}
    outside = sorted(m for m in MODULES if m.split(".")[0] == "tui" and _room(m) not in rooms
                     and m not in LOOSE)
    assert outside == []
    assert {m for m in MODULES if m.split(".")[0] == "tui" and _room(m) not in rooms} == set(LOOSE)


def test_the_console_scripts_first_imports_import_nothing() -> None:
    """`gpu` loads tui/__init__.py and tui/warm/__init__.py before the launcher: they hold no
    import, so the launcher's path stays the C modules it chose (tests/tui/cli/test_startup.py)."""
    for path in (ROOT / "tui" / "__init__.py", ROOT / "tui" / "warm" / "__init__.py"):
        tree = ast.parse(path.read_text())
        assert [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))] == [], path


def test_the_front_check_can_fail() -> None:
    """A front into another, a door used from the wrong module, the shared room into a front,
    a loose module with no door: each named; the engine, a room's own modules, tui.show and a
    door's own import pass."""
    reached = {
        "tui.mcp.tools": [(3, "tui.cli.common"), (4, "tui.show.output"), (5, "core.engine.service"),
                          (6, "tui.mcp.schema")],
        "tui.cli.jobs": [(7, "tui.dash.app")],
        "tui.cli.fronts": [(8, "tui.dash.app")],
        "tui.show.render": [(9, "tui.dash.widgets")],
        "tui.dash.demo": [(10, "tui")],
        "tui.stray": [(11, "tui.warm.wire")],
    }
    doors = {("tui.cli.fronts", "tui.dash.app"): "gpu dash", ("tui.warm.server", "tui.cli"): "unused"}
    bad, used = _front_crossings(reached, doors)
    assert bad == [
        "tui.cli.jobs:7 imports tui.dash.app (tui.cli -> tui.dash)",
        "tui.dash.demo:10 imports tui (tui.dash -> tui)",
        "tui.mcp.tools:3 imports tui.cli.common (tui.mcp -> tui.cli)",
        "tui.show.render:9 imports tui.dash.widgets (tui.show -> tui.dash)",
        "tui.stray:11 imports tui.warm.wire (tui.stray -> tui.warm)",
    ]
    assert used == {("tui.cli.fronts", "tui.dash.app")}


def test_the_job_side_runtime_imports_only_the_standard_library_and_itself() -> None:
    runtime = CORE / "runtime"
    own = {p.stem for p in runtime.rglob("*.py")} | {p.name for p in runtime.iterdir() if p.is_dir()}
    bad = []
    for path in runtime.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module != "__future__":
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in own:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert bad == []


def test_core_reads_as_a_table_of_contents() -> None:
    entries = sorted(p.name for p in CORE.iterdir() if p.name not in ("__init__.py", "__pycache__"))
    assert len(entries) <= 12, entries
    loose = [e for e in entries if e.endswith(".py")]
    assert len(loose) <= 3, f"modules outside a subpackage: {loose}"


def test_importing_all_of_core_loads_no_ui_module() -> None:
    mods = [f"core.{p.relative_to(CORE).with_suffix('').as_posix().replace('/', '.')}"
            for p in CORE.rglob("*.py") if p.name != "__init__.py" and "runtime" not in p.parts]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in mods) +
            "bad = [m for m in sys.modules if m.split('.')[0] in %r]\nprint(bad)" % (FORBIDDEN,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_each_room_of_core_says_what_it_holds_and_what_it_may_import() -> None:
    """A newcomer opening a package's __init__ learns its room and its floor (issue 42, item 5):
    every package of FLOORS has a docstring that says what it imports and names FLOORS, where
    the rule is checked."""
    import ast as _ast

    unsaid = []
    for floor in FLOORS:
        for name in floor:
            init = CORE / name / "__init__.py"
            if not init.exists():
                continue  # errors, paths: modules, not rooms
            doc = _ast.get_docstring(_ast.parse(init.read_text())) or ""
            if "import" not in doc or "FLOORS" not in doc or len(doc) < 120:
                unsaid.append(name)
    assert unsaid == [], f"core packages whose __init__ docstring does not say what they hold and may import: {unsaid}"
