"""What keeps `invoke test` (the fast tier) cheap without testing less: pytest's rewritten test modules are
cached and what collection made is frozen (tests/conftest.py's `pytest_collection`), and the fast tier draws a
third of each property test's examples while CI draws them all (tests/lib/hypothesis_budget.py)."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import conftest
from hypothesis import settings
from hypothesis_budget import FULL, examples

from sglstack.cli.testing import FAST_HYPOTHESIS_PROFILE, fast_tier_workers, pytest_argv

PROFILE_OPTION = f"--hypothesis-profile={FAST_HYPOTHESIS_PROFILE}"

CONFTEST = f"""
import importlib.util

_spec = importlib.util.spec_from_file_location("cost_under_test", {str(Path(conftest.__file__))!r})
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
pytest_collection = _real.pytest_collection
"""


def test_only_the_fast_tier_loads_the_fast_profile():
    assert PROFILE_OPTION in pytest_argv(all_tiers=False, extra=(), workers=2)
    assert not any(a.startswith("--hypothesis-profile") for a in pytest_argv(all_tiers=True, extra=(), workers=2))
    script = (conftest.REPO_ROOT / "scripts" / "test.sh").read_text()
    assert "--hypothesis-profile" not in script and "HYPOTHESIS" not in script


def test_the_fast_profile_draws_a_third_and_keeps_no_deadline():
    fast, full = settings.get_profile(FAST_HYPOTHESIS_PROFILE), settings.get_profile("sglstack")
    assert full.max_examples == FULL and fast.max_examples == 34
    assert fast.deadline is None and full.deadline is None


def test_a_tests_count_is_scaled_to_the_loaded_profile():
    before = settings.get_current_profile_name()
    try:
        settings.load_profile("sglstack")
        assert [examples(n) for n in (150, 60, 12, 1)] == [150, 60, 12, 1]
        settings.load_profile(FAST_HYPOTHESIS_PROFILE)
        assert [examples(n) for n in (150, 60, 12, 1)] == [51, 20, 4, 1]  # never none
    finally:
        settings.load_profile(before)


def test_collection_keeps_the_rewritten_modules_and_freezes_what_it_made(pytester, monkeypatch):
    """Under PYTHONDONTWRITEBYTECODE pytest rewrote every test module in every process; collected, the module is
    cached, the tests themselves still run with bytecode off, and what collection made is out of the GC's walks."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_rewritten=f"""
        import gc
        import sys

        def test_runs_as_the_user_asked():
            assert sys.dont_write_bytecode
            assert gc.get_freeze_count() > 0
            assert gc.get_threshold()[0] == {conftest.GC_YOUNG_OBJECTS}
    """)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    threshold = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, *threshold[1:])
    try:
        result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    finally:
        gc.freeze()
        gc.set_threshold(*threshold)
    result.assert_outcomes(passed=1)
    assert sys.dont_write_bytecode
    cached = sorted(p.name for p in (pytester.path / "__pycache__").glob("test_rewritten.*-pytest-*.pyc"))
    assert len(cached) == 1, cached


def test_the_fast_tier_runs_more_workers_than_cores_within_a_bound():
    assert [fast_tier_workers(c) for c in (1, 2, 4, 16)] == [3, 6, 8, 20]
    assert fast_tier_workers(0) == 3  # no count read: still a few
    argv = pytest_argv(all_tiers=False, extra=())
    assert int(argv[argv.index("-n") + 1]) > 1
    # a -n the user gives comes after ours, and pytest takes the last
    assert pytest_argv(all_tiers=False, extra=("-n", "1"))[-2:] == ["-n", "1"]
