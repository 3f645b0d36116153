"""Pins against the pinned SGLang's own requirements (read from its real wheel METADATA)."""

from __future__ import annotations

import shutil
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.markers import default_environment

from sglstack.cli.stacks_table import stacks_command
from sglstack.config.matrix import load_matrix
from sglstack.config.schema import GitSource, Matrix, Override, SGLangSource
from sglstack.core.errors import ConfigError
from sglstack.inimage.incontainer import wheelkit
from sglstack.lock import conflicts
from sglstack.lock.conflicts import (
    Finding,
    check_matrix,
    check_stack_pins,
    lock_findings,
    resolve_findings,
    sglang_requires_dist,
    target_environment,
)
from sglstack.lock.flow import LockError
from sglstack.lockfile.current import stack_input_hash
from sglstack.lockfile.model import Lock, LockedPackage, UnresolvedLayer, lock_path, with_edges
from sglstack.lockfile.text import write_lock

REPO = Path(__file__).resolve().parents[2]

REQUIRES = [
    "flashinfer_python==0.6.3",
    "flashinfer_cubin==0.6.3",
    "torch==2.9.1",
    "sgl-kernel==0.3.21",
    "cuda-python==12.9",
    "av; sys_platform == 'linux' and platform_machine == 'aarch64'",
    "sglang[test]; extra == 'dev'",
]


@pytest.fixture(scope="module")
def cu130():
    return load_matrix(REPO / "stacks.yaml").get("cu130")


def test_declared_overrides_are_reported_not_failed(cu130):
    findings = check_stack_pins(cu130, REQUIRES, "0.5.9")
    assert not [f for f in findings if f.is_failure], findings
    overrides = [f.message for f in findings if f.kind == "override"]
    assert any("flashinfer-python==0.6.4 overrides sglang 0.5.9's 'flashinfer_python==0.6.3'" in m for m in overrides)


def test_local_version_labels_satisfy_plain_pins(cu130):
    # torch 2.9.1+cu130 and sgl-kernel 0.3.21+cu130 satisfy SGLang's torch==2.9.1 / sgl-kernel==0.3.21
    findings = check_stack_pins(cu130, ["torch==2.9.1", "sgl-kernel==0.3.21"], "0.5.9")
    assert not [f for f in findings if f.kind == "conflict"]


def test_undeclared_conflict_names_both_requirements(cu130):
    bare = cu130.model_copy(update={"overrides": ()})
    conflicts = [f for f in check_stack_pins(bare, REQUIRES, "0.5.9") if f.kind == "conflict"]
    flashinfer = next(f.message for f in conflicts if "flashinfer-python" in f.message)
    assert "pins flashinfer-python==0.6.4" in flashinfer and "requires 'flashinfer_python==0.6.3'" in flashinfer
    # cuda-python is pinned only through its override: without it the stack leaves SGLang's pin alone
    assert len(conflicts) == 2


def test_stale_override_fails(cu130):
    moved_on = [r.replace("0.6.3", "0.6.4") for r in REQUIRES]
    stale = [f for f in check_stack_pins(cu130, moved_on, "0.5.x") if f.kind == "stale-override"]
    assert {s.message.split("'")[1] for s in stale} == {"flashinfer_python==0.6.3", "flashinfer_cubin==0.6.3"}


def test_markers_are_evaluated_for_the_stack_platform(cu130):
    pinned_av = cu130.model_copy(update={"overrides": (), "extra_layers": (*cu130.extra_layers,
                                                           cu130.extra_layers[0].model_copy(
                                                               update={"name": "av", "requirements": ("av==1.0",)}),)})
    # 'av' is only required on aarch64: no conflict for a linux/amd64 stack whatever it pins
    assert not [f for f in check_stack_pins(pinned_av, ["av==9.9; platform_machine == 'aarch64'"], "x") if f.is_failure]






# ---- one rule for "this override replaces that requirement", in the check and in the build ----------

SPELLINGS = ["pkg-a>=1,<2", "pkg_a<2,>=1", "pkg-a (>=1, <2)"]


def _fake_sglang_wheel(tmp_path: Path, requires: list[str]) -> Path:
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    meta = "Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang-9.9.9.dist-info/METADATA", meta)
    return wheel


