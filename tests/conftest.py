"""Shared fixtures: a real Docker engine, a BuildKit-capable CLI, the CA bundle for PyPI."""

from __future__ import annotations

import gc
import locale
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from sglstack.adapters.docker import docker_client as make_client
from sglstack.cli.testing import FAST_HYPOTHESIS_PROFILE

REPO_ROOT = Path(__file__).resolve().parent.parent
# The helpers the test files share (fixtures, doubles, `clirun`) live in tests/lib/ and are imported by name.
sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
# pytester: tests/unit/test_tiers.py runs a small pytest of its own to check the tier marks. signal_guard: a test
# that leaves a signal handler, a blocked signal or the SIGALRM timer changed fails (tests/lib/signal_guard.py).
pytest_plugins = ("pytester", "signal_guard")


# ---- tiers and marks -------------------------------------------------------------------------------

# tests/unit (in process), tests/cli (through `invoke` child processes), tests/e2e (Docker, registries,
# builds, PyPI). The marks follow what a test uses, never a hand-written decorator alone: a test that asks
# for one of these fixtures (directly, through another fixture, or by usefixtures) needs the engine or the
# package index, and `invoke test` (the fast tier: -m "not docker and not network and not slow") skips it.
TESTS = Path(__file__).resolve().parent
E2E = TESTS / "e2e"
DOCKER_FIXTURES = frozenset({
    "docker_client", "docker_cli", "sglang_double_image",  # the engine (below)
    "plain_registry", "counting_proxy", "htpasswd_registry", "token_registry", "tiny_image",  # registry_fixtures
})
# PyPI: pip inside builds; the cuobjdump wheel; NVIDIA's compiler wheels
NETWORK_FIXTURES = frozenset({"ca_bundle", "cuobjdump_tool", "cuda_wheel_toolkits"})


def tier_marks(path: Path, fixtures: set[str]) -> list[str]:
    """The marks a test gets from where it lives and what it uses (in a fixed order)."""
    marks = []
    if fixtures & DOCKER_FIXTURES or path.is_relative_to(E2E):
        marks.append("docker")
    if fixtures & NETWORK_FIXTURES:
        marks.append("network")
    return marks


# ---- per-test time limits (pytest-timeout; the default of 120 s is in pyproject.toml) -------------

# Hypothesis fails an example that runs over its `deadline` (200 ms unless a test says otherwise): a limit
# on the machine's speed, which a loaded CI host overruns. No test's outcome may depend on that; a hang is
# still ended by pytest-timeout. Tests that set other settings keep this (settings inherit the profile).
# max_examples is Hypothesis's default, named: a profile's unnamed fields follow whichever profile is loaded.
settings.register_profile("sglstack", deadline=None, max_examples=100)
settings.load_profile("sglstack")
# `invoke test` (the fast tier) draws a third of each property test's examples; CI draws them all.
settings.register_profile(FAST_HYPOTHESIS_PROFILE, parent=settings.get_profile("sglstack"), max_examples=34)

# A test that builds an image or serves one on the shared engine: minutes on a loaded 2-core CI machine
# (the slowest measured 127 s there), a cold BuildKit cache included, so five times that still ends a hang.
LONG_TIMEOUT_S = 600
_ENGINE_MARKS = ("docker", "network", "slow")
# Every test of the engine, the registries or PyPI is in one xdist group: under `--dist loadgroup` (CI,
# `invoke test --all`) they run one after another on one worker, as they always ran (they share the engine,
# its build cache and image names), while the other worker runs the fast tier beside them, a file's tests
# together and in order (as `--dist loadfile` keeps them: module fixtures are built once).
ENGINE_GROUP = "engine"
# Except the bisect tests (about 8 of the engine group's 18 minutes): paced far below what a loaded host
# serves (their verdicts are the same at load 12), and touching only what they make (salted tags, their own
# caches, containers of their own images, no registry), so they run as a second group beside the rest.
ENGINE_BISECT_GROUP = "engine-bisect"
BISECT_FILES = frozenset({"test_bisect_e2e.py", "test_bisect_releases.py", "test_bisect_smoke_kinds.py"})


