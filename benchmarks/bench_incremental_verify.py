"""Build + verify of the complete image (stack pypi-cu130) against what a change costs, in one run (issue 38).

Not a CI step: it builds the ~11 GB environment several times (needs ~30 GB of disk). Steps, in this order:

    cold     `--no-cache --full-verify` build + verify (every check runs)
    noop     `invoke build` again, nothing changed (a process, as a user runs it)
    patch    one line added to the Kimi K2.5 patch's methods.py, rebuilt + verified (incremental)
    probe    a patch that lands in SGLang 0.5.23 (a method added to LlamaForCausalLM) added to the stack, built
    probe-edit  that patch's method body edited: a patch edit that changes a file of SGLang's, rebuilt + verified
    pin      one small package of the lock's sglang-requirements part moved, rebuilt + verified (incremental)
    pip      `pip install --no-deps --require-hashes -r locks/pypi-cu130.txt` into a fresh venv, this machine,
             from PyPI (no pip cache, none of the machine's pip configuration: every wheel downloaded)
    coverage `invoke coverage --stack pypi-cu130` twice (the second with every wheel cached); before the probe
             steps: `invoke` reads the checkout's patches/, which has no bench-probe

    python3 benchmarks/bench_incremental_verify.py [--steps cold,noop,coverage,patch,probe,probe-edit,pin,pip]
        [--out FILE]

Every step prints its JSON line as it ends (with the load average before and after it, and for a build the
verify's import closure: imports, scan, facts reused and derived); at the end, each target of issue 38 with the
figure, the limit and the verdict: patch <= 45 s and <= 0.10 of cold, pin <= 0.4 of cold, cold <= 1.2x pip,
noop <= 2 s, coverage (wheels cached) <= 5 s. The CA bundle the builds hand to pip is SGLSTACK_CA_BUNDLE, else
PIP_CERT. A build's figure names its runtime install steps that ran or were CACHED (BuildKit keeps a pin built
before: pass --pin with a version not built on this machine) and each patch's status (on pypi-cu130, SGLang
0.5.23 has the Kimi K2.5 methods upstream: the patch is "already-upstream" and its edit changes no file of
SGLang, so every in-image check is reused; the probe steps add a patch that lands in llama.py and edit it,
so that a patch edit changing a file of SGLang's is measured too).

The matrix is copied to a temporary folder with the stack's base pinned to this machine's
`debian:bookworm-slim` (the committed pin names an image of another machine); the lock and patches are copied
as they are. Each step's figure comes with the load average before and after it (this machine is shared:
the load moves every figure), and the ratios are printed from the figures of this one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglstack.adapters.docker import docker_client  # noqa: E402
from sglstack.adapters.uv import ResolveRequest, compile_requirements  # noqa: E402
from sglstack.config.matrix import load_matrix  # noqa: E402
from sglstack.imagebuild.flow import build_stack  # noqa: E402
from sglstack.imagebuild.plan import BuildSettings  # noqa: E402
from sglstack.lock.trust import lock_for_build  # noqa: E402
from sglstack.lockfile.model import lock_path  # noqa: E402
from sglstack.lockfile.text import read_lock, write_lock  # noqa: E402

STACK = "pypi-cu130"
# 1.14 in the lock: a pure-Python package of the sglang-requirements part. BuildKit keeps what a pin built
# (1.13 was built here on 2026-12-05): each pin step says which install steps ran, so a cached one is seen.
PIN = ("easydict", "1.12")
STEPS = ("cold", "noop", "coverage", "patch", "probe", "probe-edit", "pin", "pip")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def copy_matrix(tmp: Path) -> Path:
    """stacks.yaml, locks/ and patches/ in tmp. A seeded base (`base_seed`, made here by `invoke seed-base`) is
    kept; a pulled one is pinned to this machine's debian:bookworm-slim (the committed pin names another machine's)."""
    text = (REPO / "stacks.yaml").read_text(encoding="utf-8")
    start = text.index(f"\n  {STACK}:\n")
    block = text[start:]
    own = re.split(r"\n  [A-Za-z0-9_.-]+:\n", block[1:], maxsplit=1)[0]  # up to the next stack's key
    if "\n    base_seed:" not in own:
        base = docker_client().images.get("debian:bookworm-slim").id
        block = re.sub(r"(\n    base_image: ).*", r"\1debian:bookworm-slim", block, count=1)
        block = re.sub(r"(\n    base_image_id: ).*", rf"\g<1>{base}", block, count=1)
    (tmp / "stacks.yaml").write_text(text[:start] + block, encoding="utf-8")
    shutil.copytree(REPO / "locks", tmp / "locks")
    shutil.copytree(REPO / "patches", tmp / "patches")
    probe = tmp / "patches" / PROBE
    probe.mkdir()
    (probe / "patch.toml").write_text(PROBE_TOML, encoding="utf-8")
    (probe / "methods.py").write_text(PROBE_METHODS.format(value=1), encoding="utf-8")
    return tmp / "stacks.yaml"


# On 0.5.23 the committed patch is upstream, so its edit changes no SGLang file; this one lands in llama.py, so
# its edit changes a file every serving-path import and the import closure see.
PROBE = "bench-probe"
PROBE_TOML = """id = "bench-probe"
why = "A method added to LlamaForCausalLM so that a patch edit rebuilds and re-verifies a changed SGLang file."
applies_to = ">=0.5.23"
file = "sglang/srt/models/llama.py"
class = "LlamaForCausalLM"
methods = ["sglstack_bench_probe"]
"""
PROBE_METHODS = """class LlamaForCausalLM:
    def sglstack_bench_probe(self) -> int:
        return {value}
