"""`invoke lock` in process: the task's checks and words, the previous lock as the starting point, several
platforms, and each way a resolution can fail, against a scripted resolver that answers as uv does."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from uv_double import GRAPH, HASH_A, VERSIONS, Uv

from sglstack.adapters.uv import (
    ResolutionConflict,
    ResolvedPackage,
    ResolverError,
    SourceUnreachable,
)
from sglstack.cli.lock import lock_command
from sglstack.config.matrix import load_matrix
from sglstack.config.schema import FlashInferPin, KernelPin, Matrix, TorchPin
from sglstack.core import console as console_mod
from sglstack.core import progress as progress_mod
from sglstack.core.errors import ConfigError
from sglstack.lock import entries, flow
from sglstack.lock.conflicts import Finding, resolve_findings
from sglstack.lock.plan import GitTree, LockError, LockUnreachable, PlannedLayer, plan_layers, python_platform
from sglstack.lockfile.current import stack_input_hash
from sglstack.lockfile.model import UnresolvedLayer, lock_path
from sglstack.lockfile.text import read_lock, render_lock

HASH_B = "sha256:" + "b" * 64
KERNEL_INDEX = "https://kernels.example/simple"
STACKS = f"""
defaults:
  serving: {{model: org/model}}
stacks:
  tiny:
    base_image: debian:bookworm-slim
    glibc: "2.36"
    python: "3.11"
    sgl_kernel: {{package: sglang-kernel, version: "0.4.10", index_url: "{KERNEL_INDEX}"}}
    extra_layers:
      - {{name: jit, requirements: ["nvcc-tool==13.0.88"], no_deps: true}}
      - {{name: late, requirements: ["six==1.16.0"], after_sglang: true}}
    sglang: {{version: "0.5.23"}}
    overrides:
      - {{replaces: "requests==2.0", pin: "requests==2.32.5", reason: "a newer requests"}}
"""


REAL_LOCK_STACK = flow.lock_stack


@pytest.fixture
def stacks(tmp_path) -> Path:
    path = tmp_path / "stacks.yaml"
    path.write_text(STACKS)
    return path


@pytest.fixture
def tiny(stacks):
    return load_matrix(stacks).get("tiny")


# ---- the task --------------------------------------------------------------------------------------

def test_a_first_lock_is_written_and_a_second_starts_from_its_pins(stacks, tiny):
    uv = Uv()
    first = flow.lock_stack(stacks, "tiny", compile_fn=uv)
    assert first.previous is None and first.path == lock_path(stacks, "tiny") == stacks.parent / "locks" / "tiny.txt"
    assert read_lock(first.path).packages == first.lock.packages
    main = uv.requests[0]
    assert (main.preferences, main.upgrade_packages, main.python_platform) == ((), (), "x86_64-manylinux_2_36")
    assert [p.name for p in first.lock.packages if p.layer == "jit"] == ["nvcc-tool"]

    again = Uv()
    second = flow.lock_stack(stacks, "tiny", upgrade_packages=["IDNA"], compile_fn=again)
    assert second.previous is not None and second.previous.packages == first.lock.packages
    main = again.requests[0]
    assert main.upgrade_packages == ("idna",)  # canonical, as uv and the lock name it
    assert set(main.preferences) == {p.requirement for p in first.lock.packages if p.hashed}
    assert "idna==3.11" in main.preferences


@pytest.mark.parametrize("prepare,upgrade,message", [
    ("none", ["idna"], "stack 'tiny': --upgrade-package needs an existing lock ({path}): run invoke lock --stack tiny"),
    ("locked", ["no-such"], "stack 'tiny': --upgrade-package no-such: not in {path}"),
    ("locked", ["idn"], "stack 'tiny': --upgrade-package idn: not in {path}; did you mean 'idna'?"),
    ("unhashed", ["idna"], "stack 'tiny': --upgrade-package idna: not resolved in {path} (built from a local wheel)"),
])
def test_upgrade_package_is_checked_against_the_previous_lock_before_resolving(stacks, prepare, upgrade, message):
    path = lock_path(stacks, "tiny")
    if prepare != "none":
        flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    if prepare == "unhashed":
        text = path.read_text()
        text = re.sub(r"^idna==3\.11 \\\n(?:    --hash=\S+(?: \\)?\n)+", "# unhashed: idna==3.11 (built from a local "
                      "wheel)\n", text, flags=re.MULTILINE)
        path.write_text(text)
        assert not read_lock(path).get("idna").hashed
    uv = Uv()
    with pytest.raises(ConfigError) as err:
        flow.lock_stack(stacks, "tiny", upgrade_packages=upgrade, compile_fn=uv)
    assert str(err.value) == message.format(path=path) and uv.requests == []


def test_the_command_prints_what_it_locked_and_what_moved(stacks, capsys, monkeypatch):
    monkeypatch.setattr(flow, "lock_stack", functools.partial(REAL_LOCK_STACK, compile_fn=Uv()))
    assert lock_command(str(stacks), "tiny") == 0
    first = capsys.readouterr().out.splitlines()
    path = lock_path(stacks, "tiny")
    assert re.fullmatch(rf"tiny: locked 7 packages \(7 hashed\) for Python 3\.11 linux/amd64 in \d+\.\d+ s -> "
                        rf"{re.escape(str(path))}", first[0])
    assert len(first) == 1  # nothing before it to compare with
    monkeypatch.setitem(VERSIONS, "numpy", "2.3.5")
    assert lock_command(str(stacks), "tiny") == 0
    out = capsys.readouterr().out
    assert re.search(r"numpy\s.*2\.3\.4.*2\.3\.5", out)
    assert "packages: 0 added, 0 removed, 1 changed" in out
    assert "not known" not in out  # a lock holds no base, pins, patches or labels: nothing to say of them


def test_the_command_names_unresolved_layers_and_notes(stacks, capsys, monkeypatch):
    unreachable = SourceUnreachable(f"{KERNEL_INDEX}/sglang-kernel/", "dns error")
    monkeypatch.setattr(flow, "lock_stack", functools.partial(REAL_LOCK_STACK, compile_fn=Uv(unreachable)))
    assert lock_command(str(stacks), "tiny") == 1  # a partial lock is not a success
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"error: stack 'tiny': the lock is partial: 1 layer(s) not resolved: sglang-kernel (index {KERNEL_INDEX} "
        f"unreachable: dns error); {lock_path(stacks, 'tiny')} leaves them unhashed; check this machine's network, "
        "DNS and proxy settings (HTTPS_PROXY, NO_PROXY), or run where the host can be reached"]
    out = captured.out.splitlines()
    assert (f"tiny: not resolved: layer sglang-kernel (with dependencies): index {KERNEL_INDEX} unreachable: "
            "dns error") in out
    assert any(line.startswith("tiny: layer sglang-kernel was not resolved; sglang-kernel==0.4.10 from the default "
                               "index stood in for its pins") for line in out)


# ---- one resolution, several platforms -------------------------------------------------------------

def test_each_platform_gets_its_own_lock_resolved_for_its_tag(tiny):
    both = tiny.model_copy(update={"platforms": ("linux/amd64", "linux/arm64")})
    uv = Uv()
    locks = flow.resolve_platforms(both, compile_fn=uv)
    assert [(p, x.platforms, x.python_platforms) for p, x in locks.items()] == [
        ("linux/amd64", ("linux/amd64",), ("x86_64-manylinux_2_36",)),
        ("linux/arm64", ("linux/arm64",), ("aarch64-manylinux_2_36",))]
    assert {r.python_platform for r in uv.requests} == {"x86_64-manylinux_2_36", "aarch64-manylinux_2_36"}
    assert flow.resolve_stack(both, compile_fn=Uv()) == locks["linux/amd64"]
    assert {x.stack_sha256 for x in locks.values()} == {stack_input_hash(both)}


def test_platforms_that_resolve_a_package_to_two_versions_are_one_line_naming_both(tiny):
    both = tiny.model_copy(update={"platforms": ("linux/amd64", "linux/arm64")})
    with pytest.raises(LockError) as err:
        flow.resolve_stack(both, compile_fn=Uv(platforms_differ=True))
    assert str(err.value) == (
        f"stack 'tiny': the platforms resolve 1 package(s) to different versions: idna {VERSIONS['idna']} on "
        "linux/amd64, 3.10 on linux/arm64 (a release without a wheel for one platform makes the resolver fall back "
        "to an older one): pin versions every platform has wheels for")


def test_a_stack_of_several_platforms_resolves_wheels_only_and_says_why_a_source_release_is_refused(tiny, tmp_path):
    """Its wheels stage installs with `pip download --only-binary=:all:`: a lock that took a source release (antlr4-
    python3-runtime 4.9.3 has only an sdist) passed `lock` and `stacks --check`, and the build failed in its wheels
    stage. Every request of such a stack now asks uv for wheels only, and uv's refusal says why."""
    from sglstack.adapters.uv import compile_argv

    both = tiny.model_copy(update={"platforms": ("linux/amd64", "linux/arm64")})
    uv = Uv()
    flow.resolve_platforms(both, compile_fn=uv)
    assert uv.requests and all(r.only_binary for r in uv.requests)
    one = Uv()
    flow.resolve_stack(tiny, compile_fn=one)  # amd64 alone: pip installs in the image, sdists build there
    assert one.requests and not any(r.only_binary for r in one.requests)
    argv = compile_argv(uv.requests[0], tmp_path)
    assert argv[argv.index("--only-binary") + 1] == ":all:"
    assert "--only-binary" not in compile_argv(one.requests[0], tmp_path)
    sdist = ResolutionConflict("Because antlr4-python3-runtime==4.9.3 has no usable wheels and you require "
                               "antlr4-python3-runtime==4.9.3, we can conclude that your requirements are "
                               "unsatisfiable.")
    with pytest.raises(LockError) as err:
        flow.resolve_platforms(both, compile_fn=Uv(sdist))
    assert str(err.value).endswith(
        "; a stack built for linux/amd64 linux/arm64 installs wheels only (each is unpacked for its platform, never "
        "built): pin a version with a wheel for every platform")
    with pytest.raises(LockError) as err:
        flow.resolve_stack(tiny, compile_fn=Uv(sdist))
    assert "wheels only" not in str(err.value)


