"""The one reading of a version a user or a package index hands us: PEP 440 (packaging's `Version`), at most
`MAX_VERSION_CHARS` long.

The length bound is checked first: a long string of digits (`--sglang 999...9`) otherwise ends in Python's
limit on int-string conversion, a `ValueError` that is no `InvalidVersion` (a traceback), or, below it, in a
release number no index has and an error line thousands of characters wide. (patchkit, which runs in images
without the rest of sglstack, bounds its own parser the same way.)
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

MAX_VERSION_CHARS = 64  # the longest SGLang, torch or CUDA version is about 25 (2.9.1+cu130.post1.dev20251201)


def parse_version(text: str) -> Version:
    """`text` as a PEP 440 version; `InvalidVersion` (a `ValueError`) with a one-line reason otherwise."""
    if len(text) > MAX_VERSION_CHARS:
        raise InvalidVersion(f"not a version (longer than {MAX_VERSION_CHARS} characters)")
    try:
        return Version(text)
    except InvalidVersion:
        raise InvalidVersion("not a version (PEP 440)") from None


def version_problem(text: str) -> str | None:
    """Why `text` is not a version, or None."""
    try:
        parse_version(text)
    except InvalidVersion as exc:
        return str(exc)
    return None
