"""`invoke lock` in process, its sources: a git SGLang's version, the base image's glibc, layers out of reach,
no-deps layers with their own indexes, the planned layers and the rules of their entries, requests and answers in
detail, direct wheels; against a scripted resolver that answers as uv does."""

from __future__ import annotations

from pathlib import Path

import pytest
from lock_flow_fixtures import GIT_STACK, HASH_B, KERNEL_INDEX, tiny_stack, write_stacks
from packaging.requirements import Requirement
from uv_double import GRAPH, HASH_A, VERSIONS, Uv

from sglstack.adapters.uv import (
    ResolvedPackage,
    SourceUnreachable,
)
from sglstack.config.schema import FlashInferPin, KernelPin, TorchPin
from sglstack.lock import entries, flow
from sglstack.lock.plan import GitTree, LockError, PlannedLayer, plan_layers
from sglstack.lockfile.model import UnresolvedLayer
from sglstack.lockfile.text import render_lock


@pytest.fixture
def stacks(tmp_path) -> Path:
    return write_stacks(tmp_path)


@pytest.fixture
def tiny(stacks):
    return tiny_stack(stacks)


# ---- a git SGLang's version, and the base image's glibc ----------------------------------------------

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
