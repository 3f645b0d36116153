"""No second copy of a CUDA library in the serving stage, shown from the rendered Dockerfiles (no Docker):
for stacks that cannot be built here (an `nvidia/cuda` base, PyTorch's own index) this is the evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.lock.file import lock_for_build
from sglstack.render.dockerfile import render_dockerfile
from sglstack.size.cudacopies import base_libraries, cuda_copies, serving_stage, wheel_library

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks.yaml"


def rendered(stacks: Path, name: str) -> tuple[str, dict[str, list[str]]]:
    stack = load_matrix(stacks).get(name)
    lock = lock_for_build(stacks, stack)
    parts = {layer: [p.name for p in lock.part(layer)] for layer in lock.layers} if lock else {}
    return render_dockerfile(stack, lock), parts


def test_pypi_stack_serving_stage_has_each_cuda_library_once():
    dockerfile, parts = rendered(STACKS, "pypi-cu130")
    base, stage = serving_stage(dockerfile)
    assert base.startswith("sglstack/base:debian12-slim") and base_libraries(base) == ()
    assert "source=lock/torch.txt" in stage  # the CUDA wheels do come in, from the lock: just once
    assert "nvidia-cublas" in parts["torch"]
    assert cuda_copies(dockerfile, parts) == []


def test_cu130_as_declared_puts_a_second_copy_of_cuda_libraries_into_its_serving_stage():
    """The finding for `cu130`: its devel base holds cuBLAS, cuDNN, NCCL ... and its torch layer (PyTorch's
    cu130 index) and its extra layer install them again as wheels."""
    dockerfile, parts = rendered(STACKS, "cu130")
    copies = {c.library: c for c in cuda_copies(dockerfile, parts)}
    assert {"cublas", "cudnn", "nccl", "cudart", "nvrtc", "cupti"} <= set(copies)
    assert copies["nccl"].base_image == "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04"
    assert "nvidia-nccl-cu13" in copies["nccl"].wheels  # the extra layer's forced NCCL
    assert any("required by torch==2.9.1+cu130" in w for w in copies["cublas"].wheels)


def test_cu130_declared_on_a_plain_base_with_the_jit_compiler_as_a_wheel_has_no_second_copy(tmp_path):
    """The declarative way out for cu130 (a stack decision, not made here for the stack users run): the
    serving stage FROM a base without CUDA, the CUDA user space from NVIDIA's wheels (nvcc included, for
    the JIT), as `pypi-cu130` does; nothing is deleted from an image or a wheel."""
    text = STACKS.read_text()
    text += """
  cu130-wheels:
    inherits: cu130
    base_image: ubuntu:24.04
    cuda_home: /opt/venv/lib/python3.12/site-packages/nvidia/cu13
    extra_layers:
      - name: cu13-runtime-libs
        requirements: ["nvidia-nccl-cu13==2.28.3", "nvidia-cuda-nvcc==13.0.88"]
        no_deps: true
        force_reinstall: true
        after_sglang: true
"""
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(text)
    dockerfile, parts = rendered(stacks, "cu130-wheels")
    assert serving_stage(dockerfile)[0] == "ubuntu:24.04"
    assert "CUDA_HOME=/opt/venv/lib/python3.12/site-packages/nvidia/cu13" in dockerfile
    assert cuda_copies(dockerfile, parts) == []


@pytest.mark.parametrize("image,libraries", [
    ("nvidia/cuda:13.0.1-base-ubuntu24.04", ("cudart",)),
    ("nvidia/cuda:12.9.1-cudnn-runtime-ubuntu24.04@sha256:" + "0" * 64, ("cublas", "cudnn", "nccl")),
    ("docker.io/nvidia/cuda:13.0.1-devel-ubuntu24.04", ("nvcc", "cupti")),
    ("ubuntu:24.04", ()),
    ("registry.example/nvidia/cuda:13.0.1-devel-ubuntu24.04", ()),  # a mirror we cannot vouch for: no facts
])
def test_base_image_flavors(image, libraries):
    assert set(libraries) <= set(base_libraries(image))
    if not libraries:
        assert base_libraries(image) == ()
    if "cudnn" not in image:
        assert "cudnn" not in base_libraries(image)


@pytest.mark.parametrize("name,library", [("nvidia-cublas-cu12", "cublas"), ("nvidia_cudnn_cu13", "cudnn"),
                                          ("nvidia-cublas", "cublas"), ("nvidia-cutlass-dsl", None),
                                          ("torch", None)])
def test_wheel_library(name, library):
    assert wheel_library(name) == library
