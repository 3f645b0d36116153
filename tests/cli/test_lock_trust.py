"""A lock edited by hand is refused before any build, in one line naming the lock, the stack and the package.

Each case starts from the committed fixture lock of `cpu-lock` (what `invoke lock` wrote) and makes one
edit a person could make; the build's own entry point (`lock_for_build`) must refuse it. Before this
check, a lock with `urllib3` removed built "verified" and the image failed `import requests`; later, a lock
with an entry added that nothing requires (the header's count made to agree) built, verified and signed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import run_invoke

from sglstack.cli.coverage import coverage_command
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError
from sglstack.coverage import stack as coverage_mod
from sglstack.imagebuild.judge import pip_check_problems
from sglstack.lock.trust import StaleLock, UntrustedLock, lock_for_build
from sglstack.lockfile.model import lock_path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture
def work(tmp_path):
    """A copy of the lock matrix and its lock: (stacks file, lock path, the lock's text)."""
    stacks = tmp_path / "stacks-lock.yaml"
    shutil.copy(FIXTURES / "stacks-lock.yaml", stacks)
    path = lock_path(stacks, "cpu-lock")
    path.parent.mkdir()
    shutil.copy(FIXTURES / "locks" / "cpu-lock.txt", path)
    return stacks, path, path.read_text()


def _drop_entry(text: str, name: str) -> str:
    """The lock without `name`'s entry (its requirement line, hashes and comment lines)."""
    return re.sub(rf"(?ms)^{re.escape(name)}==.*?(?=^\S|\Z)", "", text)


def _recount(text: str) -> str:
    """The header count made to agree with the body, as a careful hand edit would."""
    hashed = len(re.findall(r"(?m)^[a-z0-9][a-z0-9._-]*(==| @ )", text))
    unhashed = len(re.findall(r"(?m)^# unhashed: ", text))
    return re.sub(r"(?m)^# packages: .*$", f"# packages: {hashed + unhashed} ({hashed} hashed, {unhashed} unhashed)",
                  text)


def test_the_committed_locks_are_trusted(work):
    stacks, _, _ = work
    assert lock_for_build(stacks, load_matrix(stacks).get("cpu-lock")) is not None
    matrix = load_matrix(REPO / "stacks.yaml")
    for name in matrix.stacks:
        assert lock_for_build(REPO / "stacks.yaml", matrix.get(name)) is not None


@pytest.mark.parametrize(("edit", "expected"), [
    # a leaf dependency removed (count made to agree): only its parent's `requires` names it
    (lambda t: _recount(_drop_entry(t, "urllib3")), "requests requires urllib3, which is not in the lock"),
    # a parent removed: its children's `via` still name it (and the stack pins it)
    (lambda t: _recount(_drop_entry(t, "requests")), "the stack pins requests==2.32.3, the lock has no requests"),
    # a removal that left the header alone
    (lambda t: _drop_entry(t, "idna"), "the header says 6 packages (6 hashed, 0 unhashed), the body has 5"),
    # a stack pin changed
    (lambda t: t.replace("requests==2.32.3", "requests==2.31.0"),
     "the stack pins requests==2.32.3, the lock has requests==2.31.0"),
    # a header count changed
    (lambda t: t.replace("# packages: 6 (6 hashed", "# packages: 7 (7 hashed"),
     "the header says 7 packages (7 hashed, 0 unhashed), the body has 6"),
    # an entry moved to a layer the header does not name
    (lambda t: t.replace("# ---- layer http-client", "# ---- layer http-clients"),
     "is in layer 'http-clients', which the header's layers"),
])
def test_a_hand_edited_lock_is_refused_naming_file_stack_and_package(work, edit, expected):
    stacks, path, text = work
    path.write_text(edit(text))
    with pytest.raises(UntrustedLock) as caught:
        lock_for_build(stacks, load_matrix(stacks).get("cpu-lock"))
    message = str(caught.value)
    assert expected in message
    assert message.startswith(f"{path}: stack 'cpu-lock': ") and "\n" not in message
    assert "invoke lock --stack cpu-lock" in message


EVIL = "sha256:" + "e" * 64


def _add_entry(text: str, entry: str, layer: str = "http-client") -> str:
    """`entry` (its lines) added as the first entry of `layer`."""
    section = f"# ---- layer {layer}\n"
    return text.replace(section, section + entry.rstrip("\n") + "\n", 1)


def _edge(text: str) -> str:
    """`evil` added to requests' `# requires:` line too, as a forger who read the format would."""
    line = "    # requires: certifi, charset-normalizer, idna, urllib3\n"
    assert line in text
    return text.replace(line, line.replace("urllib3", "urllib3, evil"))


def _unrequired(requirement: str) -> str:
    return (f"{requirement} is required by nothing the stack installs (no layer of the stack names it, and no "
            "'# via' leads from it to one that does)")


CONTENT = ("its lines differ from its written-sha256 (an entry, hash or header line was added, changed or removed "
           "after invoke lock wrote it)")


@pytest.mark.parametrize(("edit", "expected"), [
    # an entry nothing requires, the header's count made to agree (what built, verified and signed before)
    (lambda t: _recount(_add_entry(t, f"evil==1.0 \\\n    --hash={EVIL}")), _unrequired("evil==1.0")),
    # the same as an unhashed entry: it would have made its layer install without the lock
    (lambda t: _recount(_add_entry(t, "# unhashed: evil==1.0 (no hash)")), _unrequired("evil==1.0")),
    # two added entries that name each other: a cycle leads to no requirement of the stack
    (lambda t: _recount(_add_entry(t, f"evil==1.0 \\\n    --hash={EVIL}\n    # via evil-two\n"
                                      f"    # requires: evil-two\nevil-two==1.0 \\\n    --hash={EVIL}\n"
                                      "    # via evil\n    # requires: evil")), _unrequired("evil==1.0")),
    # an added entry claiming a parent that is in the lock: the parent's `requires` line does not name it
    (lambda t: _recount(_add_entry(t, f"evil==1.0 \\\n    --hash={EVIL}\n    # via requests")),
     "evil is required by requests ('# via'), whose '# requires:' does not name evil"),
    # ... and with the parent's line made to agree: every edge holds, the written-sha256 does not
    (lambda t: _edge(_recount(_add_entry(t, f"evil==1.0 \\\n    --hash={EVIL}\n    # via requests"))), CONTENT),
    # an entry's version changed (its hashes kept): nothing but the content hash can tell
    (lambda t: t.replace("idna==3.20 ", "idna==3.19 "), CONTENT),
    # one of an entry's hashes changed
    (lambda t: re.sub(r"(?m)^(    --hash=sha256:)[0-9a-f]{64}", lambda m: m.group(1) + "0" * 64, t, count=1),
     CONTENT),
    # a header line the build reads changed (the layers' order)
    (lambda t: t.replace("# layers: http-client sglang", "# layers: sglang http-client"), CONTENT),
])
def test_a_lock_that_is_not_what_invoke_lock_wrote_is_refused_naming_the_entry(work, edit, expected):
    stacks, path, text = work
    edited = edit(text)
    assert edited != text
    path.write_text(edited)
    with pytest.raises(UntrustedLock) as caught:
        lock_for_build(stacks, load_matrix(stacks).get("cpu-lock"))
    assert str(caught.value) == (f"{path}: stack 'cpu-lock': {expected}: the lock was edited by hand; "
                                 "run invoke lock --stack cpu-lock")


def test_a_lock_without_its_written_sha256_line_asks_for_invoke_lock(work):
    """A lock written before the line existed (or with it removed) is refused with the one thing to do."""
    stacks, path, text = work
    path.write_text(re.sub(r"(?m)^# written-sha256: .*\n", "", text))
    with pytest.raises(UntrustedLock) as caught:
        lock_for_build(stacks, load_matrix(stacks).get("cpu-lock"))
    assert str(caught.value) == (f"{path}: stack 'cpu-lock': the lock has no 'written-sha256:' line (an older "
                                 "sglstack wrote it, or it was edited): run invoke lock --stack cpu-lock")


@pytest.mark.parametrize(("old", "new"), [
    ('requirements: ["requests==2.32.3"]', 'requirements: ["requests==2.32.3"]\n        index_url: https://example.org/simple'),
    ("    sglang:\n      version: 0.5.9\n      install_deps: false", "    sglang:\n      version: 0.5.9"),
    # no `glibc:` declared: the base image decides the platform tag the lock resolved for
    ("base_image: debian:bookworm-slim", "base_image: ubuntu:24.04"),
    ("base_image: debian:bookworm-slim", "base_image: debian:bookworm-slim\n    glibc: '2.39'"),
])
def test_a_lock_whose_resolution_inputs_changed_is_stale(work, old, new):
    stacks, path, _ = work
    text = stacks.read_text()
    assert old in text
    stacks.write_text(text.replace(old, new))
    with pytest.raises(StaleLock) as caught:
        lock_for_build(stacks, load_matrix(stacks).get("cpu-lock"))
    assert str(caught.value) == (f"stack 'cpu-lock': {path} is older than the stack entry it locks: "
                                 "run invoke lock --stack cpu-lock")


@pytest.mark.parametrize("task", [("build", "--stack", "cpu-lock", "--dry-run"), ("render", "--stack", "cpu-lock"),
                                  ("bake",)])
def test_build_render_and_bake_refuse_an_added_entry_before_any_work(work, task):
    stacks, path, text = work
    path.write_text(_recount(_add_entry(text, f"evil==1.0 \\\n    --hash={EVIL}")))
    proc = run_invoke(*task, "--stacks-file", str(stacks), cwd=stacks.parent, timeout=120,
                      env={"SGLSTACK_BUILD_DIR": str(stacks.parent / "build")})
    assert (proc.returncode, proc.stderr.strip()) == (
        2, f"error: {path}: stack 'cpu-lock': {_unrequired('evil==1.0')}: the lock was edited by hand; "
           "run invoke lock --stack cpu-lock")
    assert not (stacks.parent / "build").exists()


def test_stacks_check_names_the_added_entry(work):
    stacks, path, text = work
    path.write_text(_recount(_add_entry(text, f"evil==1.0 \\\n    --hash={EVIL}")))
    check = run_invoke("stacks", "--check", "--stacks-file", str(stacks), cwd=stacks.parent, timeout=120,
                       env={"COLUMNS": "400"})
    assert check.returncode == 1
    assert (f"bad-lock {stacks.name}: stack 'cpu-lock': {path}: {_unrequired('evil==1.0')}: the lock was edited by "
            "hand; run invoke lock --stack cpu-lock") in [x.strip() for x in check.stdout.splitlines()]


def test_coverage_takes_its_versions_only_from_a_lock_the_build_would_take(work, monkeypatch):
    """`invoke coverage` checks the wheels at the lock's versions: an edited lock is refused before any fetch."""
    stacks, path, text = work
    stacks.write_text(stacks.read_text().replace("    base_image: debian:bookworm-slim\n",
                                                 "    base_image: debian:bookworm-slim\n    cuda_arch_list: ['9.0']\n"))
    path.write_text(text.replace("idna==3.20 ", "idna==3.19 "))

    def no_work(*_a, **_k):
        raise AssertionError("no wheel may be fetched for versions from an edited lock")

    monkeypatch.setattr(coverage_mod, "check_wheels", no_work)
    with pytest.raises(UntrustedLock) as caught:
        coverage_command(str(stacks), "cpu-lock")
    assert caught.value.exit_code == 2
    assert str(caught.value) == f"{path}: stack 'cpu-lock': {CONTENT}: the lock was edited by hand; " \
                                "run invoke lock --stack cpu-lock"


def test_another_stacks_lock_is_refused_as_such(work):
    stacks, _, text = work
    stacks.write_text(stacks.read_text().replace("  cpu-lock:", "  cpu-other:\n    inherits: cpu-lock\n  cpu-lock:"))
    other = lock_path(stacks, "cpu-other")
    other.write_text(text)  # copied over from cpu-lock
    with pytest.raises(UntrustedLock, match=f"^{re.escape(str(other))}: stack 'cpu-other': this is the lock of "
                                            "stack 'cpu-lock', not of 'cpu-other'"):
        lock_for_build(stacks, load_matrix(stacks).get("cpu-other"))
    # a copy whose stack line was edited too is stale when the stacks' inputs differ (its hash is the other's)
    other.write_text(text.replace("# stack: cpu-lock", "# stack: cpu-other"))
    stacks.write_text(stacks.read_text().replace("inherits: cpu-lock", "inherits: cpu-lock\n    python: '3.12'"))
    with pytest.raises(StaleLock):
        lock_for_build(stacks, load_matrix(stacks).get("cpu-other"))


@pytest.mark.parametrize(("make", "expected"), [
    (lambda p: p.write_bytes(b"# lock-format: 1\n\xff\xfe not text\n"), "the lock is not UTF-8 text (byte"),
    (lambda p: (p.unlink(), p.mkdir()), "the lock path is a folder, not a lock file"),
])
def test_an_unreadable_lock_is_one_line(work, make, expected):
    stacks, path, _ = work
    make(path)
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: {re.escape(expected)}"):
        lock_for_build(stacks, load_matrix(stacks).get("cpu-lock"))


def test_build_refuses_a_hand_edited_lock_before_any_work(work):
    stacks, path, text = work
    path.write_text(_recount(_drop_entry(text, "urllib3")))
    proc = run_invoke("build", "--stack", "cpu-lock", "--stacks-file", str(stacks), "--dry-run", cwd=stacks.parent,
                      timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.strip() == (f"error: {path}: stack 'cpu-lock': requests requires urllib3, which is not in the "
                                   "lock: the lock was edited by hand; run invoke lock --stack cpu-lock")
    assert not (stacks.parent / "build").exists()


def test_lock_task_on_a_folder_is_one_line(work):
    stacks, path, _ = work
    path.unlink()
    path.mkdir()
    proc = run_invoke("lock", "--stack", "cpu-lock", "--stacks-file", str(stacks), cwd=stacks.parent, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: {path}: the lock path is a folder, not a lock file"


# ---- pip check in the image's verify step -------------------------------------------------------------

@pytest.fixture(scope="module")
def broken_env(tmp_path_factory):
    """A real venv (with pip) holding a distribution whose requirement is not installed, and imageinfo's
    report of it: the script the image's last RUN step runs, run by that venv's Python."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=120)
    python = root / "venv" / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    info = Path(site) / "needs_missing-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: needs-missing\nVersion: 1.0\n"
                                   "Requires-Dist: not-installed-dep>=2\n")
    (info / "RECORD").write_text("")
    tools = REPO / "sglstack" / "inimage" / "incontainer"
    # The venv alone: a PYTHONPATH inherited from the test run (a checkout with its egg-info) is no image's.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(python), str(tools / "imageinfo.py")], check=True, capture_output=True, text=True,
                          timeout=300, env=env)
    return json.loads(proc.stdout)


@pytest.mark.timeout(600)  # its fixture makes a real venv with pip and runs pip check: over 120 s at load 6
def test_imageinfo_reports_pip_check_and_verify_refuses_it(broken_env, work):
    stacks, _, _ = work
    check = broken_env["pip_check"]
    assert check["ran"] is True
    assert check["problems"] == ["needs-missing 1.0 requires not-installed-dep, which is not installed."]
    stack = load_matrix(stacks).get("cpu-lock")
    assert pip_check_problems(stack, broken_env) == [
        "pip check: needs-missing 1.0 requires not-installed-dep, which is not installed"]


def test_pip_check_lines_a_stack_declares_are_not_findings(repo_root):
    cu130 = load_matrix(repo_root / "stacks.yaml").get("cu130")
    override = next(o for o in cu130.overrides if o.package == "flashinfer-python")
    pin = override.pin.partition("==")[2]
    info = {"pip_check": {"ran": True, "problems": [
        f"sglang 0.5.9 has requirement {override.replaces}, but you have flashinfer-python {pin}.",
        "sglang 0.5.9 has requirement xgrammar==0.1.27, but you have xgrammar 0.1.25.",
    ]}}
    assert pip_check_problems(cu130, info) == [
        "pip check: sglang 0.5.9 has requirement xgrammar==0.1.27, but you have xgrammar 0.1.25"]
    no_deps = load_matrix(FIXTURES / "stacks-lock.yaml").get("cpu-lock")  # sglang.install_deps: false
    missing = {"pip_check": {"ran": True, "problems": ["sglang 0.5.9 requires torch, which is not installed."]}}
    assert pip_check_problems(no_deps, missing) == []
    assert pip_check_problems(no_deps, {"pip_check": {"ran": False, "error": "No module named pip"}}) == [
        "pip check could not run in the image: No module named pip"]
