"""Kernel coverage against the stack's `coverage` policy: the table of what each GPU gets, the violations, the
label that summarises it (`CoverageReport`, built by `build_report` from the pure rules of `coverage.rules`)."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config.settings import CoverageException, CoveragePolicy
from ..core.labels import COVERAGE_LABEL, format_coverage_label
from .rules import (
    NATIVE,
    PTX,
    Capability,
    Cell,
    Extension,
    PackageObjects,
    extensions,
    loader_notes,
    worst,
)

SCHEMA = "sglstack.coverage.rules/1"


def meets(got: Cell, require: str) -> bool:
    return got == NATIVE or (require == PTX and got == PTX)


@dataclass(frozen=True)
class Violation:
    extension: str
    capability: str
    cell: Cell
    require: str

    def __str__(self) -> str:
        return f"{self.extension} on {self.capability}: {self.cell} (requires {self.require})"


def _exception_for(policy: CoveragePolicy, name: str, cap: str) -> CoverageException | None:
    for exc in policy.exceptions:
        if fnmatch.fnmatchcase(name, exc.extension) and exc.capability in (None, cap):
            return exc
    return None


@dataclass(frozen=True)
class PackageStatus:
    """A package the check wanted: inspected, or the one line saying why not."""

    package: str
    version: str
    source: str
    checked: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "version": self.version, "source": self.source, "checked": self.checked,
                "reason": self.reason}


@dataclass(frozen=True)
class CoverageReport:
    stack: str
    platform: str
    capabilities: tuple[str, ...]
    require: str
    rows: tuple[Extension, ...]
    packages: tuple[PackageStatus, ...]
    violations: tuple[Violation, ...]
    waived: tuple[tuple[str, str, Cell, str], ...]  # (extension, capability, cell, reason)
    stale_exceptions: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return all(p.checked for p in self.packages)

    @property
    def exit_code(self) -> int:
        """1: a required capability is missing; 3: nothing missing in what was checked, but not all was."""
        if self.violations:
            return 1
        return 0 if self.complete else 3

    def summary(self) -> dict[str, Cell]:
        """Per capability, the worst cell of every row the policy does not waive (of every row, when the
        policy waives them all); no entry without rows."""
        waived = {(name, cap) for name, cap, _, _ in self.waived}
        out: dict[str, Cell] = {}
        for cap in self.capabilities:
            kept = [r.cells[cap] for r in self.rows if (r.name, cap) not in waived]
            if kept or self.rows:
                out[cap] = worst(kept or [r.cells[cap] for r in self.rows])
        return out

    def label(self) -> str | None:
        summary = self.summary()
        return format_coverage_label(summary) if summary else None

    def labels(self) -> dict[str, str]:
        value = self.label()
        return {COVERAGE_LABEL: value} if value else {}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "stack": self.stack, "platform": self.platform, "capabilities": list(self.capabilities),
            "require": self.require, "complete": self.complete, "exit_code": self.exit_code, "label": self.label(),
            "packages": [p.to_dict() for p in self.packages], "extensions": [r.to_dict() for r in self.rows],
            "violations": [{"extension": v.extension, "capability": v.capability, "cell": v.cell,
                            "require": v.require} for v in self.violations],
            "waived": [{"extension": e, "capability": c, "cell": cl, "reason": r} for e, c, cl, r in self.waived],
            "stale_exceptions": list(self.stale_exceptions), "notes": list(self.notes),
        }


def build_report(stack: str, platform: str, caps: Sequence[Capability], policy: CoveragePolicy,
                 packages: Sequence[PackageObjects], statuses: Sequence[PackageStatus]) -> CoverageReport:
    """Rows of every package, judged against the policy: violations, waivers and stale exceptions."""
    rows: list[Extension] = []
    notes: list[str] = []
    for package in packages:
        found = extensions(package, caps)
        rows += found
        notes += loader_notes(package)
        if not found:
            notes.append(f"{package.package} {package.version} ships no compiled device code: what it runs on the "
                         f"GPU is compiled at run time (JIT), for the GPU it finds")
    violations: list[Violation] = []
    waived: list[tuple[str, str, Cell, str]] = []
    used: set[int] = set()  # exceptions that match some cell
    useful: set[int] = set()  # exceptions that waive some cell
    for row in rows:
        for cap in caps:
            got = row.cells[str(cap)]
            if meets(got, policy.require):
                exc = _exception_for(policy, row.name, str(cap))
                if exc is not None:
                    used.add(id(exc))
                continue
            exc = _exception_for(policy, row.name, str(cap))
            if exc is None:
                violations.append(Violation(row.name, str(cap), got, policy.require))
            else:
                used.add(id(exc))
                useful.add(id(exc))
                waived.append((row.name, str(cap), got, exc.reason))
    stale = []
    complete = all(s.checked for s in statuses)
    for exc in policy.exceptions:
        where = f"'{exc.extension}'" + (f" on {exc.capability}" if exc.capability else "")
        if id(exc) not in used:
            if complete:
                stale.append(f"exception {where} matches no extension: remove or rename it")
        elif id(exc) not in useful:
            stale.append(f"exception {where} is not needed: every cell it covers meets '{policy.require}'")
    return CoverageReport(stack, platform, tuple(str(c) for c in caps), policy.require, tuple(rows), tuple(statuses),
                          tuple(violations), tuple(waived), tuple(stale), tuple(notes))
