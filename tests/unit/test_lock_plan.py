"""How a stack becomes resolver requests and a lock, with uv's answers scripted (no network).

The scripted answers have the shape `uv pip compile` really gives (see test_lock_resolver.py for uv
itself); the cu130 stack is the repo's, with PyTorch's index and the GitHub wheel out of reach.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement

from sglstack.adapters.uv import (
    Resolution,
    ResolutionConflict,
    ResolvedPackage,
    ResolveRequest,
    ResolverError,
    SourceUnreachable,
)
from sglstack.config.matrix import load_matrix
from sglstack.config.schema import GitSource, SGLangSource
from sglstack.lock.flow import LockError, resolve_stack
from sglstack.lock.plan import plan_layers, root_names
from sglstack.render.dockerfile import install_layers

REPO = Path(__file__).resolve().parents[2]
HASH = "sha256:" + "e" * 64
TORCH_INDEX = "https://download.pytorch.org/whl/cu130"

# Who requires whom in the scripted resolution (the stand-in torch is PyPI's CUDA 12.8 build).
GRAPH = {
    "torch": ["triton", "filelock", "nvidia-cublas-cu12", "nvidia-nccl-cu12"],
    "torchvision": ["torch", "numpy"],
    "torchaudio": ["torch"],
    "flashinfer-python": ["torch", "numpy", "filelock"],
    "flashinfer-cubin": [],
    "sglang": ["flashinfer-python", "flashinfer-cubin", "torch", "torchvision", "torchaudio", "triton", "requests",
               "cuda-python"],
    "requests": ["idna"],
}
VERSIONS = {"torch": "2.9.1", "torchvision": "0.24.1", "torchaudio": "2.9.1", "flashinfer-python": "0.6.4",
            "flashinfer-cubin": "0.6.4", "sglang": "0.5.9", "triton": "3.5.1", "filelock": "3.20.0",
            "nvidia-cublas-cu12": "12.8.4.1", "nvidia-nccl-cu12": "2.27.5", "numpy": "2.3.4", "requests": "2.32.5",
            "idna": "3.11", "cuda-python": "13.0.3", "nvidia-nccl-cu13": "2.28.3", "nvidia-cuda-nvcc": "13.0.88",
            "nvidia-cuda-crt": "13.0.88", "nvidia-nvvm": "13.0.88", "nvidia-cuda-cccl": "13.0.85"}


class ScriptedUv:
    """Answers like uv: PyTorch's index and GitHub are unreachable, everything else resolves by GRAPH."""

    def __init__(self, conflict: str | None = None):
        self.requests: list[ResolveRequest] = []
        self.conflict = conflict

    def __call__(self, requests):
        return [self.answer(r) for r in requests]

    def answer(self, request: ResolveRequest) -> Resolution | ResolverError:
        self.requests.append(request)
        for text in request.requirements:
            req = Requirement(text)
            if req.url and "github.com" in req.url:
                return SourceUnreachable(req.url, "dns error")
        if TORCH_INDEX in request.indexes or request.default_index == TORCH_INDEX:
            return SourceUnreachable(f"{TORCH_INDEX}/torch/", "dns error")
        if self.conflict and not request.no_deps:
            return ResolutionConflict(self.conflict)
        roots = [Requirement(r).name for r in request.requirements]
        required_by: dict[str, set[str]] = {name: set() for name in roots}
        todo = list(roots)
        while todo and not request.no_deps:
            name = todo.pop()
            for child in GRAPH.get(name, []):
                if child in request.excludes:
                    continue
                if child not in required_by:
                    todo.append(child)
                required_by.setdefault(child, set()).add(name)
        return Resolution(packages=tuple(
            ResolvedPackage(name=n, version=VERSIONS[n], hashes=(HASH,), required_by=tuple(sorted(by)),
                            index="https://pypi.org/simple") for n, by in sorted(required_by.items())),
            uv_version="0.13.9", seconds=0.1)


@pytest.fixture(scope="module")
def cu130():
    return load_matrix(REPO / "stacks.yaml").get("cu130")


@pytest.fixture(scope="module")
def locked(cu130):
    uv = ScriptedUv()
    return resolve_stack(cu130, compile_fn=uv), uv


def test_layers_are_named_as_render_names_them(cu130):
    planned = [layer.name for layer in plan_layers(cu130, "linux/amd64")]
    rendered = [layer.name for layer in install_layers(cu130)]
    assert [n for n in planned if n not in ("sglang-requirements", "sglang")] == rendered
    assert planned.index("sglang-requirements") < planned.index("cu13-runtime-libs")  # after_sglang
    assert planned[-1] == "sglang"


def test_the_main_request_is_for_the_stacks_python_and_platform_with_its_overrides(locked, cu130):
    _, uv = locked
    main = uv.requests[0]
    assert main.python_version == "3.12" and main.python_platform == "x86_64-manylinux_2_28"
    assert set(main.overrides) == {o.pin for o in cu130.overrides}
    # no-deps layers are hashed on their own and kept out of the main resolution
    assert {"nvidia-nccl-cu13", "sgl-kernel", "nvidia-cuda-nvcc", "nvidia-cuda-cccl"} <= set(main.excludes)
    assert "torch==2.9.1+cu130" in main.requirements and TORCH_INDEX in main.indexes
    no_deps = [r for r in uv.requests if r.no_deps]
    assert {r.requirements for r in no_deps} == {("nvidia-nccl-cu13==2.28.3",), (
        "nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-crt==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-cccl==13.0.85"), (
        "sgl-kernel @ https://github.com/sgl-project/whl/releases/download/v0.3.21/"
        "sgl_kernel-0.3.21+cu130-cp310-abi3-manylinux2014_x86_64.whl",)}


