#!/usr/bin/env python3
"""Realistic bugs planted one at a time, each on a branch the code takes on a user-visible outcome, and
whether the tests catch it (issue 35: "fourteen realistic bugs were planted by hand ... the fast tier caught 8").

Each plant is a one-place source edit a hurried change could make (a forgotten field, a boundary, the first
item standing for all, a form of a header not parsed). For each: a scratch copy of the checkout's tracked files
(`git archive HEAD`, so nothing uncommitted counts), the edit applied (it must match exactly where it says, or
the plant is reported stale: the code moved), then the named test files of the fast tier run against the copy.
Caught = the tests fail. Prints one row per plant and the count; exit 1 when any plant is missed or stale.

    python3 benchmarks/planted_bugs.py            # every plant
    python3 benchmarks/planted_bugs.py P04 P08    # only these
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Plant:
    id: str
    axis: str  # the branch the fixtures must sit on both sides of
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    count: int = 1  # how many times `old` occurs (all are replaced)


PLANTS = (
    Plant("P01", "size policy with only library_copies: the copies check skipped", "sglstack/size/stack.py",
          "if stack.size else []", "if stack.size and stack.size.max_gb else []",
          ("tests/unit/test_image_size.py", "tests/unit/test_size_measure.py")),
    Plant("P02", "registry tags: only the quoted `rel=\"next\"` form followed", "sglstack/registry/client.py",
          'rel=\\"?next\\"?', 'rel=\\"next\\"', ("tests/unit/test_registry_client.py",
                                                  "tests/unit/test_registry_client_api.py")),
    Plant("P03", "registry tags: each page replaces the ones before", "sglstack/registry/client.py",
          "tags += page or []", "tags = page or []",
          ("tests/unit/test_registry_client.py", "tests/unit/test_registry_client_api.py")),
    Plant("P04", "deploy's wait limit forgets the healthcheck's start period", "sglstack/deploy/deployment.py",
          "return h.start_period_s + h.interval_s * (h.retries + 1) + h.timeout_s + 30",
          "return h.interval_s * (h.retries + 1) + h.timeout_s + 30",
          ("tests/unit/test_deploy_wait_limit.py",)),
    Plant("P05", "a lock layer judged installable by its first package's hash", "sglstack/lockfile/model.py",
          "bool(part) and all(p.hashed for p in part)", "bool(part) and part[0].hashed",
          ("tests/unit/test_lock_file.py", "tests/unit/test_lock_plan.py")),
    Plant("P06", "a bisect resumed under another metric", "sglstack/bisect/driver.py",
          '        "metric": metric.name,\n', "",
          ("tests/unit/test_bisect_session.py", "tests/cli/test_bisect_driver.py")),
    Plant("P07", "a bisect resumed under another threshold", "sglstack/bisect/driver.py",
          '        "threshold": config.threshold,\n', "",
          ("tests/unit/test_bisect_session.py", "tests/cli/test_bisect_driver.py")),
    Plant("P08", "workers that ignore SIGTERM never SIGKILLed", "sglstack/adapters/process.py",
          "_signal_group(pgid, signal.SIGKILL)", "_signal_group(pgid, signal.SIGTERM)",
          ("tests/unit/test_process_adapter.py",), count=2),
    Plant("P09", "a run with no speedup passes min_speedup", "sglstack/smoke/gates.py",
          "elif speedup is None or speedup < gates.min_speedup:",
          "elif speedup is not None and speedup < gates.min_speedup:",
          ("tests/unit/test_smoke_gates.py",)),
    Plant("P10", "a kernel cache restored on another driver", "sglstack/kernelcache/key.py",
          '"compute_capability", "driver_major", ', '"compute_capability", ',
          ("tests/unit/test_kernel_cache.py", "tests/unit/test_warm_start.py")),
    Plant("P11", "topk 1: draft tokens left at the stack's value over --num-steps", "sglstack/serving/derive.py",
          'values["num_draft_tokens"] = values["num_steps"] + 1', 'values["num_draft_tokens"] = values["num_steps"]',
          ("tests/unit/test_serving.py", "tests/unit/test_promises.py")),
    Plant("P12", "an image's registry digest taken from another repository", "sglstack/config/imageref.py",
          "if known.digest and known.repository == wanted.repository:", "if known.digest:",
          ("tests/unit/test_one_home.py", "tests/unit/test_smoke_subject.py", "tests/unit/test_publish_tags.py")),
    Plant("P13", "smoke of an image of another platform (run emulated)", "sglstack/smoke/subject.py",
          "    if image != node:\n", "    if image.split('/')[0] != node.split('/')[0]:\n",
          ("tests/unit/test_smoke_subject.py",)),
    Plant("P14", "a promotion that fails part-way leaves the tags it moved", "sglstack/publish/promotion.py",
          "states = _put_back(client, repo, digest, order, kinds, before, touched, manifests)",
          "states = _put_back(client, repo, digest, order, kinds, before, [], manifests)",
          ("tests/unit/test_publish_promotion.py",)),
)


def _copy_of_head(into: Path) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def run_plant(plant: Plant) -> tuple[str, float, str]:
    """(caught | MISSED | stale, seconds, the first failing test or why)."""
    with tempfile.TemporaryDirectory(prefix=f"plant-{plant.id}-") as tmp:
        copy = Path(tmp)
        _copy_of_head(copy)
        target = copy / plant.file
        text = target.read_text(encoding="utf-8")
        if text.count(plant.old) != plant.count:
            found = text.count(plant.old)
            return "stale", 0.0, f"{plant.file}: expected {plant.count} of the planted text, found {found}"
        target.write_text(text.replace(plant.old, plant.new), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *plant.tests],
                              cwd=copy, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - start
        failed = next((line.split(" ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("FAILED ")), "")
        if proc.returncode == 0:
            return "MISSED", seconds, ""
        if proc.returncode != 1:
            return "error", seconds, (proc.stdout + proc.stderr).strip().splitlines()[-1:][0] if proc.stdout else ""
        return "caught", seconds, failed.split(" - ")[0]


def main(argv: list[str]) -> int:
    chosen = [p for p in PLANTS if not argv or p.id in argv]
    results = []
    print("| plant | axis | verdict | seconds | caught by |")
    print("|---|---|---|---:|---|")
    for plant in chosen:
        verdict, seconds, detail = run_plant(plant)
        results.append(verdict)
        print(f"| {plant.id} | {plant.axis} | {verdict} | {seconds:.1f} | {detail.replace('|', '/')} |", flush=True)
    caught = results.count("caught")
    print(f"\n{caught} of {len(results)} planted bugs caught by the fast tier")
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
