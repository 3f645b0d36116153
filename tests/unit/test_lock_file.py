"""The lock file model: its text format, staleness against the stack entry, installed set vs lock (pure)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.config.schema import GitSource, SGLangSource
from sglstack.core.errors import ConfigError
from sglstack.lock.trust import StaleLock, lock_for_build
from sglstack.lockfile.current import compare_installed, is_current, source_mismatches, stack_input_hash
from sglstack.lockfile.model import Lock, LockedPackage, UnresolvedLayer, lock_content_sha256, lock_path
from sglstack.lockfile.text import parse_lock, read_lock, render_lock, write_lock, written_sha256

REPO = Path(__file__).resolve().parents[2]
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
            LockedPackage("requests", "2.32.3", "http-client", (H2, H3), requires=("idna",)),
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
    # without a declared glibc the base image decides the platform tag: an input; with one it is not
    rebased = stack.model_copy(update={"base_image": "ubuntu:24.04"})
    assert stack_input_hash(rebased) != base
    assert stack_input_hash(rebased.model_copy(update={"glibc": "2.36"})) == stack_input_hash(
        stack.model_copy(update={"glibc": "2.36"}))


def test_lock_for_build_is_none_without_a_lock_and_fails_in_one_line_when_stale(stack, tmp_path):
    stacks_file = tmp_path / "stacks-lock.yaml"
    assert lock_for_build(stacks_file, stack) is None
    path = lock_path(stacks_file, stack.name)
    assert path == tmp_path / "locks" / "cpu-lock.txt"
    # the stack has no torch layer: a lock of it holds the rest (a torch entry would be required by nothing)
    own = dict(layers=("http-client", "sglang"), unresolved=(), packages=make_lock(stack).packages[1:])
    write_lock(path, make_lock(stack, **own))
    assert is_current(lock_for_build(stacks_file, stack), stack)
    write_lock(path, make_lock(stack, stack_sha256="0" * 64, **own))
    with pytest.raises(StaleLock) as err:
        lock_for_build(stacks_file, stack)
    assert str(err.value).endswith("run invoke lock --stack cpu-lock")
    assert "\n" not in str(err.value)


def test_an_entry_an_index_serves_without_hashes_keeps_its_parents_and_is_trusted(stack, tmp_path):
    """`# unhashed:` entries were written without their `# via`: read back, nothing required them."""
    lock = make_lock(stack, layers=("http-client", "sglang"), unresolved=(), packages=(
        LockedPackage("idna", "3.7", "http-client", unhashed="the index serves no sha256 for its files",
                      required_by=("requests",)),
        *make_lock(stack).packages[2:]))
    text = render_lock(lock)
    assert "# unhashed: idna==3.7 (the index serves no sha256 for its files)\n#     via requests\n" in text
    assert parse_lock(text) == lock
    stacks_file = tmp_path / "stacks-lock.yaml"
    write_lock(lock_path(stacks_file, stack.name), lock)
    assert lock_for_build(stacks_file, stack) == lock


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


# ---- the committed locks, the exact text, every error line ------------------------------------------

# Every stack of the repo's matrix has its committed lock (pypi-cu130 and h200-field included), and the test fixture's.
COMMITTED = [*((REPO / "stacks.yaml", name) for name in load_matrix(REPO / "stacks.yaml").names()),
             (LOCK_MATRIX, "cpu-lock")]


@pytest.mark.parametrize(("stacks_file", "name"), COMMITTED)
def test_the_committed_locks_read_back_byte_for_byte_and_are_current(stacks_file, name):
    path = lock_path(stacks_file, name)
    lock = read_lock(path)
    assert render_lock(lock, stacks_file=stacks_file.name) == path.read_text(encoding="utf-8")
    assert is_current(lock, load_matrix(stacks_file).get(name))
    assert lock.declared_written_sha256 == written_sha256(lock)


@pytest.mark.parametrize(("line", "message"), [
    ("# written-sha256: 12ab", "'written-sha256: 12ab' is not one sha256 (64 hex digits)"),
    (f"# written-sha256: {'a' * 64}\n# written-sha256: {'b' * 64}", f"'written-sha256: {'b' * 64}' is not one sha256"),
])
def test_a_malformed_written_sha256_line_is_one_line(stack, line, message):
    text = re.sub(r"(?m)^# written-sha256: .*$", line, render_lock(make_lock(stack)))
    with pytest.raises(ConfigError) as err:
        parse_lock(text, file="locks/x.txt")
    assert str(err.value).startswith(f"locks/x.txt: {message}")


def test_the_written_sha256_covers_every_line_the_parser_reads_but_itself(stack):
    lock = make_lock(stack)
    assert parse_lock(render_lock(lock)).declared_written_sha256 == written_sha256(lock)
    assert written_sha256(lock) == written_sha256(replace(lock, declared_written_sha256="f" * 64))
    changed = [replace(lock, resolved_at="2027-01-01T00:00:00Z"), replace(lock, notes=()),
               replace(lock, packages=(*lock.packages[:1], replace(lock.packages[1], required_by=()),
                                       *lock.packages[2:])),
               replace(lock, packages=(*lock.packages[:2], replace(lock.packages[2], requires=None),
                                       *lock.packages[3:]))]
    assert all(written_sha256(x) != written_sha256(lock) for x in changed)


def test_what_the_cu130_lock_says():
    lock = read_lock(lock_path(REPO / "stacks.yaml", "cu130"))
    kernel = lock.get("SGL_Kernel")
    assert kernel == LockedPackage(
        "sgl-kernel", "0.3.21+cu130", "sgl-kernel", url=kernel.url,
        unhashed=f"{kernel.url} unreachable: error resolving DNS") and kernel.url.endswith("x86_64.whl")
    assert [str(u) for u in lock.unresolved] == [
        "torch (with dependencies): index https://download.pytorch.org/whl/cu130 unreachable: error resolving DNS",
        f"sgl-kernel (no dependencies): {kernel.url} unreachable: error resolving DNS"]
    assert lock.get("httpcore") is not None and lock.get("no-such-package") is None
    assert (lock.platforms, lock.python_platforms, lock.layers[0], lock.sglang_commit) == (
        ("linux/amd64",), ("x86_64-manylinux_2_28",), "torch", None)
    assert lock.get("apache-tvm-ffi").required_by == ("flashinfer-python", "quack-kernels", "sglang")
    # the image label io.sglstack.lock-sha256: what a build records must not move when sglstack does
    assert lock_content_sha256(lock) == "020e6c3ab6a4694971ab06b9f065b0018929dea46022bd526042d7934e1e2917"


URL = "https://example.invalid/whl/sglang-0.5.9-py3-none-any.whl"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def url_lock(stack) -> Lock:
    return make_lock(
        stack, platforms=("linux/amd64", "linux/arm64"), python_platforms=(), sglang_commit=COMMIT, indexes=(),
        layers=("empty", "torch", "sglang"), notes=(),
        unresolved=(UnresolvedLayer("torch", False, "offline"),),
        packages=(LockedPackage("torch", "2.9.1", "torch", url="https://example.invalid/t.whl", unhashed="offline"),
                  LockedPackage("sglang", "0.5.9", "sglang", (H1, H2), url=URL, required_by=("a", "b-c")),
                  LockedPackage("idna", "3.7", "sglang", (H3,), note="pinned by hand")))


def test_the_exact_text_of_a_lock_with_urls_and_a_git_commit(stack):
    lock = url_lock(stack)
    text = render_lock(lock)
    assert text == "\n".join([
        "# sglstack lock for stack 'cpu-lock': the exact Python packages its image installs.",
        "# Written by `invoke lock --stack cpu-lock`; `--upgrade-package NAME` moves one package. Do not edit.",
        "# Outside sglstack: pip install --no-deps --require-hashes -r THIS_FILE (hashed entries only).",
        "#",
        "# lock-format: 1",
        "# stack: cpu-lock",
        f"# stack-sha256: {stack_input_hash(stack)}",
        "# resolved-at: 2026-12-02T18:00:00Z",
        "# resolver: uv 0.13.9 (uv pip compile --generate-hashes)",
        "# python: 3.11",
        "# platforms: linux/amd64 linux/arm64",
        f"# sglang-git-commit: {COMMIT}",
        "# packages: 3 (2 hashed, 1 unhashed)",
        "# layers: empty torch sglang",
        "# unresolved-layer: torch (no dependencies): offline",
        f"# written-sha256: {written_sha256(lock)}",
        "",
        "# ---- layer torch (not resolved: installed as without a lock)",
        "# unhashed: torch @ https://example.invalid/t.whl (offline)",
        "#     version: 2.9.1",
        "",
        "# ---- layer sglang",
        f"sglang @ {URL} \\",
        f"    --hash={H1} \\",
        f"    --hash={H2}",
        "    # version: 0.5.9",
        "    # via a, b-c",
        f"idna==3.7 \\\n    --hash={H3}",
        "    # note: pinned by hand",
        ""])
    assert parse_lock(text) == lock
    assert lock.part_text("sglang") == (f"# cpu-lock: layer sglang of the lock (generated by sglstack)\n"
                                        f"sglang @ {URL} \\\n    --hash={H1} \\\n    --hash={H2}\n"
                                        f"idna==3.7 \\\n    --hash={H3}\n")
    assert lock.part_text("empty") == "# cpu-lock: layer empty of the lock (generated by sglstack)\n"


def test_an_unhashed_pin_without_a_reason_and_an_unversioned_url(stack):
    lock = make_lock(stack, packages=(LockedPackage("six", "1.16.0", "torch", unhashed=""),
                                      LockedPackage("x", "", "torch", url="https://example.invalid/x.whl",
                                                    unhashed="offline")))
    text = render_lock(lock)
    assert "# unhashed: six==1.16.0 (no hash)\n# unhashed: x @ https://example.invalid/x.whl (offline)\n" in text
    assert "# packages: 2 (0 hashed, 2 unhashed)" in text
    assert [(p.name, p.version, p.url, p.unhashed) for p in parse_lock(text).packages] == [
        ("six", "1.16.0", None, "no hash"), ("x", "", "https://example.invalid/x.whl", "offline")]


def test_continuation_lines_and_comments_inside_a_layer(stack):
    head = render_lock(make_lock(stack, packages=(), unresolved=()))
    body = (f"\n# ---- layer http-client\n# a comment before any entry\nidna==3.7 \\\n --hash={H1} \\\n\t--hash={H2}\n"
            "# a comment after it\nsix==1.16.0 \\\n  --hash=" + H3 + "\n")
    lock = parse_lock(head.replace("# stack: cpu-lock", "# stack\n# Stack: other\n# stack: cpu-lock") + body)
    assert lock.stack == "cpu-lock"
    assert lock.packages == (LockedPackage("idna", "3.7", "http-client", (H1, H2)),
                             LockedPackage("six", "1.16.0", "http-client", (H3,)))


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_lock(text, file="locks/x.txt")
    return str(err.value)


def test_every_malformed_lock_is_one_exact_line(stack):
    good = render_lock(make_lock(stack, packages=(), unresolved=()))
    n = len(good.splitlines())
    assert _error("# lock-format: 1\n\nidna==3.7\n") == (
        "locks/x.txt:3: a package entry before the first '# ---- layer NAME' line")
    layer = good + "# ---- layer http-client\n"
    assert _error(layer + "idna==3.7 \\\n    --hash=sha256:12\n") == (
        f"locks/x.txt:{n + 3}: 'sha256:12' is not a sha256 hash (sha256:<64 hex digits>)")
    assert _error(layer + "idna\n") == f"locks/x.txt:{n + 2}: 'idna' is not 'name==version' or 'name @ url'"
    assert _error(layer + "six==1\n  --hash=" + H1 + "\nidna==3.7\n") == (
        f"locks/x.txt:{n + 4}: idna has no --hash (an unhashable pin is written '# unhashed: ...')")
    assert _error(layer + f"x @ {URL} \\\n    --hash={H1}\n") == (
        f"locks/x.txt:{n + 2}: x @ url has no '# version:' line")
    assert _error(good.replace("# stack: cpu-lock\n", "")) == "locks/x.txt: lock header has no 'stack:' line"
    assert _error(good.replace("# lock-format: 1", "# lock-format: 2")) == (
        "locks/x.txt: lock-format 2 is not 1: run invoke lock again")
    assert _error(good + "# unresolved-layer: torch, somehow\n") == (
        "locks/x.txt: unreadable 'unresolved-layer: torch, somehow'")
    for commit in ("abc", COMMIT.upper()):
        assert _error(good + f"# sglang-git-commit: {commit}\n") == (
            f"locks/x.txt: 'sglang-git-commit: {commit}' is not a full commit sha")
    two_commits = f"# sglang-git-commit: {COMMIT}\n# sglang-git-commit: {'f' * 40}\n"
    assert parse_lock(good + two_commits).sglang_commit == COMMIT


def test_read_lock_names_the_file(tmp_path):
    missing = tmp_path / "locks" / "x.txt"
    with pytest.raises(ConfigError) as err:
        read_lock(missing)
    assert str(err.value) == f"{missing}: cannot read the lock: No such file or directory"
    missing.parent.mkdir()
    missing.write_text("# lock-format: 1\n")
    with pytest.raises(ConfigError) as err:
        read_lock(missing)
    assert str(err.value) == f"{missing}: lock header has no 'stack:' line"


def test_write_lock_makes_its_folders_and_names_the_stacks_file(stack, tmp_path):
    path = tmp_path / "a" / "b" / "locks" / "cpu-lock.txt"
    write_lock(path, make_lock(stack), stacks_file="stacks-lock.yaml")
    assert path.read_text(encoding="utf-8").splitlines()[0] == (
        "# sglstack lock for stack 'cpu-lock' (stacks-lock.yaml): the exact Python packages its image installs.")
    assert [p.name for p in path.parent.iterdir()] == ["cpu-lock.txt"]


def test_a_stale_lock_names_the_stack_and_the_file(stack, tmp_path):
    stacks_file = tmp_path / "stacks-lock.yaml"
    path = lock_path(stacks_file, stack.name)
    write_lock(path, make_lock(stack, stack_sha256="0" * 64))
    with pytest.raises(StaleLock) as err:
        lock_for_build(stacks_file, stack)
    assert str(err.value) == (f"stack 'cpu-lock': {path} is older than the stack entry it locks: "
                              "run invoke lock --stack cpu-lock")
    assert err.value.stack == "cpu-lock"


def test_an_override_reason_is_prose_but_its_pin_is_input():
    cu130 = load_matrix(REPO / "stacks.yaml").get("cu130")
    base = stack_input_hash(cu130)
    first = cu130.overrides[0]
    reworded = cu130.model_copy(update={"overrides": (first.model_copy(update={"reason": "new words"}),
                                                      *cu130.overrides[1:])})
    assert stack_input_hash(reworded) == base
    for change in ({"pin": "flashinfer-python==0.6.5"}, {"replaces": "flashinfer_python>=0.6.3"}):
        moved = cu130.model_copy(update={"overrides": (first.model_copy(update=change), *cu130.overrides[1:])})
        assert stack_input_hash(moved) != base


def test_the_sglang_source_of_a_lock_against_its_stack(stack):
    git = stack.model_copy(update={"sglang": SGLangSource(git=GitSource(repo="https://example.invalid/s",
                                                                        ref=COMMIT))})
    pypi_lock, git_lock = make_lock(stack), make_lock(stack, sglang_commit=COMMIT)
    assert source_mismatches(pypi_lock, stack) == [] and source_mismatches(git_lock, git) == []
    assert source_mismatches(git_lock, stack) == [
        f"sglang: locked git commit {COMMIT}, the stack installs sglang==0.5.9"]
    assert source_mismatches(pypi_lock, git) == [f"sglang: locked a PyPI release, the stack builds git commit {COMMIT}"]
    assert source_mismatches(make_lock(stack, sglang_commit="f" * 40), git) == [
        f"sglang: locked git commit {'f' * 40}, the stack builds git commit {COMMIT}"]
    assert not is_current(git_lock, stack)


def test_an_unresolved_layer_is_never_installed_from_the_lock_even_when_hashed(stack):
    lock = make_lock(stack, unresolved=(UnresolvedLayer("http-client", False, "offline"),))
    assert not lock.installs_layer("http-client") and lock.installs_layer("sglang")
    assert not lock.installs_layer("no-such-layer")


def test_extras_and_versions_are_listed_in_full(stack):
    lock = make_lock(stack, unresolved=(UnresolvedLayer("torch", True, "x"), UnresolvedLayer("cuda", True, "y"),
                                        UnresolvedLayer("kernel", False, "z")),
                     packages=(LockedPackage("odd", "not-a-version", "torch", (H1,)),))
    got = compare_installed(lock, {"odd": "not-a-version", "A_B": "1", "c": "2"})
    assert got.problems == () and got.notices == (
        "not in the lock (dependencies of the unresolved torch, cuda layer): a-b==1, c==2",)
    assert compare_installed(lock, {"odd": "other"}).problems == ("odd: locked not-a-version, installed other",)
    complete = make_lock(stack, unresolved=(), packages=(LockedPackage("idna", "3.7", "x", (H1,)),))
    assert compare_installed(complete, {"idna": "3.7.0", "b": "1", "a": "2"}).problems == (
        "installed but not in the lock: a==2, b==1",)


def test_every_uv_target_resolved_for_is_kept_and_an_unnamed_text_is_the_lock(stack):
    targets = ("x86_64-manylinux_2_28", "aarch64-manylinux_2_28")
    text = render_lock(make_lock(stack, python_platforms=targets))
    assert f"# resolved-for: {' '.join(targets)}\n" in text
    assert parse_lock(text).python_platforms == targets
    with pytest.raises(ConfigError) as err:
        parse_lock("# lock-format: 1\n")
    assert str(err.value) == "lock: lock header has no 'stack:' line"


@pytest.mark.parametrize("unhashed", [(), ("idna",), ("idna", "certifi", "charset-normalizer", "requests", "urllib3")])
def test_a_layer_installs_from_the_lock_only_when_every_entry_of_it_is_hashed(unhashed):
    """Mixed layers: one unhashed entry makes its whole layer resolve as without a lock (pip cannot mix
    `--require-hashes` and unhashed pins in one install), and no other layer follows it."""
    from sglstack.render.dockerfile import render_dockerfile

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    text = (fixtures / "locks" / "cpu-lock.txt").read_text()
    for name in unhashed:
        text = re.sub(rf"(?ms)^{re.escape(name)}==(\S+) \\\n(?:    --hash=\S+(?: \\)?\n)+",
                      lambda m, n=name: f"# unhashed: {n}=={m.group(1)} (the index serves no sha256 for its files)\n",
                      text)
    lock = parse_lock(text)
    assert [p.name for p in lock.packages if not p.hashed] == sorted(unhashed)
    assert lock.installs_layer("http-client") is (not unhashed)
    assert lock.installs_layer("sglang")
    dockerfile = render_dockerfile(load_matrix(fixtures / "stacks-lock.yaml").get("cpu-lock"), lock)
    from_lock = "--link-mode copy -r /run/sglstack-lock/http-client.txt" in dockerfile  # uv, from the lock's part
    assert from_lock is (not unhashed)
    assert ("pip install --constraint /run/sglstack/installed.txt requests==2.32.3" in dockerfile) is bool(unhashed)
    assert "--require-hashes -r /run/sglstack-lock/sglang.txt" in dockerfile
