"""The tiers' marks come from what a test uses: a Docker (or registry) fixture marks it `docker`, a PyPI
fixture `network`, living in tests/e2e/ `docker`; so the fast tier (-m "not docker and not network and not
slow") never starts an engine, whatever the test's author remembered to write."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import conftest
import pytest

from sglstack.cli.testing import ALL_TIERS_XDIST, FAST_TIER, pytest_argv

FAKE_CONFTEST = f"""
import importlib.util

import pytest

_spec = importlib.util.spec_from_file_location("tiers_under_test", {str(Path(conftest.__file__))!r})
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
pytest_collection_modifyitems = _real.pytest_collection_modifyitems


@pytest.fixture
def docker_client():
    raise AssertionError("a deselected test's fixture ran")


@pytest.fixture
def plain_registry(docker_client):
    return None


@pytest.fixture
def ca_bundle():
    return None
"""


def test_a_docker_fixture_marks_the_test_directly_through_another_fixture_and_by_usefixtures(pytester):
    pytester.makeini("[pytest]\nmarkers =\n  docker: d\n  network: n\n  slow: s\n")
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(test_mixed="""
        import pytest

        def test_direct(docker_client): pass

        def test_through_a_registry(plain_registry): pass

        @pytest.mark.usefixtures("docker_client")
        def test_by_usefixtures(): pass

        def test_pypi(ca_bundle): pass

        def test_in_process(tmp_path): pass
    """)
    result = pytester.runpytest_inprocess("-q", "-m", FAST_TIER, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, deselected=4)
    result = pytester.runpytest_inprocess("-q", "-m", "docker", "--collect-only", "-p", "no:cacheprovider")
    selected = {line.split("::")[-1] for line in result.outlines if "::" in line}
    assert selected == {"test_direct", "test_through_a_registry", "test_by_usefixtures"}


@pytest.mark.parametrize(("where", "fixtures", "marks"), [
    ("unit", set(), []),
    ("cli", {"tmp_path"}, []),
    ("e2e", set(), ["docker"]),
    ("unit", {"docker_cli"}, ["docker"]),
    ("unit", {"tiny_image"}, ["docker"]),
    ("cli", {"cuobjdump_tool"}, ["network"]),
    ("e2e", {"ca_bundle", "sglang_double_image"}, ["docker", "network"]),
])
def test_the_marks_follow_the_folder_and_the_fixtures(where, fixtures, marks):
    assert conftest.tier_marks(conftest.TESTS / where / "test_x.py", fixtures) == marks


def test_no_collected_test_that_uses_the_engine_is_left_unmarked(request):
    """Over whatever this session collected (the whole suite under `invoke test --all`)."""
    for item in request.session.items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & conftest.DOCKER_FIXTURES or Path(str(item.path)).is_relative_to(conftest.E2E):
            assert item.get_closest_marker("docker") is not None, item.nodeid


def test_the_fast_tier_is_unit_and_cli_in_parallel_and_all_is_every_tier():
    command = pytest_argv(all_tiers=False, extra=(), workers=2)
    assert command[:3] == [sys.executable, "-m", "pytest"]
    fast = command[3:]
    assert fast[fast.index("-m") + 1] == FAST_TIER
    assert fast[fast.index("-n") + 1] == "2"
    assert "tests/unit" in fast and "tests/cli" in fast and "tests/e2e" not in fast
    every = pytest_argv(all_tiers=True, extra=("-k", "render"), workers=2)[3:]
    assert "-m" not in every and every[-2:] == ["-k", "render"]
    assert " ".join(ALL_TIERS_XDIST) in " ".join(every)


def test_ci_runs_every_tier_as_invoke_test_all_does():
    script = (conftest.REPO_ROOT / "scripts" / "test.sh").read_text()
    [line] = [line for line in script.splitlines() if line.startswith("python3 -m pytest")]
    assert " ".join(ALL_TIERS_XDIST) in line and " -m " not in line.removeprefix("python3 -m pytest")


def test_engine_tests_share_one_xdist_group_and_fast_ones_are_grouped_by_file(pytester):
    """Under --dist loadgroup the engine's tests run one after another on one worker, never two at once,
    and a fast file's tests stay together, in order."""
    pytester.makeini("[pytest]\nmarkers =\n  docker: d\n  network: n\n  slow: s\n  xdist_group: g\n")
    pytester.makeconftest(FAKE_CONFTEST + """
def pytest_collection_finish(session):
    for item in session.items:
        groups = [m.args[0] for m in item.iter_markers("xdist_group")]
        print(f"GROUPS {item.name} {groups}")
""")
    pytester.makepyfile(test_mixed="""
        import pytest

        def test_engine(docker_client): pass

        def test_pypi(ca_bundle): pass

        @pytest.mark.slow
        def test_slow(): pass

        def test_in_process(tmp_path): pass
    """)
    result = pytester.runpytest_inprocess("-q", "-s", "--collect-only", "-p", "no:cacheprovider")
    assert sorted(line for line in result.outlines if line.startswith("GROUPS ")) == [
        "GROUPS test_engine ['engine']", "GROUPS test_in_process ['test_mixed.py']", "GROUPS test_pypi ['engine']",
        "GROUPS test_slow ['engine']"]



