"""Time and peak memory of `python3 -m patchkit apply` at the source-size limit and far past it.

    python3 benchmarks/bench_patch_limits.py

Each case runs patchkit as the image build runs it (`python3 -S -m patchkit`, a copy of the folder,
no site-packages) on a target module of generated methods, in a child of its own; the peak RSS is the
child's VmHWM, read by the child itself just before it exits.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglstack.inimage.patchkit import MAX_SOURCE_BYTES  # noqa: E402

METHODS = "class Demo:\n    def added(self):\n        return 2\n"
CHILD = """
import json, sys, time
from patchkit.__main__ import main
start = time.perf_counter()
code = main(sys.argv[1:])
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"code": code, "seconds": time.perf_counter() - start, "peak_mib": peak / 1024}))
"""


def target(size: int) -> bytes:
    head = b"class Demo:\n    x = 1\n"
    method = b"    def m%07d(self, a, b=2):\n        return a + b * %7d\n"
    n = (size - len(head)) // len(method % (0, 0))
    return head + b"".join(method % (i, i) for i in range(n))


def run(tmp: Path, size: int) -> dict:
    root = tmp / f"tree-{size}"
    (root / "sglang").mkdir(parents=True)
    (root / "sglang" / "demo.py").write_bytes(target(size))
    patches = tmp / "patches" / "demo"
    if not patches.exists():
        patches.mkdir(parents=True)
        (patches / "patch.toml").write_text('id = "demo"\nwhy = "bench"\napplies_to = ">=0"\n'
                                            'file = "sglang/demo.py"\nclass = "Demo"\nmethods = ["added"]\n')
        (patches / "methods.py").write_text(METHODS)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-S", "-c", CHILD, "apply", "--root", str(root), "--patches-dir",
                           str(patches.parent), "--sglang-version", "0.5.9", "demo"], cwd=tmp / "tools",
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result.update(bytes=(root / "sglang" / "demo.py").stat().st_size, wall=wall,
                  last=(proc.stderr.strip().splitlines() or [""])[-1])
    return result


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="sglstack-bench-patch-") as tmp_name:
        tmp = Path(tmp_name)
        shutil.copytree(REPO / "sglstack" / "inimage" / "patchkit", tmp / "tools" / "patchkit",
                        ignore=shutil.ignore_patterns("__pycache__"))
        cases = {"326 KB (SGLang's largest file)": 326_167, "at the limit": MAX_SOURCE_BYTES - 64,
                 "50 MB": 50 * 1024 * 1024}
        results = {label: run(tmp, size) for label, size in cases.items()}
    small = results["326 KB (SGLang's largest file)"]
    print(f"patchkit apply, limit {MAX_SOURCE_BYTES:,} bytes")
    print(f"{'case':<32} {'bytes':>11} {'exit':>4} {'s':>6} {'peak MiB':>9} {'x 326 KB':>8}  message")
    for label, r in results.items():
        print(f"{label:<32} {r['bytes']:>11,} {r['code']:>4} {r['seconds']:>6.2f} {r['peak_mib']:>9.0f} "
              f"{r['peak_mib'] / small['peak_mib']:>8.2f}  {r['last'][:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
