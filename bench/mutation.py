"""Mutation testing of the security choke points: do the quick tests notice when a rule breaks?

    python bench/mutation.py [--module NAME ...] [--kinds-only | --no-kinds] [--jobs 2] [--keep]

Two parts, per module (MODULES below: the file, the functions of it that are the choke point,
and the quick test files that cover it):

1. **mutmut** (3.x, `pip install -e '.[test]'`) mutates every function of the module (operators,
   comparisons, constants, strings, arguments, return values: its own list) and runs, for each
   mutant, the tests of the module's files that call that function (`-m quick`). A mutant is
   *killed* when a test fails, *survived* when all pass, *no tests* when none calls it.
2. **kinds**: the breakages the rules exist against that mutmut does not generate (it mutates
   inside functions only, never a module-level table, and never swaps `search` for `match`):
   a field removed from DIGEST_FIELDS, a transition added to the state table, a fact dropped
   from jobguard.detect, `search` -> `match` in the secret-shape checks, the --tmpfs loop over
   hidden paths dropped from the sandbox argv, a rule dropped from policy.evaluate. Each is
   written into the copy's source and the module's test files run once (`-x -m quick`).

Everything runs in a temporary copy of the checkout (the working tree is never touched: others
may run tests in it at the same time). It prints killed/total per module and each survivor
(mutmut's name and diff, or the kind's description), and exits 1 if any survived. Every test
file matching tests/**/test_choke_*.py or tests/**/test_mutants_*.py joins every module's list (the
tests written against these rules); mutmut's own stats run maps which test calls what.

`--small` (tests/project/test_benches.py): core/jobs/states.py against its own test file only, mutmut
over its one function and the kinds that add a transition from `done`: under a minute.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parse_small  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
COMMON_TESTS = ["tests/**/test_choke_*.py", "tests/**/test_mutants_*.py"]


@dataclass
class Kind:
    """One hand-made mutant: the source with one thing broken, and what was broken."""
    what: str
    source: str


@dataclass
class Module:
    path: str
    tests: list[str]
    # mutmut's mutant names to run (fnmatch); empty: every function of the file
    names: list[str] = field(default_factory=list)
    kinds: Callable[[str], Iterator[Kind]] | None = None
    # each test run in its own empty working folder (OWN_CWD): for a module whose mutants can
    # act on the working folder (a descriptor turned into None reads and moves names relative
    # to it), which under mutmut is its own copy, mutants/
    own_cwd: bool = False

    @property
    def dotted(self) -> str:
        return self.path[:-3].replace("/", ".")


# --- the kinds -------------------------------------------------------------------------------

def _lines_replaced(source: str, node: ast.AST, text: str) -> str:
    """`source` with the lines of `node` replaced by `text` at the node's indentation."""
    lines = source.splitlines(keepends=True)
    start, end = node.lineno - 1, node.end_lineno
    indent = re.match(r"\s*", lines[start]).group(0)
    return "".join(lines[:start] + [f"{indent}{text}\n"] + lines[end:])


