"""The wheels stage on the real dockerd with BuildKit: a stack built for linux/arm64 on this amd64 machine has its
locked wheels unpacked natively (no QEMU) into a venv-shaped tree the serving stage copies, for the target's
platform tags, each file checked against the lock's hashes. A tiny real set from PyPI: requests and its
dependencies (charset-normalizer brings an aarch64 shared object and a console script) and SGLang 0.5.9."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from clirun import run_invoke

from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.context import write_build_context
from sglstack.lock.trust import lock_for_build

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.docker, pytest.mark.network]
TAG = "sglstack-test/wheels-stage"

# The seeded bases of stacks.yaml (the serving stage is not built here: only its FROM line names one).
SEED = load_matrix(REPO / "stacks.yaml").get("pypi-cu130-gb").base_seed
assert SEED is not None
STACKS = f"""
defaults:
  src_image: debian:bookworm-slim
  python: "3.11"
  serving: {{model: test-org/tiny-model, tp: 1, gpus: 0, startup_timeout_s: 120}}
stacks:
  cpu-gb:
    description: a CPU stack for both platforms, to build its wheels stage
    platforms: [linux/amd64, linux/arm64]
    base_image: sglstack/base:debian12-slim
    base_seed:
      rootfs: {json.dumps(dict(SEED.rootfs))}
      manifest: {json.dumps(dict(SEED.manifest))}
    glibc: "2.36"
    extra_layers:
      - name: http-client
        requirements: ["requests==2.32.3"]
    sglang: {{version: 0.5.9, install_deps: false}}
    patches: []
"""

# Run in the wheels stage's own image (the build machine's): what was unpacked, where, and how.
INSPECT = r"""
import json, os, glob, sys
venv = "/stage/http-client/opt/venv"
site = venv + "/lib/python3.11/site-packages"
so = sorted(glob.glob(site + "/charset_normalizer/*.so"))
def machine(path):
    with open(path, "rb") as f:
        head = f.read(20)
    return int.from_bytes(head[18:20], "little")
script = venv + "/bin/normalizer"
record = open(glob.glob(site + "/charset_normalizer-*.dist-info/RECORD")[0]).read().splitlines()
print(json.dumps({
    "machines": sorted({machine(p) for p in so}), "shared_objects": len(so),
    "python": machine(os.path.realpath(sys.executable)),
    "shebang": open(script).readline().strip(), "executable": os.access(script, os.X_OK),
    "record_script": [r.split(",")[0] for r in record if "bin/normalizer" in r],
    "pyc": sorted(os.path.basename(p) for p in glob.glob(site + "/requests/__pycache__/__init__*.pyc")),
    "sglang": os.path.isdir("/stage/sglang/opt/venv/lib/python3.11/site-packages/sglang"),
    "parts": sorted(os.listdir("/stage")),
}))
"""


def docker_build(docker_cli: str, ctx: Path, ca_bundle: Path, tag: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [docker_cli, "build", "--progress=plain", "--platform", "linux/arm64", "--target", "wheels",
         "--secret", f"id=ca_bundle,src={ca_bundle}", "--file", str(ctx / "Dockerfile"), "--tag", tag,
         str(ctx / "context")],
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheels-stage")
    stacks = work / "stacks.yaml"
    stacks.write_text(STACKS)
    proc = run_invoke("lock", "--stack", "cpu-gb", "--stacks-file", str(stacks), cwd=work)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    stack = load_matrix(stacks).get("cpu-gb").for_platform("linux/arm64")
    lock = lock_for_build(stacks, stack)
    assert lock is not None and lock.platforms == ("linux/arm64",)
    mp = pytest.MonkeyPatch()
    mp.setenv("SGLSTACK_BUILD_DIR", str(work))
    try:
        write_build_context(stack, work / "ctx", lock=lock)
    finally:
        mp.undo()
    return work / "ctx"


def test_the_wheels_stage_unpacks_the_targets_wheels_natively(rendered, docker_cli, ca_bundle):
    proc = docker_build(docker_cli, rendered, ca_bundle, f"{TAG}:arm64")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    try:
        out = subprocess.run([docker_cli, "run", "--rm", "--network", "none", f"{TAG}:arm64",
                              "/opt/venv/bin/python", "-c", INSPECT], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        facts = json.loads(out.stdout)
    finally:
        subprocess.run([docker_cli, "rmi", f"{TAG}:arm64"], capture_output=True)
    assert facts["machines"] == [183] and facts["shared_objects"] >= 1  # EM_AARCH64: the target's, not ours
    assert facts["python"] == 62  # EM_X86_64: the stage ran the build machine's Python, no QEMU
    assert facts["shebang"] == "#!/opt/venv/bin/python" and facts["executable"]  # the serving venv's Python
    assert facts["record_script"] == ["../../../bin/normalizer"]  # RECORD as pip writes it in a venv
    assert facts["pyc"] == ["__init__.cpython-311.pyc"]  # level 0 only, as pip compiles
    assert facts["sglang"] and facts["parts"] == ["http-client", "sglang"]


def test_a_file_that_does_not_match_the_locks_hash_fails_the_build(rendered, docker_cli, ca_bundle, tmp_path):
    ctx = tmp_path / "ctx"
    shutil.copytree(rendered, ctx)
    part = ctx / "context" / "lock" / "http-client.txt"
    text = part.read_text()
    # Every hash of charset-normalizer replaced by one no file has: pip must refuse the download.
    bad = re.sub(r"(charset-normalizer==\S+)((?: \\\n\s+--hash=sha256:[0-9a-f]{64})+)",
                 lambda m: m[1] + " \\\n    --hash=sha256:" + "0" * 64, text)
    assert bad != text
    part.write_text(bad)
    proc = docker_build(docker_cli, ctx, ca_bundle, f"{TAG}:bad")
    subprocess.run([docker_cli, "rmi", f"{TAG}:bad"], capture_output=True)
    assert proc.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in proc.stdout + proc.stderr