def test_a_package_only_one_platform_installs_is_no_disagreement(tiny):
    from dataclasses import replace

    both = tiny.model_copy(update={"platforms": ("linux/amd64", "linux/arm64")})
    uv = Uv()
    real = uv.resolve

    def resolve(request):
        r = real(request)
        if request.python_platform.startswith("aarch64"):  # an x86_64-only dependency (a platform marker)
            return replace(r, packages=tuple(p for p in r.packages if p.name != "idna"))
        return r

    uv.resolve = resolve  # type: ignore[method-assign]
    locks = flow.resolve_platforms(both, compile_fn=uv)
    assert locks["linux/amd64"].get("idna") is not None and locks["linux/arm64"].get("idna") is None


def test_each_platforms_lock_keeps_its_own_hashes(tiny):
    both = tiny.model_copy(update={"platforms": ("linux/amd64", "linux/arm64")})
    uv = Uv()
    uv.resolve = _two_hashes(uv.resolve)  # type: ignore[method-assign]
    locks = flow.resolve_platforms(both, compile_fn=uv)
    assert (locks["linux/amd64"].get("idna").hashes, locks["linux/arm64"].get("idna").hashes) == ((HASH_A,),
                                                                                                   (HASH_B,))


def _two_hashes(resolve):
    def answer(request):
        r = resolve(request)
        if request.python_platform.startswith("aarch64"):
            from dataclasses import replace
            return replace(r, packages=tuple(replace(p, hashes=(HASH_B,)) for p in r.packages))
        return r
    return answer


# ---- the parts of one resolution ---------------------------------------------------------------------

def test_the_lock_says_what_it_was_resolved_with(tiny, monkeypatch):
    monkeypatch.setattr(flow, "utc_timestamp", lambda: "2026-12-04T15:00:00Z")
    lock = flow.resolve_stack(tiny, compile_fn=Uv())
    assert lock.resolver == "uv 0.13.9 (uv pip compile --generate-hashes)"
    assert (lock.stack, lock.stack_sha256, lock.resolved_at) == ("tiny", stack_input_hash(tiny), "2026-12-04T15:00:00Z")
    assert lock.layers == ("sglang-kernel", "jit", "sglang-requirements", "late", "sglang")
    assert lock.indexes == ("https://pypi.org/simple",) and lock.sglang_commit is None
    assert [(p.name, p.layer) for p in lock.packages] == [
        ("numpy", "sglang-kernel"), ("sglang-kernel", "sglang-kernel"), ("nvcc-tool", "jit"),
        ("idna", "sglang-requirements"), ("requests", "sglang-requirements"), ("six", "late"), ("sglang", "sglang")]
    assert lock.get("nvcc-tool").required_by == ()  # a no-deps layer's entries name no parents


def test_the_main_request_carries_the_stacks_overrides_excludes_and_indexes(tiny):
    uv = Uv()
    flow.resolve_stack(tiny, compile_fn=uv)
    main, *no_deps = uv.requests
    assert main.requirements == ("sglang-kernel==0.4.10", "sglang==0.5.23", "six==1.16.0")
    assert main.overrides == ("requests==2.32.5",) and main.excludes == ("nvcc-tool",)
    assert main.indexes == (KERNEL_INDEX,) and main.python_version == "3.11"
    [jit] = no_deps
    assert (jit.requirements, jit.no_deps, jit.default_index, jit.indexes) == (("nvcc-tool==13.0.88",), True, None, ())


def test_an_unreachable_url_of_no_layer_is_one_line(tiny):
    with pytest.raises(LockError) as err:
        flow.resolve_stack(tiny, compile_fn=Uv(SourceUnreachable("https://elsewhere.example/x", "refused")))
    assert str(err.value) == "stack 'tiny': cannot reach https://elsewhere.example/x: refused"
    # out of reach decided nothing: `stacks --check --resolve` reports it as incomplete, not as a conflict
    assert isinstance(err.value, LockUnreachable)
    def resolve(stack, previous=None):
        return flow.resolve_stack(stack, compile_fn=Uv(SourceUnreachable("https://elsewhere.example/x", "refused")))
    finding = resolve_findings(Matrix(file="stacks.yaml", stacks={"tiny": tiny}), resolve)
    assert finding == [Finding("tiny", "incomplete", "cannot reach https://elsewhere.example/x: refused")]


def test_stand_ins_that_do_not_resolve_leave_their_layer_out_and_say_so(tiny):
    unreachable = SourceUnreachable(f"{KERNEL_INDEX}/sglang-kernel/", "dns error")
    uv = Uv(unreachable, ResolverError("no release sglang-kernel==0.4.10 on the default index"))
    lock = flow.resolve_stack(tiny, compile_fn=uv)
    assert lock.notes == ("no stand-in from the default index for sglang-kernel: no release sglang-kernel==0.4.10 "
                          "on the default index",)
    assert uv.requests[-1].excludes == ("nvcc-tool", "sglang-kernel")  # the no-deps layer's, then the left-out one's
    assert "sglang-kernel==0.4.10" not in uv.requests[-1].requirements
    kernel = lock.get("sglang-kernel")
    assert (kernel.version, kernel.layer, kernel.unhashed) == (
        "0.4.10", "sglang-kernel", f"index {KERNEL_INDEX} unreachable: dns error")


@pytest.mark.parametrize("error,message", [
    (ResolutionConflict("Because you require idna==1.0 and idna==2.0, we can conclude that your requirements are "
                        "unsatisfiable."),
     "stack 'tiny': the resolver found a conflict for x86_64-manylinux_2_36: the stack requires idna==1.0; the "
     "stack requires idna==2.0 (uv: Because you require idna==1.0 and idna==2.0, we can conclude that your "
     "requirements are unsatisfiable.)"),
    (ResolverError("uv crashed"), "stack 'tiny': uv crashed"),
])
def test_a_main_resolution_that_fails_is_one_line(tiny, error, message):
    with pytest.raises(LockError) as err:
        flow.resolve_stack(tiny, compile_fn=Uv(error))
    assert str(err.value) == message


def test_a_no_deps_layer_the_resolver_refuses_is_one_line(tiny):
    uv = Uv()
    real = uv.resolve
    uv.resolve = lambda r: ResolverError("no such version") if r.no_deps else real(r)  # type: ignore[method-assign]
    with pytest.raises(LockError) as err:
        flow.resolve_stack(tiny, compile_fn=uv)
    assert str(err.value) == "stack 'tiny': layer jit: no such version"