def _function(tree: ast.AST, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def digest_kinds(source: str) -> Iterator[Kind]:
    """Each field of DIGEST_FIELDS removed, and each optional part of digest() dropped."""
    tree = ast.parse(source)
    assign = next(n for n in tree.body if isinstance(n, ast.Assign)
                  and getattr(n.targets[0], "id", "") == "DIGEST_FIELDS")
    fields = [e.value for e in assign.value.elts]
    for name in fields:
        rest = ", ".join(repr(f) for f in fields if f != name)
        yield Kind(f"DIGEST_FIELDS without {name!r}",
                   _lines_replaced(source, assign, f"DIGEST_FIELDS = ({rest},)"))
    fn = _function(tree, "digest")
    for stmt in fn.body:
        if isinstance(stmt, ast.If):
            yield Kind(f"digest() without `{ast.unparse(stmt.test)}`", _lines_replaced(source, stmt, "pass"))
        if isinstance(stmt, ast.For):
            for key in ast.literal_eval(stmt.iter):
                rest = tuple(k for k in ast.literal_eval(stmt.iter) if k != key)
                seg = ast.get_source_segment(source, stmt.iter)
                yield Kind(f"digest() without the optional key {key!r}",
                           source.replace(seg, repr(rest), 1))


def states_kinds(source: str, *, only_from: str | None = None) -> Iterator[Kind]:
    """Each transition the table does not list, added (after the table, before what is derived
    from it: RESUMABLE follows the table, as it would after an edit of it)."""
    sys.path.insert(0, str(REPO))
    from core.jobs.states import TRANSITIONS, State
    tree = ast.parse(source)
    table = next(n for n in tree.body if isinstance(n, ast.AnnAssign)
                 and getattr(n.target, "id", "") == "TRANSITIONS")
    lines = source.splitlines(keepends=True)
    for src in State:
        if only_from and src.value != only_from:
            continue
        for dst in State:
            if dst == src or dst in TRANSITIONS[src]:
                continue
            add = (f"TRANSITIONS[S.{src.name}] = TRANSITIONS[S.{src.name}] | {{S.{dst.name}}}"
                   f"  # mutant\n")
            yield Kind(f"transition {src.value} -> {dst.value} allowed",
                       "".join(lines[:table.end_lineno] + [add] + lines[table.end_lineno:]))


def jobguard_kinds(source: str) -> Iterator[Kind]:
    """Each fact of detect() dropped."""
    tree = ast.parse(source)
    loop = next(n for n in _function(tree, "detect").body if isinstance(n, ast.For))
    checks = loop.iter.elts
    for i, check in enumerate(checks):
        rest = ", ".join(ast.get_source_segment(source, c) for j, c in enumerate(checks) if j != i)
        seg = ast.get_source_segment(source, loop.iter)
        yield Kind(f"detect() without {ast.get_source_segment(source, check)}",
                   source.replace(seg, f"({rest},)", 1))


def search_kinds(source: str) -> Iterator[Kind]:
    """Each `.search(` turned into `.match(` (a shape found only at the value's start)."""
    lines = source.splitlines(keepends=True)
    for i, line in enumerate(lines):
        for m in re.finditer(r"\.search\(", line):
            changed = line[:m.start()] + ".match(" + line[m.end():]
            yield Kind(f"line {i + 1} col {m.start() + 1}: {line.strip()[:70]} with .match",
                       "".join(lines[:i] + [changed] + lines[i + 1:]))


def sandbox_kinds(source: str) -> Iterator[Kind]:
    """The loops of bwrap_argv (and the macOS profile) over hidden and covered paths dropped."""
    tree = ast.parse(source)
    for fname in ("bwrap_argv", "seatbelt_profile"):
        try:
            fn = _function(tree, fname)
        except StopIteration:
            continue
        for stmt in fn.body:
            if isinstance(stmt, ast.For) and re.search(r"hide|cover", ast.unparse(stmt.iter)):
                yield Kind(f"{fname}() without `for {ast.unparse(stmt.target)} in {ast.unparse(stmt.iter)}`",
                           _lines_replaced(source, stmt, "pass"))


def policy_kinds(source: str) -> Iterator[Kind]:
    """Each `holds.append(...)` of evaluate() dropped (a rule that no longer holds anything)."""
    tree = ast.parse(source)
    fn = _function(tree, "evaluate")
    for node in ast.walk(fn):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "holds.append"):
            arg = node.value.args[0]
            rule = (arg.args[0].value if isinstance(arg, ast.Call) and arg.args
                    and isinstance(arg.args[0], ast.Constant) else ast.unparse(arg)[:40])
            yield Kind(f"evaluate() line {node.lineno}: rule {rule!r} dropped",
                       _lines_replaced(source, node, "pass"))


