"""What an image holds: `invoke coverage`, `size`, `diff`, `sbom`, `verify-image`."""

from __future__ import annotations

from dataclasses import dataclass

from ..config.imageref import not_an_image
from ..core.options import (
    TaskOptions,
    docker_host_option,
    json_flag_option,
    json_path_option,
    option,
    required,
    stacks_file_option,
)
from .options import command


@dataclass(frozen=True)
class CoverageOptions(TaskOptions):
    stack: str = required("stack name from the matrix")
    stacks_file: str = stacks_file_option()
    json: str | None = json_path_option("also write the table and the verdict as JSON to this path")


@command(CoverageOptions)
def coverage(o: CoverageOptions) -> int:
    """Which kernels each GPU of cuda_arch_list gets from the stack's wheels (cuobjdump; no Docker, no GPU).

    Exit 0 covered, 1 a required capability missing, 2 bad input, 3 incomplete (a wheel out of reach)."""
    from .coverage import coverage_command  # at call time: rich and the matrix are slow to import

    return coverage_command(o.stacks_file, o.stack, json_path=o.json)


@dataclass(frozen=True)
class SizeOptions(TaskOptions):
    stack: str = required("stack name from the matrix")
    stacks_file: str = stacks_file_option()
    image: str | None = option("the image to measure (default: the one the stack's last build recorded)",
                               check=not_an_image)
    json: bool = json_flag_option("print the report as JSON")
    docker_host: str | None = docker_host_option("Docker engine URL the image is on (default: DOCKER_HOST / local "
                                                 "socket)")


@command(SizeOptions)
def size(o: SizeOptions) -> int:
    """The image's size by layer, its 20 largest packages, files present twice; exit 1 over size.max_gb."""
    from .size import size_command  # at call time: the docker SDK is slow to import

    return size_command(o.stacks_file, o.stack, image=o.image, as_json=o.json, docker_host=o.docker_host)


@dataclass(frozen=True)
class DiffOptions(TaskOptions):
    # Names of more than one letter: invoke would make `-a` and `-b` short flags of these (one meaning per letter).
    before: str = required("the first argument: an image (tag, id, repo@sha256:...), a build record, or a lock")
    after: str = required("the second argument: the same kinds")
    json: bool = json_flag_option("print the diff as JSON")
    docker_host: str | None = docker_host_option("Docker engine URL to read images from (default: DOCKER_HOST / "
                                                 "local socket)")


@command(DiffOptions, positional=("before", "after"))
def diff(o: DiffOptions) -> int:
    """invoke diff BEFORE AFTER [--json]: what changed (base image, pins, packages, patches, SGLang, labels)."""
    from ..diff.sources import diff_command  # at call time: the Docker SDK and the registry client

    return diff_command(o.before, o.after, as_json=o.json, docker_host=o.docker_host)


@dataclass(frozen=True)
class SbomOptions(TaskOptions):
    ref: str = required("the image: REPO:TAG or REPO@sha256:... in a registry (or a local image)",
                        check=not_an_image)
    json: str | None = json_path_option("write the CycloneDX JSON to PATH instead of printing it")
    generate: bool = option("list the image itself even when the registry has an SBOM attached", False, kind=bool)
    docker_host: str | None = docker_host_option("Docker engine URL to list images on (default: DOCKER_HOST / "
                                                 "local socket)")
    key: str | None = option("show only the SBOM a signature by this ed25519 public key (PEM) covers (exit 1 "
                             "when none does); without it the SBOM is marked unsigned")


@command(SbomOptions, positional=("ref",))
def sbom(o: SbomOptions) -> int:
    """invoke sbom REF [--key PUB] [--json PATH]: the image's SBOM (the signed one with --key; else the attached
    one, else listed from the image, marked unsigned)."""
    from .attest import sbom_command  # at call time: cyclonedx is slow to import

    return sbom_command(o.ref, json_path=o.json, docker_host=o.docker_host, generate=o.generate, key=o.key)


@dataclass(frozen=True)
class VerifyImageOptions(TaskOptions):
    ref: str = required("the image in its registry: REPO:TAG or REPO@sha256:...", check=not_an_image)
    key: str | None = option("the signer's ed25519 public key (PEM)")
    json: str | None = json_path_option("write what was checked (or why it was refused) to PATH as JSON")
    stack: str | None = option("also require the signed provenance to name this stack, its config hash (as the "
                               "matrix gives it now) and its SGLang release")
    stacks_file: str | None = stacks_file_option("the matrix file of --stack (default: stacks.yaml)")


@command(VerifyImageOptions, name="verify-image", positional=("ref",))
def verify_image(o: VerifyImageOptions) -> int:
    """invoke verify-image REF --key PUB [--stack NAME]: exit 0 only when a signature by that key covers exactly
    REF's digest and the SBOM and provenance it names, and (with --stack) they name that stack's build
    (1: refused, 2: bad input)."""
    from .attest import verify_image_command  # at call time: cryptography and the registry

    return verify_image_command(o.ref, key=o.key, json_path=o.json, stack=o.stack, stacks_file=o.stacks_file)
