"""The upgrade planner (pure): the new entry from the old one and the release's METADATA, then the verdict.

`derive` turns the old stack and what SGLang VERSION requires into edits of the stack's own YAML mapping
(nested keys, None deletes a key), so the file written and the stack checked are the same text. Its rules:
- torch and its family, the kernel package and FlashInfer follow SGLang's exact pins, keeping the old
  pin's local label and index (`2.9.1+cu130` from PyTorch's cu130 index becomes `2.11.0+cu130` there);
  a family member SGLang leaves open (torchvision) takes the version the resolver found with that torch;
- an override whose `replaces` SGLang still requires is kept (its pin wins over the derived one); one whose
  requirement is gone is stale and dropped, and the package follows SGLang again;
- a patch upstream already has is retired from `patches:` (its `retire` note says so); a drifted one stays
  and makes the verdict `review`;
- the kernel package's name follows SGLang (`sgl-kernel` to `sglang-kernel`); a direct wheel URL is
  rewritten for the new name and version, which nobody here can check: it is said so;
- the manylinux tag the release's wheels need: a stack without `glibc` on a base image whose glibc is
  known gets it declared, so the lock resolves for that tag.
`judge` then collects every reason for `review` from the checks the shell ran.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ..config.schema import Stack
from ..inimage.incontainer.wheelkit import requirement_key
from ..lockfile.model import Lock
from .releases import FLASHINFER, ReleasePins, applicable_requirements

FLASHINFER_CUBIN = "flashinfer-cubin"
BASELINE_GLIBC = "2.28"
READY, REVIEW = "ready", "review"
APPLIES, UPSTREAM, DRIFTED = "applies", "upstream", "drifted"


@dataclass(frozen=True)
class OverrideDecision:
    replaces: str
    pin: str
    reason: str
    status: str  # "kept" | "dropped"
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"replaces": self.replaces, "pin": self.pin, "status": self.status, "why": self.why}


@dataclass(frozen=True)
class Derivation:
    edits: dict[str, Any]
    overrides: tuple[OverrideDecision, ...]
    retired_patches: tuple[str, ...]
    wheel_tag: str | None  # the platform tag of the release's wheel for the stack's Python and platform
    glibc: str  # the glibc the lock resolves for after the upgrade
    notes: tuple[str, ...] = ()
    review: tuple[str, ...] = ()


def local_label(version: str) -> str | None:
    return Version(version).local


def with_label(public: str, label: str | None) -> str:
    return f"{public}+{label}" if label else public


def glibc_of_tag(tag: str) -> str | None:
    """'2.34' for manylinux_2_34_x86_64, '2.17' for manylinux2014_*, None for other tags (py3-none-any)."""
    m = re.match(r"manylinux_(\d+)_(\d+)_", tag)
    if m:
        return f"{m.group(1)}.{m.group(2)}"
    return "2.17" if tag.startswith("manylinux2014_") else None


def _glibc_key(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def wheel_platform_tag(filename: str) -> str:
    """The platform part of a wheel file name (the newest of a compressed tag set)."""
    tags = filename[:-len(".whl")].split("-")[-1].split(".")
    return max(tags, key=lambda t: _glibc_key(glibc_of_tag(t) or "0.0"))


def _override_decisions(stack: Stack, target: ReleasePins, requires_dist: Sequence[str]) -> list[OverrideDecision]:
    applicable = applicable_requirements(tuple(requires_dist), stack.python, tuple(stack.platforms))
    keys = {requirement_key(line): line for line, _ in applicable}
    by_name = {canonicalize_name(req.name): line for line, req in applicable}
    out = []
    for o in stack.overrides:
        key = requirement_key(o.replaces)
        if key in keys:
            out.append(OverrideDecision(o.replaces, o.pin, o.reason, "kept",
                                        f"sglang {target.sglang} still requires '{keys[key]}'"))
            continue
        now = by_name.get(canonicalize_name(Requirement(o.replaces).name))
        out.append(OverrideDecision(o.replaces, o.pin, o.reason, "dropped",
                                    f"sglang {target.sglang} " + (f"now requires '{now}'" if now else
                                                                  "no longer requires it")))
    return out


def _kernel_url(url: str, old_package: str, old_version: str, new_package: str, new_version: str) -> str:
    """The release asset URL for the new name and version (the wheel's file name uses underscores)."""
    old_public, new_public = Version(old_version).public, Version(new_version).public
    url = url.replace(old_package.replace("-", "_") + "-", new_package.replace("-", "_") + "-")
    return url.replace(old_version, new_version).replace(old_public, new_public)


def derive(stack: Stack, target: ReleasePins, requires_dist: Sequence[str], *, family: Mapping[str, str],
           wheel_filename: str | None, base_glibc: str | None, patch_status: Mapping[str, str]) -> Derivation:
    """The edits that move `stack` to `target` (see the module's rules). `family`: torch-family versions
    the resolver chose with the new torch; `wheel_filename`: the release's wheel for the stack's Python and
    platform (None: there is none); `base_glibc`: the base image's glibc when known."""
    edits: dict[str, Any] = {"sglang": {"version": target.sglang}}
    notes: list[str] = []
    review: list[str] = []
    decisions = _override_decisions(stack, target, requires_dist)
    overridden = {canonicalize_name(Requirement(d.pin).name) for d in decisions if d.status == "kept"}
    kept = [d for d in decisions if d.status == "kept"]
    if len(kept) != len(stack.overrides):
        edits["overrides"] = [{"replaces": d.replaces, "pin": d.pin, "reason": d.reason} for d in kept]
    replaced: list[tuple[str, str]] = []  # (old text, new text) for the description

    _torch_edit(stack, target, family, overridden, edits, notes, review, replaced)
    _kernel_edit(stack, target, overridden, edits, notes, review, replaced)
    _flashinfer_edit(stack, target, overridden, edits, notes, replaced)

    retired = tuple(p for p in stack.patches if patch_status.get(p) == UPSTREAM)
    if retired:
        edits["patches"] = [p for p in stack.patches if p not in retired]
    drifted = [p for p in stack.patches if patch_status.get(p) == DRIFTED]
    if drifted:
        review.append(f"patch(es) drifted against sglang {target.sglang}: {', '.join(drifted)}")

    wheel_tag, glibc = _glibc_edit(stack, target, wheel_filename, base_glibc, edits, notes, review)
    if stack.description:
        replaced.append((f"SGLang {stack.sglang.version}", f"SGLang {target.sglang}"))
        text = stack.description
        for old, new in replaced:
            text = text.replace(old, new)
        edits["description"] = text
    return Derivation(edits, tuple(decisions), retired, wheel_tag, glibc, tuple(notes), tuple(review))


def _torch_edit(stack: Stack, target: ReleasePins, family: Mapping[str, str], overridden: AbstractSet[str],
                edits: dict[str, Any], notes: list[str], review: list[str], replaced: list[tuple[str, str]]) -> None:
    if stack.torch and target.torch and "torch" not in overridden:
        label = local_label(stack.torch.version)
        torch_edit: dict[str, Any] = {"version": with_label(target.torch, label)}
        replaced.append((stack.torch.version, torch_edit["version"]))
        packages = []
        for text in stack.torch.packages:
            req = Requirement(text)
            name = str(canonicalize_name(req.name))
            old = next(iter(req.specifier)).version
            new = family.get(name) or target.exact.get(name)
            if name in overridden or new is None:
                if new is None:
                    review.append(f"{name}: no version found that goes with torch {target.torch}; kept {old}")
                packages.append(text)
                continue
            packages.append(f"{req.name}=={with_label(new, local_label(old))}")
        if packages != list(stack.torch.packages):
            torch_edit["packages"] = packages
        if torch_edit != {"version": stack.torch.version}:  # an unchanged torch is not an edit
            edits["torch"] = torch_edit
    elif stack.torch and "torch" in overridden:
        notes.append(f"torch stays {stack.torch.version}: an override the release still needs pins it")


def _kernel_edit(stack: Stack, target: ReleasePins, overridden: AbstractSet[str],
                 edits: dict[str, Any], notes: list[str], review: list[str], replaced: list[tuple[str, str]]) -> None:
    if stack.sgl_kernel and target.kernel and target.kernel_package and target.kernel_package not in overridden:
        old_pkg, old_version = stack.sgl_kernel.package, stack.sgl_kernel.version
        new_version = with_label(target.kernel, local_label(old_version))
        kernel_edit: dict[str, Any] = {"version": new_version}
        if target.kernel_package != old_pkg:
            kernel_edit["package"] = target.kernel_package
            notes.append(f"the kernel package is renamed: {old_pkg} -> {target.kernel_package} "
                         f"(the import name stays sgl_kernel)")
        if stack.sgl_kernel.url:
            kernel_edit["url"] = _kernel_url(stack.sgl_kernel.url, old_pkg, old_version, target.kernel_package,
                                             new_version)
            notes.append(f"the kernel wheel URL was rewritten for {target.kernel_package} {new_version}: "
                         f"{kernel_edit['url']} (check it exists; the lock and coverage say if it was reachable)")
        replaced += [(f"{old_pkg} {old_version}", f"{target.kernel_package} {new_version}")]
        edits["sgl_kernel"] = kernel_edit
    elif stack.sgl_kernel and not target.kernel:
        review.append(f"sglang {target.sglang} requires no kernel package the stack knows; the stack pins "
                      f"{stack.sgl_kernel.package}=={stack.sgl_kernel.version}")


def _flashinfer_edit(stack: Stack, target: ReleasePins, overridden: AbstractSet[str], edits: dict[str, Any],
                     notes: list[str], replaced: list[tuple[str, str]]) -> None:
    if stack.flashinfer and target.flashinfer and FLASHINFER not in overridden:
        fi_edit: dict[str, Any] = {"version": target.flashinfer}
        packages = [p for p in stack.flashinfer.packages
                    if not (p == FLASHINFER_CUBIN and FLASHINFER_CUBIN not in target.exact)]
        if packages != list(stack.flashinfer.packages):
            fi_edit["packages"] = packages
            notes.append(f"{FLASHINFER_CUBIN} dropped: sglang {target.sglang} does not require it "
                         f"(FlashInfer JIT-compiles what no cubin covers)")
        replaced.append((f"FlashInfer {stack.flashinfer.version}", f"FlashInfer {target.flashinfer}"))
        edits["flashinfer"] = fi_edit


def _glibc_edit(stack: Stack, target: ReleasePins, wheel_filename: str | None, base_glibc: str | None,
                edits: dict[str, Any], notes: list[str], review: list[str]) -> tuple[str | None, str]:
    """(the release wheel's platform tag, the glibc the lock resolves for), declaring `glibc:` where needed."""
    # What the lock resolves for when nothing is declared is the 2.28 baseline (or the local base image's,
    # which other machines may not have): a release that needs more gets `glibc:` declared, so every
    # machine resolves the same lock.
    have = stack.glibc or BASELINE_GLIBC
    wheel_tag = wheel_platform_tag(wheel_filename) if wheel_filename else None
    need = glibc_of_tag(wheel_tag) if wheel_tag else None
    glibc = have
    if wheel_filename is None:
        review.append(f"sglang {target.sglang} has no wheel for Python {stack.python} on "
                      f"{stack.platforms[0]} with glibc {base_glibc or have}")
    elif need and _glibc_key(need) > _glibc_key(have):
        if base_glibc and _glibc_key(base_glibc) >= _glibc_key(need):
            edits["glibc"] = glibc = base_glibc
            notes.append(f"sglang {target.sglang}'s wheels need glibc {need} ({wheel_tag}): glibc {base_glibc} "
                         f"(the base image's) is declared, and the lock resolves for manylinux_"
                         f"{base_glibc.replace('.', '_')}")
        else:
            review.append(f"sglang {target.sglang}'s wheels need glibc {need} ({wheel_tag}); the base image "
                          + (f"has {base_glibc}" if base_glibc else "is not known: declare `glibc:`"))
    return wheel_tag, glibc


# ---- coverage change -------------------------------------------------------------------------------

_RANK = {"missing": 0, "ptx": 1, "native": 2}


@dataclass(frozen=True)
class CellChange:
    extension: str
    capability: str
    before: str | None
    after: str | None

    @property
    def lost(self) -> bool:
        """Worse than before; a row that disappeared is not a loss (its package no longer ships it)."""
        return self.after is not None and _RANK.get(self.after, 0) < _RANK.get(self.before or "missing", 0)


def _cells(report: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for row in report.get("extensions", []):
        for cap, value in row["cells"].items():
            key = (row["name"], cap)
            # a name shipped twice (a package's aliases) counts at its best: the loader takes one of them
            out[key] = max(value, out.get(key, "missing"), key=lambda c: _RANK.get(c, 0))
    return out


def _cell_order(key: tuple[str, str]) -> tuple[str, tuple[int, ...]]:
    """By extension, then capability as numbers (9.0 before 10.0)."""
    return key[0], tuple(int(x) for x in key[1].split(".") if x.isdigit())


def coverage_change(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, Any]:
    """Per extension and capability, what moved between two `CoverageReport.to_dict()` documents."""
    if before is None or after is None:
        return {"checked": False, "changes": [], "lost": [], "new_violations": [], "complete": False}
    a, b = _cells(before), _cells(after)
    changes = [CellChange(ext, cap, a.get((ext, cap)), b.get((ext, cap)))
               for ext, cap in sorted(set(a) | set(b), key=_cell_order) if a.get((ext, cap)) != b.get((ext, cap))]
    old_violations = {(v["extension"], v["capability"]) for v in before.get("violations", [])}
    old_unchecked = {(p["package"], p["version"]) for p in before.get("packages", []) if not p.get("checked")}
    new_violations = [v for v in after.get("violations", []) if (v["extension"], v["capability"]) not in old_violations]
    return {"checked": True,
            "changes": [{"extension": c.extension, "capability": c.capability, "before": c.before, "after": c.after}
                        for c in changes],
            "lost": [{"extension": c.extension, "capability": c.capability, "before": c.before, "after": c.after}
                     for c in changes if c.lost],
            "new_violations": new_violations,
            "complete": bool(after.get("complete")), "was_complete": bool(before.get("complete")),
            "label_before": before.get("label"), "label_after": after.get("label"),
            "unchecked": [p["package"] for p in after.get("packages", []) if not p.get("checked")],
            # a package the upgrade moved and nobody could look into: its kernels are unknown, not unchanged
            "unchecked_changed": [f"{p['package']} {p['version']}" for p in after.get("packages", [])
                                  if not p.get("checked") and (p["package"], p["version"]) not in old_unchecked]}


# ---- guesses ---------------------------------------------------------------------------------------

def guessed_pins(pins_before: Mapping[str, str], pins: Mapping[str, str], lock: Lock | None,
                 lock_error: str | None) -> dict[str, str]:
    """The pins the upgrade moved that nothing confirmed, each with why: the derived `2.11.0+cu130` keeps
    the old local label on the assumption that its index has that build, and only the lock's resolver can
    say so. A pin of a layer the resolver could not reach (or of any layer, when the lock did not
    resolve) is a guess: shown as one, a `review`, and never written by `--write`."""
    guesses = {}
    for name, version in sorted(pins.items()):
        if name == "sglang" or pins_before.get(name) == version:
            continue  # the release itself is on the index (checked first), and an unmoved pin is the old one
        if lock is None:
            guesses[name] = f"the lock did not resolve: {lock_error}" if lock_error else "not resolved"
            continue
        entry = lock.get(name)
        unreached = {u.layer: u.reason for u in lock.unresolved}
        if entry is not None and entry.layer in unreached:
            guesses[name] = f"layer {entry.layer} not resolved: {unreached[entry.layer]}"
    return guesses


# ---- the verdict -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """Everything the report shows; `reasons` empty means ready."""

    stack: str
    new_stack: str
    from_version: str
    to_version: str
    pins_before: dict[str, str]
    pins: dict[str, str]
    derivation: Derivation
    patches: dict[str, str]
    patch_details: dict[str, str]
    conflicts: tuple[str, ...]
    closure: dict[str, Any]
    coverage: dict[str, Any]
    argv: dict[str, Any]
    lock_error: str | None
    bisect_command: str
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    guesses: dict[str, str] = field(default_factory=dict)  # package -> why its new pin is not confirmed
    speculative: dict[str, Any] = field(default_factory=dict)  # the last smoke sweep's advice (upgrade/speculative.py)
    # a stack of several platforms: each further platform's closure (its own lock), as `closure` is the first's
    platform_closures: dict[str, dict[str, Any]] = field(default_factory=dict)
    # ... and each further platform's coverage change (its own wheels), as `coverage` is the first's
    platform_coverage: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return REVIEW if self.reasons else READY

    @property
    def exit_code(self) -> int:
        return 1 if self.reasons else 0


def review_reasons(derivation: Derivation, conflicts: Sequence[str], coverage: Mapping[str, Any],
                   argv: Mapping[str, Any], lock_error: str | None,
                   guesses: Mapping[str, str] | None = None,
                   platform_coverage: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[str, ...]:
    reasons = list(derivation.review)
    reasons += [f"the new pin of {name} is a guess: {why}" for name, why in sorted((guesses or {}).items())]
    reasons += [f"needs an override: {c}" for c in conflicts]
    if lock_error:
        reasons.append(f"the lock does not resolve: {lock_error}")
    reasons += coverage_reasons(coverage)
    for platform, change in (platform_coverage or {}).items():  # each further platform's own wheels
        reasons += [f"{platform}: {r}" for r in coverage_reasons(change)]
    for flag, hint in sorted(argv.get("unknown", {}).items()):
        reasons.append(f"serving flag {flag} is not accepted by sglang's parser" + (f" (renamed to {hint}?)"
                                                                                     if hint else " (removed)"))
    reasons += [f"serving argv: {e}" for e in argv.get("errors", [])]
    if argv.get("skipped"):
        reasons.append(f"serving argv not checked: {argv['skipped']}")
    return tuple(reasons)


def coverage_reasons(coverage: Mapping[str, Any]) -> list[str]:
    """Why one coverage change (`coverage_change`) needs a reviewer: cells lost, policy broken, unknown."""
    reasons = [f"kernel coverage lost: {cell['extension']} on {cell['capability']} "
               f"({cell['before']} -> {cell['after']})" for cell in coverage.get("lost", [])]
    for v in coverage.get("new_violations", []):
        if not any(c["extension"] == v["extension"] and c["capability"] == v["capability"]
                   for c in coverage.get("lost", [])):
            reasons.append(f"kernel coverage below the policy: {v['extension']} on {v['capability']} ({v['cell']})")
    if coverage.get("unchecked_changed"):
        reasons.append("kernel coverage could not be checked for what changed: "
                       + ", ".join(coverage["unchecked_changed"]))
    return reasons


def missing_wheel_reasons(version: str, python: str, wheels: Mapping[str, str | None]) -> list[str]:
    """A further platform of the stack for which the release has no wheel (the first's is `derive`'s)."""
    return [f"sglang {version} has no wheel for Python {python} on {platform}"
            for platform, wheel in wheels.items() if wheel is None]


def bisect_invocation(stack: str, good: str, bad: str) -> str:
    return f"invoke bisect --stack {stack} --good {good} --bad {bad}"
