"""The whole SGLang 0.5.23 image from PyPI (stack pypi-cu130): build times, size, what a change rebuilds.

Not a CI step: it builds the ~10 GB environment. Run after `invoke lock --stack pypi-cu130`.

    python3 benchmarks/bench_pypi_stack.py steps build/pypi-cu130/build.log   # one build's steps, split
    python3 benchmarks/bench_pypi_stack.py size IMAGE                         # layers, 20 largest packages
    python3 benchmarks/bench_pypi_stack.py patch-rebuild                      # a patch edit, rebuilt + verified
    python3 benchmarks/bench_pypi_stack.py pin-rebuild                        # one locked pin moved, rebuilt

`steps` reads BuildKit's plain log (the build writes it to build/STACK/build.log): each RUN step's seconds,
and for a pip step the part before pip's "Installing collected packages" (resolving the lock's files and
downloading them, or finding them in the cache mount) and the part after (unpacking and installing), and
the export of the layers. `size` runs nothing but a stdlib script in a container of the image (network off).
The rebuilds use the production build path (`build_stack`) on a copy of the matrix, its lock and patches.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglstack.adapters.docker import docker_client, run_to_completion  # noqa: E402
from sglstack.adapters.uv import ResolveRequest, compile_requirements  # noqa: E402
from sglstack.config.matrix import load_matrix  # noqa: E402
from sglstack.imagebuild.flow import build_stack  # noqa: E402
from sglstack.imagebuild.plan import BuildSettings  # noqa: E402
from sglstack.lock.trust import lock_for_build  # noqa: E402
from sglstack.lockfile.model import lock_path  # noqa: E402
from sglstack.lockfile.text import read_lock, write_lock  # noqa: E402

STACK = "pypi-cu130"
_STEP = re.compile(r"^#(?P<n>\d+) \[(?P<stage>[^\]]+)\] (?P<what>.*)$")
_LINE = re.compile(r"^#(?P<n>\d+) (?P<t>\d+\.\d+) (?P<text>.*)$")
_DONE = re.compile(r"^#(?P<n>\d+) (?:DONE (?P<s>\d+\.\d+)s|CACHED)$")
_EXPORT = re.compile(r"^#\d+ exporting layers (?P<s>\d+\.\d+)s done$")


def steps(log: Path) -> dict:
    """Per RUN step: seconds, and for pip steps the seconds before and after 'Installing collected packages'."""
    names: dict[str, str] = {}
    install_at: dict[str, float] = {}
    done: dict[str, float | None] = {}
    export = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if m := _STEP.match(line):
            names.setdefault(m["n"], f"[{m['stage']}] {m['what'][:110]}")
        elif m := _DONE.match(line):
            done[m["n"]] = float(m["s"]) if m["s"] else None
        elif m := _EXPORT.match(line):
            export = float(m["s"])
        elif (m := _LINE.match(line)) and m["text"].startswith("Installing collected packages"):
            install_at[m["n"]] = float(m["t"])
    rows = []
    for n, name in names.items():
        if "RUN" not in name or n not in done:
            continue
        seconds = done[n]
        row = {"step": name, "seconds": seconds, "cached": seconds is None}
        if seconds is not None and n in install_at:
            row["fetch_s"] = round(install_at[n], 1)
            row["install_s"] = round(seconds - install_at[n], 1)
        rows.append(row)
    total_run = round(sum(r["seconds"] or 0 for r in rows), 1)
    return {"log": str(log), "steps": rows, "run_steps_s": total_run, "export_s": export}


SIZE_SCRIPT = r"""
import importlib.metadata as md, json, os, sysconfig
site = sysconfig.get_paths()["purelib"]
rows = []
for d in md.distributions():
    size = 0
    for f in d.files or ():
        p = os.path.join(str(d.locate_file("")), str(f))
        try:
            size += os.lstat(p).st_size
        except OSError:
            pass
    rows.append((d.metadata["Name"], d.version, size))
