"""Which CUDA libraries a rendered serving stage gets twice: once from its base image, once as NVIDIA's wheels.

Pure, over the rendered Dockerfile (and the stack's lock where it has one), for stacks that cannot be
built here (`cu130`'s `nvidia/cuda` devel base and PyTorch's own index): the size report's duplicate
table shows the same for an image that can be built. The two tables below are facts about NVIDIA's
images and wheels, one home for each:

- an `nvidia/cuda` image's flavor says which libraries it installs under /usr/local/cuda (NVIDIA's
  Dockerfiles: `base` cudart; `runtime` adds the math libraries, NVRTC, nvJitLink, NVTX and NCCL; `devel` adds
  the compiler, CUPTI and the headers; a `cudnn` tag adds cuDNN);
- a wheel's name says which library it carries (`nvidia-cublas`, `nvidia-cublas-cu12`, ... all cuBLAS).

A torch layer installed from a CUDA index without a lock brings that CUDA's wheels by torch's own
requirements: every torch CUDA wheel since 2.1 depends on them (TORCH_CUDA_WHEELS).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config.cudaimages import cuda_image_tag

_RUNTIME = ("cudart", "cublas", "cufft", "curand", "cusolver", "cusparse", "nvrtc", "nvjitlink", "nvtx", "npp", "nccl")
_DEVEL = (*_RUNTIME, "nvcc", "cupti", "nvml")
CUDA_BASE_FLAVORS: Mapping[str, tuple[str, ...]] = {"base": ("cudart",), "runtime": _RUNTIME, "devel": _DEVEL}
# The wheel's name, its CUDA suffix (-cu12, -cu13) left off, -> the library it carries.
WHEEL_LIBRARIES: Mapping[str, str] = {
    "nvidia-cuda-runtime": "cudart", "nvidia-cublas": "cublas", "nvidia-cufft": "cufft", "nvidia-curand": "curand",
    "nvidia-cusolver": "cusolver", "nvidia-cusparse": "cusparse", "nvidia-cuda-nvrtc": "nvrtc",
    "nvidia-nvjitlink": "nvjitlink", "nvidia-nvtx": "nvtx", "nvidia-npp": "npp", "nvidia-nccl": "nccl",
    "nvidia-cuda-nvcc": "nvcc", "nvidia-cuda-cupti": "cupti", "nvidia-cudnn": "cudnn",
    "nvidia-cusparselt": "cusparselt", "nvidia-cufile": "cufile", "nvidia-nvshmem": "nvshmem",
}
# What `pip install torch==X+cuNNN` from PyTorch's index brings besides torch (its Requires-Dist).
TORCH_CUDA_WHEELS = ("nvidia-cuda-runtime", "nvidia-cublas", "nvidia-cufft", "nvidia-curand", "nvidia-cusolver",
                     "nvidia-cusparse", "nvidia-cuda-nvrtc", "nvidia-nvjitlink", "nvidia-nvtx", "nvidia-nccl",
                     "nvidia-cuda-cupti", "nvidia-cudnn", "nvidia-cusparselt", "nvidia-cufile")
_CU_SUFFIX = re.compile(r"-cu\d+$")
_FROM = re.compile(r"^FROM\s+(?P<image>\S+)(?:\s+AS\s+(?P<name>\S+))?\s*$", re.IGNORECASE | re.MULTILINE)
# A step installing a lock part: pip from its context file, or (a stack built for more than amd64) a COPY of
# the tree the wheels stage unpacked it into (render.dockerfile.WHEELS_ROOT).
_LOCK_PART = re.compile(r"source=lock/(?P<part>[A-Za-z0-9._-]+)\.txt"
                        r"|COPY --from=wheels /stage/(?P<copied>[A-Za-z0-9._-]+)/")
_PIP_ARGS = re.compile(r"pip install (?P<args>[^\n]*)$", re.MULTILINE)
_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?(?:[=<>!~].*)?$")


def wheel_library(name: str) -> str | None:
    """The CUDA library a distribution carries (`nvidia-cublas-cu12` -> cublas), or None."""
    key = _CU_SUFFIX.sub("", name.lower().replace("_", "-"))
    return WHEEL_LIBRARIES.get(key)


def base_libraries(image: str) -> tuple[str, ...]:
    """The CUDA libraries a base image holds: an nvidia/cuda image by its flavor; any other, none."""
    tag = cuda_image_tag(image)
    if tag is None:
        return ()
    words = tag.split("-")
    flavor = next((w for w in ("devel", "runtime", "base") if w in words), None)
    if flavor is None:
        return ()
    return tuple(sorted((*CUDA_BASE_FLAVORS[flavor], *(("cudnn",) if "cudnn" in words else ()))))


def serving_stage(dockerfile: str) -> tuple[str, str]:
    """(base image, text) of the last stage of a rendered Dockerfile: the one the image is."""
    froms = list(_FROM.finditer(dockerfile))
    if not froms:
        raise ValueError("no FROM line")
    last = froms[-1]
    return last["image"], dockerfile[last.start():]


@dataclass(frozen=True)
class CudaCopy:
    library: str
    base_image: str
    wheels: tuple[str, ...]  # the distributions (or the torch layer's requirement) that bring it again


def stage_wheels(stage: str, lock_parts: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """library -> the distributions the stage's pip steps install that carry it.

    A step installing a lock part installs that part's names; any other step its named requirements, and
    a torch requirement from a CUDA index (`+cu`) the wheels torch requires."""
    found: dict[str, set[str]] = {}

    def add(name: str, why: str) -> None:
        library = wheel_library(name)
        if library:
            found.setdefault(library, set()).add(why)

    for m in _LOCK_PART.finditer(stage):
        for name in lock_parts.get(m["part"] or m["copied"], ()):
            add(name, name)
    for m in _PIP_ARGS.finditer(stage):
        for arg in m["args"].replace('"', " ").split():
            req = _REQUIREMENT.match(arg)
            if arg.startswith("-") or req is None:
                continue
            add(req["name"], req["name"])
            if req["name"].lower() == "torch" and "+cu" in arg:
                for wheel in TORCH_CUDA_WHEELS:
                    add(wheel, f"{wheel} (required by {arg})")
    return {lib: sorted(names) for lib, names in found.items()}


def cuda_copies(dockerfile: str, lock_parts: Mapping[str, Iterable[str]]) -> list[CudaCopy]:
    """Each CUDA library the serving stage's base holds and one of its pip steps installs again, by name."""
    base, stage = serving_stage(dockerfile)
    held = set(base_libraries(base))
    wheels = stage_wheels(stage, lock_parts)
    return [CudaCopy(lib, base, tuple(wheels[lib])) for lib in sorted(held & set(wheels))]


def lock_parts(lock: Any) -> dict[str, list[str]]:
    """The names each layer of a lock installs (no lock: none known, every step read from its arguments)."""
    return {layer: [p.name for p in lock.part(layer)] for layer in lock.layers} if lock is not None else {}


def copies_line(copies: list[CudaCopy]) -> str:
    """One line for `invoke build --dry-run`."""
    if not copies:
        return "each CUDA library once in the serving stage (its base holds none that a pip step installs again)"
    return (f"{len(copies)} CUDA libraries twice in the serving stage: in {copies[0].base_image} and again as "
            f"NVIDIA wheels ({', '.join(c.library for c in copies)})")
