"""The credential-file gate on two corpora: precision and recall (issue 39, items 3 and 6).

    python bench/credential_files.py [--reps 5] [--list]

bench/corpora/credential_files/ holds two trees (its README says what each file stands for):
`credentials/` (files that must never ship: console key exports, settings and mount files with
a password, DER keys, ...) and `ordinary/` (files from public projects' trees that must ship:
templates, sample configs, docs that mention `password=`, training data, DER certificates).
Each file is judged as the packer judges it (`core.packaging.gate.Gate.judge`: name and place,
identity, content), at its path under its tree, so the folder around a sample stands for the
project around it.

Figures: recall (credential files refused / credential files), precision (credential files
refused / all files refused), every credential file that ships, every ordinary file refused
(with the reason), recall by kind (a kind is a folder under `credentials/`), and the time the
gate took per file (content judged fresh: no cache). Target: recall 1.0 and precision 1.0 (no
ordinary file refused, no credential kind missed). `--list` prints every verdict.
Exits 1 when the target is missed (not in `--small` mode, which judges no target).

`measure()` is what other benches (bench/gates.py) and tests/packaging/test_credential_kinds.py call.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CORPUS = Path(__file__).resolve().parent / "corpora" / "credential_files"


@dataclass
class Figures:
    """The file gate's verdicts on the corpora: {path under the corpus: reason or ''}."""

    credentials: dict[str, str] = field(default_factory=dict)
    ordinary: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0  # judging every file once, content judged fresh

    @property
    def missed(self) -> list[str]:
        """Credential files that would ship."""
        return sorted(p for p, r in self.credentials.items() if not r)

    @property
    def false_refusals(self) -> dict[str, str]:
        """Ordinary files that would not ship, with the reason given."""
        return {p: r for p, r in sorted(self.ordinary.items()) if r}

    @property
    def recall(self) -> float:
        n = len(self.credentials)
        return (n - len(self.missed)) / n if n else 1.0

    @property
    def precision(self) -> float:
        caught = len(self.credentials) - len(self.missed)
        refused = caught + len(self.false_refusals)
        return caught / refused if refused else 1.0

    def by_kind(self) -> dict[str, tuple[int, int]]:
        """{kind: (refused, samples)}: a kind is the first folder under `credentials/`."""
        out: dict[str, list[int]] = {}
        for path, reason in self.credentials.items():
            kind = path.split("/")[1] if path.count("/") > 1 else path
            got = out.setdefault(kind, [0, 0])
            got[0] += bool(reason)
            got[1] += 1
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def _files(tree: Path) -> list[str]:
    return sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*")
                  if p.is_file() and not p.is_symlink())


def judge_tree(tree: Path) -> dict[str, str]:
    """{path under `tree`: the gate's reason, '' when the file ships}, with no verdict cache."""
    from core.packaging import credentials as cred
    from core.packaging.gate import Gate

    cred._MEMO.clear()  # judged fresh: no verdict remembered from an earlier run
    gate = Gate(root=tree)
    out = {}
    for rel in _files(tree):
        out[rel] = gate.judge(rel, os.lstat(tree / rel)) or ""
    return out


def measure(corpus: Path = CORPUS) -> Figures:
    """The file gate's precision and recall on `corpus`/credentials and `corpus`/ordinary."""
    start = time.perf_counter()
    creds = judge_tree(corpus / "credentials")
    ordinary = judge_tree(corpus / "ordinary")
    seconds = time.perf_counter() - start
    return Figures(credentials={f"credentials/{p}": r for p, r in creds.items()},
                   ordinary={f"ordinary/{p}": r for p, r in ordinary.items()}, seconds=seconds)


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import parse_small, private_world

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="runs timed (the median is printed)")
    parser.add_argument("--list", action="store_true", help="print every file's verdict")
    args = parse_small(parser, {"reps": 1})
    private_world("credential-files")  # the gate reads nothing there; no real home is touched
    runs = [measure() for _ in range(max(1, args.reps))]
    figures = runs[-1]
    times = sorted(r.seconds for r in runs)
    n_files = len(figures.credentials) + len(figures.ordinary)
    print(f"credential files: {len(figures.credentials)}, ordinary files: {len(figures.ordinary)}")
    print(f"recall    {figures.recall:.3f}  ({len(figures.credentials) - len(figures.missed)} of "
          f"{len(figures.credentials)} credential files refused)")
    print(f"precision {figures.precision:.3f}  ({len(figures.false_refusals)} of "
          f"{len(figures.ordinary)} ordinary files refused)")
    print(f"gate time {times[len(times) // 2] * 1000:.1f} ms for {n_files} files "
          f"(median of {len(times)}, content judged fresh)")
    print("recall by kind:")
    for kind, (caught, total) in figures.by_kind().items():
        print(f"  {kind:<28} {caught}/{total}")
    for path in figures.missed:
        print(f"MISSED   {path}")
    for path, reason in figures.false_refusals.items():
        print(f"REFUSED  {path}: {reason}")
    if args.list:
        for path, reason in {**figures.credentials, **figures.ordinary}.items():
            print(f"  {path}: {reason or 'ships'}")
    met = not figures.missed and not figures.false_refusals
    if args.small:
        return 0
    print("PASS" if met else "FAIL", "target: recall 1.0, precision 1.0")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
