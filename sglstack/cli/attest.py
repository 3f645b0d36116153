"""`invoke sbom` and `invoke verify-image`: their options, and what each prints or writes as JSON. Finding or
listing the SBOM is `attest.shown`'s; the check (the one `deploy --verify-key` and `render --verify-key` run
too) is `attest.verify`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config.imageref import not_an_image
from ..core.jsonreport import NO_JSON, JsonReport
from ..core.options import ReportOptions, docker_host_option, option, required, stacks_file_option
from .cmdoptions import only_stack_option, verify_key_option
from .options import command

if TYPE_CHECKING:
    from ..attest.provenance import BuildIdentity


@dataclass(frozen=True)
class SbomOptions(ReportOptions):
    ref: str = required("the image: REPO:TAG or REPO@sha256:... in a registry (or a local image)",
                        check=not_an_image)
    generate: bool = option("list the image itself even when the registry has an SBOM attached", False, kind=bool)
    docker_host: str | None = docker_host_option("Docker engine URL to list images on (default: DOCKER_HOST / "
                                                 "local socket)")
    verify_key: str | None = verify_key_option("show only the SBOM a signature by this ed25519 public key (PEM) "
                                               "covers (exit 1 when none does); without it the SBOM is marked unsigned")


@command(SbomOptions, positional=("ref",))
def sbom(o: SbomOptions, as_json: JsonReport) -> int:
    """invoke sbom REF [--verify-key PUB] [--json-out PATH]: the image's SBOM (the signed one with --verify-key;
    else the attached one, else listed from the image, marked unsigned), printed as JSON unless --json-out alone
    names a file for it."""
    return sbom_command(o.ref, as_json=as_json, docker_host=o.docker_host, generate=o.generate, key=o.verify_key)


@dataclass(frozen=True)
class VerifyImageOptions(ReportOptions):
    ref: str = required("the image in its registry: REPO:TAG or REPO@sha256:...", check=not_an_image)
    verify_key: str | None = verify_key_option("the signer's ed25519 public key (PEM)")
    stack: str | None = only_stack_option("also require the signed provenance to name this stack, its config hash (as "
                                          "the matrix gives it now) and its SGLang release")
    stacks_file: str | None = stacks_file_option("the matrix file of --stack (default: stacks.yaml)")


@command(VerifyImageOptions, name="verify-image", positional=("ref",))
def verify_image(o: VerifyImageOptions, as_json: JsonReport) -> int:
    """invoke verify-image REF --verify-key PUB [--stack NAME]: exit 0 only when a signature by that key covers exactly
    REF's digest and the SBOM and provenance it names, and (with --stack) they name that stack's build
    (1: refused, 2: bad input)."""
    return verify_image_command(o.ref, key=o.verify_key, as_json=as_json, stack=o.stack, stacks_file=o.stacks_file)


def expected_identity(stacks_file: str | None, stack_name: str) -> BuildIdentity:
    """What a signature must name to be this stack's release now (`deploy.identity`, the one home)."""
    # at call time: the matrix and the renderer are slow to import, and only `--stack` needs them
    from ..config.matrix import load_matrix
    from ..deploy.identity import release_identity

    return release_identity(load_matrix(stacks_file).get(stack_name), stacks_file)


def verify_image_command(ref: str, *, key: str | None, as_json: JsonReport = NO_JSON, stack: str | None = None,
                         stacks_file: str | None = None) -> int:
    """Exit 0 when verified; NotVerified (exit 1) or BadInput (exit 2) otherwise; the JSON report either way.
    With `--stack`, the signed provenance must name that stack, its config hash and its SGLang release."""
    # at call time: cryptography and the registry would slow `invoke --list`
    from ..attest.errors import BadInput, NotVerified
    from ..attest.verify import IndexNotVerified, verified_line, verified_reference
    from ..core.console import console
    from ..core.errors import one_line

    expect = expected_identity(stacks_file, stack) if stack else None  # the matrix's one line first
    if not key:
        raise BadInput("verify-image: --verify-key PUB (the signer's ed25519 public key, PEM) is required")
    try:
        _, result = verified_reference(ref, key, what="--verify-key", expect=expect)
    except IndexNotVerified as exc:  # an index: every platform's verdict, then the one refusal
        as_json.emit(exc.verification.as_dict())
        _print_platforms(exc.verification.platforms)
        raise NotVerified(f"{ref}: NOT verified: {exc}") from None
    except NotVerified as exc:
        as_json.emit({"image": ref, "verified": False, "reason": str(exc),
                      "bound_to": expect.as_dict() if expect else None})
        raise NotVerified(f"{ref}: NOT verified: {exc}") from None
    as_json.emit(result.as_dict())
    if result.platforms:
        _print_platforms(result.platforms)
        console().print(f"verified: {one_line(ref)} is the index {result.digest} of "
                        f"{len(result.platforms) - 1} platform(s), each signed by key {result.key_id[:16]}",
                        markup=False, highlight=False)
        return 0
    out = console()
    for line in result.checked:
        out.print(f"  ok: {one_line(line)}", markup=False, highlight=False)
    for line in result.skipped:
        console(stderr=True).print(f"skipped: {one_line(line)}", markup=False, highlight=False)
    out.print(verified_line(ref, result), markup=False, highlight=False)
    return 0


def _print_platforms(platforms: list[dict[str, Any]]) -> None:
    """One line per platform of an index (and the index itself): its digest and verdict."""
    # at call time: rich would slow `invoke --list`
    from ..core.console import console
    from ..core.errors import one_line

    for p in platforms:
        verdict = "verified" if p["verified"] else f"NOT verified: {p['reason']}"
        console().print(one_line(f"  {p['platform']:<12} {p['digest']}  {verdict}"), markup=False, highlight=False)


def sbom_command(ref: str, *, as_json: JsonReport = NO_JSON, docker_host: str | None = None,
                 generate: bool = False, key: str | None = None) -> int:
    """The SBOM of REF (`sglstack.attest.shown`), printed as JSON unless it goes only to --json-out's file, and
    one line on stderr saying where it came from and whether a signature covers it."""
    # at call time: cyclonedx, the Docker SDK and the registry would slow `invoke --list`
    from ..attest.shown import index_platforms, sbom_to_show
    from ..core.console import console
    from ..core.errors import one_line

    if (index := index_platforms(ref)) is not None:  # an index: each platform's SBOM, one line each on stderr
        shown_each = [(platform, child, sbom_to_show(child, docker_host=docker_host, generate=generate, key=key))
                      for platform, child in index[1]]
        document = {"image": ref, "index": index[0], "platforms": [
            {"platform": p, "image": c, "source": s.source, "signature": s.signature, "sbom": s.document}
            for p, c, s in shown_each]}
        (as_json or JsonReport(stdout=True)).emit(document)
        for platform, child, s in shown_each:
            console(stderr=True).print(one_line(
                f"sbom: {platform} {child}: {s.summary.components} components ({len(s.summary.python)} Python, "
                f"{s.summary.debian} Debian), {s.source}; {s.signature}"), markup=False, highlight=False)
        return 0
    shown = sbom_to_show(ref, docker_host=docker_host, generate=generate, key=key)
    (as_json or JsonReport(stdout=True)).emit(shown.document)
    summary = shown.summary
    console(stderr=True).print(f"sbom: {one_line(ref)}: {summary.components} components ({len(summary.python)} "
                               f"Python, {summary.debian} Debian), {shown.source}; {shown.signature}"
                               + (f"; written to {as_json.path}" if as_json.path else ""),
                               markup=False, highlight=False)
    return 0
