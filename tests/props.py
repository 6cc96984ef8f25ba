"""How many examples a property test tries: the full count in the full run (CI), about a fifth in
the quick loop.

Hypothesis's profiles set the default count (100); a test that asks for more or fewer names its
count through `examples(n)`, so the quick profile scales every property alike instead of only
those that kept the default. The quick loop (`-m quick`, tests/conftest.py) loads the `quick`
profile; `--hypothesis-profile=default` keeps full counts there too."""

from __future__ import annotations

from hypothesis import settings

FULL = 100  # Hypothesis's own default count, the full run's
QUICK = 20  # the quick profile's default count
settings.register_profile("quick", max_examples=QUICK)


def examples(n: int) -> int:
    """`n` examples in the full run; the same share of the quick profile's count there."""
    default = settings.default.max_examples
    return n if default >= FULL else max(10, n * default // FULL)
