"""`invoke lock` time, cold and warm, and the number of packages each lock pins.

    python3 benchmarks/bench_lock.py [--stacks cpu-lock,cu129,cu130] [--repeat N]

Each stack is locked in a scratch copy of its stacks file (the repo's locks are not touched):
- cold: an empty uv cache and no earlier lock (every index page and METADATA is fetched);
- warm: the same uv cache and the lock just written as the starting point (a re-lock);
then the warm/cold ratio, measured in this one run. It also says which layers could not be resolved
(an unreachable index or URL): those cost uv its retries on every run, cold or warm.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglstack.adapters.uv import SourceUnreachable, compile_many
from sglstack.lock.flow import lock_stack

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"cpu-lock": REPO_ROOT / "tests" / "fixtures" / "stacks-lock.yaml", "cu129": REPO_ROOT / "stacks.yaml",
           "cu130": REPO_ROOT / "stacks.yaml"}


class TimedUv:
    """compile_many, timing each batch; a batch in which some source was unreachable counts as waiting."""

    def __init__(self) -> None:
        self.waiting = 0.0

    def __call__(self, requests):
        start = time.perf_counter()
        results = compile_many(requests)
        if any(isinstance(r, SourceUnreachable) for r in results):
            self.waiting += time.perf_counter() - start
        return results


def timed_lock(stacks_file: Path, stack: str) -> tuple[float, float, object]:
    uv = TimedUv()
    start = time.perf_counter()
    result = lock_stack(stacks_file, stack, compile_fn=uv)
    return time.perf_counter() - start, uv.waiting, result.lock


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stacks", default="cpu-lock,cu129,cu130")
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per stack (median)")
    args = parser.parse_args()
    rows = []
    for name in args.stacks.split(","):
        with tempfile.TemporaryDirectory(prefix="sglstack-bench-lock-") as tmp:
            work = Path(tmp)
            stacks_file = work / SOURCES[name].name
            shutil.copy(SOURCES[name], stacks_file)
            os.environ["UV_CACHE_DIR"] = str(work / "uv-cache")  # empty: the cold run fetches everything
            cold, cold_wait, lock = timed_lock(stacks_file, name)
            warm_runs = [timed_lock(stacks_file, name) for _ in range(args.repeat)]
            warm = statistics.median(r[0] for r in warm_runs)
            warm_wait = statistics.median(r[1] for r in warm_runs)
            rows.append((name, cold, cold_wait, warm, warm_wait, lock))
    print(f"{'stack':<10} {'cold s':>7} {'(unreach.)':>10} {'warm s':>7} {'(unreach.)':>10} {'warm/cold':>9} "
          f"{'pinned':>6} {'hashed':>6}  not resolved")
    for name, cold, cold_wait, warm, warm_wait, lock in rows:
        unresolved = "; ".join(u.layer for u in lock.unresolved) or "-"
        print(f"{name:<10} {cold:7.2f} {cold_wait:10.2f} {warm:7.2f} {warm_wait:10.2f} {warm / cold:9.2f} "
              f"{len(lock.packages):6d} {lock.hashed_count:6d}  {unresolved}")
    print("(unreach.) = seconds of uv batches in which an index or URL was unreachable (uv's retries included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
