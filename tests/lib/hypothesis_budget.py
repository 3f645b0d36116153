"""How many examples a property test draws. The count a test names is what CI draws (`bash .ci/run`: the
"sglstack" profile of tests/conftest.py, Hypothesis's default of 100 examples); the fast tier (`invoke test`,
which loads sglstack.cli.testing.FAST_HYPOTHESIS_PROFILE) draws the same share of it as its profile draws of
100, a third. The tests are derandomized: each tier draws the same examples every run."""

from __future__ import annotations

from hypothesis import settings

# Hypothesis's own max_examples, which the "sglstack" profile keeps: a test's count at that profile.
FULL = 100


def examples(full: int) -> int:
    """`full` scaled to the loaded profile (read as the test module is imported, after the profile is loaded)."""
    return max(1, full * settings.default.max_examples // FULL)
