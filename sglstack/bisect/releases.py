"""The releases between a good and a bad one, in version order (pure)."""

from __future__ import annotations

from collections.abc import Iterable

from packaging.version import InvalidVersion, Version

from ..core.versions import parse_version


class ReleaseRangeError(ValueError):
    pass


def releases_between(available: Iterable[str], good: str, bad: str) -> list[str]:
    """[good, ..., bad]: every available release after `good` up to `bad`, oldest first (PEP 440 order).

    Pre-releases and dev releases are left out unless an endpoint is one: a bisect of releases tests what
    users could install. Post-releases (0.5.10.post1) are releases.
    """
    try:
        lo, hi = parse_version(good), parse_version(bad)
    except InvalidVersion as exc:
        raise ReleaseRangeError(f"{exc}") from None
    if lo >= hi:
        raise ReleaseRangeError(f"the good release {good} must be older than the bad release {bad}")
    parsed: dict[Version, str] = {}
    for text in available:
        try:
            parsed.setdefault(parse_version(text), text)
        except InvalidVersion:
            continue
    for version, text in ((lo, good), (hi, bad)):
        if version not in parsed:
            raise ReleaseRangeError(f"release {text} is not on the package index")
    pre = lo.is_prerelease or hi.is_prerelease
    inside = sorted(v for v in parsed if lo < v < hi and (pre or not v.is_prerelease))
    return [parsed[lo], *(parsed[v] for v in inside), parsed[hi]]
