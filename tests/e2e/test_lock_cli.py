"""`invoke lock`, `stacks --check [--resolve]` and the stale-lock gate of `build`, against real PyPI and uv."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clirun import run_invoke

from sglstack.config.matrix import load_matrix
from sglstack.lock.plan import base_image_glibc
from sglstack.lockfile.current import is_current
from sglstack.lockfile.model import lock_path
from sglstack.lockfile.text import read_lock

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "stacks-lock.yaml"
CLOSURE = {"requests", "certifi", "charset-normalizer", "idna", "urllib3"}

pytestmark = pytest.mark.network


@pytest.fixture
def stacks(tmp_path) -> Path:
    path = tmp_path / "stacks-lock.yaml"
    shutil.copy(FIXTURE, path)
    return path


def lock(stacks: Path, *args: str):
    return run_invoke("lock", "--stack", "cpu-lock", "--stacks-file", str(stacks), *args, cwd=stacks.parent)


def test_the_lock_holds_the_whole_closure_with_hashes_and_pip_accepts_it(stacks, tmp_path):
    proc = lock(stacks)
    assert proc.returncode == 0, proc.stderr
    path = stacks.parent / "locks" / "cpu-lock.txt"
    assert f"-> {path.relative_to(stacks.parent)}" in proc.stdout or str(path) in proc.stdout
    locked = read_lock(path)
    assert {p.name for p in locked.part("http-client")} == CLOSURE
    assert [p.name for p in locked.part("sglang")] == ["sglang"] and locked.get("sglang").version == "0.5.9"
    assert locked.get("requests").version == "2.32.3"
    assert all(p.hashed and p.hashes for p in locked.packages)
    # the platform tag follows the base image's glibc: debian:bookworm-slim's 2.36 when the engine has it
    glibc = base_image_glibc(load_matrix(stacks).get("cpu-lock"))
    tag = f"manylinux_{(glibc or '2.28').replace('.', '_')}_x86_64"
    assert locked.python == "3.11" and locked.python_platforms == (f"x86_64-{tag.removesuffix('_x86_64')}",)
    assert locked.indexes and not locked.unresolved
    text = path.read_text()
    assert "/work/" not in text and str(tmp_path) not in text  # no path of this machine in a lock
    # pip itself accepts the file and checks every downloaded file against its hashes
    dest = tmp_path / "dl"
    pip = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
                          "--only-binary=:all:", "--python-version", "3.11", "--platform", tag,
                          "--platform", "any", "-d", str(dest), "-r", str(path)],
                         capture_output=True, text=True, check=False)
    assert pip.returncode == 0, pip.stderr[-2000:]
    assert len(list(dest.glob("*.whl"))) == len(CLOSURE) + 1


def test_a_stale_lock_fails_stacks_check_and_build_in_one_line(stacks):
    assert lock(stacks).returncode == 0
    ok = run_invoke("stacks", "--check", "--stacks-file", str(stacks), cwd=stacks.parent)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    stacks.write_text(stacks.read_text().replace("requests==2.32.3", "requests==2.32.2"))
    check = run_invoke("stacks", "--check", "--stacks-file", str(stacks), cwd=stacks.parent)
    assert check.returncode == 1
    assert "stale-lock" in check.stdout and "run invoke lock --stack cpu-lock" in check.stdout
    build = run_invoke("build", "--stack", "cpu-lock", "--stacks-file", str(stacks), cwd=stacks.parent,
                       env={"DOCKER_HOST": "unix:///nonexistent.sock"})  # decided before any Docker work
    assert build.returncode == 2
    [line] = build.stderr.strip().splitlines()
    assert line.startswith("error: ") and line.endswith("run invoke lock --stack cpu-lock")


def test_no_lock_is_a_notice_for_check_and_a_warning_for_build(stacks):
    check = run_invoke("stacks", "--check", "--stacks-file", str(stacks), cwd=stacks.parent)
    assert check.returncode == 0 and "no-lock" in check.stdout
    plan = run_invoke("build", "--stack", "cpu-lock", "--stacks-file", str(stacks), "--dry-run", cwd=stacks.parent)
    assert plan.returncode == 0, plan.stderr
    assert "warning: stack 'cpu-lock': no lock" in plan.stdout and "not reproducible" in plan.stdout
    assert "lock:         none" in plan.stdout
    assert lock(stacks).returncode == 0
    locked = run_invoke("build", "--stack", "cpu-lock", "--stacks-file", str(stacks), "--dry-run", cwd=stacks.parent)
    assert "warning" not in locked.stdout and "lock:         6 packages, 6 hash-checked" in locked.stdout
    # the lock is part of the config hash
    assert _config_hash(plan.stdout) != _config_hash(locked.stdout)


def _config_hash(plan: str) -> str:
    return next(line.split()[-1] for line in plan.splitlines() if line.startswith("config hash:"))


def test_upgrade_package_moves_only_that_package_from_an_old_lock(stacks):
    # An old lock: the same stack resolved when idna 3.7 and urllib3 2.2.2 were current.
    original = stacks.read_text()
    stacks.write_text(original.replace('["requests==2.32.3"]', '["requests==2.32.3", "idna==3.7", "urllib3==2.2.2"]'))
    assert lock(stacks).returncode == 0
    stacks.write_text(original)
    kept = lock(stacks)
    assert kept.returncode == 0, kept.stderr
    pins = read_lock(lock_path(stacks, "cpu-lock")).pins
    assert pins["idna"] == "3.7" and pins["urllib3"] == "2.2.2"  # an earlier lock's pins are kept
    before = dict(pins)
    upgraded = lock(stacks, "--upgrade-package", "idna")
    assert upgraded.returncode == 0, upgraded.stderr
    after = read_lock(lock_path(stacks, "cpu-lock")).pins
    assert after["idna"] != "3.7"
    assert {k: v for k, v in after.items() if k != "idna"} == {k: v for k, v in before.items() if k != "idna"}
    # the printed diff names the moved package with both versions
    row = next(line for line in upgraded.stdout.splitlines() if " idna " in line)
    assert "changed" in row and "3.7" in row and after["idna"] in row
    assert "1 changed" in upgraded.stdout


def test_upgrade_package_errors_before_resolving(stacks):
    missing = lock(stacks, "--upgrade-package", "idna")
    assert missing.returncode == 2 and "needs an existing lock" in missing.stderr
    assert lock(stacks).returncode == 0
    text = lock_path(stacks, "cpu-lock").read_text()
    unknown = lock(stacks, "--upgrade-package", "nope")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [f"error: stack 'cpu-lock': --upgrade-package nope: not in "
                                                   f"{lock_path(stacks, 'cpu-lock')}"]
    assert lock_path(stacks, "cpu-lock").read_text() == text


def test_check_resolve_names_both_sides_of_a_transitive_conflict(tmp_path):
    # SGLang only asks for `huggingface_hub`: its METADATA says nothing against 0.20.0. transformers, which
    # SGLang pins, needs >=0.34: only the resolver sees it.
    stacks = tmp_path / "stacks.yaml"
    text = FIXTURE.read_text().replace("  cpu-lock:", "  hub-drift:").replace(
        '["requests==2.32.3"]', '["huggingface-hub==0.20.0"]').replace("install_deps: false", "install_deps: true")
    stacks.write_text(text)
    assert load_matrix(stacks).get("hub-drift").sglang.install_deps
    metadata_only = run_invoke("stacks", "--check", "--stacks-file", str(stacks), cwd=tmp_path)
    assert metadata_only.returncode == 0, metadata_only.stdout
    resolved = run_invoke("stacks", "--check", "--resolve", "--stacks-file", str(stacks), cwd=tmp_path)
    assert resolved.returncode == 1
    out = " ".join(resolved.stdout.split())
    assert "transformers==4.57.1 (needed by sglang==0.5.9) requires huggingface-hub>=0.34.0,<1.0" in out
    assert "the stack requires huggingface-hub==0.20.0" in out


def test_the_repos_locks_are_current():
    matrix = load_matrix(REPO / "stacks.yaml")
    for name, stack in matrix.stacks.items():
        locked = read_lock(lock_path(REPO / "stacks.yaml", name))
        assert is_current(locked, stack), f"locks/{name}.txt is stale: run invoke lock --stack {name}"
        torch = locked.get("torch")
        assert torch is not None and torch.version == stack.torch.version


def test_sigterm_while_resolving_leaves_no_lock_no_uv_and_no_temp_files(tmp_path):
    """cu130 waits several seconds on PyPI and on the unreachable PyTorch index: stop it mid-way."""
    stacks = tmp_path / "stacks.yaml"
    shutil.copy(REPO / "stacks.yaml", stacks)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "--search-root", str(REPO), "lock", "--stack", "cu130",
                             "--stacks-file", str(stacks)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(scratch)})
    deadline = time.monotonic() + 60
    while not list(scratch.glob("sglstack-resolve-*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # until uv runs
    assert list(scratch.glob("sglstack-resolve-*")), "uv never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "interrupted (SIGTERM)" in err
    assert not (tmp_path / "locks").exists() or not list((tmp_path / "locks").iterdir())
    assert not list(scratch.iterdir())  # every uv work dir removed
    for link in Path("/proc").glob("[0-9]*/cwd"):
        try:
            assert not str(link.resolve()).startswith(str(scratch)), f"a uv process survived: {link}"
        except OSError:
            continue
