"""What an image holds: `invoke coverage`, `size`, `diff`, `sbom`, `verify-image`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config.imageref import not_an_image
from ..core.options import ReportOptions, docker_host_option, option, required, stacks_file_option
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport


@dataclass(frozen=True)
class CoverageOptions(ReportOptions):
    stack: str = required("stack name from the matrix")
    stacks_file: str = stacks_file_option()


@command(CoverageOptions)
def coverage(o: CoverageOptions, as_json: JsonReport) -> int:
    """Which kernels each GPU of cuda_arch_list gets from the stack's wheels (cuobjdump; no Docker, no GPU).

    Exit 0 covered, 1 a required capability missing, 2 bad input, 3 incomplete (a wheel out of reach)."""
    from .coverage import coverage_command  # at call time: rich and the matrix are slow to import

    return coverage_command(o.stacks_file, o.stack, as_json=as_json)


@dataclass(frozen=True)
class SizeOptions(ReportOptions):
    stack: str = required("stack name from the matrix")
    stacks_file: str = stacks_file_option()
    image: str | None = option("the image to measure (default: the one the stack's last build recorded)",
                               check=not_an_image)
    docker_host: str | None = docker_host_option("Docker engine URL the image is on (default: DOCKER_HOST / local "
                                                 "socket)")


@command(SizeOptions)
def size(o: SizeOptions, as_json: JsonReport) -> int:
    """The image's size by layer, its 20 largest packages, files present twice; exit 1 over size.max_gb."""
    from .size import size_command  # at call time: the docker SDK is slow to import

    return size_command(o.stacks_file, o.stack, image=o.image, as_json=as_json, docker_host=o.docker_host)


@dataclass(frozen=True)
class DiffOptions(ReportOptions):
    # Names of more than one letter: invoke would make `-a` and `-b` short flags of these (one meaning per letter).
    before: str = required("the first argument: an image (tag, id, repo@sha256:...), a build record, or a lock")
    after: str = required("the second argument: the same kinds")
    docker_host: str | None = docker_host_option("Docker engine URL to read images from (default: DOCKER_HOST / "
                                                 "local socket)")


@command(DiffOptions, positional=("before", "after"))
def diff(o: DiffOptions, as_json: JsonReport) -> int:
    """invoke diff BEFORE AFTER [--json]: what changed (base image, pins, packages, patches, SGLang, labels)."""
    from ..diff.sources import diff_command  # at call time: the Docker SDK and the registry client

    return diff_command(o.before, o.after, as_json=as_json, docker_host=o.docker_host)


@dataclass(frozen=True)
class SbomOptions(ReportOptions):
    ref: str = required("the image: REPO:TAG or REPO@sha256:... in a registry (or a local image)",
                        check=not_an_image)
    generate: bool = option("list the image itself even when the registry has an SBOM attached", False, kind=bool)
    docker_host: str | None = docker_host_option("Docker engine URL to list images on (default: DOCKER_HOST / "
                                                 "local socket)")
    verify_key: str | None = option("show only the SBOM a signature by this ed25519 public key (PEM) covers (exit 1 "
                             "when none does); without it the SBOM is marked unsigned")


@command(SbomOptions, positional=("ref",))
def sbom(o: SbomOptions, as_json: JsonReport) -> int:
    """invoke sbom REF [--verify-key PUB] [--json-out PATH]: the image's SBOM (the signed one with --verify-key;
    else the attached one, else listed from the image, marked unsigned), printed as JSON unless --json-out alone
    names a file for it."""
    from .attest import sbom_command  # at call time: cyclonedx is slow to import

    return sbom_command(o.ref, as_json=as_json, docker_host=o.docker_host, generate=o.generate, key=o.verify_key)


@dataclass(frozen=True)
class VerifyImageOptions(ReportOptions):
    ref: str = required("the image in its registry: REPO:TAG or REPO@sha256:...", check=not_an_image)
    verify_key: str | None = option("the signer's ed25519 public key (PEM)")
    stack: str | None = option("also require the signed provenance to name this stack, its config hash (as the "
                               "matrix gives it now) and its SGLang release")
    stacks_file: str | None = stacks_file_option("the matrix file of --stack (default: stacks.yaml)")


@command(VerifyImageOptions, name="verify-image", positional=("ref",))
def verify_image(o: VerifyImageOptions, as_json: JsonReport) -> int:
    """invoke verify-image REF --verify-key PUB [--stack NAME]: exit 0 only when a signature by that key covers exactly
    REF's digest and the SBOM and provenance it names, and (with --stack) they name that stack's build
    (1: refused, 2: bad input)."""
    from .attest import verify_image_command  # at call time: cryptography and the registry

    return verify_image_command(o.ref, key=o.verify_key, as_json=as_json, stack=o.stack, stacks_file=o.stacks_file)
