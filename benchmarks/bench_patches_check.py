"""`patches.check` for every stack of the matrix: a warm wheel cache against a cold one.

Usage: python3 benchmarks/bench_patches_check.py [--stacks-file stacks.yaml] [--repeat 5]

Measured in one run, printed as a table and as ratios:
- warm, in process: `check_stack_patches` over the whole matrix, the wheels already in the cache (median of
  --repeat runs);
- cold, in process: the same with an empty SGLSTACK_CACHE, so each SGLang wheel is downloaded with pip;
- warm, as users run it: `invoke patches.check --stack NAME` for every stack, one process each;
- the engine alone: apply + verify of every patch on an in-memory-sized tree (median).
Target: the warm matrix under 5 s.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglstack.adapters.wheels import fetch_wheel  # noqa: E402
from sglstack.cli.patches import check_command  # noqa: E402
from sglstack.config.matrix import DEFAULT_PATCHES_DIR, load_matrix  # noqa: E402
from sglstack.inimage import patchkit  # noqa: E402
from sglstack.patches.host import check_stack_patches, unpack_for_patches  # noqa: E402


def _matrix_check(matrix) -> dict[str, str]:
    outcomes = {}
    for name, stack in matrix.stacks.items():
        rows = check_stack_patches(stack)
        outcomes[name] = ", ".join(f"{r.patch}: {r.outcome}" for r in rows) or "no patches"
    return outcomes


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks-file", default=str(REPO / "stacks.yaml"))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    matrix = load_matrix(args.stacks_file)
    versions = sorted({s.sglang.version for s in matrix.stacks.values() if s.patches and s.sglang.version})

    # Cold: an empty cache, every wheel downloaded once (stacks sharing a version share the download).
    with tempfile.TemporaryDirectory(prefix="sglstack-bench-cache-") as cache:
        saved = os.environ.get("SGLSTACK_CACHE")
        os.environ["SGLSTACK_CACHE"] = cache
        try:
            cold, outcomes = _timed(lambda: _matrix_check(matrix))
        finally:
            if saved is None:
                os.environ.pop("SGLSTACK_CACHE")
            else:
                os.environ["SGLSTACK_CACHE"] = saved

    _matrix_check(matrix)  # make sure the real cache is warm
    warm_runs = [_timed(lambda: _matrix_check(matrix))[0] for _ in range(args.repeat)]
    warm = statistics.median(warm_runs)

    # As users run it: one `invoke patches.check --stack NAME` process per stack.
    invoke_total = 0.0
    for name in matrix.stacks:
        seconds, proc = _timed(
            lambda n=name: subprocess.run(
                [sys.executable, "-m", "invoke", "patches.check", "--stack", n, "--stacks-file", args.stacks_file],
                cwd=REPO,
                capture_output=True,
                text=True,
                check=False,
            )
        )
        invoke_total += seconds
        if proc.returncode not in (0, 1):
            print(proc.stderr, file=sys.stderr)

    # The engine alone, per version: apply + verify every patch to a fresh unpacked tree.
    engine = {}
    for version in versions:
        ids = sorted({p for s in matrix.stacks.values() if s.sglang.version == version for p in s.patches})
        specs = [patchkit.load_patch(DEFAULT_PATCHES_DIR, i) for i in ids]
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                root = unpack_for_patches(fetch_wheel("sglang", version), specs, Path(tmp))
                runs.append(
                    _timed(lambda r=root, v=version, i=ids: patchkit.apply_patches(r, DEFAULT_PATCHES_DIR, i, v))[0]
                )
        engine[version] = statistics.median(runs)

    # A --sglang check of a release no stack uses yet (warm), the "will my patches survive?" question.
    newest = _timed(lambda: check_command(sglang="0.5.11", console=Console(file=io.StringIO())))[0]

    print(f"stacks: {', '.join(matrix.stacks)} (SGLang {', '.join(versions) or 'none with patches'})")
    for name, outcome in outcomes.items():
        print(f"  {name}: {outcome}")
    print(f"cold cache, whole matrix, in process : {cold:7.3f} s")
    print(
        f"warm cache, whole matrix, in process : {warm:7.3f} s  (median of {args.repeat}: "
        f"{', '.join(f'{t:.3f}' for t in warm_runs)})"
    )
    print(f"warm cache, whole matrix, via invoke : {invoke_total:7.3f} s  ({len(matrix.stacks)} processes)")
    for version, seconds in engine.items():
        print(f"engine apply+verify, sglang {version:7}: {seconds * 1000:7.1f} ms")
    print(f"check --sglang 0.5.11 (warm)         : {newest:7.3f} s")
    print(f"ratio cold/warm (in process)         : {cold / warm:7.1f}x")
    print(f"target warm < 5 s (via invoke)       : {'met' if invoke_total < 5 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