def _overriding(stack, replaces: str):
    return stack.model_copy(update={"overrides": (Override(replaces=replaces, pin="pkg-a==2.5", reason="test"),)})


@pytest.mark.parametrize("required", SPELLINGS)
@pytest.mark.parametrize("replaces", SPELLINGS)
def test_override_spellings_match_alike_in_stacks_check_and_in_the_build(cu130, tmp_path, required, replaces):
    stack = _overriding(cu130, replaces)
    findings = check_stack_pins(stack, [required], "9.9.9")
    assert [f.kind for f in findings] == ["override"], findings

    out = tmp_path / "requirements.txt"
    manifest = {"name": stack.name, "overrides": [o.model_dump(mode="json") for o in stack.overrides]}
    lines = wheelkit.requirements(_fake_sglang_wheel(tmp_path, [required]), manifest, out)
    assert lines[-1] == f"pkg-a==2.5  # override of {required}: test"


def test_an_override_of_another_range_fails_in_both(cu130, tmp_path):
    stack = _overriding(cu130, "pkg-a>=1,<3")
    findings = check_stack_pins(stack, ["pkg-a>=1,<2"], "9.9.9")
    assert [f.kind for f in findings] == ["conflict", "stale-override"] and all(f.is_failure for f in findings)
    manifest = {"name": stack.name, "overrides": [o.model_dump(mode="json") for o in stack.overrides]}
    with pytest.raises(wheelkit.WheelKitError, match="update the override"):
        wheelkit.requirements(_fake_sglang_wheel(tmp_path, ["pkg-a>=1,<2"]), manifest, tmp_path / "r.txt")