def test_an_unreachable_no_deps_layer_is_kept_unhashed(tiny):
    uv = Uv()
    real = uv.resolve
    uv.resolve = lambda r: (SourceUnreachable("https://pypi.org/simple/nvcc-tool/", "timeout") if r.no_deps
                            else real(r))  # type: ignore[method-assign]
    lock = flow.resolve_stack(tiny, compile_fn=uv)
    tool = lock.get("nvcc-tool")
    assert (tool.version, tool.layer, tool.hashes) == ("13.0.88", "jit", ())
    assert tool.unhashed == "https://pypi.org/simple/nvcc-tool/ unreachable: timeout"
    assert [str(u) for u in lock.unresolved] == [
        "jit (no dependencies): https://pypi.org/simple/nvcc-tool/ unreachable: timeout"]


def test_a_direct_url_without_a_version_in_the_stack_is_refused(tiny):
    layer = PlannedLayer("x", ("thing @ https://files.example/thing.whl",))
    with pytest.raises(LockError) as err:
        entries.hashed_entries(tiny, layer, (ResolvedPackage(name="thing", version="", url="https://files.example/thing.whl"),))
    assert str(err.value) == ("stack 'tiny': layer x: thing @ https://files.example/thing.whl has no version pinned "
                              "in the stack")
    [entry] = entries.hashed_entries(tiny, layer, (ResolvedPackage(name="sglang-kernel", version="", url="https://f/k.whl",
                                                         required_by=("a",)),), required_by=False, note="n")
    assert (entry.version, entry.unhashed, entry.required_by, entry.note) == (
        "0.4.10", "the index serves no sha256 for its files", (), "n")


def test_a_git_sglang_is_locked_at_its_trees_version_never_its_path(tiny, tmp_path):
    tree = GitTree(tmp_path / "export", "0123456789ab" * 3 + "0123", "0.5.24.dev1")
    layer = PlannedLayer("sglang", (f"sglang @ {(tmp_path / 'export').as_uri()}",))
    [entry] = entries.unhashed_entries(tiny, layer, "index down", tree)
    assert (entry.name, entry.version, entry.layer, entry.url) == ("sglang", "0.5.24.dev1", "sglang", None)
    assert entry.unhashed == f"{tree.reason}; index down" and str(tmp_path) not in entry.unhashed
    [plain] = entries.unhashed_entries(tiny, PlannedLayer("late", ("Six==1.16.0",)), "index down")
    assert (plain.name, plain.version, plain.layer, plain.unhashed) == ("six", "1.16.0", "late", "index down")


@pytest.mark.parametrize("requirement,public", [
    ("torch==2.9.1+cu130", "torch==2.9.1"), ("torch==2.9.1", "torch==2.9.1"), ("torch>=2.9", None),
    ("torch @ https://x.example/torch.whl", None), ("torch", None),
])
def test_the_public_release_that_stands_in_for_a_local_build(requirement, public):
    assert entries.public_pin(requirement) == public


def test_an_unreachable_url_names_its_layer_by_index_or_by_direct_url():
    index = PlannedLayer("torch", ("torch==2.9.1+cu130",), "https://download.pytorch.org/whl/cu130/")
    direct = PlannedLayer("k", ("k @ https://github.com/o/r/releases/k.whl#sha256=00",))
    layers = (index, direct)
    assert entries.owner_of("https://download.pytorch.org/whl/cu130/torch/", layers) is index
    assert entries.owner_of("https://github.com/o/r/releases/k.whl", layers) is direct
    assert entries.owner_of("https://github.com/o/r/releases/other.whl", layers) is None
    gone = SourceUnreachable("https://download.pytorch.org/whl/cu130/torch/", "dns")
    assert entries.unreachable_reason(gone, index) == "index https://download.pytorch.org/whl/cu130/ unreachable: dns"
    assert entries.unreachable_reason(gone) == "https://download.pytorch.org/whl/cu130/torch/ unreachable: dns"
    assert entries.unreachable_reason(SourceUnreachable("https://x.example/", "")) == "https://x.example/ unreachable"


def test_an_index_is_matched_as_a_prefix_whatever_its_last_letters():
    linux = PlannedLayer("l", ("l==1",), "https://pkgs.example/LINUX")
    assert entries.owner_of("https://pkgs.example/LINUX/", (linux,)) is linux
    assert entries.owner_of("https://pkgs.example/LINUY/l/", (linux,)) is None
    assert entries.owner_of("/https://pkgs.example/LINUX/l/", (linux,)) is None  # a prefix from the first letter only
    slashed = PlannedLayer("t", ("t==1",), "https://t.example/whl/")
    assert entries.unreachable_reason(SourceUnreachable("https://t.example/whl", "dns"), slashed) == (
        "index https://t.example/whl/ unreachable: dns")
    assert entries.unreachable_reason(SourceUnreachable("https://pkgs.example/LINUY", "dns"), linux) == (
        "https://pkgs.example/LINUY unreachable: dns")


@pytest.mark.parametrize("explanation,message", [
    ("Because you require a==1 and a==2, we can conclude that your requirements are unsatisfiable.",
     "the stack requires a==1; the stack requires a==2 (uv: Because you require a==1 and a==2, we can conclude "
     "that your requirements are unsatisfiable.)"),
    ("something   uv   said", "something uv said"),
])
def test_a_conflict_message_has_both_sides_and_uvs_reason(explanation, message):
    assert entries.conflict_message(ResolutionConflict(explanation)) == message


def test_the_closure_follows_only_allowed_names():
    children = {"a": {"b", "c"}, "b": {"d"}, "c": {"a"}}
    assert entries.closure(["a"], children, {"a", "b", "c", "d"}) == {"a", "b", "c", "d"}
    assert entries.closure(["a"], children, {"a", "c"}) == {"a", "c"}
    assert entries.closure(["x", "a"], children, {"a"}) == {"a"}
    assert entries.closure(["x", "a", "a"], {}, {"a", "x"}) == {"a", "x"}  # a name met twice is skipped, not the end


def test_plan_layers_in_install_order(tiny):
    planned = plan_layers(tiny, "linux/amd64")
    assert [(x.name, x.requirements, x.index_url, x.exclusive_index, x.no_deps) for x in planned] == [
        ("sglang-kernel", ("sglang-kernel==0.4.10",), KERNEL_INDEX, True, False),
        ("jit", ("nvcc-tool==13.0.88",), None, True, True),
        ("sglang-requirements", ("sglang==0.5.23",), None, False, False),
        ("late", ("six==1.16.0",), None, True, False),
        ("sglang", ("sglang==0.5.23",), None, False, False),
    ]
    assert python_platform("linux/arm64", "2.39") == "aarch64-manylinux_2_39"


# ---- a git SGLang's version, and the base image's glibc ----------------------------------------------

GIT_STACK = {"name": "g", "base_image": "debian:bookworm-slim", "serving": {"model": "m"},
             "sglang": {"git": {"repo": "https://github.com/sgl-project/sglang", "ref": "ab" * 20}}}


@pytest.mark.parametrize("text,problem", [
    (None, "cannot read it ("),
    ("[project\n", "cannot read it ("),
    ("[project]\nname = 'sglang'\n", "no static [project] version (the lock pins the version the image installs)"),
    ("[project]\nversion = ''\n", "no static [project] version (the lock pins the version the image installs)"),
    ("[project]\nversion = 5\n", "no static [project] version (the lock pins the version the image installs)"),
    ("[tool.other]\nversion = '1.0'\n", "no static [project] version (the lock pins the version the image installs)"),
])
def test_a_git_sglang_needs_a_static_version_in_its_pyproject(tmp_path, text, problem):
    from sglstack.config.schema import Stack
    from sglstack.lock.plan import _static_version

    stack = Stack.model_validate(GIT_STACK)
    pyproject = tmp_path / "sglang-src" / "pyproject.toml"
    pyproject.parent.mkdir()
    if text is not None:
        pyproject.write_text(text)
    with pytest.raises(LockError) as err:
        _static_version(stack, pyproject)
    assert str(err.value).startswith(f"stack 'g': sglang.git sglang-src/pyproject.toml at {'ab' * 6}: {problem}")
    pyproject.write_text("[project]\nname = 'sglang'\nversion = '0.5.24.dev1'\n")
    assert _static_version(stack, pyproject) == "0.5.24.dev1"


def test_a_git_sglangs_pyproject_is_read_as_utf8_whatever_the_locale(tmp_path, monkeypatch):
    from sglstack.config.schema import Stack
    from sglstack.lock.plan import _static_version

    pyproject = tmp_path / "sglang-src" / "pyproject.toml"
    pyproject.parent.mkdir()
    pyproject.write_text("[project]\nversion = '0.5.24'\nauthors = [{name = 'Zoë'}]\n", encoding="utf-8")
    # A machine whose locale is plain ASCII (LANG=C without Python's UTF-8 mode).
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None, errors=None: self.read_bytes().decode(
        encoding or "ascii"))
    assert _static_version(Stack.model_validate(GIT_STACK), pyproject) == "0.5.24"


