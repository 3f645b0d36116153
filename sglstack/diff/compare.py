"""`invoke diff A B`, the pure part: two snapshots of a stack in, a typed list of what changed out.

A snapshot is what one side can tell about a build, whatever it came from: an image (its labels and the
facts sglstack leaves in it), a build record (`build/NAME/record.json`), or a lock. Each section of the
diff (base image, stack pins, installed packages, patches, SGLang source, labels) is compared only when
both sides know it; otherwise the diff says which side cannot tell. Reading images, registries and files
is `sources.py`'s job; nothing here touches Docker, a registry or the disk.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from packaging.utils import canonicalize_name
from rich.console import Console
from rich.table import Table

from ..config.imageref import image_name
from ..core import labels as lb
from ..core.console import plain, report_table
from ..core.inputs import loads
from ..core.labels import CONFIG_HASH_LABEL, PATCH_LABEL_PREFIX, PIN_LABEL_PREFIX, PREFIX
from ..lockfile.model import Lock
from ..size.report import GB, MB, Growth, size_changes

BASE_NAME_LABEL = lb.BASE_NAME_LABEL
BASE_DIGEST_LABEL = lb.BASE_DIGEST_LABEL
SGLANG_LABEL = PREFIX + "sglang"


@dataclass(frozen=True)
class Snapshot:
    """What one side of a diff knows; None means "this kind of source cannot tell"."""

    ref: str  # what the user named
    kind: str  # "image" | "record" | "lock"
    stack: str | None = None
    config_hash: str | None = None
    base_image: str | None = None
    base_digest: str | None = None
    base_image_id: str | None = None  # the engine's id of a base no registry digest names (a local base)
    pins: Mapping[str, str] | None = None  # the stack's own pins
    packages: Mapping[str, str] | None = None  # every installed (or locked) distribution
    patches: Mapping[str, str] | None = None  # id -> "status sha256:<before16>-><after16>"
    sglang: str | None = None  # "0.5.9" or "git-<ref12>"
    sglang_git: tuple[str, str] | None = None  # (repo, full commit) for a git source
    labels: Mapping[str, str] | None = None
    size: Mapping[str, Any] | None = None  # a record's size summary; for an image, {"bytes": N} from the engine
    platform: str | None = None  # a lock's or build record's platform (a stack of several has one of each)

    @property
    def heading(self) -> str:
        """How the diff names this side: what the user named, its kind, and a lock's platform."""
        return f"{self.ref} ({self.kind}{f', {self.platform}' if self.platform else ''})"


@dataclass(frozen=True)
class Change:
    name: str
    before: str | None
    after: str | None

    @property
    def kind(self) -> str:
        if self.before is None:
            return "added"
        if self.after is None:
            return "removed"
        return "changed"


@dataclass(frozen=True)
class StackDiff:
    a: str
    b: str
    base: tuple[Change, ...] = ()
    config_hash: Change | None = None
    pins: tuple[Change, ...] = ()
    packages: tuple[Change, ...] = ()
    patches: tuple[Change, ...] = ()
    sglang: Change | None = None
    sglang_commits: str | None = None  # "repo: a..b" for two commits of one repository
    labels: tuple[Change, ...] = ()
    unknown: tuple[str, ...] = field(default=())  # sections one side cannot tell
    size: tuple[Growth, ...] = ()  # the image, then the layers and packages that moved (a result, not a cause)
    platform: Change | None = None  # two locks of different platforms (of one stack: not an error, but said)

    @property
    def identical(self) -> bool:
        return not (self.base or self.config_hash or self.pins or self.packages or self.patches or self.sglang
                    or self.labels)


# ---- snapshots from each kind of source (pure) -----------------------------------------------------

def patch_value(status: str, before: str, after: str) -> str:
    """One format for a patch's state wherever it comes from (the image label keeps 16 hex digits)."""
    return f"{status} sha256:{before[:16]}->{after[:16]}"


def _canonical(mapping: Mapping[str, Any]) -> dict[str, str]:
    return {canonicalize_name(k): str(v) for k, v in sorted(mapping.items())}


def _patches_from_manifest(manifest: Any) -> dict[str, str] | None:
    if isinstance(manifest, dict):  # a record written for a reused image: id -> label value
        return {str(k): str(v) for k, v in manifest.items()}
    if isinstance(manifest, list):
        return {str(e.get("id")): patch_value(str(e.get("status")), str(e.get("sha256_before", "")),
                                              str(e.get("sha256_after", "")))
                for e in manifest if isinstance(e, dict)}
    return None