def uses_the_engine(item) -> bool:
    return any(item.get_closest_marker(m) for m in _ENGINE_MARKS)


def engine_group(path: Path) -> str:
    return ENGINE_BISECT_GROUP if path.parent == E2E and path.name in BISECT_FILES else ENGINE_GROUP


# Under --dist loadgroup --no-loadscope-reorder (CI) xdist hands the groups out in the order of the tests: the
# two engine chains first, one to each worker (the bisect one is the longer wait, though it has few tests:
# xdist's own order, most tests first, queued it behind the whole fast tier), then the fast files to whichever
# worker is free.
START_ORDER = {ENGINE_BISECT_GROUP: 0, ENGINE_GROUP: 1}


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the marks added here must count
def pytest_collection_modifyitems(config, items) -> None:
    order = {}
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for mark in tier_marks(Path(str(item.path)), fixtures):
            if item.get_closest_marker(mark) is None:
                item.add_marker(mark)
        engine = uses_the_engine(item)
        group = engine_group(Path(str(item.path))) if engine else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
        order[item.nodeid] = START_ORDER.get(group, len(START_ORDER))
        if item.get_closest_marker("timeout") is not None:
            continue  # the test chose its own limit
        if engine:
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))
    items.sort(key=lambda item: order[item.nodeid])  # stable: each group's tests keep their order


# ---- collection: pytest's rewritten test modules kept -------------------------------------------------

GC_YOUNG_OBJECTS = 20_000


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """Collect with bytecode written, whatever PYTHONDONTWRITEBYTECODE says: pytest caches each test module with
    its asserts rewritten (`__pycache__/*-pytest-*.pyc`, ignored by git and by the build contexts) only where
    bytecode may be written, and without that cache every process (each xdist worker) rewrote all 340 test
    modules again, 9 s of CPU each. Only while collecting: what the tests run writes as the user asked.
    Then the collected objects are frozen (below)."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        collected = yield
    finally:
        sys.dont_write_bytecode = before
    # What collection made (every module, test function and item) lives to the session's end: frozen, it is
    # out of the garbage collector's walks (a worker spent 10-13 s of CPU in them) and of pytest's own five
    # collections at its end. What the tests make is collected as before, in fewer, larger young collections
    # (700 objects by default): a worker's GC time 11.6 -> 2.9 s of CPU.
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_OBJECTS, *gc.get_threshold()[1:])
    return collected


CLI = TESTS / "cli"


@pytest.fixture(autouse=True)
def _invoke_in_a_fork(request, monkeypatch):
    """tests/cli: `invoke` runs in a fork of the test process (tests/lib/clirun.py says why that is the same);
    elsewhere as a real child. (Here, not in a tests/cli/conftest.py: a second module named `conftest`
    would shadow this one for the tests that import it.)"""
    if Path(str(request.node.path)).is_relative_to(CLI):
        import clirun

        monkeypatch.setattr(clirun, "FORK_BY_DEFAULT", True)
        clirun._warm()  # here, before the test's own fixtures patch anything: its imports are the forks'


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def cluster(tmp_path: Path) -> dict[str, str]:
    """The environment of a deploy to the kubectl stand-in (tests/doubles/kubectl): its state under tmp_path,
    its context kind-sglstack, the build folder under tmp_path."""
    return {"PATH": f"{REPO_ROOT / 'tests' / 'doubles' / 'kubectl'}{os.pathsep}{os.environ['PATH']}",
            "KUBECTL_DOUBLE_STATE": str(tmp_path / "kube"), "KUBECTL_DOUBLE_CONTEXT": "kind-sglstack",
            "SGLSTACK_BUILD_DIR": str(tmp_path / "build")}


@pytest.fixture(scope="module")
def stacks_matrix():
    """The project's stacks.yaml, loaded once a module (the tests read it, never change it)."""
    from sglstack.config.matrix import load_matrix  # at use: the other tests need no matrix

    return load_matrix(REPO_ROOT / "stacks.yaml")


@pytest.fixture(scope="session")
def docker_client():
    return make_client()