class FakeEngine:
    def __init__(self, files: dict[str, bytes] | None) -> None:
        self.files, self.asked = files, []


def test_the_base_images_glibc_is_read_from_its_libc_when_the_engine_has_it(tiny, monkeypatch):
    from sglstack.lock import plan

    engine = FakeEngine({"/lib/x86_64-linux-gnu/libc.so.6": b"..GNU C Library (Debian GLIBC 2.36-9) stable release "
                                                              b"version 2.36.\n.."})
    hosts = []
    monkeypatch.setattr(plan, "docker_client", lambda host: hosts.append(host) or engine)

    def exists(client, ref):
        engine.asked.append(("exists", client is engine, ref))
        return engine.files is not None

    def read(client, ref, paths):
        engine.asked.append(("read", client is engine, ref, tuple(paths)))
        return {p: engine.files[p] for p in paths if p in engine.files}

    monkeypatch.setattr(plan, "image_exists", exists)
    monkeypatch.setattr(plan, "read_image_files", read)
    assert plan.base_image_glibc(tiny, "tcp://engine.example:2375") == "2.36"
    assert hosts == ["tcp://engine.example:2375"]
    assert engine.asked == [("exists", True, "debian:bookworm-slim"),
                            ("read", True, "debian:bookworm-slim", tuple(plan.LIBC_PATHS["linux/amd64"]))]
    engine.files = {"/lib/x86_64-linux-gnu/libc.so.6": b"no banner"}
    assert plan.base_image_glibc(tiny) is None
    engine.files = None  # not on the engine: never pulled
    assert plan.base_image_glibc(tiny) is None

    def down(host):
        raise plan.DockerUnavailable("no engine")

    monkeypatch.setattr(plan, "docker_client", down)
    assert plan.base_image_glibc(tiny) is None


# ---- layers out of reach, a git SGLang, SGLang without its requirements -------------------------------

def test_two_layers_out_of_reach_are_both_kept_unhashed_with_their_stand_ins_named(tiny):
    torch_index = "https://download.pytorch.org/whl/cu130"
    stack = tiny.model_copy(update={"torch": TorchPin.model_validate(
        {"version": "2.9.1+cu130", "index_url": torch_index, "packages": ["torchvision==0.24.1+cu130"]})})
    GRAPH.update({"torch": [], "torchvision": ["torch"]})
    VERSIONS.update({"torch": "2.9.1", "torchvision": "0.24.1"})
    try:
        uv = Uv(SourceUnreachable(f"{torch_index}/torch/", "dns"), SourceUnreachable(f"{KERNEL_INDEX}/x/", "dns"))
        lock = flow.resolve_stack(stack, compile_fn=uv)
    finally:
        for name in ("torch", "torchvision"):
            GRAPH.pop(name)
            VERSIONS.pop(name)
    assert [str(u) for u in lock.unresolved] == [
        f"torch (with dependencies): index {torch_index} unreachable: dns",
        f"sglang-kernel (with dependencies): index {KERNEL_INDEX} unreachable: dns"]
    assert {p.name: p.unhashed for p in lock.packages if not p.hashed} == {
        "torch": f"index {torch_index} unreachable: dns", "torchvision": f"index {torch_index} unreachable: dns",
        "sglang-kernel": f"index {KERNEL_INDEX} unreachable: dns"}
    assert lock.get("torch").version == "2.9.1+cu130" and lock.get("torchvision").version == "0.24.1+cu130"
    [torch_note, kernel_note] = lock.notes
    assert torch_note == ("layer torch was not resolved; torch==2.9.1 torchvision==0.24.1 from the default index "
                          "stood in for its pins, so that what it shares with the rest of the stack is locked at "
                          "versions that satisfy that release; 1 package(s) only the stand-ins need are not locked "
                          "(the layer brings its own from its index)")
    assert kernel_note.startswith("layer sglang-kernel was not resolved; sglang-kernel==0.4.10 from the default")
    assert lock.get("numpy") is None  # only the kernel's stand-in needs it: the layer brings its own
    assert lock.get("idna").note is None


def test_a_git_sglang_is_resolved_from_its_tree_and_locked_as_the_wheel_the_image_builds(tmp_path, monkeypatch):
    import contextlib

    from sglstack.config.schema import Stack

    stack = Stack.model_validate({**GIT_STACK, "python": "3.11", "glibc": "2.36"})
    tree = GitTree(tmp_path / "sglang-src", "ab" * 20, "0.5.24.dev1")
    monkeypatch.setattr(flow, "git_tree", lambda s: contextlib.nullcontext(tree))
    uv = Uv()
    lock = flow.resolve_stack(stack, compile_fn=uv)
    assert uv.requests[0].requirements == (f"sglang @ {tree.path.resolve().as_uri()}",)
    sglang = lock.get("sglang")
    assert (sglang.version, sglang.layer, sglang.hashes, sglang.url, sglang.unhashed) == (
        "0.5.24.dev1", "sglang", (), None, f"built in the image from git commit {'ab' * 20}")
    assert lock.sglang_commit == "ab" * 20 and str(tmp_path) not in render_lock(lock)
    assert lock.get("requests").hashed and lock.get("requests").layer == "sglang-requirements"


def test_without_sglangs_requirements_what_the_last_deps_layer_needs_stays_in_it(tiny):
    stack = tiny.model_copy(update={"sglang": tiny.sglang.model_copy(update={"install_deps": False})})
    lock = flow.resolve_stack(stack, compile_fn=Uv())
    assert lock.layers == ("sglang-kernel", "jit", "late", "sglang")
    assert {p.name: p.layer for p in lock.packages} == {
        "numpy": "sglang-kernel", "sglang-kernel": "sglang-kernel", "nvcc-tool": "jit", "six": "late",
        "sglang": "sglang"}
    assert lock.get("sglang").hashed  # hashed on its own, with no dependencies


# ---- no-deps layers with their own indexes; the base image's glibc; a git source out of reach ----------

WIDE = """
stacks:
  wide:
    base_image: debian:bookworm-slim
    python: "3.11"
    serving: {model: org/model}
    extra_layers:
      - {name: own-index, requirements: ["tool-a==1.0"], no_deps: true, index_url: "https://a.example/simple"}
      - {name: public, requirements: ["tool-b==2.0"], no_deps: true}
      - {name: gone, requirements: ["tool-c==3.0"], no_deps: true, index_url: "https://c.example/simple"}
    sglang: {version: "0.5.23"}
"""


class IndexedUv(Uv):
    """Each no-deps layer answered from its own index; the one on c.example is out of reach."""

    def resolve(self, request):
        if request.no_deps and request.default_index == "https://c.example/simple":
            return SourceUnreachable("https://c.example/simple/tool-c/", "refused")
        r = super().resolve(request)
        from dataclasses import replace
        where = request.default_index or "https://pypi.org/simple"
        return replace(r, packages=tuple(replace(p, index=where) for p in r.packages))


def test_no_deps_layers_resolve_each_from_its_own_index_and_one_out_of_reach_is_kept(tmp_path, monkeypatch):
    (tmp_path / "stacks.yaml").write_text(WIDE)
    asked = []
    monkeypatch.setattr(flow, "base_image_glibc", lambda stack: asked.append(stack.name) or "2.39")  # its base image's
    uv = IndexedUv()
    result = flow.lock_stack(tmp_path / "stacks.yaml", "wide", compile_fn=uv)
    main, *no_deps = uv.requests
    assert main.python_platform == "x86_64-manylinux_2_39" and main.excludes == ("tool-a", "tool-b", "tool-c")
    assert [(r.requirements, r.default_index, r.indexes, r.python_version, r.python_platform, r.logins)
            for r in no_deps] == [
        (("tool-a==1.0",), "https://a.example/simple", (), "3.11", "x86_64-manylinux_2_39", ()),
        (("tool-b==2.0",), None, (), "3.11", "x86_64-manylinux_2_39", ()),
        (("tool-c==3.0",), "https://c.example/simple", (), "3.11", "x86_64-manylinux_2_39", ())]
    lock = result.lock
    assert lock.python_platforms == ("x86_64-manylinux_2_39",) and asked == ["wide"]
    assert lock.indexes == ("https://pypi.org/simple", "https://a.example/simple")
    assert [(p.name, p.layer, p.hashed) for p in lock.packages if p.name.startswith("tool-")] == [
        ("tool-a", "own-index", True), ("tool-b", "public", True), ("tool-c", "gone", False)]
    assert lock.get("tool-c").unhashed == "index https://c.example/simple unreachable: refused"
    assert lock.unresolved == (UnresolvedLayer("gone", False, "index https://c.example/simple unreachable: refused"),)
    assert lock.get("tool-a").required_by == ()
    text = result.path.read_text()
    assert "Written by `invoke lock --stack wide`" in text and "stacks.yaml" in text.splitlines()[0]
    assert "# unresolved-layer: gone (no dependencies): index https://c.example/simple unreachable: refused" in text