"""


def probe_added(stacks: Path) -> dict:
    text = stacks.read_text(encoding="utf-8")
    start = text.index(f"\n  {STACK}:\n")
    head, block = text[:start], text[start:]
    block, count = re.subn(r"(\n    patches: \[)([^\]]*)\]", lambda m: f"{m[1]}{m[2]}, {PROBE}]" if m[2].strip()
                           else f"{m[1]}{PROBE}]", block, count=1)
    if not count:
        raise SystemExit(f"{stacks}: stack {STACK!r} has no `patches: [...]` line to add {PROBE} to")
    stacks.write_text(head + block, encoding="utf-8")
    return build(stacks, f"patch {PROBE} added (lands in SGLang)", force=True)


def probe_edited(stacks: Path) -> dict:
    (stacks.parent / "patches" / PROBE / "methods.py").write_text(PROBE_METHODS.format(value=2), encoding="utf-8")
    return build(stacks, f"patch {PROBE} edited (a changed SGLang file)", force=True)


CA_BUNDLE = os.environ.get("SGLSTACK_CA_BUNDLE") or os.environ.get("PIP_CERT")


def import_closure(record: dict) -> dict | None:
    """The verify's import closure, as the build record keeps it: its seconds (the serving path's imports, the
    scan of every file) and the facts reused and derived; None where it did not run (its pass reused)."""
    closure = (record.get("image_checks") or {}).get("import_closure") or {}
    helped = (record.get("image_checks") or {}).get("server_help") or {}
    checks = (record.get("verification") or {}).get("checks") or []
    facts = [c for c in checks if c.get("check") == "import_closure_facts"]
    if not facts:
        return None
    # --help runs in the closure's process after its imports (a forked child): its seconds are within the scan's
    return {"seconds": closure.get("seconds"), "imports": closure.get("seconds_imports"),
            "scan": closure.get("seconds_scan"), "server_help": helped.get("seconds"),
            "facts": {k: facts[0].get(k) for k in ("files", "reused", "derived", "parsed")}}


_STEP = re.compile(r"^#(\d+) \[runtime\s+\d+/\d+\] RUN .*?uv pip install .*?/run/sglstack-lock/([\w.-]+)\.txt", re.M)


def installs(log: str) -> dict:
    """The runtime stage's install steps of a build log (BuildKit's plain progress), by lock part: ran or CACHED."""
    out = {}
    for step, part in _STEP.findall(log):
        out[part] = "CACHED" if re.search(rf"^#{step} CACHED$", log, re.M) else "ran"
    return dict(sorted(out.items()))


def build(stacks: Path, label: str, **options: bool) -> dict:
    """One build + verify. The changed steps pass `force`: an image of the same configuration left by an earlier
    run of this bench would be skipped, and the step would measure nothing (BuildKit's cache is used as ever)."""
    patches = stacks.parent / "patches"
    stack = load_matrix(stacks, patches_dir=patches).get(STACK)
    before = load()
    start = time.monotonic()
    result = build_stack(stack, BuildSettings(lock=lock_for_build(str(stacks), stack), patches_dir=patches,
                                              ca_bundle=CA_BUNDLE, **options))
    seconds = round(time.monotonic() - start, 1)
    record = json.loads(result.record_path.read_text()) if result.record_path else {}
    log = REPO / "build" / STACK / "build.log"
    return {"what": label, "seconds": seconds, "load_before": before, "load_after": load(),
            "image_id": result.image_id, "skipped": result.skipped, "durations_s": record.get("durations_s"),
            "verification": record.get("verification"), "import_closure": import_closure(record),
            "installs": installs(log.read_text(errors="replace")) if log.is_file() else None,
            # a patch whose methods SGLang already has ("already-upstream") changes no file of SGLang's
            "patches": {str(p.get("id")): p.get("status") for p in record.get("patches") or [] if isinstance(p, dict)},
            "coverage_objects": (record.get("coverage") or {}).get("objects"),
            "coverage_label": (record.get("labels") or {}).get("io.sglstack.coverage")}


def invoke(*args: str) -> dict:
    before = load()
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(REPO), **({"SGLSTACK_CA_BUNDLE": CA_BUNDLE} if CA_BUNDLE else {})}
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True, text=True,
                          check=False, env=env)
    return {"what": "invoke " + " ".join(args), "seconds": round(time.monotonic() - start, 2), "exit": proc.returncode,
            "load_before": before, "load_after": load(), "last_line": (proc.stdout.strip().splitlines() or [""])[-1],
            "error": (proc.stderr.strip().splitlines() or [""])[-1] if proc.returncode else None}


