"""The image labels sglstack itself reads back: one home, so that writer and readers never disagree.

Build writes them, Publish and Deploy read them from the registry or the engine, Diff compares them.
"""

from __future__ import annotations

from collections.abc import Mapping

PREFIX = "io.sglstack."
CONFIG_HASH_LABEL = PREFIX + "config-hash"  # our content hash of the build inputs (not a registry digest)
VERIFIED_LABEL = PREFIX + "verified"  # "true" once in-image verification passed
TARGET_LABEL = PREFIX + "target"
BUILDER_LABEL = PREFIX + "builder"
PATCH_LABEL_PREFIX = PREFIX + "patch."
PIN_LABEL_PREFIX = PREFIX + "pin."
# Kernel coverage per compute capability, e.g. "9.0:native,10.0:native,12.0:ptx" (coverage.py writes it,
# preflight reads it to warn when a node's GPU is not covered by the image).
COVERAGE_LABEL = PREFIX + "coverage"
COVERAGE_CELLS = ("native", "ptx", "missing")


def format_coverage_label(cells: Mapping[str, str]) -> str:
    """{capability: cell} -> "9.0:native,10.0:ptx", in the given order."""
    return ",".join(f"{cap}:{value}" for cap, value in cells.items())


def parse_coverage_label(value: str) -> dict[str, str]:
    """The inverse of `format_coverage_label`; ValueError on anything else."""
    out: dict[str, str] = {}
    for item in value.split(","):
        cap, sep, cell = item.strip().partition(":")
        major, dot, minor = cap.partition(".")
        if not sep or not dot or not major.isdigit() or not minor.isdigit() or cell not in COVERAGE_CELLS:
            raise ValueError(f"'{item}' is not CAPABILITY:native|ptx|missing")
        out[cap] = cell
    return out
