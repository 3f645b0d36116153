"""The image labels sglstack itself reads back: one home, so that writer and readers never disagree.

Build writes them, Publish and Deploy read them from the registry or the engine, Diff compares them.
"""

from __future__ import annotations

from collections.abc import Mapping

PREFIX = "io.sglstack."
OCI = "org.opencontainers.image."

# ---- on the image (render writes the static ones into the Dockerfile; build stamps the verified ones) ----
OCI_TITLE_LABEL = OCI + "title"
OCI_DESCRIPTION_LABEL = OCI + "description"
OCI_VERSION_LABEL = OCI + "version"
OCI_VENDOR_LABEL = OCI + "vendor"
BASE_NAME_LABEL = OCI + "base.name"
BASE_DIGEST_LABEL = OCI + "base.digest"  # the base image's registry digest (never written as an image id)
STACK_LABEL = PREFIX + "stack"  # the image's stack; compose's containers carry it too
SGLANG_LABEL = PREFIX + "sglang"
PYTHON_LABEL = PREFIX + "python"
PATCHES_LABEL = PREFIX + "patches"
CUDA_LABEL = PREFIX + "cuda"
CUDA_ARCH_LIST_LABEL = PREFIX + "cuda-arch-list"
OVERRIDE_LABEL_PREFIX = PREFIX + "override."
FREEZE_LABEL = PREFIX + "freeze-sha256"
TORCH_LABEL = PREFIX + "torch"
LOCK_LABEL = PREFIX + "lock-sha256"
CONFIG_HASH_LABEL = PREFIX + "config-hash"  # our content hash of the build inputs (not a registry digest)
VERIFIED_LABEL = PREFIX + "verified"  # "true" once in-image verification passed
TARGET_LABEL = PREFIX + "target"
BUILDER_LABEL = PREFIX + "builder"
PATCH_LABEL_PREFIX = PREFIX + "patch."
PIN_LABEL_PREFIX = PREFIX + "pin."
# Kernel coverage per compute capability, e.g. "9.0:native,10.0:native,12.0:ptx" (coverage.py writes it,
# preflight reads it to warn when a node's GPU is not covered by the image).
COVERAGE_LABEL = PREFIX + "coverage"
COVERAGE_CELLS = ("native", "ptx", "missing")

# ---- on containers and other things sglstack starts, so it finds (and removes) only its own -------------
OWNER_LABEL = PREFIX + "owner"
BUILD_CONTAINER_LABEL = PREFIX + "build"
SMOKE_CONTAINER_LABEL = PREFIX + "smoke"  # the run kind: baseline or eagle3
IMAGE_LABEL = PREFIX + "image"  # compose: the reference the service runs
MODEL_LABEL = PREFIX + "model"
SPECULATIVE_LABEL = PREFIX + "speculative"
NODE_LABEL = PREFIX + "node"
SMOKE_REPORT_LABEL = PREFIX + "smoke-report"  # `sha256:` of the smoke report that passed the image
UNTAG_LABEL = PREFIX + "untag"  # the config of the marker image a registry tag is moved to before deletion
ATTESTATION_ANNOTATION = PREFIX + "attestation"
# Kubernetes label keys take a `prefix/name` form
K8S_PREFIX = "io.sglstack/"
K8S_STACK_LABEL = K8S_PREFIX + "stack"
K8S_ROLE_LABEL = K8S_PREFIX + "role"


def format_coverage_label(cells: Mapping[str, str]) -> str:
    """{capability: cell} -> "9.0:native,10.0:ptx", in the given order."""
    return ",".join(f"{cap}:{value}" for cap, value in cells.items())


def parse_coverage_label(value: str) -> dict[str, str]:
    """The inverse of `format_coverage_label`; ValueError on anything else."""
    out: dict[str, str] = {}
    for item in value.split(","):
        cap, sep, cell = item.strip().partition(":")
        major, dot, minor = cap.partition(".")
        if not sep or not dot or not major.isdigit() or not minor.isdigit() or cell not in COVERAGE_CELLS:
            raise ValueError(f"'{item}' is not CAPABILITY:native|ptx|missing")
        out[cap] = cell
    return out


# The kernel-cache artifact's annotations (kernelcache/layout.py writes them; attest and deploy read them).
KERNEL_CACHE_KEY_ANNOTATION = "io.sglstack.kernel-cache.key"
KERNEL_CACHE_IMAGE_ANNOTATION = "io.sglstack.kernel-cache.image"
KERNEL_CACHE_FILES_ANNOTATION = "io.sglstack.kernel-cache.files"
KERNEL_CACHE_ARTIFACT_ANNOTATION = "io.sglstack.kernel-cache.artifact"  # on a cache's signature: the cache
OCI_REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"  # an OCI image layout's name of an index entry
