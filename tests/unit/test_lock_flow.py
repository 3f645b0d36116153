"""`invoke lock` in process: the task's checks and words, the previous lock as the starting point, several
platforms, and the parts of one resolution, against a scripted resolver that answers as uv does (more:
test_lock_flow_sources.py, test_lock_flow_retries.py)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from lock_flow_fixtures import HASH_B, KERNEL_INDEX, REAL_LOCK_STACK, tiny_stack, write_stacks
from uv_double import HASH_A, VERSIONS, Uv

from sglstack.adapters.uv import (
    ResolutionConflict,
    ResolvedPackage,
    ResolverError,
    SourceUnreachable,
)
from sglstack.cli.lock import lock_command
from sglstack.config.schema import Matrix
from sglstack.core.errors import ConfigError
from sglstack.lock import entries, flow
from sglstack.lock.conflicts import Finding, resolve_findings
from sglstack.lock.plan import GitTree, LockError, LockUnreachable, PlannedLayer, plan_layers, python_platform
from sglstack.lockfile.current import stack_input_hash
from sglstack.lockfile.model import lock_path
from sglstack.lockfile.text import read_lock


@pytest.fixture
def stacks(tmp_path) -> Path:
    return write_stacks(tmp_path)


@pytest.fixture
def tiny(stacks):
    return tiny_stack(stacks)


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
