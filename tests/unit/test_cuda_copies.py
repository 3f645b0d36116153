"""No second copy of a CUDA library in the serving stage, shown from the rendered Dockerfiles (no Docker):
for stacks that cannot be built here (an `nvidia/cuda` base, PyTorch's own index) this is the evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.lock.trust import lock_for_build
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


def test_cu130_serving_stage_has_each_cuda_library_once_and_its_jit_compiler_as_wheels():
    """`cu130` serves FROM a base without CUDA: torch's cu130 wheels bring the CUDA user space, the cuda-jit
    layer the compiler the JIT paths need, matched to CUDA 13.0; nothing is deleted from an image or a wheel."""
    dockerfile, parts = rendered(STACKS, "cu130")
    base, stage = serving_stage(dockerfile)
    assert base == "ubuntu:24.04" and base_libraries(base) == ()
    assert "CUDA_HOME=/opt/venv/lib/python3.12/site-packages/nvidia/cu13" in stage
    assert sorted(parts["cuda-jit"]) == ["nvidia-cuda-cccl", "nvidia-cuda-crt", "nvidia-cuda-nvcc", "nvidia-nvvm"]
    assert "source=lock/cuda-jit.txt" in stage
    assert cuda_copies(dockerfile, parts) == []


def test_cu130_on_its_old_devel_base_would_put_a_second_copy_of_cuda_libraries_into_its_serving_stage(tmp_path):
    """The finding that moved `cu130` off `nvidia/cuda:13.0.1-cudnn-devel`: that base holds cuBLAS, cuDNN,
    NCCL ... and the torch layer (PyTorch's cu130 index) and the NCCL layer install them again as wheels."""
    text = STACKS.read_text() + """
  cu130-devel:
    inherits: cu130
    base_image: nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
    cuda_home: /usr/local/cuda
"""
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(text)
    dockerfile, parts = rendered(stacks, "cu130-devel")
    copies = {c.library: c for c in cuda_copies(dockerfile, parts)}
    assert {"cublas", "cudnn", "nccl", "cudart", "nvrtc", "cupti"} <= set(copies)
    assert copies["nccl"].base_image == "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04"
    assert "nvidia-nccl-cu13" in copies["nccl"].wheels  # the extra layer's forced NCCL
    assert any("required by torch==2.9.1+cu130" in w for w in copies["cublas"].wheels)
    assert "nvidia-cuda-nvcc" in copies["nvcc"].wheels  # the JIT layer's compiler beside the devel one


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


def test_the_serving_stage_is_the_last_from_and_a_file_without_one_is_refused():
    text = "FROM a:1 AS src\nRUN x\nFROM nvidia/cuda:13.0.1-runtime-ubuntu24.04 AS runtime\nRUN y\n"
    base, stage = serving_stage(text)
    assert base == "nvidia/cuda:13.0.1-runtime-ubuntu24.04"
    assert stage.startswith("FROM nvidia/cuda") and "RUN x" not in stage
    assert serving_stage("FROM only:1\nRUN z\n")[0] == "only:1"
    with pytest.raises(ValueError, match=r"^no FROM line$"):
        serving_stage("RUN nothing\n")


def test_the_pip_steps_of_a_stage_name_their_cuda_wheels():
    from sglstack.size.cudacopies import stage_wheels

    stage = ('FROM nvidia/cuda:13.0.1-devel-ubuntu24.04 AS runtime\n'
             'RUN --mount=type=bind,source=lock/torch.txt,target=/run/l/torch.txt pip install -r /run/l/torch.txt\n'
             'RUN --mount=type=bind,source=lock/missing-part.txt,target=/x pip install -r /x\n'
             'RUN pip install --no-deps "nvidia-nccl-cu13==2.28.3" -q torchvision==0.24.1+cu130 '
             '"nvidia-cuda-nvcc-cu12[extra]>=12" ./local.whl\n'
             'RUN pip install torch==2.9.1\n')
    found = stage_wheels(stage, {"torch": ["nvidia-cublas", "numpy"]})
    assert found == {"cublas": ["nvidia-cublas"], "nccl": ["nvidia-nccl-cu13"], "nvcc": ["nvidia-cuda-nvcc-cu12"]}
    # torch from a CUDA index brings torch's CUDA wheels; PyPI's plain torch named so is not read as one
    cuda_torch = stage_wheels("RUN pip install torch==2.9.1+cu130\n", {})
    assert cuda_torch["cudnn"] == ["nvidia-cudnn (required by torch==2.9.1+cu130)"]
    assert stage_wheels("RUN pip install torchaudio==2.9.1+cu130\n", {}) == {}


def test_the_dry_runs_line_says_once_or_names_each_library_twice():
    from sglstack.size.cudacopies import CudaCopy, copies_line, lock_parts

    assert copies_line([]) == ("each CUDA library once in the serving stage (its base holds none that a pip step "
                               "installs again)")
    copies = [CudaCopy("cublas", "nvidia/cuda:13.0.1-devel-ubuntu24.04", ("nvidia-cublas",)),
              CudaCopy("nccl", "nvidia/cuda:13.0.1-devel-ubuntu24.04", ("nvidia-nccl-cu13",))]
    assert copies_line(copies) == ("2 CUDA libraries twice in the serving stage: in "
                                   "nvidia/cuda:13.0.1-devel-ubuntu24.04 and again as NVIDIA wheels (cublas, nccl)")
    assert lock_parts(None) == {}
    from sglstack.lockfile.text import read_lock

    lock = read_lock(REPO / "locks" / "cu130.txt")
    parts = lock_parts(lock)
    assert list(parts) == list(lock.layers) and parts["cuda-jit"] == [
        "nvidia-cuda-cccl", "nvidia-cuda-crt", "nvidia-cuda-nvcc", "nvidia-nvvm"]


def test_an_nvidia_cuda_tag_without_a_flavor_holds_nothing_known():
    assert base_libraries("nvidia/cuda:13.0.1-ubuntu24.04") == ()
