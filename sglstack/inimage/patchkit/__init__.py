"""patchkit: verified in-class source patches for SGLang.

Standard library only, relative imports only: the build copies this folder into an image and runs it
as `python3 -m patchkit`; on the host it is `sglstack.inimage.patchkit`.
"""

from __future__ import annotations

from .engine import (
    ALREADY_APPLIED,
    ALREADY_UPSTREAM,
    APPLIED,
    POLICIES,
    VERIFIED,
    PatchResult,
    apply_patches,
    detect_sglang_version,
    read_manifest,
    resolve_version,
    verify_patches,
    write_manifest,
)
from .errors import (
    PatchAlreadyUpstream,
    PatchConflict,
    PatchDefinitionError,
    PatchDrift,
    PatchError,
    PatchModuleLevelDef,
    PatchOutOfRange,
    PatchPreimageMismatch,
    PatchUnboundName,
    PatchUnreadable,
    PatchUsageError,
    PatchVerifyError,
    PatchWriteError,
)
from .source import MAX_SOURCE_BYTES
from .spec import PatchSpec, load_patch, patch_ids
from .versions import InvalidVersion, SpecifierSet, Version

__all__ = [
    "ALREADY_APPLIED",
    "ALREADY_UPSTREAM",
    "APPLIED",
    "MAX_SOURCE_BYTES",
    "POLICIES",
    "VERIFIED",
    "InvalidVersion",
    "PatchAlreadyUpstream",
    "PatchConflict",
    "PatchDefinitionError",
    "PatchDrift",
    "PatchError",
    "PatchModuleLevelDef",
    "PatchOutOfRange",
    "PatchPreimageMismatch",
    "PatchResult",
    "PatchSpec",
    "PatchUnboundName",
    "PatchUnreadable",
    "PatchUsageError",
    "PatchVerifyError",
    "PatchWriteError",
    "SpecifierSet",
    "Version",
    "apply_patches",
    "detect_sglang_version",
    "load_patch",
    "patch_ids",
    "read_manifest",
    "resolve_version",
    "verify_patches",
    "write_manifest",
]