def test_a_git_sglang_out_of_reach_leaves_its_requirements_and_itself_unresolved(tmp_path, monkeypatch):
    import contextlib

    from sglstack.config.schema import Stack

    stack = Stack.model_validate({**GIT_STACK, "python": "3.11", "glibc": "2.36"})
    tree = GitTree(tmp_path / "sglang-src", "ab" * 20, "0.5.24.dev1")
    monkeypatch.setattr(flow, "git_tree", lambda s: contextlib.nullcontext(tree))
    url = tree.path.resolve().as_uri()
    lock = flow.resolve_stack(stack, compile_fn=Uv(SourceUnreachable(url, "no pyproject")))
    assert lock.unresolved == (UnresolvedLayer("sglang-requirements", True, f"{url} unreachable: no pyproject"),
                               UnresolvedLayer("sglang", False, f"{url} unreachable: no pyproject"))
    [sglang] = lock.packages
    assert (sglang.name, sglang.version, sglang.layer, sglang.url) == ("sglang", "0.5.24.dev1", "sglang", None)
    assert sglang.unhashed == f"built in the image from git commit {'ab' * 20}; {url} unreachable: no pyproject"


# ---- the planned layers, and the small rules of the entries --------------------------------------------

def test_each_planned_layer_says_which_index_it_installs_from_and_how(tiny):
    stack = tiny.model_copy(update={
        "torch": TorchPin.model_validate({"version": "2.9.1+cu130", "index_url": "https://t.example/cu130"}),
        "flashinfer": FlashInferPin.model_validate({"version": "0.6.4", "index_url": "https://f.example/simple"}),
        "sgl_kernel": KernelPin.model_validate({"version": "0.3.21", "url": "https://k.example/{arch}/k.whl"})})
    layers = {x.name: x for x in plan_layers(stack, "linux/arm64")}
    assert (layers["torch"].index_url, layers["torch"].exclusive_index, layers["torch"].no_deps) == (
        "https://t.example/cu130", True, False)
    assert (layers["flashinfer"].index_url, layers["flashinfer"].exclusive_index) == ("https://f.example/simple", False)
    assert layers["sgl-kernel"].requirements == ("sgl-kernel @ https://k.example/aarch64/k.whl",)
    assert layers["sgl-kernel"].no_deps and layers["sgl-kernel"].index_url is None


def test_an_unreachable_direct_url_is_matched_without_its_fragment_or_trailing_slashes():
    index = PlannedLayer("torch", ("torch==2.9.1",), "https://t.example/whl/")
    direct = PlannedLayer("k", ("k @ https://k.example/k.whl",))
    assert entries.owner_of("https://t.example/whl", (index,)) is index
    assert entries.owner_of("https://t.example/whl/torch/", (PlannedLayer("t", ("t==1",), "https://t.example/whl"),))
    assert entries.owner_of("https://k.example/k.whl#sha256=00", (direct,)) is direct
    assert entries.owner_of("//t.example/whl/torch/", (index,)) is None


def test_an_unhashed_layer_keeps_every_requirement_and_its_url(tiny, tmp_path):
    tree = GitTree(tmp_path / "src", "cd" * 20, "0.5.24")
    layer = PlannedLayer("sglang-requirements", (f"sglang @ {tmp_path.as_uri()}", "extra @ https://e.example/e.whl",
                                                 "sglang-kernel==0.4.10"))
    unhashed = entries.unhashed_entries(tiny, layer, "down", tree)
    assert [(e.name, e.version, e.layer, e.url) for e in unhashed] == [
        ("sglang", "0.5.24", "sglang", None), ("extra", "", "sglang-requirements", "https://e.example/e.whl"),
        ("sglang-kernel", "0.4.10", "sglang-requirements", None)]
    [plain_sglang] = entries.unhashed_entries(tiny, PlannedLayer("sglang", ("sglang==0.5.23",)), "down")
    assert (plain_sglang.version, plain_sglang.layer) == ("0.5.23", "sglang")
    # Without a git tree, SGLang is still its own layer's, and a direct URL takes the stack's pin of its name.
    found = entries.unhashed_entries(tiny, PlannedLayer("sglang-requirements", (
        "sglang==0.5.23", "sglang-kernel @ https://k.example/k.whl")), "down")
    assert [(e.name, e.version, e.layer, e.url, e.unhashed) for e in found] == [
        ("sglang", "0.5.23", "sglang", None, "down"),
        ("sglang-kernel", "0.4.10", "sglang-requirements", "https://k.example/k.whl", "down")]


def test_a_hashed_direct_url_keeps_its_url_and_parents(tiny):
    layer = PlannedLayer("k", ("sglang-kernel @ https://k.example/k.whl",))
    [entry] = entries.hashed_entries(tiny, layer, (ResolvedPackage(name="sglang-kernel", version="", url="https://k.example/k.whl",
                                                         hashes=(HASH_B, HASH_A), required_by=("sglang",)),))
    assert (entry.version, entry.url, entry.hashes, entry.required_by, entry.unhashed) == (
        "0.4.10", "https://k.example/k.whl", (HASH_A, HASH_B), ("sglang",), None)


def test_what_the_stand_ins_share_with_the_stack_is_noted(tiny):
    unreachable = SourceUnreachable(f"{KERNEL_INDEX}/sglang-kernel/", "dns error")
    GRAPH["requests"] = ["idna", "numpy"]  # numpy: needed by the kernel's stand-in and by requests
    try:
        lock = flow.resolve_stack(tiny, compile_fn=Uv(unreachable))
    finally:
        GRAPH["requests"] = ["idna"]
    assert lock.get("numpy").note == ("also needed by the unresolved sglang-kernel layer: checked against its "
                                      "stand-ins")
    assert lock.get("idna").note is None and lock.get("numpy").layer == "sglang-requirements"


# ---- requests and answers in detail ------------------------------------------------------------------

def test_a_no_deps_request_takes_its_layers_index_as_the_only_one_or_as_one_more(tiny):
    from sglstack.core.credentials import HostLogin

    login = HostLogin("a.example", "me", "secret")
    stack = tiny.model_copy(update={"credentials": (login,)})
    only = entries.no_deps_request(stack, PlannedLayer("a", ("a==1",), "https://a.example/simple", True, True), "t")
    more = entries.no_deps_request(stack, PlannedLayer("b", ("b==1",), "https://b.example/simple", False, True), "t")
    assert (only.default_index, only.indexes, only.logins, only.no_deps) == ("https://a.example/simple", (), (login,),
                                                                             True)
    assert (more.default_index, more.indexes, more.logins) == (None, ("https://b.example/simple",), (login,))


def test_the_stacks_logins_go_with_every_request(tiny):
    from sglstack.core.credentials import HostLogin

    login = HostLogin("kernels.example", "me", "secret")
    uv = Uv()
    flow.resolve_stack(tiny.model_copy(update={"credentials": (login,)}), compile_fn=uv)
    assert [(r.no_deps, r.logins) for r in uv.requests] == [(False, (login,)), (True, (login,))]


def test_only_hashed_index_entries_of_the_previous_lock_are_preferences(tiny):
    from dataclasses import replace

    first = flow.resolve_stack(tiny, compile_fn=Uv())
    changed = {"idna": {"hashes": (), "unhashed": "built from a local wheel"},
               "six": {"url": "https://s.example/six-1.16.0-py3-none-any.whl"}}
    previous = replace(first, packages=tuple(replace(p, **changed.get(p.name, {})) for p in first.packages))
    uv = Uv()
    flow.resolve_stack(tiny, previous=previous, compile_fn=uv)
    assert uv.requests[0].preferences == ("numpy==2.3.4", "sglang-kernel==0.4.10", "nvcc-tool==13.0.88",
                                          "requests==2.32.5", "sglang==0.5.23")


def test_a_resolver_that_answers_fewer_requests_than_it_was_asked_is_not_trusted(tiny):
    uv = Uv()
    with pytest.raises(ValueError, match="zip"):
        flow.resolve_stack(tiny, compile_fn=lambda requests: uv(requests)[:-1])


