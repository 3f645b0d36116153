"""Render every stack of the matrix: load + validate + render, in milliseconds.

    python3 benchmarks/bench_render.py [--repeat N] [--stacks-file FILE]

Prints per-stack render times (median of N) and the whole matrix, and the ratio of a warm render to the
first one (template compilation and imports happen once).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglstack.config.matrix import DEFAULT_STACKS_FILE, load_matrix
from sglstack.imagebuild.context import write_build_context
from sglstack.render.dockerfile import render_dockerfile


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--stacks-file", default=str(DEFAULT_STACKS_FILE))
    args = parser.parse_args()

    t0 = time.perf_counter()
    matrix = load_matrix(args.stacks_file)
    first_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    for stack in matrix.stacks.values():
        render_dockerfile(stack)
    first_render = time.perf_counter() - t0

    whole, per_stack = [], {name: [] for name in matrix.names()}
    context = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            start = time.perf_counter()
            m = load_matrix(args.stacks_file)
            for name, stack in m.stacks.items():
                s0 = time.perf_counter()
                render_dockerfile(stack)
                per_stack[name].append(time.perf_counter() - s0)
            whole.append(time.perf_counter() - start)
            c0 = time.perf_counter()
            for name, stack in m.stacks.items():
                write_build_context(stack, Path(tmp) / name)
            context.append(time.perf_counter() - c0)

    ms = 1000.0
    print(f"first load + render of {len(matrix.stacks)} stacks: {(first_load + first_render) * ms:.1f} ms "
          f"(load {first_load * ms:.1f} ms, render {first_render * ms:.1f} ms)")
    for name, times in per_stack.items():
        print(f"  render {name:<24} median {statistics.median(times) * ms:7.2f} ms")
    warm = statistics.median(whole)
    print(f"whole matrix, load + validate + render, warm: median {warm * ms:.1f} ms over {args.repeat} runs")
    print(f"whole matrix, writing build contexts too:     median {statistics.median(context) * ms:.1f} ms")
    print(f"ratio warm / first: {warm / (first_load + first_render):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
