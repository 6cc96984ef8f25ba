"""The env gate on the corpora bench/gates.py measures (issue 39): no ordinary setting from public
training and evaluation scripts is refused, and no test vector of a token family passes, whatever
name it is under. The figures themselves are bench/gates.py's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick
BENCH = Path(__file__).resolve().parents[2] / "bench"


def _gates():
    sys.path.insert(0, str(BENCH))  # gates.py imports _common beside it (bench/ is no package)
    try:
        spec = importlib.util.spec_from_file_location("bench_gates", BENCH / "gates.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_no_ordinary_setting_is_refused_and_no_token_family_passes() -> None:
    figures = _gates().env_figures()
    assert figures.ordinary >= 150 and figures.secrets >= 150  # the corpora are all there
    assert figures.false_refusals == [], figures.false_refusals
    assert figures.misses == [], figures.misses


def test_every_family_of_the_rule_set_has_a_vector() -> None:
    """A family added to the rule set without a test vector would go unmeasured."""
    from core.runtime.tokenshapes import PREFIXES

    values = [value for _, _, value in _gates().secret_entries()]
    for prefix, _, what in PREFIXES:
        assert any(v.startswith(prefix) or f"={prefix}" in v for v in values), (prefix, what)