def test_an_override_wheelkit_cannot_parse_is_refused_when_the_matrix_loads(tmp_path):
    text = (REPO / "stacks.yaml").read_text().replace("replaces: flashinfer_python==0.6.3", "replaces: '>=1'", 1)
    (tmp_path / "stacks.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"key 'overrides\.0\.replaces': '>=1' is not a valid requirement"):
        load_matrix(tmp_path / "stacks.yaml")


# ---- exact findings, the marker environment, the matrix and lock checks, the `stacks` table -----------

FLASHINFER_OVERRIDE = ("flashinfer-python==0.6.4 overrides sglang 0.5.9's 'flashinfer_python==0.6.3': "
                       "FlashInfer 0.6.4 carries the CUDA 13 fixes this stack is built for")
CUBIN_OVERRIDE = ("flashinfer-cubin==0.6.4 overrides sglang 0.5.9's 'flashinfer_cubin==0.6.3': "
                  "the cubin package must match flashinfer-python exactly")
CUDA_PYTHON_OVERRIDE = ("cuda-python==13.0.3 overrides sglang 0.5.9's 'cuda-python==12.9': CUDA 13 bindings; "
                        "12.9 bindings do not match the CUDA 13.0.1 base (upstream's cu13 images force 13.x)")


def test_every_finding_of_a_stack_is_exact(cu130):
    assert check_stack_pins(cu130, REQUIRES, "0.5.9") == [
        Finding("cu130", "override", FLASHINFER_OVERRIDE),
        Finding("cu130", "override", CUBIN_OVERRIDE),
        Finding("cu130", "override", CUDA_PYTHON_OVERRIDE),
    ]
    bare = cu130.model_copy(update={"overrides": ()})
    assert check_stack_pins(bare, ["torch==2.9.0", "flashinfer_python>=0.6,<0.6.4"], "0.5.9") == [
        Finding("cu130", "conflict", "pins torch==2.9.1+cu130 but sglang 0.5.9 requires 'torch==2.9.0': declare it "
                                     "under 'overrides' (replaces: torch==2.9.0) or change the pin"),
        Finding("cu130", "conflict", "pins flashinfer-python==0.6.4 but sglang 0.5.9 requires "
                                     "'flashinfer_python<0.6.4,>=0.6': declare it under 'overrides' "
                                     "(replaces: flashinfer_python<0.6.4,>=0.6) or change the pin"),
    ]
    moved_on = check_stack_pins(cu130, ["flashinfer_python==0.6.3", "flashinfer_cubin==0.6.3"], "0.5.10")
    assert moved_on[-1] == Finding("cu130", "stale-override", "override replaces 'cuda-python==12.9', which sglang "
                                                              "0.5.10 does not require: remove or update it")
    assert [f.is_failure for f in moved_on] == [False, False, True]


def test_sglang_requiring_itself_is_not_a_pin_to_check(cu130):
    # SGLang's own extras name sglang (`sglang[srt]`): the stack's sglang pin is what is installed, not a rival
    bare = cu130.model_copy(update={"overrides": ()})
    assert check_stack_pins(bare, ["sglang[srt]==0.5.8"], "0.5.9") == []


def test_a_prerelease_pin_satisfies_a_range_that_does_not_name_prereleases(cu130):
    # a pin is what gets installed: whether a resolver would pick a pre-release unasked does not matter
    rc = cu130.model_copy(update={"overrides": (), "flashinfer": cu130.flashinfer.model_copy(
        update={"version": "0.6.5rc1"})})
    assert rc.pins()["flashinfer-python"] == "0.6.5rc1"
    assert check_stack_pins(rc, ["flashinfer_python>=0.6.3"], "0.5.9") == []
    overridden = rc.model_copy(update={"overrides": (
        Override(replaces="flashinfer_python==0.6.3", pin="flashinfer-python==0.6.5rc1", reason="rc"),)})
    assert [f.kind for f in check_stack_pins(overridden, ["flashinfer_python==0.6.3"], "0.5.9")] == ["override"]


def test_an_override_that_pins_another_package_than_the_stack_pins_is_a_conflict(cu130):
    # the override replaces flashinfer_python's line but pins a different distribution at the same version
    stack = cu130.model_copy(update={"overrides": (
        Override(replaces="flashinfer_python==0.6.3", pin="flashinfer-cubin==0.6.4", reason="typo"),)})
    assert check_stack_pins(stack, ["flashinfer_python==0.6.3"], "0.5.9") == [
        Finding("cu130", "conflict", "override 'flashinfer-cubin==0.6.4' disagrees with the stack's pin "
                                     "flashinfer-python==0.6.4")]
    other_version = cu130.model_copy(update={"overrides": (
        Override(replaces="flashinfer_python==0.6.3", pin="flashinfer-python==0.6.5", reason="behind"),)})
    assert check_stack_pins(other_version, ["flashinfer_python==0.6.3"], "0.5.9") == [
        Finding("cu130", "conflict", "override 'flashinfer-python==0.6.5' disagrees with the stack's pin "
                                     "flashinfer-python==0.6.4")]


def test_markers_are_evaluated_for_the_stack_python(cu130):
    requires = ["torch==1.0; python_version < '3.12'", "sgl-kernel==0.1; python_full_version >= '3.12.0'"]
    bare = cu130.model_copy(update={"overrides": ()})
    assert [f.message.split(" but")[0] for f in check_stack_pins(bare, requires, "x")] == [
        "pins sgl-kernel==0.3.21+cu130"]
    aarch64 = bare.model_copy(update={"platforms": ("linux/arm64",)})
    assert [f.kind for f in check_stack_pins(aarch64, ["torch==1.0; platform_machine == 'aarch64'"], "x")] == [
        "conflict"]


def test_the_marker_environment_is_the_image_not_this_host():
    env = target_environment("3.12", "linux/arm64")
    host = default_environment()
    assert set(env) == {*host, "extra"} and all(isinstance(v, str) for v in env.values())
    assert {k: env[k] for k in env if k not in ("platform_release", "platform_version")} == {
        "python_version": "3.12", "python_full_version": "3.12.0", "implementation_version": "3.12.0",
        "implementation_name": "cpython", "platform_python_implementation": "CPython", "sys_platform": "linux",
        "platform_system": "Linux", "os_name": "posix", "platform_machine": "aarch64", "extra": ""}
    # the kernel is the host's whatever the image: left as packaging reads it
    assert (env["platform_release"], env["platform_version"]) == (host["platform_release"], host["platform_version"])
    assert target_environment("3.11", "linux/amd64")["platform_machine"] == "x86_64"


def _matrix(*stacks) -> Matrix:
    return Matrix(file="stacks.yaml", stacks={s.name: s for s in stacks})


def _from_git(stack, name: str):
    source = SGLangSource(git=GitSource(repo="https://github.com/sgl-project/sglang", ref="1" * 40))
    return stack.model_copy(update={"name": name, "sglang": source})


def test_check_matrix_reads_each_sglang_version_once_and_skips_git_sources(cu130):
    asked: list[str] = []

    def requires_dist(version: str) -> list[str]:
        asked.append(version)
        return ["torch==2.9.0", "cuda-python==12.9"]

    bare = cu130.model_copy(update={"name": "bare", "overrides": ()})
    matrix = _matrix(_from_git(cu130, "from-git"), cu130, bare)
    conflict = ("pins torch==2.9.1+cu130 but sglang 0.5.9 requires 'torch==2.9.0': declare it under 'overrides' "
                "(replaces: torch==2.9.0) or change the pin")
    assert check_matrix(matrix, requires_dist) == [
        Finding("from-git", "skipped", "SGLang from git: its requirements are checked in the build (wheelkit)"),
        Finding("cu130", "conflict", conflict),
        Finding("cu130", "override", CUDA_PYTHON_OVERRIDE),
        Finding("cu130", "stale-override", "override replaces 'flashinfer_python==0.6.3', which sglang 0.5.9 does "
                                           "not require: remove or update it"),
        Finding("cu130", "stale-override", "override replaces 'flashinfer_cubin==0.6.3', which sglang 0.5.9 does "
                                           "not require: remove or update it"),
        Finding("bare", "conflict", conflict),
    ]
    assert asked == ["0.5.9"]


IDNA = LockedPackage("idna", "3.7", "deps", ("sha256:" + "a" * 64,))


def _lock_of(stack, **changes) -> Lock:
    """A lock the build trusts: every pin of the stack locked at its version, and one dependency; all but
    SGLang required by SGLang (an entry nothing requires is refused), both ends of each edge written."""
    pinned = tuple(LockedPackage(name, version, "deps", ("sha256:" + "b" * 64,))
                   for name, version in sorted(stack.pins().items()))
    packages = with_edges(tuple(p if p.name == "sglang" else replace(p, required_by=("sglang",))
                                for p in (*pinned, IDNA)))
    fields = dict(stack=stack.name, stack_sha256=stack_input_hash(stack), resolved_at="2026-12-02T18:00:00Z",
                  resolver="uv 0.13.9", python=stack.python, platforms=stack.platforms, layers=("deps",),
                  packages=packages)
    fields.update(changes)
    return Lock(**fields)


def test_lock_findings_name_the_missing_and_the_stale_lock(cu130, tmp_path):
    stacks_file = str(tmp_path / "stacks.yaml")
    current, stale, missing = (cu130.model_copy(update={"name": n}) for n in ("current", "stale", "missing"))
    write_lock(lock_path(stacks_file, "current"), _lock_of(current))
    write_lock(lock_path(stacks_file, "stale"), _lock_of(stale, stack_sha256="0" * 64))
    folder = current.model_copy(update={"name": "folder"})
    lock_path(stacks_file, "folder").parent.joinpath("folder.txt").mkdir()  # a folder is not a lock: bad input
    locks = tmp_path / "locks"
    assert lock_findings(_matrix(current, stale, missing, folder), stacks_file) == [
        Finding("stale", "stale-lock", f"{locks}/stale.txt is older than the stack entry it locks: "
                                       "run invoke lock --stack stale"),
        Finding("missing", "no-lock", f"no lock ({locks}/missing.txt): the image is not reproducible to the last "
                                      "package; run invoke lock --stack missing"),
        Finding("folder", "bad-lock", f"{locks}/folder.txt: the lock path is a folder, not a lock file"),
    ]


def _resolver(cu130):
    def resolve(stack) -> Lock:
        if stack.name == "unsolvable":
            raise LockError(f"stack '{stack.name}': uv found no solution: torch==2.9.0 and torch==2.9.1")
        return _lock_of(stack, packages=(IDNA,) * 3, unresolved=(
            UnresolvedLayer("torch", True, "index https://download.pytorch.org/whl/cu130 unreachable"),))
    return resolve


def test_resolve_findings_report_the_resolver_error_and_what_it_could_not_see(cu130):
    unsolvable = cu130.model_copy(update={"name": "unsolvable"})
    assert resolve_findings(_matrix(unsolvable, cu130), _resolver(cu130)) == [
        Finding("unsolvable", "conflict", "uv found no solution: torch==2.9.0 and torch==2.9.1"),
        Finding("cu130", "incomplete", "resolver: layer torch (with dependencies): "
                                    "index https://download.pytorch.org/whl/cu130 unreachable"),
        Finding("cu130", "resolved", "the resolver found a consistent set of 3 packages"),
    ]


@pytest.fixture
def stacks_copy(tmp_path):
    """The repo's matrix with its two SGLang 0.5.9 stacks only (the checks below script 0.5.9's METADATA)."""
    text = (REPO / "stacks.yaml").read_text()
    (tmp_path / "stacks.yaml").write_text(text[:text.index("\n  pypi-cu130:")] + "\n")
    return tmp_path / "stacks.yaml"


@pytest.fixture
def whole_matrix(tmp_path):
    shutil.copy(REPO / "stacks.yaml", tmp_path / "stacks.yaml")
    return tmp_path / "stacks.yaml"


def test_stacks_table_lists_every_stack(whole_matrix, capsys):
    stacks_copy = whole_matrix
    assert stacks_command(str(stacks_copy), check=False, requires_dist=pytest.fail, resolver=pytest.fail) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].strip() == f"stacks in {stacks_copy}"
    [header] = [[c.strip() for c in line.split("┃")[1:-1]] for line in lines if line.startswith("┃")]
    assert header == ["stack", "base image", "CUDA", "python", "torch", "kernel package", "flashinfer", "sglang",
                      "patches", "overrides"]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    assert rows == [
        ["cu130", "ubuntu:24.04", "13.0.1", "3.12", "2.9.1+cu130",
         "sgl-kernel 0.3.21+cu130", "0.6.4", "0.5.9", "kimi-k25-eagle3", "3"],
        ["cu129", "nvidia/cuda:12.9.1-cudnn-devel-ubuntu24.04", "12.9.1", "3.12", "2.9.1+cu129", "sgl-kernel 0.3.21",
         "0.6.3", "0.5.9", "kimi-k25-eagle3", "0"],
        ["pypi-cu130", "sglstack/base:debian12-slim", "13.0", "3.11", "2.14.1", "sglang-kernel 0.4.10",
         "0.7.2", "0.5.23", "kimi-k25-eagle3", "0"],
        ["pypi-cu130-gb", "sglstack/base:debian12-slim", "13.0", "3.11", "2.14.1", "sglang-kernel 0.4.10",
         "0.7.2", "0.5.23", "kimi-k25-eagle3", "0"],
        ["h200-field", "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04", "13.0", "3.12", "2.11.0", "sglang-kernel 0.4.5",
         "0.6.15.post1", "0.5.17", "-", "0"],
    ]


