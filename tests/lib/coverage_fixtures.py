"""Test helpers for kernel coverage: the real cuobjdump (installed once per machine into the user's sglstack
cache) and fake CUDA packages made of the compiled fixtures in tests/data/coverage/ (see make_fixtures.sh)."""

from __future__ import annotations

import base64
import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "coverage"

# Written for these tests (not sgl-kernel's code): it carries the lines the loader model checks for.
FAKE_LOAD_UTILS = '''"""Stand-in for sgl_kernel/load_utils.py: the variant choice the coverage model reads."""
def choose(compute_capability):
    if compute_capability == 90:
        ops_subdir = "sm90"
    else:
        ops_subdir = "sm100"
    return ops_subdir
'''

# An sgl-kernel 0.0.1 made of fixtures: Hopper gets sm_90a, Blackwell 10.0 gets sm_100a (+ 100a PTX, which
# does not run on 10.3 either), flash_ops is Hopper-only, mscclpp brings PTX for 9.0 (two identical copies),
# deep_gemm_cpp has no device code.
FAKE_SGL_KERNEL = {
    "sgl_kernel/__init__.py": b"",
    "sgl_kernel/load_utils.py": FAKE_LOAD_UTILS.encode(),
    "sgl_kernel/sm90/common_ops.abi3.so": "sm90a.so",
    "sgl_kernel/sm100/common_ops.abi3.so": "sm100a_compute100a.so",
    "sgl_kernel/flash_ops.abi3.so": "sm90a.so",
    "deep_gemm/deep_gemm_cpp.abi3.so": "host_only.so",
    "lib/mscclpp.so": "compute90.so",
    "lib/mscclpp.so.0": "compute90.so",
}


def fixture_bytes(source: str | bytes) -> bytes:
    return source if isinstance(source, bytes) else (FIXTURES / source).read_bytes()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_site_packages(root: Path, name: str, version: str, files: dict[str, str | bytes]) -> Path:
    """An installed distribution under root (files + NAME-VERSION.dist-info with a RECORD), as pip leaves it."""
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    contents = {path: fixture_bytes(src) for path, src in files.items()}
    contents[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    contents[f"{dist_info}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n"
    lines = [f"{p},{_record_hash(d)},{len(d)}" for p, d in contents.items()]
    contents[f"{dist_info}/RECORD"] = ("\n".join([*lines, f"{dist_info}/RECORD,,"]) + "\n").encode()
    for path, data in contents.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root / dist_info


def make_wheel(dest: Path, name: str, version: str, files: dict[str, str | bytes]) -> Path:
    """The same distribution as a wheel file in dest."""
    tree = dest / f".tree-{name}"
    shutil.rmtree(tree, ignore_errors=True)
    dist_info = write_site_packages(tree, name, version, files)
    wheel = dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    record = (dist_info / "RECORD").read_text().splitlines()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for line in record:
            path = line.split(",")[0]
            zf.write(tree / path, path)
    shutil.rmtree(tree)
    return wheel


@pytest.fixture(scope="session")
def cuobjdump_tool():
    """NVIDIA's cuobjdump from the nvidia-cuda-cuobjdump wheel (PyPI, once per machine)."""
    from sglstack.adapters.cuobjdump import cuobjdump

    return cuobjdump()
