"""The secret gates, measured: the env gate's and the credential-file gate's precision and recall
on corpora kept in the repository (issue 39).

- env: bench/corpora/env/ordinary.txt (settings from public training and evaluation scripts; its
  header says from where) against bench/corpora/env/secrets.txt (test vectors of every token
  family the rule set covers, each under several names; written by make_secrets.py from a seed).
- files: bench/corpora/credential_files/ (bench/credential_files.py measures it).

Precision is the share of refusals that were secrets; recall the share of secrets refused. The
target is 1.0 for both: no ordinary setting refused, no token family missed. Exits non-zero when
either gate misses its target (an ordinary line refused, a secret passed), printing each one.

    python bench/gates.py [--small]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = HERE / "corpora" / "env"
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))  # run as a script from anywhere: the repository's core/

from _common import parse_small  # noqa: E402


@dataclass
class EnvFigures:
    ordinary: int = 0
    secrets: int = 0
    false_refusals: list[tuple[str, str]] = field(default_factory=list)  # (entry, why)
    misses: list[tuple[str, str]] = field(default_factory=list)  # (family, name)
    seconds: float = 0.0

    @property
    def precision(self) -> float:
        caught = self.secrets - len(self.misses)
        refused = caught + len(self.false_refusals)
        return caught / refused if refused else 1.0

    @property
    def recall(self) -> float:
        return (self.secrets - len(self.misses)) / self.secrets if self.secrets else 1.0


def ordinary_entries(path: Path = ENV / "ordinary.txt") -> list[tuple[str, str]]:
    rows = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            rows.append((name, value))
    return rows


def secret_entries(path: Path = ENV / "secrets.txt") -> list[tuple[str, str, str]]:
    """(family, name, value); a value's `\\n` is a line break (a key block spans lines)."""
    rows = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            family, _, entry = line.partition("\t")
            name, _, value = entry.partition("=")
            rows.append((family, name, value.replace("\\n", "\n")))
    return rows


def env_figures(limit: int | None = None) -> EnvFigures:
    from core.secrets.scan import env_problem

    figures = EnvFigures()
    start = time.perf_counter()
    for name, value in ordinary_entries()[:limit]:
        figures.ordinary += 1
        why = env_problem(name, value)
        if why:
            figures.false_refusals.append((f"{name}={value}", why))
    for family, name, value in secret_entries()[:limit]:
        figures.secrets += 1
        if env_problem(name, value) is None:
            figures.misses.append((family, name))
    figures.seconds = time.perf_counter() - start
    return figures


def file_figures():
    """bench/credential_files.py's figures (bench/ is no package: loaded from its file)."""
    spec = importlib.util.spec_from_file_location("bench_credential_files", HERE / "credential_files.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.measure()


def main() -> int:
    import os
    import tempfile

    # the file gate keeps a verdict cache under the home: a private one, never the user's
    import atexit
    import shutil

    os.environ["GPU_ROUTER_HOME"] = home = tempfile.mkdtemp(prefix="gpu-router-bench-gates-")
    atexit.register(shutil.rmtree, home, True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = parse_small(parser, {})
    limit = 20 if args.small else None
    env = env_figures(limit)
    print(f"env gate: {env.ordinary} ordinary settings, {env.secrets} secret values "
          f"({env.seconds * 1000:.0f} ms)")
    print(f"  precision {env.precision:.3f}  recall {env.recall:.3f}  "
          f"false refusals {len(env.false_refusals)}  misses {len(env.misses)}")
    for entry, why in env.false_refusals:
        print(f"  refused an ordinary setting: {entry}: {why}")
    for family, name in env.misses:
        print(f"  missed: {family} under {name}")
    broken = bool(env.false_refusals or env.misses)
    files = file_figures()
    print(f"credential-file gate: {len(files.ordinary)} ordinary files, {len(files.credentials)} credential "
          f"files ({files.seconds * 1000:.0f} ms)")
    print(f"  precision {files.precision:.3f}  recall {files.recall:.3f}  "
          f"false refusals {len(files.false_refusals)}  misses {len(files.missed)}")
    for path, why in files.false_refusals.items():
        print(f"  refused an ordinary file: {path}: {why}")
    for path in files.missed:
        print(f"  missed: {path}")
    broken = broken or bool(files.false_refusals or files.missed)
    print("PASS: no ordinary setting refused, no token family missed" if not broken else
          "FAIL: see the lines above")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