def test_stacks_table_marks_what_a_stack_leaves_out(tmp_path, capsys):
    cpu = tmp_path / "stacks-cpu.yaml"
    text = (REPO / "tests" / "fixtures" / "stacks-lock.yaml").read_text()
    cpu.write_text(text.replace("patches: [kimi-k25-eagle3]", "patches: []"))
    assert stacks_command(str(cpu), check=False) == 0
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in capsys.readouterr().out.splitlines()
            if line.startswith("│")]
    assert rows == [["cpu-lock", "debian:bookworm-slim", "-", "3.11", "-", "-", "-", "0.5.9", "-", "0"]]


def test_stacks_check_prints_one_line_per_finding_and_fails_on_problems(stacks_copy, cu130, capsys):
    matrix = load_matrix(stacks_copy)
    write_lock(lock_path(stacks_copy, "cu130"), _lock_of(matrix.get("cu130"), stack_sha256="0" * 64))
    requires = ["flashinfer_python==0.6.3", "cuda-python==12.9", "torch==2.9.0"]
    code = stacks_command(str(stacks_copy), check=True, resolve=True, requires_dist=lambda version: requires,
                          resolver=_resolver(cu130))
    out = capsys.readouterr().out.splitlines()
    at = out.index(next(line for line in out if "stack 'cu130'" in line))
    where = f"{stacks_copy}: stack"
    pin_conflict = ("pins torch=={} but sglang 0.5.9 requires 'torch==2.9.0': declare it under 'overrides' "
                    "(replaces: torch==2.9.0) or change the pin")
    locks = stacks_copy.parent / "locks"
    assert out[at:] == [
        f"      override {where} 'cu130': {FLASHINFER_OVERRIDE}",
        f"      override {where} 'cu130': {CUDA_PYTHON_OVERRIDE}",
        f"      conflict {where} 'cu130': {pin_conflict.format('2.9.1+cu130')}",
        f"stale-override {where} 'cu130': override replaces 'flashinfer_cubin==0.6.3', which sglang 0.5.9 does not "
        "require: remove or update it",
        f"      conflict {where} 'cu129': {pin_conflict.format('2.9.1+cu129')}",
        f"    stale-lock {where} 'cu130': {locks}/cu130.txt is older than the stack entry it locks: run invoke lock "
        "--stack cu130",
        f"       no-lock {where} 'cu129': no lock ({locks}/cu129.txt): the image is not reproducible to the last "
        "package; run invoke lock --stack cu129",
        f"    incomplete {where} 'cu130': resolver: layer torch (with dependencies): "
        "index https://download.pytorch.org/whl/cu130 unreachable",
        f"      resolved {where} 'cu130': the resolver found a consistent set of 3 packages",
        f"    incomplete {where} 'cu129': resolver: layer torch (with dependencies): "
        "index https://download.pytorch.org/whl/cu130 unreachable",
        f"      resolved {where} 'cu129': the resolver found a consistent set of 3 packages",
        "2 stacks, 4 problem(s); not checked whole: the resolver could not reach everything of cu129, cu130 "
        "(incomplete above)",
    ]
    assert code == 1


