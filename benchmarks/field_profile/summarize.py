"""Summarise the field profiler's samples (`benchmarks/field_profile/sitecustomize.py` writes ~/prof/PID.jsonl):
per process, the frames that held the main thread (inclusive, and as the innermost frame) within a window of
seconds since the process started.

    python3 benchmarks/field_profile/summarize.py PROF_DIR [FROM_S TO_S]
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path


def summarize(path: Path, lo: float, hi: float) -> list[str]:
    stacks: dict[int, str] = {}
    counts: collections.Counter[int] = collections.Counter()
    head = ""
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "new" in record:
            stacks[record["id"]] = record["new"]
        elif "sec" in record:
            if lo <= record["sec"] < hi:
                counts.update({int(i): n for i, n in record["c"].items()})
        else:
            head = f"{path.name} {record['argv'][:100]}"
    total = sum(counts.values())
    if total < 50:
        return []
    inclusive: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    for stack_id, n in counts.items():
        frames = stacks[stack_id].split(";")
        leaf[frames[-1]] += n
        for frame in {":".join(f.split(":")[:2]) for f in frames}:
            inclusive[frame] += n
    out = [f"== {head}: {total} samples in [{lo:g}, {hi:g}) s"]
    out += [f"  incl {n / total:6.1%} {frame}" for frame, n in inclusive.most_common(40)]
    out += [f"  leaf {n / total:6.1%} {frame}" for frame, n in leaf.most_common(12)]
    return out


def main(argv: list[str]) -> int:
    lo, hi = (float(argv[1]), float(argv[2])) if len(argv) > 2 else (0.0, float("inf"))
    for path in sorted(Path(argv[0]).glob("*.jsonl")):
        print("\n".join(summarize(path, lo, hi)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
