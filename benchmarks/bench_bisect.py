"""Bisect figures for `invoke bisect`, measured in one run.

    python3 benchmarks/bench_bisect.py [--seeds 100] [--real-commits 16] [--docker-cli /usr/bin/docker]

1. Builds per bisect against log2(N): the real planner and statistics over a simulated noisy metric
   (a 10% slowdown at a random commit of N, 2% noise per run, 0.5% per server start), many seeds.
2. A real bisect: a synthetic SGLang history of --real-commits commits in a local git repository (the
   CPU double as an installable package, the real Kimi K2.5 patch), each tested commit built with
   BuildKit and smoked with the real smoke; wall time per step, and sglstack's own time outside builds
   and smokes, broken down (host patch check + git export, planner + statistics, log + report writes).
   The heavy layers come from BuildKit's cache, as on any builder that has built the stack before.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "lib"))

from sglstack.bisect import driver  # noqa: E402
from sglstack.bisect.planner import Measure, Outcome, Planner, PlannerConfig  # noqa: E402


def simulate(n: int, seed: int, run_sd: float = 0.02, start_sd: float = 0.005) -> tuple[Outcome, int, int, int]:
    rng = random.Random(seed)
    k = rng.randint(1, n)
    refs = [f"c{i}" for i in range(n + 1)]
    planner = Planner(refs, PlannerConfig())
    built: set[str] = set()
    starts = 0
    while True:
        action = planner.next()
        if isinstance(action, Outcome):
            return action, k, len(built), starts
        assert isinstance(action, Measure)
        built.add(action.ref)
        starts += 1
        level = 89.0 * (0.9 if action.index >= k else 1.0) * (1 + rng.gauss(0, start_sd))
        planner.record_batch(action.ref, [level * (1 + rng.gauss(0, run_sd)) for _ in range(5)])


def simulated_table(seeds: int) -> None:
    print("## builds per bisect (simulated metric, real planner and statistics)")
    print("| N | ceil(log2 N) | builds: mean | max | limit ceil(log2 N)+3 | server starts: mean | found | wrong |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (8, 16, 32, 64, 128):
        builds, starts, found, wrong = [], [], 0, 0
        for seed in range(seeds):
            outcome, k, b, s = simulate(n, seed)
            builds.append(b)
            starts.append(s)
            if outcome.found:
                found += 1
                wrong += outcome.first_bad != f"c{k}"
        log2 = math.ceil(math.log2(n))
        print(f"| {n} | {log2} | {statistics.fmean(builds):.2f} | {max(builds)} | {log2 + 3} | "
              f"{statistics.fmean(starts):.1f} | {found}/{seeds} | {wrong} |")
    print()


class Timers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, owner, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] += time.monotonic() - start
                self.calls[label] += 1

        setattr(owner, name, timed)


def real_bisect(commits: int, docker_cli: str, ca_bundle: str | None) -> None:
    from bisect_fixtures import make_history, stack_yaml

    from sglstack.bisect import log as log_mod
    from sglstack.bisect import planner as planner_mod

    work = Path(tempfile.mkdtemp(prefix="sglstack-bench-bisect-"))
    os.environ["SGLSTACK_BUILD_DIR"] = str(work / "build")
    os.environ["SGLSTACK_CACHE"] = str(work / "cache")
    bad_from = commits // 2 + 3
    speeds = [300.0 if i < bad_from else 270.0 for i in range(commits + 1)]
    shas = make_history(work / "sglang", speeds, salt=os.urandom(4).hex())
    matrix = work / "stacks.yaml"
    matrix.write_text(stack_yaml(str(work / "sglang"), shas[-1]))
    timers = Timers()
    timers.wrap(driver, "patch_skip", "host patch check (git export + patchkit)")
    timers.wrap(driver, "write_reports", "report writes (JSON, Markdown, chart)")
    timers.wrap(planner_mod.Planner, "next", "planner + statistics")
    timers.wrap(log_mod.BisectLog, "append", "log appends")
    start = time.monotonic()
    result = driver.run_bisect(driver.BisectRequest(stack="synth", good=shas[0], bad=shas[-1], stacks_file=matrix,
                                                    ca_bundle=ca_bundle, docker_cli=docker_cli,
                                                    smoke={"gpus": 0}), log=lambda _m: None)
    wall = time.monotonic() - start
    data = result.data
    assert result.outcome is not None and result.outcome.first_bad == shas[bad_from], result.outcome
    timing = data["timing"]
    events = log_mod.BisectLog(work / "build" / "synth" / "bisect").read()
    per_ref: dict[str, float] = defaultdict(float)
    for event in events:
        if event["event"] in ("build", "batch"):
            per_ref[event["ref"]] += float(event["seconds"])
    builds = [e["seconds"] for e in events if e["event"] == "build" and e["built"]]
    batches = [e["seconds"] for e in events if e["event"] == "batch"]
    print(f"## a real bisect: {commits} commits, first bad at {bad_from}, found {result.outcome.first_bad[:12]}")
    print(f"builds: {data['builds']} (ceil(log2 N) + 3 = {math.ceil(math.log2(commits)) + 3}), "
          f"server starts: {len(batches)}, refs tested: {data['steps_tested']}")
    print("| figure | seconds |")
    print("|---|---|")
    print(f"| whole bisect (wall) | {wall:.1f} |")
    print(f"| builds (sglstack build of each new ref) | {timing['build_s']:.1f} |")
    print(f"| smokes (server starts with {data['runs_per_batch']} runs each) | {timing['smoke_s']:.1f} |")
    own = wall - timing["build_s"] - timing["smoke_s"]
    print(f"| sglstack's own work outside builds and smokes (wall - builds - smokes) | {own:.2f} "
          f"({own / wall:.1%} of the wall time) |")
    for label, seconds in timers.seconds.items():
        print(f"| - {label} ({timers.calls[label]} calls) | {seconds:.2f} |")
    print(f"| wall time per tested ref (build + its server starts): median | "
          f"{statistics.median(per_ref.values()):.1f} |")
    print(f"| one build: median | {statistics.median(builds):.1f} |")
    print(f"| one server start (warm-up + {data['runs_per_batch']} runs): median | {statistics.median(batches):.1f} |")
    # the images and the folder are this run's own (unique commits): leave nothing behind
    from sglstack.adapters.docker import docker_client

    client = docker_client()
    for step in data["steps"]:
        if step.get("tag"):
            client.images.remove(step["tag"], force=True)
    shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--real-commits", type=int, default=16)
    parser.add_argument("--docker-cli", default=os.environ.get("SGLSTACK_DOCKER_CLI", "/usr/bin/docker"))
    parser.add_argument("--ca-bundle", default=os.environ.get("SGLSTACK_CA_BUNDLE") or os.environ.get("PIP_CERT"))
    args = parser.parse_args()
    simulated_table(args.seeds)
    if args.real_commits:
        real_bisect(args.real_commits, args.docker_cli, args.ca_bundle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