def test_stacks_check_passes_with_notices_only(stacks_copy, capsys):
    matrix = load_matrix(stacks_copy)
    for stack in matrix.stacks.values():
        write_lock(lock_path(stacks_copy, stack.name), _lock_of(stack))
    requires = ["flashinfer_python==0.6.3", "flashinfer_cubin==0.6.3", "cuda-python==12.9"]
    code = stacks_command(str(stacks_copy), check=True, requires_dist=lambda version: requires, resolver=pytest.fail)
    out = capsys.readouterr().out.splitlines()
    assert out[-4:] == [
        f"      override {stacks_copy}: stack 'cu130': {FLASHINFER_OVERRIDE}",
        f"      override {stacks_copy}: stack 'cu130': {CUBIN_OVERRIDE}",
        f"      override {stacks_copy}: stack 'cu130': {CUDA_PYTHON_OVERRIDE}",
        "2 stacks, 0 problem(s): matrix OK",
    ]
    assert code == 0


def test_stacks_check_resolve_that_could_not_reach_a_layer_is_not_ok(stacks_copy, capsys):
    matrix = load_matrix(stacks_copy)
    locks = {stack.name: _lock_of(stack) for stack in matrix.stacks.values()}
    for name, lock in locks.items():
        write_lock(lock_path(stacks_copy, name), lock)
    cut = UnresolvedLayer("torch", True, "index https://download.pytorch.org/whl/cu130 unreachable: dns error")

    def resolve(stack, previous=None):  # the index of one layer of cu130 is out of reach; the rest agrees
        lock = locks[stack.name]
        return replace(lock, unresolved=(cut,)) if stack.name == "cu130" else lock

    requires = ["flashinfer_python==0.6.3", "flashinfer_cubin==0.6.3", "cuda-python==12.9"]  # overrides: notices
    code = stacks_command(str(stacks_copy), check=True, resolve=True, requires_dist=lambda version: requires,
                          resolver=resolve)
    out = capsys.readouterr().out.splitlines()
    assert (f"    incomplete {stacks_copy}: stack 'cu130': resolver: layer torch (with dependencies): index "
            "https://download.pytorch.org/whl/cu130 unreachable: dns error") in out
    assert (code, out[-1]) == (1, "2 stacks, 0 problem(s); not checked whole: the resolver could not reach "
                                  "everything of cu130 (incomplete above)")