def test_a_git_sglang_keeps_its_no_deps_layers_hashed_on_their_own(tmp_path, monkeypatch):
    import contextlib

    from sglstack.config.schema import Stack

    stack = Stack.model_validate({**GIT_STACK, "python": "3.11", "glibc": "2.36", "extra_layers": [
        {"name": "jit", "requirements": ["nvcc-tool==13.0.88"], "no_deps": True}]})
    tree = GitTree(tmp_path / "sglang-src", "ab" * 20, "0.5.24.dev1")
    monkeypatch.setattr(flow, "git_tree", lambda s: contextlib.nullcontext(tree))
    uv = Uv()
    lock = flow.resolve_stack(stack, compile_fn=uv)
    assert [r.requirements for r in uv.requests if r.no_deps] == [("nvcc-tool==13.0.88",)]
    assert uv.requests[0].excludes == ("nvcc-tool",)
    tool = lock.get("nvcc-tool")
    assert (tool.layer, tool.version, tool.hashed) == ("jit", "13.0.88", True)


def test_what_only_a_git_sglang_without_its_requirements_layer_needs_stays_in_the_last_layer(tmp_path, monkeypatch):
    import contextlib

    from sglstack.config.schema import Stack

    stack = Stack.model_validate({**GIT_STACK, "python": "3.11", "glibc": "2.36", "extra_layers": [
        {"name": "tools", "requirements": ["six==1.16.0"]},
        {"name": "more", "requirements": ["idna==3.11"]},
        {"name": "plugin", "requirements": ["plugin==1.0"], "after_sglang": True}],
        "sglang": {**GIT_STACK["sglang"], "install_deps": False}})
    tree = GitTree(tmp_path / "sglang-src", "ab" * 20, "0.5.24.dev1")
    monkeypatch.setattr(flow, "git_tree", lambda s: contextlib.nullcontext(tree))
    monkeypatch.setitem(GRAPH, "plugin", ["sglang"])  # the plugin brings SGLang's own requirements
    lock = flow.resolve_stack(stack, compile_fn=Uv())
    assert lock.layers == ("tools", "more", "plugin", "sglang")
    assert {p.name: p.layer for p in lock.packages} == {
        "six": "tools", "idna": "more", "plugin": "plugin", "requests": "plugin", "sglang-kernel": "plugin",
        "numpy": "plugin", "sglang": "sglang"}
    assert lock.get("sglang").unhashed == f"built in the image from git commit {'ab' * 20}"


WHEEL = "https://github.com/o/r/releases/download/v1/flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl"


def _with_a_wheel_layer(tiny):
    from sglstack.config.schema import PipLayer

    wheels = PipLayer.model_validate({"name": "wheels", "requirements": [f"flash-attn @ {WHEEL}"]})
    return tiny.model_copy(update={"extra_layers": (*tiny.extra_layers, wheels)})


def test_a_direct_wheel_of_a_layer_with_dependencies_out_of_reach_is_kept_with_its_url(tiny):
    lock = flow.resolve_stack(_with_a_wheel_layer(tiny), compile_fn=Uv(SourceUnreachable(WHEEL, "dns")))
    wheel = lock.get("flash-attn")
    assert (wheel.version, wheel.layer, wheel.url, wheel.unhashed) == ("", "wheels", WHEEL, f"{WHEEL} unreachable: dns")
    assert lock.unresolved == (UnresolvedLayer("wheels", True, f"{WHEEL} unreachable: dns"),)
    assert lock.notes == ()  # a direct URL has no public release to stand in for it


def test_a_resolved_direct_wheel_without_a_version_in_the_stack_is_refused(tiny):
    from dataclasses import replace

    uv = Uv()
    real = uv.resolve

    def resolve(request):
        r = real(request)
        return replace(r, packages=tuple(replace(p, version="", url=WHEEL) if p.name == "flash-attn" else p
                                         for p in r.packages))

    uv.resolve = resolve  # type: ignore[method-assign]
    with pytest.raises(LockError) as err:
        flow.resolve_stack(_with_a_wheel_layer(tiny), compile_fn=uv)
    assert str(err.value) == f"stack 'tiny': layer wheels: flash-attn @ {WHEEL} has no version pinned in the stack"


def test_a_no_deps_wheel_by_url_takes_the_stacks_version_and_names_no_parents(tiny):
    from dataclasses import replace

    stack = tiny.model_copy(update={"sgl_kernel": KernelPin.model_validate(
        {"package": "sglang-kernel", "version": "0.4.10", "url": "https://k.example/{arch}/k.whl"})})
    uv = Uv()
    real = uv.resolve

    def resolve(request):  # uv names the requirement's parents even with --no-deps
        r = real(request)
        if not request.no_deps:
            return r
        url = Requirement(request.requirements[0]).url
        return replace(r, packages=tuple(replace(p, version="" if url else p.version, url=url, required_by=("sglang",))
                                         for p in r.packages))

    uv.resolve = resolve  # type: ignore[method-assign]
    lock = flow.resolve_stack(stack, compile_fn=uv)
    kernel, tool = lock.get("sglang-kernel"), lock.get("nvcc-tool")
    assert (kernel.version, kernel.url, kernel.required_by, kernel.hashed) == (
        "0.4.10", "https://k.example/x86_64/k.whl", (), True)
    assert (tool.version, tool.required_by) == ("13.0.88", ())


# ---- the retries of the main resolution ----------------------------------------------------------------

MANY = """
stacks:
  many:
    base_image: debian:bookworm-slim
    glibc: "2.36"
    python: "3.11"
    serving: {model: org/model}
    extra_layers:
      - {name: e1, requirements: ["p1==1.0+e1"], index_url: "https://e1.example/simple"}
      - {name: e2, requirements: ["p2==1.0+e2"], index_url: "https://e2.example/simple"}
      - {name: e3, requirements: ["p3==1.0+e3"], index_url: "https://e3.example/simple"}
      - {name: e4, requirements: ["LAST"], index_url: "https://e4.example/simple"}
    sglang: {version: "0.5.23"}
"""


class NoIndexUv(Uv):
    """Every extra index is out of reach, and no stand-in resolves from the default index."""

    def resolve(self, request):
        if any(r.startswith("p") and r.endswith("==1.0") for r in request.requirements):  # p1==1.0 for p1==1.0+e1
            return ResolverError("no stand-in on the default index")
        if request.indexes:
            return SourceUnreachable(f"{request.indexes[0]}/p/", "dns")
        return super().resolve(request)


@pytest.mark.parametrize("last,attempts,error", [
    # 7 failures (3 layers each out of reach, then their stand-in not resolving; the 4th has none): the 8th locks
    ("p4 @ https://e4.example/p4-1.0-py3-none-any.whl", 8, None),
    # 8 failures: after len(plan) + 1 = 7 of them, the next answer is the error
    ("p4==1.0+e4", 8, "stack 'many': no stand-in on the default index"),
])
def test_each_layer_out_of_reach_is_retried_without_it_up_to_one_retry_per_layer_and_one_more(
        tmp_path, last, attempts, error):
    (tmp_path / "stacks.yaml").write_text(MANY.replace("LAST", last))
    stack = load_matrix(tmp_path / "stacks.yaml").get("many")
    uv = NoIndexUv()
    uv.answers = []
    if error:
        with pytest.raises(LockError) as err:
            flow.resolve_stack(stack, compile_fn=uv)
        assert str(err.value) == error
    else:
        lock = flow.resolve_stack(stack, compile_fn=uv)
        assert [u.layer for u in lock.unresolved] == ["e1", "e2", "e3", "e4"]
        assert lock.notes == tuple(f"no stand-in from the default index for e{i}: no stand-in on the default index"
                                   for i in (1, 2, 3))
    assert len(uv.requests) == attempts


# ---- two layers out of reach at once -----------------------------------------------------------------

def _torch_too(tiny, monkeypatch):
    torch_index = "https://download.pytorch.org/whl/cu130"
    monkeypatch.setitem(GRAPH, "torch", [])
    monkeypatch.setitem(GRAPH, "torchvision", ["torch"])
    monkeypatch.setitem(VERSIONS, "torch", "2.9.1")
    monkeypatch.setitem(VERSIONS, "torchvision", "0.24.1")
    stack = tiny.model_copy(update={"torch": TorchPin.model_validate(
        {"version": "2.9.1+cu130", "index_url": torch_index, "packages": ["torchvision==0.24.1+cu130"]})})
    return stack, [SourceUnreachable(f"{torch_index}/torch/", "dns"), SourceUnreachable(f"{KERNEL_INDEX}/x/", "dns")]


