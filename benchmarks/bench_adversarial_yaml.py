"""Worst-case time and memory of `invoke stacks --check` on adversarial matrix files.

    python3 benchmarks/bench_adversarial_yaml.py [--tree CHECKOUT] [--cap-mib 2048] [--timeout 120]

Each case is one `invoke stacks --check --stacks-file FILE` child process (the task as a user runs
it), under an address-space cap so that a loader that expands aliases dies with MemoryError instead of
taking the host down. The peak RSS comes from that child's own rusage (os.wait4), the time from the
wall clock around it. Ratios are to the repository's own stacks.yaml, measured in the same run.
`--tree` runs the same files through another checkout (e.g. an older commit) for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglstack.config.matrix import MAX_STACKS  # noqa: E402
from sglstack.config.yamlsrc import MAX_DEPTH, MAX_FILE_BYTES  # noqa: E402

STACK = "    base_image: debian:bookworm-slim\n    sglang: {version: 0.5.9}\n    smoke: {model: org/model}\n"


def alias_bomb(levels: int, width: int = 9) -> str:
    lines = ["stacks:", "  s:", STACK.rstrip("\n"), "    labels: {a: b}", "defaults:",
             "  x0: &x0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"  x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def deep(levels: int) -> str:
    return "stacks:\n  s:\n" + STACK + "    labels: " + "[" * levels + "]" * levels + "\n"


def one_line_stacks(limit: int) -> str:
    """As many one-line stacks as fit under `limit` bytes, each inheriting a full one."""
    head = "stacks:\n  base:\n" + STACK
    lines, size, i = [head], len(head), 0
    while True:
        line = f"  s{i:06d}: {{inherits: base}}\n"
        if size + len(line) > limit:
            break
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines)


def long_valid(stacks: int, limit: int) -> str:
    """`stacks` full stacks with labels filling the file to just under `limit` bytes: the most a
    matrix within both limits can make every command validate, and `stacks` print."""
    per_stack = limit // stacks
    out = ["stacks:\n"]
    for i in range(stacks):
        head = f"  s{i:04d}:\n{STACK}    labels:\n"
        label_lines, size = [], len(head)
        j = 0
        while size + 24 < per_stack:
            line = f"      k{j:04d}: v{j:012d}\n"
            label_lines.append(line)
            size += len(line)
            j += 1
        out.append(head + "".join(label_lines))
    return "".join(out)


def defaults_times_stacks() -> str:
    packages = ", ".join(f"p{i}" for i in range(100_000))
    return ("defaults:\n  base_image: debian:bookworm-slim\n  sglang: {version: 0.5.9}\n"
            f"  smoke: {{model: org/model}}\n  system_packages: [{packages}]\nstacks:\n"
            + "".join(f"  s{i}: {{}}\n" for i in range(200)))


def run_case(tree: Path, path: Path, cap_mib: int, timeout: float) -> dict:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap_mib << 20, cap_mib << 20))

    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "--search-root", str(tree), "stacks", "--check",
                             "--stacks-file", str(path)], cwd=path.parent, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    timed_out = False
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        timed_out = True
    elapsed = time.perf_counter() - start
    last = (stderr.strip().splitlines() or [""])[-1]
    return {"seconds": elapsed, "code": proc.returncode, "timed_out": timed_out, "last": last}


def measured(tree: Path, path: Path, cap_mib: int, timeout: float) -> dict:
    """run_case in a wrapper process of its own: RUSAGE_CHILDREN's peak there is this case's alone."""
    code = (
        "import json, resource, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "from bench_adversarial_yaml import run_case\n"
        f"r = run_case(__import__('pathlib').Path({str(tree)!r}), __import__('pathlib').Path({str(path)!r}), "
        f"{cap_mib}, {timeout})\n"
        "r['max_rss_mib'] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(json.dumps(r))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", default=str(REPO), help="checkout whose `invoke stacks --check` is measured")
    parser.add_argument("--cap-mib", type=int, default=2048, help="address-space cap of each run")
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    tree = Path(args.tree).resolve()

    with tempfile.TemporaryDirectory(prefix="sglstack-bench-yaml-") as tmp:
        cases = {
            "repo stacks.yaml (baseline)": (REPO / "stacks.yaml").read_text(),
            "alias bomb, 9 levels of 9": alias_bomb(9),
            "alias tree, 6 levels of 9 (598k values, under the budget)": alias_bomb(6),
            f"nesting {MAX_DEPTH} levels (the limit)": deep(MAX_DEPTH - 3),
            "nesting 10,000 levels": deep(10_000),
            f"a long valid file ({MAX_STACKS} stacks, 1 MiB)": long_valid(MAX_STACKS, MAX_FILE_BYTES),
            "1 MiB of one-line stacks (over the stack limit)": one_line_stacks(MAX_FILE_BYTES),
            "100k-entry defaults list x 200 stacks": defaults_times_stacks(),
            "a file over the size limit": "# pad\n" * (MAX_FILE_BYTES // 6 + 1),
        }
        results = {}
        for label, text in cases.items():
            path = Path(tmp) / "stacks.yaml"
            path.write_text(text)
            results[label] = (len(text.encode()), measured(tree, path, args.cap_mib, args.timeout))

    base_seconds = results["repo stacks.yaml (baseline)"][1]["seconds"]
    base_rss = results["repo stacks.yaml (baseline)"][1]["max_rss_mib"]
    print(f"invoke stacks --check, tree {tree}, cap {args.cap_mib} MiB, timeout {args.timeout:.0f} s")
    print(f"{'case':<58} {'bytes':>9} {'s':>7} {'x base':>7} {'peak MiB':>9} {'x base':>7}  exit, last line")
    for label, (size, r) in results.items():
        outcome = "timeout" if r["timed_out"] else str(r["code"])
        print(f"{label:<58} {size:>9,} {r['seconds']:>7.2f} {r['seconds'] / base_seconds:>7.2f} "
              f"{r['max_rss_mib']:>9.0f} {r['max_rss_mib'] / base_rss:>7.2f}  {outcome}, {r['last'][:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
