"""PEP 440 versions and specifiers, the subset patch ranges need, with the standard library only.

`packaging` is not installed in the build stages that run the engine. Supported: epochs, releases,
a/b/rc pre-releases, post and dev releases, local labels, and the operators == != < <= > >= ~= ===
including `==X.*`. The version tested is the one installed, so pre-releases are never excluded by
default; as in PEP 440, `<V` does not match pre-releases of V and `>V` does not match post-releases
of V.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

_VERSION_RE = re.compile(
    r"""^\s*v?
    (?:(?P<epoch>\d+)!)?
    (?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>\d+)?)?
    (?:(?:-(?P<post_n1>\d+))|(?:[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d+)?))?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
# As sglstack.core.versions (this package runs in images without the rest of sglstack).
MAX_VERSION_CHARS = 64
_PRE_LABELS = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}


class InvalidVersion(ValueError):
    pass


@total_ordering
@dataclass(frozen=True)
class Version:
    epoch: int
    release: tuple[int, ...]
    pre: tuple[str, int] | None
    post: int | None
    dev: int | None
    local: tuple[int | str, ...]
    text: str = ""  # as written, for `===`; not part of the ordering

    @classmethod
    def parse(cls, text: str) -> Version:
        if len(text) > MAX_VERSION_CHARS:  # a long run of digits would end in int()'s conversion limit
            raise InvalidVersion(f"'{text[:40]}...' ({len(text)} characters) is not a PEP 440 version (longer "
                                 f"than {MAX_VERSION_CHARS} characters)")
        m = _VERSION_RE.match(text)
        if not m:
            raise InvalidVersion(f"'{text}' is not a PEP 440 version")
        pre = None
        if m["pre_l"]:
            pre = (_PRE_LABELS[m["pre_l"].lower()], int(m["pre_n"] or 0))
        post = None
        if m["post_n1"] is not None:
            post = int(m["post_n1"])
        elif m["post_l"]:
            post = int(m["post_n2"] or 0)
        dev = int(m["dev_n"] or 0) if m["dev_l"] else None
        local: tuple[int | str, ...] = ()
        if m["local"]:
            local = tuple(int(p) if p.isdigit() else p.lower() for p in re.split(r"[-_.]", m["local"]))
        return cls(
            int(m["epoch"] or 0), tuple(int(p) for p in m["release"].split(".")), pre, post, dev, local, text.strip()
        )

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None

    @property
    def public(self) -> Version:
        return Version(self.epoch, self.release, self.pre, self.post, self.dev, ())

    def _key(self) -> tuple:
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        # A bare dev release sorts before the pre-releases of the same version.
        if self.pre is None and self.post is None and self.dev is not None:
            pre_key: tuple = (-1, "", 0)
        elif self.pre is None:
            pre_key = (1, "", 0)
        else:
            pre_key = (0, *self.pre)
        post_key = (-1, 0) if self.post is None else (0, self.post)
        dev_key = (1, 0) if self.dev is None else (0, self.dev)
        local_key = tuple((1, p, "") if isinstance(p, int) else (0, 0, p) for p in self.local)
        return (self.epoch, tuple(release), pre_key, post_key, dev_key, local_key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()


def _padded(release: tuple[int, ...], length: int) -> tuple[int, ...]:
    return release + (0,) * (length - len(release))


@dataclass(frozen=True)
class Specifier:
    operator: str
    version: str

    def contains(self, candidate: Version) -> bool:
        op, text = self.operator, self.version
        if op == "===":
            return text.lower() == candidate.text.lower()
        if op in ("==", "!=") and text.endswith(".*"):
            prefix = Version.parse(text[:-2])
            cand = candidate.public
            n = len(prefix.release)
            matches = (
                cand.epoch == prefix.epoch
                and _padded(cand.release, n)[:n] == prefix.release
                and (prefix.pre is None or cand.pre == prefix.pre)
            )
            return matches if op == "==" else not matches
        spec = Version.parse(text)
        if op == "==":
            return (candidate if spec.local else candidate.public) == spec
        if op == "!=":
            return (candidate if spec.local else candidate.public) != spec
        cand = candidate.public
        if op == "<=":
            return cand <= spec
        if op == ">=":
            return cand >= spec
        if op == "<":
            if not cand < spec:
                return False
            # V's earliest pre-release is V.dev0 (1.2 -> 1.2.dev0, 1.2.post1 -> 1.2.post1.dev0)
            earliest = Version(spec.epoch, spec.release, spec.pre, spec.post, 0, ())
            return spec.is_prerelease or not (cand.is_prerelease and cand >= earliest)
        if op == ">":
            if not cand > spec:
                return False
            # what `cand` is a post-release of: 1.0.post1 -> 1.0, 1.0a1.post0 -> 1.0a1
            post_of = Version(cand.epoch, cand.release, cand.pre, None, None, ())
            return spec.post is not None or not (cand.post is not None and post_of == spec)
        if op == "~=":  # SpecifierSet.parse refused fewer than two release segments
            head = spec.release[:-1]
            return cand >= spec and cand.epoch == spec.epoch and _padded(cand.release, len(head))[: len(head)] == head
        raise InvalidVersion(f"unknown operator '{op}'")


_SPEC_RE = re.compile(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*([^\s,;]+)\s*$")


@dataclass(frozen=True)
class SpecifierSet:
    """A comma-separated list of specifiers; a version matches when it matches all of them."""

    specifiers: tuple[Specifier, ...]
    text: str

    @classmethod
    def parse(cls, text: str) -> SpecifierSet:
        specs = []
        for part in (p for p in text.split(",") if p.strip()):
            m = _SPEC_RE.match(part)
            if not m:
                raise InvalidVersion(f"'{part.strip()}' is not a PEP 440 specifier")
            op, ver = m.groups()
            if op != "===":
                parsed = Version.parse(ver[:-2] if ver.endswith(".*") and op in ("==", "!=") else ver)
                if op == "~=" and len(parsed.release) < 2:
                    raise InvalidVersion(f"'~={ver}' needs at least two release segments")
            specs.append(Specifier(op, ver))
        return cls(tuple(specs), text)

    def contains(self, version: str | Version) -> bool:
        if isinstance(version, str):
            version = Version.parse(version)
        return all(s.contains(version) for s in self.specifiers)

    def __str__(self) -> str:
        return self.text