def test_check_resolve_refuses_a_lock_with_made_up_edges_that_a_fresh_resolution_does_not_hold(stacks_copy, capsys):
    """An entry added with a `# via` and its parent's `# requires:` made up and the `written-sha256` recomputed
    passes every offline check; resolving again from the lock (its pins preferred, as invoke lock does) shows it."""
    matrix = load_matrix(stacks_copy)
    honest = {name: _lock_of(stack) for name, stack in matrix.stacks.items()}
    evil = LockedPackage("evil", "1.0", "deps", ("sha256:" + "e" * 64,), required_by=("sglang",))
    forged = replace(honest["cu130"], packages=with_edges((*honest["cu130"].packages, evil)))
    for name, lock in {**honest, "cu130": forged}.items():
        write_lock(lock_path(stacks_copy, name), lock)
    asked = []

    def resolve(stack, previous=None):
        asked.append((stack.name, previous))
        return honest[stack.name]

    requires = ["flashinfer_python==0.6.3", "flashinfer_cubin==0.6.3", "cuda-python==12.9"]  # overrides: notices
    code = stacks_command(str(stacks_copy), check=True, resolve=True, requires_dist=lambda version: requires,
                          resolver=resolve)
    assert asked == [("cu130", forged), ("cu129", honest["cu129"])]
    out = capsys.readouterr().out.splitlines()
    assert (f"      bad-lock {stacks_copy}: stack 'cu130': not what invoke lock resolves now: evil==1.0 is in the "
            "lock, and nothing resolved needs it: run invoke lock --stack cu130") in out
    assert [line for line in out if "bad-lock" in line and "cu129" in line] == []
    assert (code, out[-1]) == (1, "2 stacks, 1 problem(s)")


