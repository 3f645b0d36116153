"""Take the SASS cubins out of a built image's CUDA packages, to load them on a real GPU (load_cubins.py).

For every device-code object of the stack's CUDA packages in IMAGE (the files the build's coverage check
reads, through the same RECORD-driven copy), `cuobjdump --list-elf` names its cubins; this extracts

- its sm_90 / sm_90a cubins: all of them when an object holds at most PER_OBJECT, else PER_OBJECT of them
  evenly spaced through cuobjdump's listing (a library such as cuDNN holds thousands; the sample is
  deterministic and spread over the whole file), smaller than MAX_CUBIN each;
- up to OTHERS cubins of other targets (sm_80, sm_100a, sm_120, ...), which a 9.0 GPU must refuse;

with `cuobjdump -xelf NAME,NAME,...` (one run per object), and writes OUT/manifest.json: for each cubin,
its package, the coverage row (extension) it belongs to, the object, the target, and per object how many
sm_90/sm_90a cubins it has in all, so the recording says what share was loaded. The total stays under
BUDGET (the transfer limit of the GPU machine).

Usage: python benchmarks/coverage_gpu/image_cubins.py --stack pypi-cu130 --image IMAGE --out DIR
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sglstack.adapters.cuobjdump import cuobjdump, is_device_object_name  # noqa: E402
from sglstack.adapters.docker import created_container, docker_client  # noqa: E402
from sglstack.config.matrix import load_matrix  # noqa: E402
from sglstack.coverage.image import archive_units, copy_out, read_file, record_files, site_dirs  # noqa: E402
from sglstack.coverage.rules import device_code_wheels, extension_name  # noqa: E402

PER_OBJECT = 12
OTHERS = 2
MAX_CUBIN = 2 << 20
BUDGET = 56 << 20
HOPPER = {"sm_90", "sm_90a"}
_ELF = re.compile(r"^ELF file\s+\d+:\s+(?P<name>\S+)$")
_ARCH = re.compile(r"\.(?P<arch>sm_\d+[af]?)\.cubin$")


def spread(items: list[str], n: int) -> list[str]:
    """n items evenly spaced through `items` (all of them when there are at most n)."""
    if len(items) <= n:
        return items
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def listing(tool: Path, path: Path) -> list[str]:
    proc = subprocess.run([str(tool), "--list-elf", str(path)], capture_output=True, text=True, check=False)
    return [m.group("name") for line in proc.stdout.splitlines() if (m := _ELF.match(line.strip()))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stack", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stacks-file", default=str(REPO / "stacks.yaml"))
    opts = ap.parse_args()
    stack = load_matrix(opts.stacks_file).get(opts.stack)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    tool = cuobjdump().binary
    client = docker_client()
    attrs = client.images.get(opts.image).attrs
    sites = site_dirs((attrs.get("Config") or {}).get("Env") or [], stack.python)
    entries, objects, used = [], [], 0
    with created_container(client, opts.image, name_prefix="sglstack-cubins", command=["/bin/true"],
                           entrypoint=[], network_disabled=True) as container, \
            tempfile.TemporaryDirectory(prefix="cubins-") as tmp:
        installed = json.loads(read_file(container, "/opt/sglstack/installed.json") or b"{}").get("distributions", {})
        for source in device_code_wheels(stack, "linux/amd64", installed):
            dist_info = f"{source.package.replace('-', '_')}-{source.version}.dist-info"
            found = next(((s, t) for s in sites if (t := read_file(container, f"{s}/{dist_info}/RECORD"))), None)
            if found is None:
                continue
            site, record = found
            files = record_files(record.decode("utf-8", "replace"))
            wanted = {p for p in files if is_device_object_name(p)}
            dest = Path(tmp) / source.package
            dest.mkdir()
            copied = copy_out(container, site, archive_units(files, wanted), wanted, dest)
            for path, local in sorted(copied.items()):
                names = listing(tool, local)
                if not names:
                    local.unlink()
                    continue
                arch = {n: m.group("arch") for n in names if (m := _ARCH.search(n))}
                hopper = [n for n in names if arch.get(n) in HOPPER]
                others = [n for n in names if n in arch and arch[n] not in HOPPER]
                chosen = spread(hopper, PER_OBJECT) + spread(others, OTHERS)
                objects.append({"package": source.package, "object": path, "extension": extension_name(path),
                                "cubins": len(names), "hopper_cubins": len(hopper), "hopper_chosen": 0})
                work = Path(tmp) / "x"
                work.mkdir()
                subprocess.run([str(tool), "-xelf", ",".join(chosen), str(local)], cwd=work, capture_output=True,
                               check=False)
                local.unlink()
                for name in chosen:
                    got = work / name
                    if not got.is_file() or got.stat().st_size > MAX_CUBIN or used + got.stat().st_size > BUDGET:
                        continue
                    used += got.stat().st_size
                    kept = f"{len(entries):05d}.cubin"
                    shutil.move(str(got), out / kept)
                    entries.append({"file": kept, "package": source.package, "object": path,
                                    "extension": extension_name(path), "name": name, "target": arch[name]})
                    if arch[name] in HOPPER:
                        objects[-1]["hopper_chosen"] += 1
                shutil.rmtree(work)
    manifest = {"stack": stack.name, "image": opts.image, "per_object": PER_OBJECT, "others": OTHERS,
                "max_cubin": MAX_CUBIN, "bytes": used, "cubins": entries, "objects": objects}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(entries)} cubins ({used / 2**20:.1f} MiB) from {len(objects)} objects -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