@pytest.fixture(scope="session")
def docker_cli() -> str:
    """The BuildKit-capable CLI (Debian's 20.10 one here; the CLI first on PATH may lack buildx)."""
    cli = os.environ.get("SGLSTACK_DOCKER_CLI") or (
        "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker")
    )
    assert cli, "no docker CLI found: run .ci/provision.sh"
    return cli


@pytest.fixture(scope="session")
def ca_bundle() -> Path:
    """The CA bundle that lets containers reach PyPI through the intercepting proxy."""
    path = Path(
        os.environ.get("PIP_CERT") or os.environ.get("SGLSTACK_CA_BUNDLE") or "/etc/ssl/certs/ca-certificates.crt"
    )
    assert path.is_file(), f"CA bundle {path} missing"
    return path


SGLANG_DOUBLE_IMAGE = "sglstack-test/sglang-double:latest-test"


@pytest.fixture(scope="session")
def sglang_double_image(docker_cli: str, repo_root: Path) -> str:
    """The CPU SGLang test double (tests/doubles/sglang-double), built once per session with BuildKit.

    It runs the production command `python3 -m sglang.launch_server ...`; SGLANG_DOUBLE_* env vars script
    its speed, acceptance and failures (see its http_server.py).
    """
    context = repo_root / "tests" / "doubles" / "sglang-double"
    proc = subprocess.run(
        [docker_cli, "build", "-q", "-t", SGLANG_DOUBLE_IMAGE, str(context)],
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"building the SGLang double failed:\n{proc.stderr[-3000:]}"
    return SGLANG_DOUBLE_IMAGE


# ---- references left on the shared engine (see engine_refs.py) ------------------------------------

_SESSION_START_REFS: set[str] | None = None


def _engine_references() -> set[str] | None:
    from engine_refs import references

    try:
        return references(make_client())
    except Exception:  # no engine here: the Docker-free tests still run, and there is nothing to check
        return None


def pytest_sessionstart(session) -> None:
    global _SESSION_START_REFS
    _SESSION_START_REFS = _engine_references()


@pytest.fixture(autouse=True)
def _no_registry_references_left(request):
    """After each engine test, untag what it left under this session's registries (a pulled candidate, a tag).
    Only the engine's tests (docker, network, slow) can leave one: asking the engine after every other test
    cost ~50 ms of CPU each (and as much of dockerd's) once any test had claimed a port. A test that used the
    engine unmarked still fails the run at the session's end (pytest_sessionfinish)."""
    yield
    from engine_refs import CLAIMED_HOSTS, claimed, remove_references

    if not CLAIMED_HOSTS or not uses_the_engine(request.node):
        return
    refs = _engine_references()
    if refs:
        remove_references(make_client(), claimed(refs))


# Under xdist (CI) the engine's tests run in a worker, which has no terminal and whose exit status the
# controller does not take: a worker hands what it left to the controller, which says it and fails the run.
LEFT_ON_WORKER = "sglstack_left_references"
_LEFT_ON_WORKERS: set[str] = set()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    _LEFT_ON_WORKERS.update(getattr(node, "workeroutput", {}).get(LEFT_ON_WORKER, ()))


def pytest_sessionfinish(session, exitstatus) -> None:
    from engine_refs import claimed, test_references

    ours: list[str] = []
    others: list[str] = []
    if _SESSION_START_REFS is not None:
        now = _engine_references() or set()
        new = now - _SESSION_START_REFS
        ours, others = claimed(new), [r for r in test_references(new) if r not in claimed(new)]
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker
        workeroutput[LEFT_ON_WORKER] = ours
        return
    ours = sorted({*ours, *_LEFT_ON_WORKERS})
    others = [r for r in others if r not in ours]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if others and reporter is not None:
        reporter.write_line(f"warning: tests left {len(others)} image reference(s) on the engine (this session's, "
                            f"or a concurrent one's): {', '.join(others)}", yellow=True)
    if ours:
        if reporter is not None:
            reporter.write_line(f"error: tests left {len(ours)} reference(s) under this session's registries: "
                                f"{', '.join(ours)}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def ascii_locale():
    """The C locale's ASCII as this process's locale encoding, for one test: a file read without naming its
    encoding fails on a non-ASCII byte (how "read as UTF-8 whatever the locale" is told apart)."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