MODULES: dict[str, Module] = {m.path.rsplit("/", 1)[-1][:-3]: m for m in [
    Module("core/planning/plan.py",
           ["tests/config/test_targets_config.py", "tests/providers/test_modal_image_gpus.py", "tests/secrets/test_env_gate.py"],
           names=["core.planning.plan.x_digest__mutmut_*", "core.planning.plan.x_canonical_bytes__*"],
           kinds=digest_kinds),
    Module("core/planning/policy.py",
           ["tests/planning/test_policy.py", "tests/planning/test_agent_day.py", "tests/providers/test_host_sandbox.py"],
           kinds=policy_kinds),
    Module("core/jobs/states.py", ["tests/jobs/test_store_states.py"], kinds=states_kinds),
    Module("core/engine/jobguard.py", ["tests/engine/test_jobguard.py", "tests/tui/warm/test_warm.py"],
           kinds=jobguard_kinds),
    Module("core/secrets/scan.py",
           ["tests/secrets/test_env_scan.py", "tests/secrets/test_env_gate.py", "tests/secrets/test_gate_corpora.py"],
           kinds=search_kinds),
    Module("core/runtime/tokenshapes.py",
           ["tests/secrets/test_env_gate.py", "tests/secrets/test_gate_corpora.py", "tests/runtime/test_masking.py",
            "tests/secrets/test_choke_secret_shapes.py", "tests/runtime/test_mutants_tokenshapes.py"],
           kinds=search_kinds),
    Module("core/runtime/redact.py", ["tests/runtime/test_masking.py", "tests/runtime/test_mask_encodings.py"],
           names=["core.runtime.redact.xǁSecretPatternǁ*", "core.runtime.redact.x_fixed_forms__*",
                  "core.runtime.redact.x__base64_*", "core.runtime.redact.x__base32_forms__*",
                  "core.runtime.redact.x__hex_forms__*", "core.runtime.redact.x_secret_values__*",
                  "core.runtime.redact.x__masked__*", "core.runtime.redact.x__escape_start__*", "core.runtime.redact.x__escape_end__*", "core.runtime.redact.x__minimal__*"]),
    Module("core/runtime/boundary.py",
           ["tests/runtime/test_sandbox.py", "tests/runtime/test_build_sandbox.py", "tests/runtime/test_root_job.py"],
           names=["core.runtime.boundary.x_bwrap_argv__*", "core.runtime.boundary.x__outermost__*",
                  "core.runtime.boundary.x__under_any__*", "core.runtime.boundary.x_job_environ__*",
                  "core.runtime.boundary.x_plan_for__*"],
           kinds=sandbox_kinds),
    Module("core/engine/actor.py",
           ["tests/engine/test_approvals.py", "tests/engine/test_approval_pin.py", "tests/engine/test_jobguard.py"]),
    Module("core/engine/pin.py", ["tests/engine/test_pin_lockout.py", "tests/engine/test_approval_pin.py",
                                  "tests/engine/test_choke_pin.py"]),
    Module("core/runtime/nofollow.py", ["tests/runtime/test_nofollow.py", "tests/runtime/test_choke_nofollow.py"]),
    Module("core/packaging/runswriter.py", ["tests/packaging/test_runs_writer.py", "tests/runtime/test_choke_nofollow.py",
                                            "tests/packaging/test_mutants_runswriter.py"],
           own_cwd=True),
    Module("core/runtime/ckptgen.py", ["tests/runtime/test_checkpoint_generations.py", "tests/runtime/test_choke_ckptgen.py"]),
    # the generation choice of the checkpoint listing
    Module("core/runtime/ckptscan.py", ["tests/runtime/test_checkpoint_generations.py", "tests/runtime/test_choke_ckptgen.py"],
           names=["core.runtime.ckptscan.x__scan_generation__*", "core.runtime.ckptscan.x__gen_names__*"]),
    # idempotency: what "the same request" is, and the one insert per request_id
    Module("core/engine/service.py", ["tests/engine/test_idempotency.py", "tests/engine/test_choke_idempotency.py",
                                      "tests/engine/test_choke_sweep_idempotency.py"],
           names=["core.engine.service.x_fingerprint__*", "core.engine.service.x__insert_once__*"]),
    Module("core/jobs/store.py", ["tests/engine/test_idempotency.py", "tests/engine/test_choke_idempotency.py"],
           names=["core.jobs.store.xǁStoreǁfind_active__*"]),
    # ... and a sweep's: the one group per request_id, the live group an identical sweep returns
    Module("core/engine/sweeps.py", ["tests/engine/test_choke_sweep_idempotency.py"],
           names=["core.engine.sweeps.x__insert_once__*"]),
    Module("core/jobs/groups.py", ["tests/engine/test_choke_sweep_idempotency.py"],
           names=["core.jobs.groups.xǁGroupRowsǁfind_active_group__*"]),
    # the code-folder take-over: the record, its pin, the check of the folder, objects that lie
    Module("core/runtime/codetree.py", ["tests/runtime/test_codetree.py", "tests/runtime/test_choke_takeover.py"],
           names=["core.runtime.codetree.x_record_digest__*", "core.runtime.codetree.x__read_record__*",
                  "core.runtime.codetree.x__take_over__*", "core.runtime.codetree.x__untouched__*",
                  "core.runtime.codetree.x__copy_all__*"]),
    # ... and the store's side of it: objects checked as they arrive and as they are copied
    Module("core/runtime/objstore.py", ["tests/runtime/test_codetree.py", "tests/runtime/test_choke_takeover.py"],
           names=["core.runtime.objstore.x_receive__*", "core.runtime.objstore.x__store__*",
                  "core.runtime.objstore.x_copy_verified__*", "core.runtime.objstore.x_holds__*"]),
    # ... and the engine's side of it: asked only sandboxed, with the hash kept at home
    Module("core/providers/remote.py", ["tests/runtime/test_choke_takeover.py"],
           names=["core.providers.remote.x_take_over_args__*",
                  "core.providers.remote.xǁRemoteProviderǁ_keep_code_record__*",
                  "core.providers.remote.xǁRemoteProviderǁ_code_record__*"]),
    # the credential gate: what never ships, by name, by place and by content (the functions
    # that apply the rules; the tables are data, and the settings-file judge (_settings_what,
    # _written_out) is measured on its corpora by tests/packaging/test_credential_kinds.py).
    # _folder_reason and _part_forms are lru_cache'd: mutmut leaves decorated functions alone
    Module("core/packaging/credentials.py",
           ["tests/packaging/test_choke_credentials.py", "tests/packaging/test_credential_kinds.py", "tests/packaging/test_credentials_props.py"],
           names=[f"core.packaging.credentials.x_{f}__*" for f in (
               "name_reason", "name_variants", "_normal", "might_be_credential_name", "is_env_template",
               "withheld_reason", "place_reason", "_folder_reason", "_part_forms", "_last_part_reason",
               "_suffix_reason", "content_reason", "_text_what", "_escaped_what", "_escaped_near",
               "_utf16_what", "_der_length", "_binary_what", "_wrapped_what", "_pgpass_what",
               "_url_password_what", "url_credential", "env_template_reason", "_assigned_label",
               "content_key", "content_verdict", "remember_verdict", "needs_content_check")]),
]}


# --- running ---------------------------------------------------------------------------------

def test_files(root: Path, module: Module, common: bool = True) -> list[str]:
    found: list[str] = []
    for pattern in module.tests + (COMMON_TESTS if common else []):
        found += sorted(str(p.relative_to(root)) for p in root.glob(pattern))
    return list(dict.fromkeys(found))


def copy_tree(dest: Path) -> None:
    """The checkout's files (untracked ones too) in `dest`. In the copy the quick profile of the
    property tests is made deterministic and deadline-free: a mutant is killed by what it
    breaks, never by a slow example on a busy machine or a different draw."""
    skip = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".hypothesis", "mutants",
                                  ".pytest_cache", "runs", "screenshots", "setup.cfg")
    shutil.copytree(REPO, dest, ignore=skip, symlinks=True)
    props = dest / "tests" / "props.py"
    text = props.read_text()
    old = 'settings.register_profile("quick", '
    assert old in text, "tests/props.py no longer registers the quick profile: update copy_tree"
    props.write_text(text.replace(old, old + "deadline=None, derandomize=True, database=None, ", 1))
    with open(dest / "tests" / "conftest.py", "a") as conftest:
        conftest.write(OWN_CWD)


# Appended to the copy's tests/conftest.py, on for a module with `own_cwd`. mutmut runs every
# test with its own copy (mutants/) as the working folder, where it keeps what it has measured
# (mutants/<module>.meta): runswriter's mutant `merge_at(None, self.fd)` listed that folder and
# renamed mutants/core into the test's runs/<id>/, and the run stopped at 130 of 667 with the
# .meta gone. In an empty folder of its own such a mutant finds nothing to move, and the test
# that expected the files fails: killed, as a test run from anywhere would see it.
OWN_CWD = '''

if os.environ.get("GPU_MUTATION_OWN_CWD") == "1":  # written by bench/mutation.py, in its copy only
    @pytest.fixture(autouse=True)
    def _mutation_own_cwd(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each test in an empty working folder: a mutant acting on relative names cannot
        reach mutmut's own files."""
        monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
'''


def passing(work: Path, files: list[str]) -> list[str]:
    """The files whose quick tests pass on the unmutated copy (one that fails measures nothing:
    it is left out, saying so)."""
    env = {**os.environ, "PYTHONPATH": str(work)}

    def ok(chosen: list[str]) -> bool:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
                               "quick", *chosen], cwd=work, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode in (0, 5)

    if ok(files):
        return files
    kept = [f for f in files if ok([f])]
    for f in files:
        if f not in kept:
            print(f"  left out: {f} fails on the unmutated copy", flush=True)
    return kept


def run_mutmut(work: Path, module: Module, files: list[str], jobs: int,
               only: list[str] | None) -> tuple[dict[str, str], dict[str, str]]:
    """mutmut over the module in `work` (a copy): {mutant: status}, {survivor: its diff}."""
    from mutmut.stats import status_by_exit_code
    shutil.rmtree(work / "mutants", ignore_errors=True)
    # mutmut runs the tests in its own copy (mutants/): the folders they read beside core/ go too
    cfg = ["[mutmut]", "source_paths=core", f"only_mutate={module.path}", "also_copy=bench\n    examples\n    tui",
           "pytest_add_cli_args_test_selection=" + "\n    ".join(files),
           "pytest_add_cli_args=-p\n    no:cacheprovider\n    -m\n    quick",
           "use_git_change_detection=false", ""]
    (work / "setup.cfg").write_text("\n".join(cfg))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if module.own_cwd:
        env["GPU_MUTATION_OWN_CWD"] = "1"
    names = only if only is not None else module.names
    with open(work / f"mutmut-{Path(module.path).stem}.log", "wb") as out:
        rc = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *names],
                            cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    meta = work / "mutants" / (module.path + ".meta")
    if not meta.exists():
        tail = (work / f"mutmut-{Path(module.path).stem}.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"mutmut did not run on {module.path} (exit {rc}):\n{tail}")
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    pats = names or ["*"]
    import fnmatch
    status = {k: status_by_exit_code[c] for k, c in codes.items()
              if any(fnmatch.fnmatch(k, p) for p in pats)}
    if any(st == "not checked" for st in status.values()):
        tail = (work / f"mutmut-{Path(module.path).stem}.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"mutmut stopped before checking the mutants of {module.path} (exit {rc}):\n{tail}")
    diffs = {}
    for name, st in status.items():
        if st not in ("killed", "timeout"):
            shown = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=work, env=env,
                                   capture_output=True, text=True)
            diffs[name] = "\n".join(ln for ln in shown.stdout.splitlines()
                                    if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---")))
    return status, diffs


def run_kinds(work: Path, module: Module, files: list[str], kinds: list[Kind]) -> dict[str, str]:
    """Each kind written into the copy's source, the test files run: {what: status}."""
    target = work / module.path
    original = target.read_text()
    env = {**os.environ, "PYTHONPATH": str(work)}
    # the rule-shaped tests that import the module first: with -x a kind they kill stops there
    parent, _, stem = module.dotted.rpartition(".")

    def order(f: str) -> tuple[bool, bool]:
        text = (work / f).read_text(errors="replace")
        imports = module.dotted in text or re.search(rf"from {re.escape(parent)} import .*\b{stem}\b", text)
        return (not imports, not Path(f).name.startswith(("test_choke_", "test_mutants_")))

    first = sorted(files, key=order)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "quick",
           "--timeout", "300", *first]

    def pytest() -> int:
        return subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode

    out: dict[str, str] = {}
    try:
        for kind in kinds:
            assert kind.source != original, kind.what
            target.write_text(kind.source)
            rc = pytest()
            out[kind.what] = {0: "survived", 1: "killed", 5: "no tests"}.get(rc, f"error (exit {rc})")
            if out[kind.what] != "killed":  # as found: a long run shows its survivors early
                print(f"  {out[kind.what]}: {kind.what}", flush=True)
    finally:
        target.write_text(original)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=sorted(MODULES),
                        help="a module to mutate (repeatable; default: all)")
    parser.add_argument("--no-kinds", action="store_true", help="mutmut only")
    parser.add_argument("--kinds-only", action="store_true", help="the hand-made kinds only")
    parser.add_argument("--listed-only", action="store_true",
                        help="only the test files the module lists (its own and the rule-shaped "
                             "ones named there), not every test_choke_*/test_mutants_*: the same "
                             "score where no other of those calls the module, minutes sooner")
    parser.add_argument("--without-new-tests", action="store_true",
                        help="leave out tests/**/test_choke_*.py and tests/**/test_mutants_*.py (the score "
                             "before them)")
    parser.add_argument("--jobs", type=int, default=2, help="mutmut's parallel children")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy (its path "
                        "is printed; `python -m mutmut show NAME` there shows a mutant)")
    args = parse_small(parser, {"module": ["states"], "small_kinds": "done", "without_new_tests": True})
    small_from = getattr(args, "small_kinds", None)
    work = Path(tempfile.mkdtemp(prefix="gpu-mutation-"))
    survivors = 0
    try:
        copy_tree(work / "repo")
        root = work / "repo"
        for key in args.module or list(MODULES):
            module = MODULES[key]
            files = test_files(root, module, not (args.without_new_tests or args.listed_only))
            if args.without_new_tests:  # the rule-shaped files a module lists go too
                files = [f for f in files if not Path(f).name.startswith(("test_choke_", "test_mutants_"))]
            started = time.monotonic()
            print(f"== {module.path}: tests {' '.join(files)}", flush=True)
            files = passing(root, files)
            if not args.kinds_only:
                status, diffs = run_mutmut(root, module, files, args.jobs, None)
                killed = sum(1 for s in status.values() if s in ("killed", "timeout"))
                print(f"mutmut  {module.path}: killed {killed} / {len(status)}"
                      + (f" ({100 * killed / len(status):.1f}%)" if status else ""), flush=True)
                for name, st in sorted(status.items()):
                    if name in diffs:
                        survivors += 1
                        print(f"  {st}: {name}\n" + "\n".join("      " + ln for ln in diffs[name].splitlines()))
            if module.kinds and not args.no_kinds:
                source = (root / module.path).read_text()
                if module.kinds is states_kinds:
                    kinds = list(states_kinds(source, only_from=small_from))
                else:
                    kinds = list(module.kinds(source))
                result = run_kinds(root, module, files, kinds)
                killed = sum(1 for s in result.values() if s == "killed")
                print(f"kinds   {module.path}: killed {killed} / {len(result)}", flush=True)
                survivors += len(result) - killed
            print(f"   ({time.monotonic() - started:.0f} s)", flush=True)
    finally:
        if args.keep:
            print(f"kept: {work / 'repo'}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"survivors: {survivors}")
    return 1 if survivors and not args.small else 0


if __name__ == "__main__":
    sys.exit(main())
