"""The lock file model: its text format, staleness against the stack entry, installed set vs lock (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglstack.errors import ConfigError
from sglstack.lockfile import (
    Lock,
    LockedPackage,
    StaleLock,
    UnresolvedLayer,
    compare_installed,
    is_current,
    lock_content_sha256,
    lock_for_build,
    lock_path,
    parse_lock,
    render_lock,
    stack_input_hash,
    write_lock,
)
from sglstack.matrix import load_matrix

REPO = Path(__file__).resolve().parent.parent
LOCK_MATRIX = REPO / "tests" / "fixtures" / "stacks-lock.yaml"
H1, H2, H3 = ("sha256:" + c * 64 for c in "abc")


@pytest.fixture(scope="module")
def stack():
    return load_matrix(LOCK_MATRIX).get("cpu-lock")


def make_lock(stack, **changes) -> Lock:
    fields = dict(
        stack=stack.name, stack_sha256=stack_input_hash(stack), resolved_at="2026-12-02T18:00:00Z",
        resolver="uv 0.13.9 (uv pip compile --generate-hashes)", python="3.11", platforms=("linux/amd64",),
        layers=("torch", "http-client", "sglang"), indexes=("https://pypi.org/simple",),
        packages=(
            LockedPackage("torch", "2.9.1+cu130", "torch", unhashed="index https://example.invalid/whl unreachable"),
            LockedPackage("idna", "3.7", "http-client", (H1,), required_by=("requests",)),
            LockedPackage("requests", "2.32.3", "http-client", (H2, H3)),
            LockedPackage("sglang", "0.5.9", "sglang", (H3,), note="pristine wheel; patched in the image"),
        ),
        unresolved=(UnresolvedLayer("torch", True, "index https://example.invalid/whl unreachable"),),
        notes=("a note",), python_platforms=("x86_64-manylinux_2_28",))
    fields.update(changes)
    return Lock(**fields)


def test_render_and_parse_round_trip(stack):
    lock = make_lock(stack)
    text = render_lock(lock, stacks_file="stacks-lock.yaml")
    assert parse_lock(text) == lock
    assert "# unhashed: torch==2.9.1+cu130 (index https://example.invalid/whl unreachable)" in text
    assert f"# stack-sha256: {stack_input_hash(stack)}" in text
    assert "# resolved-at: 2026-12-02T18:00:00Z" in text


def test_the_file_is_a_pip_requirements_file_with_hashes(stack):
    """Every non-comment line is a pin with a hash: unhashed pins are comments, so --require-hashes works."""
    text = render_lock(make_lock(stack))
    logical = " ".join(line for line in text.splitlines() if not line.strip().startswith("#")).replace("\\", " ")
    entries = [e for e in logical.split() if not e.startswith("--hash=")]
    assert entries == ["idna==3.7", "requests==2.32.3", "sglang==0.5.9"]
    assert logical.count("--hash=sha256:") == 4


def test_layer_parts_hold_only_hashed_entries_of_their_layer(stack):
    lock = make_lock(stack)
    assert lock.installs_layer("http-client") and lock.installs_layer("sglang")
    assert not lock.installs_layer("torch")  # unresolved: installed as without a lock
    part = lock.part_text("http-client")
    assert "idna==3.7 \\\n    --hash=" + H1 in part and "requests==2.32.3" in part and "sglang" not in part


@pytest.mark.parametrize(("line", "message"), [
    ("idna==3.7 \\\n    --hash=sha256:123", "not a sha256 hash"),
    ("idna==3.7", "has no --hash"),
    ("idna", "is not 'name==version'"),
])
def test_malformed_entries_are_one_line_errors_naming_file_and_line(stack, line, message):
    text = render_lock(make_lock(stack, packages=(), unresolved=())) + "\n# ---- layer http-client\n" + line + "\n"
    with pytest.raises(ConfigError) as err:
        parse_lock(text, file="locks/cpu-lock.txt")
    assert message in str(err.value)
    assert str(err.value).startswith("locks/cpu-lock.txt:")
    assert "\n" not in str(err.value)


def test_only_resolution_inputs_make_a_lock_stale(stack):
    base = stack_input_hash(stack)
    assert stack_input_hash(stack.model_copy(update={"description": "new words"})) == base
    moved = stack.model_copy(update={"extra_layers": (stack.extra_layers[0].model_copy(
        update={"requirements": ("requests==2.32.2",)}),)})
    assert stack_input_hash(moved) != base
    assert stack_input_hash(stack.model_copy(update={"python": "3.12"})) != base


def test_lock_for_build_is_none_without_a_lock_and_fails_in_one_line_when_stale(stack, tmp_path):
    stacks_file = tmp_path / "stacks-lock.yaml"
    assert lock_for_build(stacks_file, stack) is None
    path = lock_path(stacks_file, stack.name)
    assert path == tmp_path / "locks" / "cpu-lock.txt"
    write_lock(path, make_lock(stack))
    assert is_current(lock_for_build(stacks_file, stack), stack)
    write_lock(path, make_lock(stack, stack_sha256="0" * 64))
    with pytest.raises(StaleLock) as err:
        lock_for_build(stacks_file, stack)
    assert str(err.value).endswith("run invoke lock --stack cpu-lock")
    assert "\n" not in str(err.value)


def test_installed_set_against_a_complete_lock_names_every_difference(stack):
    lock = make_lock(stack, unresolved=(), packages=make_lock(stack).packages[1:])
    exact = {"idna": "3.7", "requests": "2.32.3", "sglang": "0.5.9", "pip": "24.0", "setuptools": "66.1.1"}
    assert compare_installed(lock, exact).ok  # the venv's own pip and setuptools are not extras
    got = compare_installed(lock, {"idna": "3.8", "sglang": "0.5.9", "six": "1.16.0"})
    assert sorted(got.problems) == sorted(["idna: locked 3.7, installed 3.8",
                                           "requests==2.32.3 is in the lock but not installed",
                                           "installed but not in the lock: six==1.16.0"])


def test_extras_of_an_unresolved_layer_with_dependencies_are_notices(stack):
    lock = make_lock(stack)
    installed = {"torch": "2.9.1+cu130", "idna": "3.7", "requests": "2.32.3", "sglang": "0.5.9",
                 "nvidia-nccl-cu13": "2.27.7"}
    got = compare_installed(lock, installed)
    assert got.ok
    assert got.notices == ("not in the lock (dependencies of the unresolved torch layer): nvidia-nccl-cu13==2.27.7",)
    assert "torch==2.9.1+cu130 is in the lock but not installed" in compare_installed(
        lock, {k: v for k, v in installed.items() if k != "torch"}).problems


def test_content_hash_ignores_when_the_lock_was_resolved(stack):
    a, b = make_lock(stack), make_lock(stack, resolved_at="2027-01-01T00:00:00Z")
    assert lock_content_sha256(a) == lock_content_sha256(b)
    bumped = make_lock(stack, packages=(*a.packages[:1], LockedPackage("idna", "3.8", "http-client", (H1,)),
                                        *a.packages[2:]))
    assert lock_content_sha256(bumped) != lock_content_sha256(a)