def patch_edit(stacks: Path) -> dict:
    methods = stacks.parent / "patches" / "kimi-k25-eagle3" / "methods.py"
    methods.write_text(methods.read_text() + f"\n# bench {time.time_ns()}\n")
    return build(stacks, "patch edit", force=True)


def pin_change(stacks: Path, pin: str) -> dict:
    package, _, version = pin.partition("==")
    path = lock_path(stacks, STACK)
    lock = read_lock(path)
    resolved = compile_requirements(ResolveRequest(requirements=(f"{package}=={version}",), python_version="3.11",
                                                   python_platform="x86_64-manylinux_2_36", no_deps=True))
    new = resolved.packages[0]
    packages = tuple(p.__class__(**{**p.__dict__, "version": new.version, "hashes": tuple(sorted(new.hashes))})
                     if p.name == package else p for p in lock.packages)
    write_lock(path, lock.__class__(**{**lock.__dict__, "packages": packages}), stacks_file="stacks.yaml")
    return build(stacks, f"pin change {package} -> {version}", force=True)


def pip_install(stacks: Path, tmp: Path) -> dict:
    """The same lock into a fresh venv with the stack's Python minor (this machine's python3.11), from PyPI.

    Like the cold build: every wheel downloaded, no pip cache, none of this machine's pip configuration (its
    find-links and local indexes would serve torch and the CUDA wheels from disk); only its CA bundle."""
    venv = tmp / "venv"
    cert = os.environ.get("SGLSTACK_CA_BUNDLE") or os.environ.get("PIP_CERT")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    before = load()
    start = time.monotonic()
    subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True)
    proc = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-deps", "--require-hashes", "--no-cache-dir",
                           "--disable-pip-version-check", *(["--cert", cert] if cert else []),
                           "-r", str(lock_path(stacks, STACK))],
                          capture_output=True, text=True, check=False, env=env)
    seconds = round(time.monotonic() - start, 1)
    downloads = proc.stdout.count("Downloading ")
    shutil.rmtree(venv, ignore_errors=True)
    return {"what": "pip install of the lock into a venv", "seconds": seconds, "exit": proc.returncode,
            "downloaded": downloads, "packages": len(read_lock(lock_path(stacks, STACK)).packages),
            "load_before": before, "load_after": load(),
            "last_line": (proc.stdout.strip().splitlines() or [""])[-1][:300]}