def test_two_layers_stood_in_for_are_both_in_the_retry_and_named_in_every_note(tiny, monkeypatch):
    stack, unreachable = _torch_too(tiny, monkeypatch)
    monkeypatch.setitem(GRAPH, "requests", ["idna", "numpy"])  # numpy: also needed by the kernel's stand-in
    monkeypatch.setitem(GRAPH, "six", ["six-helper"])
    uv = Uv(*unreachable)
    lock = flow.resolve_stack(stack, compile_fn=uv)
    # the first retry stands in for torch; the second for the kernel too (its pin is already the public one)
    assert [r.requirements for r in uv.requests[2:]] == 2 * [
        ("torch==2.9.1", "torchvision==0.24.1", "sglang-kernel==0.4.10", "sglang==0.5.23", "six==1.16.0")]
    assert lock.get("numpy").note == ("also needed by the unresolved torch, sglang-kernel layer: checked against its "
                                      "stand-ins")
    assert lock.get("six-helper").layer == "late"  # after the layers out of reach, each layer still takes its own


def test_stand_ins_of_two_layers_that_do_not_resolve_are_named_together(tiny, monkeypatch):
    stack, unreachable = _torch_too(tiny, monkeypatch)
    lock = flow.resolve_stack(stack, compile_fn=Uv(*unreachable, ResolverError("no torch==2.9.1 for this platform")))
    assert lock.notes == ("no stand-in from the default index for torch, sglang-kernel: no torch==2.9.1 for this "
                          "platform",)


def test_platforms_that_resolve_differently_name_every_package_that_differs(tiny):
    from dataclasses import replace

    both = tiny.model_copy(update={"platforms": ("linux/amd64", "linux/arm64")})
    uv = Uv()
    real = uv.resolve

    def resolve(request):
        r = real(request)
        if request.python_platform.startswith("aarch64"):
            return replace(r, packages=tuple(replace(p, version="0.1") if p.name in ("numpy", "idna") else p
                                             for p in r.packages))
        return r

    uv.resolve = resolve  # type: ignore[method-assign]
    with pytest.raises(LockError) as err:
        flow.resolve_stack(both, compile_fn=uv)
    assert str(err.value) == (
        f"stack 'tiny': the platforms resolve 2 package(s) to different versions: idna {VERSIONS['idna']} on "
        f"linux/amd64, 0.1 on linux/arm64; numpy {VERSIONS['numpy']} on linux/amd64, 0.1 on linux/arm64 (a release "
        "without a wheel for one platform makes the resolver fall back to an older one): pin versions every "
        "platform has wheels for")


# ---- the base image's glibc, the task's timing and its console lines ------------------------------------

def test_resolving_for_the_base_reads_the_base_images_glibc_only_when_the_stack_has_none(tiny, monkeypatch):
    asked, resolved = [], []
    monkeypatch.setattr(flow, "base_image_glibc", lambda stack: asked.append(stack.name) or "2.39")
    monkeypatch.setattr(flow, "resolve_stack", lambda stack, **kw: resolved.append((stack.name, kw)) or "a lock")
    assert flow.resolve_for_base(tiny) == "a lock"
    assert (asked, resolved) == ([], [("tiny", {"previous": None, "base_glibc": None})])
    plain = tiny.model_copy(update={"glibc": None})
    assert flow.resolve_for_base(plain) == "a lock"
    assert (asked, resolved[1:]) == (["tiny"], [("tiny", {"previous": None, "base_glibc": "2.39"})])


def test_the_task_never_reads_the_base_image_when_the_stack_says_its_glibc(stacks, monkeypatch):
    def unexpected(stack):
        raise AssertionError("the base image was read")

    monkeypatch.setattr(flow, "base_image_glibc", unexpected)
    assert flow.lock_stack(stacks, "tiny", compile_fn=Uv()).lock.python_platforms == ("x86_64-manylinux_2_36",)