def test_only_an_engine_test_is_followed_by_a_look_at_the_engine(pytester, monkeypatch):
    """What a test left under this session's registries is looked for after each engine test (docker, network,
    slow), and only then, whatever ports the session's servers claimed: a test of the fast tier never used it."""
    import engine_refs

    monkeypatch.setattr(engine_refs, "CLAIMED_HOSTS", {"127.0.0.1:49999"})  # as after any server of the session
    pytester.makeini("[pytest]\nmarkers =\n  docker: d\n  network: n\n  slow: s\n  timeout: t\n")
    pytester.makeconftest(FAKE_CONFTEST + """
_asked = []
_real._engine_references = lambda: _asked.append(1) or set()
_no_registry_references_left = _real._no_registry_references_left


def pytest_sessionfinish(session):
    print(f"ASKED {len(_asked)}")
""")
    pytester.makepyfile(test_mixed="""
        import pytest

        @pytest.mark.docker
        def test_engine(): pass

        @pytest.mark.network
        def test_pypi(): pass

        def test_in_process(tmp_path): pass
    """)
    # -p no:timeout: the engine tests' 600 s limit (the real marks) would start pytest-timeout's timer in this process
    # and stop it after them, this test's own limit with it (SIGALRM left at SIG_DFL; tests/lib/signal_guard.py)
    result = pytester.runpytest_inprocess("-q", "-s", "-p", "no:cacheprovider", "-p", "no:timeout")
    assert result.ret == 0 and result.outlines[0].endswith("ASKED 2"), result.outlines


def test_the_engine_groups_come_first_bisect_before_the_rest(pytester):
    """CI hands the groups out in the tests' order (--no-loadscope-reorder): the bisect chain and the other
    engine chain start at once on the two workers, and the fast files queue behind them."""
    assert "--no-loadscope-reorder" in ALL_TIERS_XDIST
    pytester.makeini("[pytest]\nmarkers =\n  docker: d\n  network: n\n  slow: s\n  xdist_group: g\n")
    pytester.makeconftest(FAKE_CONFTEST.replace("pytest_collection_modifyitems = _real.pytest_collection_modifyitems",
                                                "pytest_collection_modifyitems = _real.pytest_collection_modifyitems\n"
                                                "_real.engine_group = lambda path: "
                                                "'engine-bisect' if 'bisect' in path.name else 'engine'"))
    pytester.makepyfile(test_a_fast="def test_one(): pass\n\ndef test_two(): pass\n",
                        test_b_engine="import pytest\n\n@pytest.mark.docker\ndef test_built(): pass\n",
                        test_c_bisect="import pytest\n\n@pytest.mark.docker\ndef test_bisected(): pass\n")
    result = pytester.runpytest_inprocess("-q", "--collect-only", "-p", "no:cacheprovider")
    assert [line for line in result.outlines if "::" in line] == [
        "test_c_bisect.py::test_bisected", "test_b_engine.py::test_built", "test_a_fast.py::test_one",
        "test_a_fast.py::test_two"]

def test_outside_tests_cli_invoke_runs_as_a_real_child():
    import clirun

    assert clirun.FORK_BY_DEFAULT is False


class _Reporter:
    def __init__(self):
        self.lines = []

    def write_line(self, line, **_markup):
        self.lines.append(line)


def _session(reporter, **config):
    plugins = SimpleNamespace(get_plugin=lambda name: reporter if name == "terminalreporter" else None)
    return SimpleNamespace(config=SimpleNamespace(pluginmanager=plugins, **config), exitstatus=0)


def test_a_reference_a_worker_left_fails_the_run_on_the_controller(monkeypatch):
    """Under xdist the engine's tests run in a worker: what it left under its registries still fails the run."""
    import engine_refs

    left = "127.0.0.1:49999/sglstack-test/x:1"
    monkeypatch.setattr(engine_refs, "CLAIMED_HOSTS", {"127.0.0.1:49999"})
    monkeypatch.setattr(conftest, "_SESSION_START_REFS", set())
    monkeypatch.setattr(conftest, "_engine_references", lambda: {left})
    monkeypatch.setattr(conftest, "_LEFT_ON_WORKERS", set())
    worker = _session(None, workeroutput={})
    conftest.pytest_sessionfinish(worker, 0)
    assert worker.config.workeroutput == {conftest.LEFT_ON_WORKER: [left]} and worker.exitstatus == 0

    monkeypatch.setattr(engine_refs, "CLAIMED_HOSTS", set())  # the controller claimed no port of its own
    conftest.pytest_testnodedown(SimpleNamespace(workeroutput=worker.config.workeroutput), None)
    reporter = _Reporter()
    controller = _session(reporter)
    conftest.pytest_sessionfinish(controller, 0)
    assert controller.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert reporter.lines == [f"error: tests left 1 reference(s) under this session's registries: {left}"]


def test_the_test_task_outside_a_checkout_is_one_line(tmp_path):
    """The installed `sglstack test` has no tests beside it: refused, not "no tests collected"."""
    from sglstack.cli.testing import run_tests
    from sglstack.core.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        run_tests(all_tiers=False, extra=(), repo=tmp_path)
    assert str(refused.value) == (f"test: the tests come with a checkout of sglstack, not the installed package "
                                  f"({tmp_path} has none)")
    assert refused.value.exit_code == 2


def test_only_the_bisect_tests_of_the_engine_run_beside_the_rest_of_it():
    """Two engine groups: the bisect e2e files (paced, touching only what they make) and everything else."""
    every = sorted(p.name for p in conftest.E2E.glob("test_*.py"))
    bisect = [name for name in every if conftest.engine_group(conftest.E2E / name) == conftest.ENGINE_BISECT_GROUP]
    assert bisect == sorted(conftest.BISECT_FILES)
    assert conftest.engine_group(conftest.TESTS / "cli" / "test_bisect_e2e.py") == conftest.ENGINE_GROUP


def test_no_two_test_files_share_a_name():
    """The test folders are not packages: pytest imports each file by its base name, so a second file of that
    name elsewhere is an import-mismatch error of the whole collection (a CI run was red on it)."""
    from collections import Counter
    from pathlib import Path

    names = Counter(p.name for p in (Path(__file__).resolve().parents[1]).rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []
