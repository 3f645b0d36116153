"""`invoke coverage` as users run it (one process each), cold against warm, for each stack of the matrix.

Usage: python3 benchmarks/bench_coverage.py [--stacks-file stacks.yaml] [--stack cu129 ...] [--repeat 3]

Measured in one run, in one fresh SGLSTACK_CACHE, printed as a table and as ratios:
- cold: nothing cached, so pip downloads the stack's wheels and cuobjdump's, and every object is listed;
- listing cold: the wheels are cached but no listing is (the wheel and per-object caches removed), so the
  time is unpacking the wheels and running cuobjdump on every object, in parallel;
- warm: everything cached (median of --repeat runs); target under 5 s.
The table of each stack is printed once, from the warm run's --json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglstack.config.matrix import load_matrix  # noqa: E402


def run(stack: str, stacks_file: str, cache: Path, json_path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "coverage", "--stack", stack,
         "--stacks-file", stacks_file, "--json", str(json_path)],
        env={**os.environ, "SGLSTACK_CACHE": str(cache), "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1, 3):
        raise SystemExit(f"invoke coverage --stack {stack} failed ({proc.returncode}): {proc.stderr.strip()}")
    return elapsed, proc.returncode


def table(data: dict) -> str:
    caps = data["capabilities"]
    lines = ["| package | extension | " + " | ".join(caps) + " |", "|---|---|" + "---|" * len(caps)]
    for row in data["extensions"]:
        lines.append(f"| {row['package']} | `{row['name']}` | " + " | ".join(row["cells"][c] for c in caps) + " |")
    unchecked: dict[str, list[str]] = {}
    for pkg in data["packages"]:
        if not pkg["checked"]:
            unchecked.setdefault(pkg["reason"], []).append(f"{pkg['package']} {pkg['version']}")
    lines += ["", *(f"not checked: {', '.join(names)}: {reason}" for reason, names in unchecked.items())]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks-file", default=str(REPO / "stacks.yaml"))
    parser.add_argument("--stack", action="append", help="default: every stack of the matrix")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    stacks = args.stack or load_matrix(args.stacks_file).names()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sglstack-bench-coverage-") as tmp:
        cache = Path(tmp) / "cache"
        for name in stacks:
            out = Path(tmp) / f"{name}.json"
            cold, code = run(name, args.stacks_file, cache, out)
            shutil.rmtree(cache / "coverage")
            listing_cold, _ = run(name, args.stacks_file, cache, out)
            warm = statistics.median(run(name, args.stacks_file, cache, out)[0] for _ in range(args.repeat))
            data = json.loads(out.read_text())
            wheels = sum(p.stat().st_size for p in (cache / "wheels").rglob("*.whl"))
            rows.append((name, cold, listing_cold, warm, code, data, wheels))
    print(f"cpu cores: {os.cpu_count()}; repeat (warm) {args.repeat}")
    print("| stack | cold (download + list) | listing cold (wheels cached) | warm | cold / warm | exit |")
    print("|---|---|---|---|---|---|")
    for name, cold, listing_cold, warm, code, _, _ in rows:
        print(f"| {name} | {cold:.1f} s | {listing_cold:.1f} s | {warm:.2f} s | {cold / warm:.1f}x | {code} |")
    for name, *_, data, wheels in rows:
        print(f"\n### {name}: {len(data['extensions'])} extensions; label {data['label']}; "
              f"wheels in the cache after it: {wheels / 1e6:.0f} MB\n")
        print(table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