def _pins_from_labels(labels: Mapping[str, str]) -> dict[str, str]:
    return {k.removeprefix(PIN_LABEL_PREFIX): v for k, v in sorted(labels.items()) if k.startswith(PIN_LABEL_PREFIX)}


def _sglang_source(source: Any) -> tuple[str | None, tuple[str, str] | None]:
    """From a stack manifest's `sglang` section ({version} or {git: {repo, ref}})."""
    if not isinstance(source, dict):
        return None, None
    if source.get("version"):
        return str(source["version"]), None
    git = source.get("git") or {}
    if git.get("ref"):
        return f"git-{str(git['ref'])[:12]}", (str(git.get("repo", "")), str(git["ref"]))
    return None, None


_SCALAR = (str, int, float)


def _flat(value: Any) -> bool:
    """A mapping of names to plain values (pins, installed packages, labels)."""
    return isinstance(value, Mapping) and all(isinstance(v, _SCALAR) and not isinstance(v, bool)
                                              for v in value.values())


def record_problem(record: Any) -> tuple[str, str] | None:
    """(key, what is wrong) for a build record diff cannot read as `build/record.py` writes it; None when it can.

    Each key is checked for the type diff reads it as, so a hand-edited or damaged record is one line
    naming its key instead of a traceback (or a diff of half-read values)."""
    if not isinstance(record, Mapping):
        return "(record)", f"a JSON {type(record).__name__}, not an object"
    for key in ("stack", "config_hash"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return key, "not text"
    for key in ("pins", "installed", "labels"):
        if record.get(key) is not None and not _flat(record[key]):
            return key, "not an object of names to versions or values"
    base = record.get("base_image")
    if base is not None and not (isinstance(base, Mapping) and all(
            isinstance(base.get(k), str | None) for k in ("name", "digest", "image_id"))):
        return "base_image", "not an object with text 'name' and 'digest'"
    patches = record.get("patches")
    if patches is not None and not (_flat(patches) or (isinstance(patches, list)
                                                        and all(isinstance(e, Mapping) for e in patches))):
        return "patches", "not a list of patch entries"
    sglang = record.get("sglang")
    if sglang is not None:
        git = sglang.get("git") if isinstance(sglang, Mapping) else None
        if not isinstance(sglang, Mapping) or not isinstance(sglang.get("version"), str | None) or not (
                git is None or (isinstance(git, Mapping) and all(isinstance(git.get(k), str | None)
                                                                 for k in ("repo", "ref")))):
            return "sglang", "not {version} or {git: {repo, ref}}"
    return None


def record_snapshot(record: Mapping[str, Any], ref: str) -> Snapshot:
    """A build record (`build/NAME/record.json`, as `build/record.py` writes it)."""
    labels = record.get("labels")
    labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else None
    base: Mapping[str, Any] = record["base_image"] if isinstance(record.get("base_image"), Mapping) else {}
    sglang, git = _sglang_source(record.get("sglang"))
    pins = record.get("pins")
    if sglang is None and isinstance(pins, Mapping) and pins.get("sglang"):
        sglang = str(pins["sglang"])
    if sglang is None and labels:
        sglang = labels.get(SGLANG_LABEL)
    installed = record.get("installed")
    size = record.get("size")
    return Snapshot(
        ref=ref, kind="record", stack=record.get("stack"), config_hash=record.get("config_hash"),
        base_image=base.get("name") or (labels or {}).get(BASE_NAME_LABEL),
        base_digest=base.get("digest") or (labels or {}).get(BASE_DIGEST_LABEL),
        base_image_id=base.get("image_id"),
        pins=_canonical(pins) if isinstance(pins, Mapping) else None,
        packages=_canonical(installed) if isinstance(installed, Mapping) and installed else None,
        patches=_patches_from_manifest(record.get("patches")), sglang=sglang, sglang_git=git, labels=labels,
        size=size if isinstance(size, Mapping) and isinstance(size.get("bytes"), int) else None,
        platform=str(record["platform"]) if isinstance(record.get("platform"), str) else None)


def lock_snapshot(lock: Lock, ref: str) -> Snapshot:
    sglang = lock.get("sglang")
    return Snapshot(ref=ref, kind="lock", stack=lock.stack, packages=dict(sorted(lock.pins.items())),
                    sglang=sglang.version if sglang and sglang.version else None,
                    platform=lock.platforms[0] if len(lock.platforms) == 1 else None)


def image_snapshot(ref: str, labels: Mapping[str, str], files: Mapping[str, bytes]) -> Snapshot:
    """An image: its labels, plus the JSON files the build leaves in /opt/sglstack (when readable)."""

    def load(name: str) -> Any:
        try:
            return loads(files[name]) if name in files else None
        except ValueError:
            return None

    installed = load("installed.json")
    manifest = load("patches.json")
    stack = load("stack.json")
    stack = stack if isinstance(stack, dict) else None  # an unreadable fact: known by the labels instead
    labels = {str(k): v for k, v in labels.items() if isinstance(v, str)}
    patches = _patches_from_manifest(manifest)
    if patches is None:
        patches = {k.removeprefix(PATCH_LABEL_PREFIX): v for k, v in sorted(labels.items())
                   if k.startswith(PATCH_LABEL_PREFIX)}
    sglang, git = _sglang_source((stack or {}).get("sglang"))
    distributions = (installed or {}).get("distributions") if isinstance(installed, dict) else None
    distributions = distributions if _flat(distributions) else None
    return Snapshot(
        ref=ref, kind="image", stack=labels.get(PREFIX + "stack"), config_hash=labels.get(CONFIG_HASH_LABEL),
        base_image=labels.get(BASE_NAME_LABEL), base_digest=labels.get(BASE_DIGEST_LABEL),
        pins=_pins_from_labels(labels), packages=_canonical(distributions) if distributions else None,
        patches=patches, sglang=sglang or labels.get(SGLANG_LABEL), sglang_git=git, labels=dict(labels))


# ---- the comparison --------------------------------------------------------------------------------

def _changes(a: Mapping[str, str], b: Mapping[str, str]) -> tuple[Change, ...]:
    return tuple(Change(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))


# Labels shown in their own sections (pins, patches) or that always differ between two builds.
_LABELS_SHOWN_ELSEWHERE = (PIN_LABEL_PREFIX, PATCH_LABEL_PREFIX)


def snapshot_diff(a: Snapshot, b: Snapshot) -> StackDiff:
    """Everything that differs between A (before) and B (after)."""
    unknown: list[str] = []

    def both(section: str, x: Any, y: Any) -> bool:
        if x is None or y is None:
            sides = [s.ref for s, v in ((a, x), (b, y)) if v is None]
            unknown.append(f"{section}: not known for {' and '.join(sides)}")
            return False
        return True

    base: list[Change] = []
    if both("base image", a.base_image or a.base_digest, b.base_image or b.base_digest):
        if a.base_image != b.base_image:
            base.append(Change("name", a.base_image, b.base_image))
        if a.base_digest != b.base_digest:
            base.append(Change("digest", a.base_digest, b.base_digest))
        elif a.base_image_id and b.base_image_id and a.base_image_id != b.base_image_id:  # both known
            # Two local bases with no registry digest: the engine's ids still tell them apart.
            base.append(Change("image id", a.base_image_id, b.base_image_id))
    config = None
    if a.config_hash and b.config_hash and a.config_hash != b.config_hash:
        config = Change("config hash", a.config_hash, b.config_hash)
    pins = _changes(a.pins or {}, b.pins or {}) if both("stack pins", a.pins, b.pins) else ()
    packages = _changes(a.packages or {}, b.packages or {}) if both("packages", a.packages, b.packages) else ()
    patches = _changes(a.patches or {}, b.patches or {}) if both("patches", a.patches, b.patches) else ()
    sglang = commits = None
    if both("sglang", a.sglang, b.sglang) and a.sglang != b.sglang:
        sglang = Change("sglang", a.sglang, b.sglang)
        if a.sglang_git and b.sglang_git and a.sglang_git[0] == b.sglang_git[0]:
            commits = f"{a.sglang_git[0]}: {a.sglang_git[1]}..{b.sglang_git[1]}"
    labels: tuple[Change, ...] = ()
    if both("labels", a.labels, b.labels):
        labels = tuple(c for c in _changes(a.labels or {}, b.labels or {})
                       if not c.name.startswith(_LABELS_SHOWN_ELSEWHERE))
    size: tuple[Growth, ...] = ()
    if a.size and b.size and a.size["bytes"] != b.size["bytes"]:
        size = tuple(size_changes(a.size, b.size))
    platform = Change("platform", a.platform, b.platform) if a.platform and b.platform and \
        a.platform != b.platform else None
    return StackDiff(a=a.heading, b=b.heading, base=tuple(base), config_hash=config,
                     pins=pins, packages=packages, patches=patches, sglang=sglang, sglang_commits=commits,
                     labels=labels, unknown=tuple(unknown), size=size, platform=platform)


# ---- output ----------------------------------------------------------------------------------------

def diff_to_json(diff: StackDiff) -> dict[str, Any]:
    data = asdict(diff)

    def with_kind(changes: list[dict]) -> list[dict]:
        return [{**c, "kind": Change(**c).kind} for c in changes]

    for key in ("base", "pins", "packages", "patches", "labels"):
        data[key] = with_kind(data[key])
    for key in ("config_hash", "sglang", "platform"):
        if data[key]:
            data[key] = with_kind([data[key]])[0]
    data["size"] = [{**asdict(g), "delta": g.delta} for g in diff.size]
    data["identical"] = diff.identical
    return data


def diff_table(diff: StackDiff) -> Table:
    title = f"A = {plain(diff.a)}\nB = {plain(diff.b)}" + (f"\n{plain(platforms_line(diff.platform))}"
                                                         if diff.platform else "")
    table = report_table(("section", "name", "change", "A", "B"), title=title, title_justify="left")

    def rows(section: str, changes: tuple[Change, ...]) -> None:
        for c in changes:
            table.add_row(section, plain(c.name), c.kind, plain(c.before or "-"), plain(c.after or "-"))

    rows("base image", diff.base)
    if diff.config_hash:
        rows("config hash", (diff.config_hash,))
    if diff.sglang:
        rows("sglang", (diff.sglang,))
    if diff.sglang_commits:
        table.add_row("sglang", "commits", "range", plain(diff.sglang_commits), "")
    rows("stack pin", diff.pins)
    rows("package", diff.packages)
    rows("patch", diff.patches)
    rows("label", diff.labels)
    for g in diff.size:
        change = f"{g.delta / MB:+,.1f} MB" if abs(g.delta) >= MB // 10 else f"{g.delta:+,} B"
        table.add_row("size", plain(g.what), change,
                      "-" if g.before is None else f"{g.before / GB:.3f} GB",
                      "-" if g.after is None else f"{g.after / GB:.3f} GB")
    return table


def platforms_line(platform: Change) -> str:
    """The heading's line for two locks (or images) of different platforms: their packages may differ for that
    alone."""
    return (f"two platforms: A is {platform.before}, B is {platform.after} (a package only one platform "
            "installs differs for that alone)")


def print_diff(diff: StackDiff, console: Console) -> None:
    if diff.identical:
        console.print(f"no difference between {plain(diff.a)} and {plain(diff.b)}", highlight=False)
        if diff.platform:
            console.print(plain(platforms_line(diff.platform)), highlight=False)
        for g in diff.size[:1]:  # the same contents built again can still differ by a few bytes: say so
            console.print(f"size: {g.before} -> {g.after} bytes ({g.delta:+,})", highlight=False)
    else:
        console.print(diff_table(diff))
        counts = {k: sum(1 for c in diff.packages if c.kind == k) for k in ("added", "removed", "changed")}
        console.print(f"packages: {counts['added']} added, {counts['removed']} removed, {counts['changed']} changed",
                      highlight=False)
    for line in diff.unknown:
        console.print(f"[dim]{plain(line)}[/]", highlight=False)


def diff_summary(diff: StackDiff, *, limit: int = 10) -> dict[str, Any]:
    """The short form a smoke report carries: what changed in packages, patches and SGLang."""

    def line(c: Change) -> str:
        return f"{c.name} {c.before or '(none)'} -> {c.after or '(none)'}"

    counts = {k: sum(1 for c in diff.packages if c.kind == k) for k in ("added", "removed", "changed")}
    return {
        "identical": diff.identical,
        "packages": {**counts, "first": [line(c) for c in diff.packages[:limit]]},
        "patches": [line(c) for c in diff.patches],
        "sglang": line(diff.sglang) if diff.sglang else None,
        "sglang_commits": diff.sglang_commits,
        "base": [line(c) for c in diff.base],
        "unknown": list(diff.unknown),
    }


def image_name_for_diff(image: Mapping[str, Any]) -> str:
    """How `invoke diff` can find a smoked image later: a registry digest, else its id, else its ref."""
    digests = [d for d in image.get("repo_digests") or () if "@sha256:" in str(d)]
    return str(image_name(digests[0] if digests else None, image.get("id")) or image.get("ref") or "")


def diff_invocation_for(current_image: str, last_passing_image: str) -> str:
    """The command a failed regression gate prints: what changed since the last image that passed."""
    return f"invoke diff {shlex.quote(last_passing_image)} {shlex.quote(current_image)}"
