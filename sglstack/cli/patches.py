"""The patches: `invoke patches.list`, `patches.check`, `patches.apply`, `patches.verify`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.options import ReportOptions, TaskOptions, option, required, stacks_file_option
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport


@dataclass(frozen=True)
class ListOptions(ReportOptions):
    stacks_file: str = stacks_file_option("the matrix file (to show which stacks use each patch)")


@command(ListOptions, name="list")
def patches_list(o: ListOptions, as_json: JsonReport) -> int:
    """List the patches, their SGLang version ranges, targets, and the stacks that use them."""
    from .patch_commands import list_command  # at call time: the matrix is slow to import

    return list_command(o.stacks_file, as_json=as_json)


@dataclass(frozen=True)
class CheckOptions(ReportOptions):
    exactly_one = (("sglang", "stack"),)
    sglang: str | None = option("an SGLang release: check every patch against its wheel")
    stack: str | None = option("check this stack's patches against its SGLang, with its policy")
    stacks_file: str = stacks_file_option()


@command(CheckOptions, name="check")
def patches_check(o: CheckOptions, as_json: JsonReport) -> int:
    """Apply patches to a temporary copy of an SGLang wheel (pip download, cached); no Docker needed."""
    from .patch_commands import check_command  # at call time: the matrix is slow to import

    return check_command(sglang=o.sglang, stack=o.stack, stacks_file=o.stacks_file, as_json=as_json)


@dataclass(frozen=True)
class ApplyOptions(TaskOptions):
    exactly_one = (("stack", "patch"),)
    root: str = required("folder holding the sglang/ package (unpacked wheel or site-packages)")
    stack: str | None = option("apply this stack's patches")
    patch: str | None = option("apply this one patch")
    stacks_file: str = stacks_file_option()
    sglang: str | None = option("the SGLang release under ROOT (default: from ROOT's sglang-*.dist-info, or the "
                                "stack's)")
    manifest: str | None = option("write what was applied to this JSON file")


@command(ApplyOptions, name="apply")
def patches_apply(o: ApplyOptions) -> int:
    """Insert patch methods into their classes under ROOT, then verify them."""
    from .patch_commands import apply_command  # at call time: the matrix is slow to import

    return apply_command(o.root, stack=o.stack, patch=o.patch, stacks_file=o.stacks_file,
                         sglang_version=o.sglang, manifest=o.manifest)


@dataclass(frozen=True)
class VerifyOptions(ReportOptions):
    exactly_one = (("stack", "patch"),)
    root: str = required("folder holding the sglang/ package")
    stack: str | None = option("this stack's patches")
    patch: str | None = option("this one patch")
    stacks_file: str = stacks_file_option()
    manifest: str | None = option("also check the sha256 recorded by apply")


@command(VerifyOptions, name="verify")
def patches_verify(o: VerifyOptions, as_json: JsonReport) -> int:
    """Verify that patches are in place under ROOT (class members, compiles, EntryClass); change nothing."""
    from .patch_commands import verify_command  # at call time: the matrix is slow to import

    return verify_command(o.root, stack=o.stack, patch=o.patch, stacks_file=o.stacks_file, manifest=o.manifest,
                          as_json=as_json)
