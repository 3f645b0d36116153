"""`invoke upgrade` time with caches cold and warm, on a scratch copy of the matrix (the repo is not touched).

    python3 benchmarks/bench_upgrade.py [--stack cu130] [--sglang 0.5.23] [--out DIR]

cold: an empty sglstack wheel cache (SGLSTACK_CACHE) and an empty uv cache (UV_CACHE_DIR): every wheel
(SGLang's, the coverage wheels, msgspec/packaging for the parser probe, cuobjdump's) and every index page
is fetched. warm: the same caches again. Each run is the real task in its own process
(`invoke upgrade --stack S --sglang V --as S-next --json ...`), coverage included. The last report's
Markdown is copied to OUT/report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(stacks: Path, stack: str, version: str, env: dict[str, str], out: Path) -> tuple[float, int, dict]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(REPO), "upgrade", "--stack", stack,
                           "--sglang", version, "--as", f"{stack}-next", "--json", str(out),
                           "--stacks-file", str(stacks)], env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"upgrade failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return seconds, proc.returncode, json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stack", default="cu130")
    ap.add_argument("--sglang", default="0.5.23")
    ap.add_argument("--out", default=str(REPO / "build" / "bench-upgrade"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-upgrade-") as tmp:
        work = Path(tmp)
        shutil.copy(REPO / "stacks.yaml", work / "stacks.yaml")
        shutil.copytree(REPO / "locks", work / "locks")
        env = {**os.environ, "PYTHONPATH": str(REPO), "SGLSTACK_CACHE": str(work / "cache"),
               "UV_CACHE_DIR": str(work / "uv-cache"), "SGLSTACK_BUILD_DIR": str(work / "build")}
        results = {}
        for label in ("cold", "warm"):
            seconds, code, doc = run(work / "stacks.yaml", args.stack, args.sglang, env, work / f"{label}.json")
            results[label] = seconds
            print(f"{label}: {seconds:.1f} s, exit {code}, verdict {doc['verdict']}", flush=True)
        report = work / "build" / f"{args.stack}-next" / "upgrade" / "report.md"
        shutil.copy(report, out / "report.md")
        shutil.copy(work / "warm.json", out / "report.json")
        size = sum(f.stat().st_size for f in (work / "cache").rglob("*") if f.is_file())
        print(f"wheel cache after the cold run: {size / 1e9:.2f} GB; warm/cold = "
              f"{results['warm'] / results['cold']:.2f}; report: {out / 'report.md'}")


if __name__ == "__main__":
    main()
