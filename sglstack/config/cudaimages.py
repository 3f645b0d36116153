"""NVIDIA's `nvidia/cuda` images, recognised by name: the one home of that rule.

Such an image brings CUDA under /usr/local/cuda (its flavor says how much: `size/cudacopies`) and the
environment the NVIDIA container runtime reads (`NVIDIA_VISIBLE_DEVICES`, `NVIDIA_DRIVER_CAPABILITIES`,
`NVIDIA_REQUIRE_CUDA`); a serving stage on any other base sets that environment itself (`render/dockerfile`).
"""

from __future__ import annotations

import re

# nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04, docker.io/nvidia/cuda:12.9.1-runtime-ubuntu22.04@sha256:...
_CUDA_IMAGE = re.compile(r"^(?:docker\.io/)?nvidia/cuda:(?P<tag>[^@\s]+)")


def cuda_image_tag(image: str) -> str | None:
    """The tag of an `nvidia/cuda` image reference (`13.0.1-cudnn-devel-ubuntu24.04`); None for any other image."""
    m = _CUDA_IMAGE.match(image)
    return m["tag"] if m else None
