"""What `--docker-host/--image` copies into the stack image: node-side modules that need only the
standard library and torch, runnable from the archive with no sglstack dependency installed."""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tarfile
from pathlib import Path

from sglstack.inimage.preflight.checks import GiB, MiB, Requirements
from sglstack.inimage.preflight.node import SCHEMA
from sglstack.preflight import remote

PACKAGE = remote.NODE_DIR
NODE_MODULES = sorted(p.name for p in PACKAGE.glob("*.py"))
# What `invoke preflight --image` ships into the image, byte for byte: the node side, nothing of the host's.
SHIPPED = ("__init__.py", "__main__.py", "allreduce.py", "checks.py", "node.py", "parse.py", "probe.py")
ALLOWED_THIRD_PARTY = {"torch", "pynvml"}  # torch is in every stack image; pynvml is optional


def _imported_top_levels(path: Path) -> set[str]:
    names = set()
    for item in ast.walk(ast.parse(path.read_text())):
        if isinstance(item, ast.Import):
            names |= {alias.name.split(".")[0] for alias in item.names}
        elif isinstance(item, ast.ImportFrom) and item.level == 0:
            names.add(item.module.split(".")[0])
        elif isinstance(item, ast.ImportFrom) and item.level == 1 and item.module:
            assert f"{item.module}.py" in NODE_MODULES, f"{path.name} imports host-only .{item.module}"
        elif isinstance(item, ast.ImportFrom) and item.level > 1:
            raise AssertionError(f"{path.name} imports outside sglstack.preflight")
    return names


def test_node_modules_import_only_stdlib_and_torch():
    for module in NODE_MODULES:
        outside = _imported_top_levels(PACKAGE / module) - set(sys.stdlib_module_names) - ALLOWED_THIRD_PARTY
        assert not outside, f"{module} imports {outside}: it must run in a stack image"


def test_node_arguments_carry_the_stack_requirements():
    req = Requirements(
        stack="cu130", cuda="13.0.1", tp=8, arch_list=("9.0", "10.0"), shm_bytes=32 * GiB, sizes=(MiB, GiB)
    )
    args = remote.node_arguments(req)
    assert args[args.index("--tp") + 1] == "8" and args[args.index("--arch") + 1] == "9.0,10.0"
    assert args[args.index("--sizes") + 1] == f"{MiB},{GiB}" and args[args.index("--cuda") + 1] == "13.0.1"
    assert "--emit-json" in args


def test_archive_runs_without_site_packages(tmp_path):
    """Unpacked as in the container and run with `python3 -S` (no pydantic, rich, docker): a report."""
    with tarfile.open(fileobj=io.BytesIO(remote.node_package_archive())) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path, filter="data")
    assert sorted(names) == ["sglstack-preflight/sglstack/__init__.py",
                             *(f"sglstack-preflight/sglstack/preflight/{m}" for m in SHIPPED)]
    for module in SHIPPED:
        assert (tmp_path / "sglstack-preflight/sglstack/preflight" / module).read_bytes() == \
            (PACKAGE / module).read_bytes()
    assert not any(n.endswith(("command.py", "remote.py", "report.py")) for n in names)
    req = Requirements(stack="cu130", cuda="13.0.1", tp=8, arch_list=("9.0",))
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "sglstack.preflight", *remote.node_arguments(req)],
        cwd=tmp_path / "sglstack-preflight",
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = remote.extract_report(proc.stdout)
    assert report is not None, proc.stderr
    assert proc.returncode == 1 and report.to_dict()["schema"] == SCHEMA
    assert report.requirements.tp == 8 and report.requirements.arch_list == ("9.0",)
    assert report.fatal and report.fatal.startswith("no NVIDIA driver")


def test_extract_report_needs_both_markers():
    assert remote.extract_report("python3: No module named sglstack\n") is None
    assert remote.extract_report(f"{remote.REPORT_BEGIN}\n{{}}") is None