def test_an_unreachable_torch_index_marks_its_pins_and_uses_public_stand_ins(locked):
    lock, uv = locked
    retry = uv.requests[-1]
    assert {"torch==2.9.1", "torchvision==0.24.1", "torchaudio==2.9.1"} <= set(retry.requirements)
    assert not [r for r in retry.requirements if "+cu130" in r] and TORCH_INDEX not in retry.indexes
    torch = lock.get("torch")
    assert torch.version == "2.9.1+cu130" and not torch.hashed
    assert torch.unhashed == f"index {TORCH_INDEX} unreachable: dns error"
    [unresolved_torch, unresolved_kernel] = lock.unresolved
    assert unresolved_torch.layer == "torch" and unresolved_torch.with_dependencies
    assert unresolved_kernel.layer == "sgl-kernel" and not unresolved_kernel.with_dependencies
    assert lock.get("sgl-kernel").version == "0.3.21+cu130" and lock.get("sgl-kernel").url.startswith("https://")


def test_what_only_the_stand_ins_need_is_not_locked_and_what_is_shared_is(locked):
    lock, _ = locked
    assert lock.get("nvidia-cublas-cu12") is None and lock.get("nvidia-nccl-cu12") is None  # PyPI torch's CUDA 12
    triton = lock.get("triton")
    assert triton.hashed and triton.version == "3.5.1" and "unresolved torch layer" in triton.note
    assert lock.get("idna").note is None
    assert any("stood in" in n for n in lock.notes)


def test_each_package_belongs_to_the_first_layer_that_installs_it(locked):
    lock, _ = locked
    layer = {p.name: p.layer for p in lock.packages}
    assert layer["flashinfer-python"] == layer["numpy"] == layer["filelock"] == "flashinfer"
    assert layer["triton"] == layer["requests"] == layer["idna"] == layer["cuda-python"] == "sglang-requirements"
    assert layer["nvidia-nccl-cu13"] == "cu13-runtime-libs" and layer["sglang"] == "sglang"
    assert lock.installs_layer("flashinfer") and not lock.installs_layer("torch")
    assert not lock.installs_layer("sgl-kernel")


def test_the_lock_renders_the_unreachable_layers_as_without_a_lock(locked, cu130):
    from sglstack.render.dockerfile import render_dockerfile

    lock, _ = locked
    text = render_dockerfile(cu130, lock)
    assert f"--index-url {TORCH_INDEX} torch==2.9.1+cu130" in text  # as without a lock
    # The locked parts install by uv (the layer before them by pip, as without a lock), hash-checked.
    assert "--link-mode copy -r /run/sglstack-lock/flashinfer.txt" in text
    assert "--link-mode copy -r /run/sglstack-lock/sglang-requirements.txt" in text
    assert "--link-mode copy --reinstall -r /run/sglstack-lock/cu13-runtime-libs.txt" in text
    assert "--require-hashes -r /run/sglstack-lock/sglang.txt" in text  # the src stage's wheel download
    assert render_dockerfile(cu130) == render_dockerfile(cu130, None)


def test_a_conflict_names_both_sides(cu130):
    uv = ScriptedUv(conflict="Because transformers==4.57.1 depends on huggingface-hub>=0.34.0,<1.0 and sglang==0.5.9 "
                             "depends on transformers==4.57.1, we can conclude that sglang==0.5.9 depends on "
                             "huggingface-hub>=0.34.0,<1.0. And because you require sglang==0.5.9 and "
                             "huggingface-hub==0.20.0, we can conclude that your requirements are unsatisfiable.")
    with pytest.raises(LockError) as err:
        resolve_stack(cu130, compile_fn=uv)
    message = str(err.value)
    assert "transformers==4.57.1 (needed by sglang==0.5.9) requires huggingface-hub>=0.34.0,<1.0" in message
    assert "the stack requires huggingface-hub==0.20.0" in message


def test_the_context_holds_the_lock_part_of_each_locked_layer_only(locked, cu130):
    from sglstack.render.dockerfile import build_context

    lock, _ = locked
    parts = sorted(f for f in build_context(cu130, lock=lock).files if f.startswith("lock/"))
    assert parts == sorted(f"lock/{layer}.txt" for layer in lock.layers if lock.installs_layer(layer))
    assert "lock/flashinfer.txt" in parts and "lock/torch.txt" not in parts and "lock/sgl-kernel.txt" not in parts
    assert build_context(cu130, lock=lock).files["lock/flashinfer.txt"] == lock.part_text("flashinfer").encode()
    assert not [f for f in build_context(cu130).files if f.startswith("lock/")]


def test_the_roots_a_lock_is_checked_from_are_the_layers_own_names_git_sglang_included():
    """Every entry of a lock must be one of these or be required by one (the trust check); a git-sourced
    SGLang has the same roots as its PyPI twin, without its tree being exported for them."""
    stack = load_matrix(REPO / "stacks.yaml").get("cu130")
    assert root_names(stack) == {n for layer in plan_layers(stack, "linux/amd64") for n in layer.names}
    assert {"torch", "sgl-kernel", "flashinfer-python", "sglang"} <= root_names(stack)
    assert "cuda-python" not in root_names(stack)  # an override replaces a requirement, it asks for nothing
    git = stack.model_copy(update={"sglang": SGLangSource(git=GitSource(
        repo="https://example.invalid/sglang", ref="0" * 40, subdirectory="python"))})
    assert root_names(git) == root_names(stack)
