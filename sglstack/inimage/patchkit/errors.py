"""The failures of the patch engine, one class per kind, all one-line messages.

Every message starts with the patch, then the file and the class it targets, so a build log line or a
CLI error says at once which patch broke against what.
"""

from __future__ import annotations


def one_line(text: str) -> str:
    """`text` with line breaks and other control characters written as escapes (a method name or a
    path from a patch file must not split the message). sglstack.core.errors has the same rule for the host;
    this copy keeps patchkit free of imports from the rest of sglstack."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


class PatchError(Exception):
    """Base class; `str(err)` is the one-line message and `kind` the short status shown in tables."""

    kind = "error"

    def __init__(
        self, reason: str, *, patch: str | None = None, file: str | None = None, class_name: str | None = None
    ) -> None:
        self.patch, self.file, self.class_name, self.reason = patch, file, class_name, reason
        where = []
        if patch:
            where.append(f"patch '{patch}'")
        if file:
            where.append(file)
        if class_name:
            where.append(f"class {class_name}")
        super().__init__(one_line(": ".join([*where, reason])))


class PatchUsageError(PatchError):
    """The command itself is wrong: unknown patch id, no `sglang/` under the root, unknown version."""

    kind = "usage"


class PatchDefinitionError(PatchError):
    """The patch's own files (patch.toml, the methods source) are invalid."""

    kind = "invalid patch"


class PatchDrift(PatchError):
    """The target file no longer looks like what the patch was written for."""

    kind = "drift"


class PatchUnreadable(PatchError):
    """The target file cannot be read as Python source: unreadable, too large, or not in its encoding."""

    kind = "unreadable"


class PatchWriteError(PatchError):
    """The patched files (or the manifest) could not be written; nothing under the root was changed."""

    kind = "write failed"


class PatchModuleLevelDef(PatchDrift):
    """A function named like one of the methods sits at module level: the `cat >>` mistake."""


class PatchUnboundName(PatchDrift):
    """A method uses a name the target module does not define or import."""


class PatchConflict(PatchError):
    """The class already has a member of that name that is not a compatible method."""

    kind = "conflict"


class PatchOutOfRange(PatchError):
    """The SGLang version is outside the patch's `applies_to` range, and the fix is not upstream."""

    kind = "out of range"


class PatchPreimageMismatch(PatchError):
    """The file's sha256 before patching is not the declared (or pip-recorded) one."""

    kind = "pre-image mismatch"


class PatchAlreadyUpstream(PatchError):
    """Upstream has the methods and the stack's policy says that is an error: retire the patch."""

    kind = "already upstream"


class PatchVerifyError(PatchError):
    """The structural verification after applying (or on demand) failed."""

    kind = "verify failed"