def test_the_task_takes_its_seconds_to_the_hundredth(stacks, monkeypatch):
    from types import SimpleNamespace

    clock = iter([100.0, 101.23456])
    monkeypatch.setattr(flow, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    assert flow.lock_stack(stacks, "tiny", compile_fn=Uv()).seconds == 1.23


def test_a_locks_folder_that_is_a_file_is_one_line_before_resolving(stacks):
    from sglstack.core.records import OutputNotWritable

    (stacks.parent / "locks").write_text("not a folder")
    uv = Uv()
    with pytest.raises(OutputNotWritable) as err:
        flow.lock_stack(stacks, "tiny", compile_fn=uv)
    path = lock_path(stacks, "tiny")
    assert str(err.value) == f"lock {path}: cannot be written ({path.parent} is not a folder)" and uv.requests == []


def _terminal(monkeypatch):
    import io

    from rich.console import Console

    out = io.StringIO()
    monkeypatch.setattr(console_mod, "console", lambda: Console(file=out, force_terminal=True, color_system="standard",
                                                                width=400))
    return out


def test_the_commands_lines_are_styled_but_never_highlighted(stacks, monkeypatch):
    out = _terminal(monkeypatch)
    unreachable = SourceUnreachable(f"{KERNEL_INDEX}/sglang-kernel/", "dns error")
    monkeypatch.setattr(flow, "lock_stack", functools.partial(REAL_LOCK_STACK, compile_fn=Uv(unreachable)))
    assert lock_command(str(stacks), "tiny") == 1  # partial (the error line is on stderr)
    lines = out.getvalue().splitlines()
    assert lines[1] == (f"\x1b[33mtiny\x1b[0m: not resolved: layer sglang-kernel (with dependencies): index "
                        f"{KERNEL_INDEX} unreachable: dns error")
    assert lines[2] == ("\x1b[2mtiny: layer sglang-kernel was not resolved; sglang-kernel==0.4.10 from the default "
                        "index stood in for its pins, so that what it shares with the rest of the stack is locked at "
                        "versions that satisfy that release; 1 package(s) only the stand-ins need are not locked (the "
                        "layer brings its own from its index)\x1b[0m")
    assert len(lines) == 3


def test_the_command_writes_a_lock_per_platform_and_passes_the_packages_to_upgrade(stacks, capsys, monkeypatch):
    stacks.write_text(STACKS.replace('python: "3.11"', 'python: "3.11"\n    platforms: [linux/amd64, linux/arm64]'))
    monkeypatch.setattr(flow, "lock_stack", functools.partial(REAL_LOCK_STACK, compile_fn=Uv()))
    assert lock_command(str(stacks), "tiny") == 0
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny: locked")]
    assert [line.split(" for Python ")[1].split(" in ")[0] for line in out] == ["3.11 linux/amd64", "3.11 linux/arm64"]
    assert [line.split(" -> ")[1] for line in out] == [str(stacks.parent / "locks" / "tiny.txt"),
                                                       str(stacks.parent / "locks" / "tiny.linux-arm64.txt")]
    assert [read_lock(stacks.parent / "locks" / f).platforms for f in ("tiny.txt", "tiny.linux-arm64.txt")] == [
        ("linux/amd64",), ("linux/arm64",)]
    with pytest.raises(ConfigError) as err:
        lock_command(str(stacks), "tiny", upgrade_packages=["no-such"])
    # every platform's lock is looked in (a package only arm64 installs is upgraded there)
    assert str(err.value) == (f"stack 'tiny': --upgrade-package no-such: not in {lock_path(stacks, 'tiny')} or "
                              f"{lock_path(stacks, 'tiny', 'linux/arm64')}")


def test_a_git_sglang_without_its_tree_has_no_requirement(tiny):
    from sglstack.config.schema import Stack
    from sglstack.lock.plan import sglang_requirement

    with pytest.raises(LockError) as err:
        sglang_requirement(Stack.model_validate(GIT_STACK))
    assert str(err.value) == "stack 'g': a git-sourced SGLang is resolved from its exported tree"
    assert sglang_requirement(tiny) == "sglang==0.5.23"


def test_a_stack_of_no_deps_layers_only_is_hashed_layer_by_layer(tiny):
    stack = tiny.model_copy(update={"sgl_kernel": None, "extra_layers": tiny.extra_layers[:1],
                                    "sglang": tiny.sglang.model_copy(update={"install_deps": False})})
    uv = Uv()
    lock = flow.resolve_stack(stack, compile_fn=uv)
    assert uv.requests[0].requirements == () and uv.requests[0].excludes == ("nvcc-tool", "sglang")
    assert [(p.name, p.layer, p.hashed) for p in lock.packages] == [("nvcc-tool", "jit", True),
                                                                    ("sglang", "sglang", True)]


class ExcludingUv(Uv):
    """Leaves the excluded names out even where they are asked for, as uv's --excludes does."""

    def resolve(self, request):
        r = super().resolve(request)
        if request.no_deps:
            return r
        from dataclasses import replace
        return replace(r, packages=tuple(p for p in r.packages if p.name not in request.excludes))


def test_sglang_forced_by_an_earlier_no_deps_layer_is_that_layers_entry(tiny):
    from sglstack.config.schema import PipLayer

    force = PipLayer.model_validate({"name": "force", "requirements": ["sglang==0.5.23"], "no_deps": True})
    lock = flow.resolve_stack(tiny.model_copy(update={"extra_layers": (force, *tiny.extra_layers)}),
                              compile_fn=ExcludingUv())
    sglang = lock.get("sglang")
    assert (sglang.layer, sglang.version, sglang.hashed) == ("force", "0.5.23", True)


def test_a_lock_that_finds_no_change_leaves_the_files_bytes_and_mtime_alone(stacks, monkeypatch):
    monkeypatch.setattr(flow, "utc_timestamp", lambda: "2026-12-01T00:00:00Z")
    first = flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    before = first.path.read_bytes()
    os.utime(first.path, ns=(1_000_000_000, 1_000_000_000))
    monkeypatch.setattr(flow, "utc_timestamp", lambda: "2026-12-02T00:00:00Z")
    second = flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    assert second.lock.resolved_at == "2026-12-01T00:00:00Z"
    assert first.path.read_bytes() == before and first.path.stat().st_mtime_ns == 1_000_000_000

    monkeypatch.setitem(VERSIONS, "numpy", "2.3.5")  # a change: written, and dated now
    third = flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    assert third.lock.resolved_at == "2026-12-02T00:00:00Z"
    assert "# resolved-at: 2026-12-02T00:00:00Z\n" in first.path.read_text()


def test_lock_command_refuses_a_stack_typo_before_its_progress_starts(tmp_path, monkeypatch):
    (tmp_path / "stacks.yaml").write_text(STACKS)

    def no_progress(*args, **kwargs):
        raise AssertionError("the progress started before the stack name was checked")

    monkeypatch.setattr(progress_mod, "progress", no_progress)
    with pytest.raises(ConfigError) as err:
        lock_command(str(tmp_path / "stacks.yaml"), "tinyy")
    assert str(err.value).endswith("stack 'tinyy': unknown stack (known: tiny); did you mean 'tiny'?")


# ---- one lock per platform: stacks --check reads each, and refuses platforms that disagree -------------------

def _two_platforms(stacks: Path) -> None:
    stacks.write_text(STACKS.replace('python: "3.11"', 'python: "3.11"\n    platforms: [linux/amd64, linux/arm64]'))


def test_the_platforms_locks_are_replaced_together_or_not_at_all(stacks, monkeypatch):
    """They were written one by one: a rename refused (or a signal) after the first left the new amd64 lock beside
    the old arm64 one. Now a failure at the second puts the first back: both stay as they were."""
    import os

    from sglstack.core.errors import SglstackError

    _two_platforms(stacks)
    flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    locks = stacks.parent / "locks"
    before = {p.name: p.read_bytes() for p in locks.glob("*.txt")}
    assert sorted(before) == ["tiny.linux-arm64.txt", "tiny.txt"]
    stacks.write_text(stacks.read_text().replace('"six==1.16.0"', '"six==1.17.0"'))
    real = os.replace

    def refuse_arm64(src, dst, *args, **kwargs):
        if str(dst).endswith("tiny.linux-arm64.txt"):
            raise OSError(28, "No space left on device")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", refuse_arm64)
    with pytest.raises(SglstackError) as err:
        flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    assert "tiny.linux-arm64.txt" in str(err.value)
    monkeypatch.setattr(os, "replace", real)
    assert {p.name: p.read_bytes() for p in locks.glob("*.txt")} == before
    assert not [p for p in locks.iterdir() if p.name not in before]  # no temp file left


def test_stacks_check_reads_each_platforms_lock(stacks):
    from sglstack.lock.conflicts import lock_findings

    _two_platforms(stacks)
    flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    assert lock_findings(load_matrix(stacks), str(stacks)) == []
    (stacks.parent / "locks" / "tiny.linux-arm64.txt").unlink()
    # A problem (exit 1), not a notice: the build of a stack of several platforms refuses a missing lock, so a
    # `stacks --check` that said "matrix OK" passed CI for a stack that cannot be built.
    [finding] = lock_findings(load_matrix(stacks), str(stacks))
    assert finding == Finding(
        "tiny", "bad-lock", f"no lock ({stacks.parent / 'locks' / 'tiny.linux-arm64.txt'}): a stack of several "
                            "platforms builds each from its own lock; run invoke lock --stack tiny")
    assert finding.is_failure


def test_stacks_check_refuses_platform_locks_that_disagree_naming_the_package_and_both_versions(stacks,
                                                                                                 monkeypatch):
    """Locks written apart (another sglstack, a merge of two branches): each is sound, together they are not."""
    from sglstack.lock.conflicts import lock_findings

    _two_platforms(stacks)
    monkeypatch.setattr(flow, "platform_disagreements", lambda locks: [])
    flow.lock_stack(stacks, "tiny", compile_fn=Uv(platforms_differ=True))
    assert lock_findings(load_matrix(stacks), str(stacks)) == [Finding(
        "tiny", "conflict", f"the platforms resolve 1 package(s) to different versions: idna {VERSIONS['idna']} on "
                            "linux/amd64, 3.10 on linux/arm64 (a release without a wheel for one platform makes the "
                            "resolver fall back to an older one): pin versions every platform has wheels for")]


def test_a_lock_of_another_platform_is_not_taken_for_this_one(stacks):
    from sglstack.lock.trust import UntrustedLock, lock_for_build

    _two_platforms(stacks)
    flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    locks = stacks.parent / "locks"
    (locks / "tiny.txt").write_bytes((locks / "tiny.linux-arm64.txt").read_bytes())
    with pytest.raises(UntrustedLock) as err:
        lock_for_build(stacks, load_matrix(stacks).get("tiny"))
    assert str(err.value) == (f"{locks / 'tiny.txt'}: stack 'tiny': this lock is for linux/arm64, not linux/amd64 "
                              "(each platform has its own lock): run invoke lock --stack tiny")


def test_upgrade_package_reads_every_platforms_lock_and_needs_each(stacks):
    """`--upgrade-package` of a package only arm64 installs moves it there, from arm64's own pins; and with one
    platform's lock gone it is refused (that platform would be resolved afresh: every package moved, not one)."""
    from dataclasses import replace

    stacks.write_text(STACKS.replace('python: "3.11"', 'python: "3.11"\n    platforms: [linux/amd64, linux/arm64]'))

    def arm_only_idna(uv: Uv) -> Uv:
        real = uv.resolve

        def resolve(request):
            r = real(request)
            if request.python_platform.startswith("x86_64"):  # an aarch64-only dependency (a platform marker)
                return replace(r, packages=tuple(p for p in r.packages if p.name != "idna"))
            return r

        uv.resolve = resolve  # type: ignore[method-assign]
        return uv

    flow.lock_stack(stacks, "tiny", compile_fn=arm_only_idna(Uv()))
    amd, arm = lock_path(stacks, "tiny"), lock_path(stacks, "tiny", "linux/arm64")
    assert read_lock(amd).get("idna") is None and read_lock(arm).get("idna") is not None
    again = arm_only_idna(Uv())
    flow.lock_stack(stacks, "tiny", upgrade_packages=["idna"], compile_fn=again)
    mains = {r.python_platform: r for r in again.requests if not r.no_deps and r.requirements}
    assert mains["aarch64-manylinux_2_36"].upgrade_packages == ("idna",)
    assert "idna==3.11" in mains["aarch64-manylinux_2_36"].preferences  # arm64's own pins are the starting point
    assert "idna==3.11" not in mains["x86_64-manylinux_2_36"].preferences

    arm.unlink()
    refused = Uv()
    with pytest.raises(ConfigError) as err:
        flow.lock_stack(stacks, "tiny", upgrade_packages=["numpy"], compile_fn=refused)
    assert str(err.value) == (f"stack 'tiny': --upgrade-package needs an existing lock ({arm}): run invoke lock "
                              "--stack tiny")
    assert (err.value.exit_code, refused.requests, arm.exists()) == (2, [], False)