def test_check_resolve_names_a_version_the_resolver_does_not_keep_and_skips_a_lock_seen_otherwise(cu130):
    lock = _lock_of(cu130)
    idna = replace(lock, packages=tuple(replace(p, version="3.6") if p.name == "idna" else p for p in lock.packages))
    assert resolve_findings(_matrix(cu130), lambda stack, previous=None: lock, {"cu130": idna})[-1] == Finding(
        "cu130", "bad-lock", "not what invoke lock resolves now: idna: 3.6 in the lock, 3.7 resolved: "
                             "run invoke lock --stack cu130")
    reached = replace(lock, unresolved=(UnresolvedLayer("torch", True, "index unreachable"),))
    assert resolve_findings(_matrix(cu130), lambda stack, previous=None: reached, {"cu130": idna})[-1] == Finding(
        "cu130", "incomplete", "the lock was not compared: the resolver reached other layers than when it was written")


def test_the_marker_environment_is_linux_cpython_on_any_host(monkeypatch):
    # run on a Mac with PyPy, the check still evaluates markers as the Linux CPython image will
    mac = {"implementation_name": "pypy", "implementation_version": "7.3.17", "os_name": "nt",
           "platform_machine": "arm64", "platform_release": "24.1.0", "platform_system": "Darwin",
           "platform_version": "Darwin Kernel", "python_full_version": "3.10.14",
           "platform_python_implementation": "PyPy", "python_version": "3.10", "sys_platform": "darwin"}
    monkeypatch.setattr(conflicts, "default_environment", lambda: mac)
    assert target_environment("3.12", "linux/amd64") == {
        "python_version": "3.12", "python_full_version": "3.12.0", "implementation_version": "3.12.0",
        "implementation_name": "cpython", "platform_python_implementation": "CPython", "sys_platform": "linux",
        "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64", "extra": "",
        "platform_release": "24.1.0", "platform_version": "Darwin Kernel"}


def test_an_sglang_wheel_without_requirements_requires_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(conflicts, "fetch_wheel", lambda name, version: _fake_sglang_wheel(tmp_path, []))
    assert sglang_requires_dist("9.9.9") == []