def du(path):
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total
print(json.dumps({"packages": sorted(rows, key=lambda r: -r[2]), "site_packages": du(site),
                  "nvidia": du(os.path.join(site, "nvidia")), "venv": du("/opt/venv"), "root_usr": du("/usr")}))
"""


def size(image: str) -> dict:
    client = docker_client()
    img = client.images.get(image)
    layers = [{"bytes": h["Size"], "created_by": re.sub(r"\s+", " ", h.get("CreatedBy") or "")[:140]}
              for h in img.history() if h["Size"]]
    code, out = run_to_completion(client, image, ["python", "-c", SIZE_SCRIPT], name_prefix="sglstack-bench-size",
                                  entrypoint=[], network_disabled=True)
    if code != 0:
        raise SystemExit(out[-2000:])
    data = json.loads(out.strip().splitlines()[-1])
    return {"image": image, "image_id": img.id, "bytes": img.attrs["Size"], "layers": layers[::-1],
            "top20": data["packages"][:20], "packages": len(data["packages"]),
            "installed_bytes": sum(r[2] for r in data["packages"]), "site_packages_bytes": data["site_packages"],
            "nvidia_bytes": data["nvidia"], "venv_bytes": data["venv"], "usr_bytes": data["root_usr"]}


def _copy_matrix(tmp: Path) -> Path:
    shutil.copy(REPO / "stacks.yaml", tmp / "stacks.yaml")
    shutil.copytree(REPO / "locks", tmp / "locks")
    shutil.copytree(REPO / "patches", tmp / "patches")
    return tmp / "stacks.yaml"


def _build(stacks: Path, patches: Path, label: str) -> dict:
    stack = load_matrix(stacks, patches_dir=patches).get(STACK)
    options = BuildSettings(lock=lock_for_build(str(stacks), stack), patches_dir=patches)
    start = time.monotonic()
    result = build_stack(stack, options)
    seconds = round(time.monotonic() - start, 1)
    record = json.loads(result.record_path.read_text())
    return {"what": label, "seconds": seconds, "durations_s": record["durations_s"], "image_id": result.image_id,
            "steps": steps(result.record_path.parent / "build.log")}


def patch_rebuild() -> dict:
    """A one-line edit of the Kimi K2.5 patch's methods (upstream in 0.5.23: skipped, and re-verified)."""
    with tempfile.TemporaryDirectory(prefix="sglstack-bench-") as tmp:
        stacks = _copy_matrix(Path(tmp))
        methods = Path(tmp) / "patches" / "kimi-k25-eagle3" / "methods.py"
        methods.write_text(methods.read_text() + f"\n# bench {time.time_ns()}\n")
        return _build(stacks, Path(tmp) / "patches", "patch edit")


def pin_rebuild(package: str, version: str) -> dict:
    """One package of the sglang-requirements layer moved to another release, hashes from the index."""
    with tempfile.TemporaryDirectory(prefix="sglstack-bench-") as tmp:
        stacks = _copy_matrix(Path(tmp))
        path = lock_path(stacks, STACK)
        lock = read_lock(path)
        resolved = compile_requirements(ResolveRequest(requirements=(f"{package}=={version}",), python_version="3.11",
                                                       python_platform="x86_64-manylinux_2_36", no_deps=True))
        new = resolved.packages[0]
        packages = tuple(p.__class__(**{**p.__dict__, "version": new.version, "hashes": tuple(sorted(new.hashes))})
                         if p.name == package else p for p in lock.packages)
        write_lock(path, lock.__class__(**{**lock.__dict__, "packages": packages}), stacks_file="stacks.yaml")
        return _build(stacks, Path(tmp) / "patches", f"pin change {package} -> {version}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["steps", "size", "patch-rebuild", "pin-rebuild"])
    ap.add_argument("arg", nargs="*")
    opts = ap.parse_args()
    if opts.what == "steps":
        out = steps(Path(opts.arg[0]))
    elif opts.what == "size":
        out = size(opts.arg[0])
    elif opts.what == "patch-rebuild":
        out = patch_rebuild()
    else:
        package, version = opts.arg if opts.arg else ("certifi", "2025.11.12")
        out = pin_rebuild(package, version)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