def ratios(figures: dict) -> dict:
    out: dict = {}
    cold = figures.get("cold", {}).get("seconds")
    if cold:
        for step in ("patch", "probe-edit", "pin"):
            if step in figures:
                out[f"{step} / cold"] = round(figures[step]["seconds"] / cold, 3)
        if "pip" in figures:
            out["cold / pip install"] = round(cold / figures["pip"]["seconds"], 3)
    return out


# Issue 38's targets: (what, the figure's step and key, the limit).
TARGETS = (("patch rebuild + verify, seconds", "patch", "seconds", 45.0),
           ("patch / cold", "ratios", "patch / cold", 0.10),
           ("landing patch edit rebuild + verify, seconds", "probe-edit", "seconds", 45.0),
           ("landing patch edit / cold", "ratios", "probe-edit / cold", 0.10),
           ("pin / cold", "ratios", "pin / cold", 0.4),
           ("cold / pip install", "ratios", "cold / pip install", 1.2),
           ("noop `invoke build`, seconds", "noop", "seconds", 2.0),
           ("coverage, wheels cached, seconds", "coverage", "cached", 5.0))


def verdicts(figures: dict) -> list[dict]:
    """Each target of the issue with this run's figure (None where its step did not run) and whether it is met."""
    out = []
    for what, step, key, limit in TARGETS:
        value = (figures.get(step) or {}).get(key)
        value = value.get("seconds") if isinstance(value, dict) else value
        out.append({"target": what, "figure": value, "limit": limit,
                    "met": None if value is None else value <= limit})
    return out


def loads_by_step(figures: dict) -> dict:
    """The load average (1/5/15 min) before and after each step."""
    out = {}
    for step in STEPS:
        fig = figures.get(step)
        for part, f in (fig.items() if step == "coverage" and fig else [(step, fig)] if fig else []):
            out[part if step != "coverage" else f"coverage {part}"] = {"before": f.get("load_before"),
                                                                       "after": f.get("load_after")}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--out", default=str(REPO / "build" / "bench-incremental-verify.json"))
    # BuildKit's cache outlives a run: a pin already measured once rebuilds nothing the second time.
    ap.add_argument("--pin", default="==".join(PIN), help="NAME==VERSION the pin step moves to (default %(default)s)")
    opts = ap.parse_args()
    steps = opts.steps.split(",")
    figures: dict = {}
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sglstack-bench-") as tmp:
        stacks = copy_matrix(Path(tmp))
        run = {"cold": lambda: build(stacks, "cold build + full verify", no_cache=True, full_verify=True),
               "noop": lambda: invoke("build", "--stack", STACK, "--stacks-file", str(stacks)),
               "patch": lambda: patch_edit(stacks),
               "probe": lambda: probe_added(stacks),
               "probe-edit": lambda: probe_edited(stacks),
               "pin": lambda: pin_change(stacks, opts.pin),
               "pip": lambda: pip_install(stacks, Path(tmp)),
               "coverage": lambda: {"first": invoke("coverage", "--stack", STACK, "--stacks-file", str(stacks)),
                                    "cached": invoke("coverage", "--stack", STACK, "--stacks-file", str(stacks))}}
        for step in steps:
            figures[step] = run[step]()
            figures["ratios"] = ratios(figures)
            out.write_text(json.dumps(figures, indent=1))  # what is measured so far survives a failed step
            print(json.dumps({step: figures[step]}), flush=True)
    figures["targets"] = verdicts(figures)
    out.write_text(json.dumps(figures, indent=1))
    print(json.dumps({"ratios": ratios(figures), "load": loads_by_step(figures)}, indent=1))
    if "pin" in figures and "ran" not in (figures["pin"].get("installs") or {}).values():
        print(f"pin: no install step ran (BuildKit had {opts.pin} from an earlier run): pass --pin with a version "
              "not built on this machine")
    for v in figures["targets"]:
        shown = "not run" if v["figure"] is None else f"{v['figure']} (limit {v['limit']}): " + \
            ("met" if v["met"] else "NOT met")
        print(f"{v['target']}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
