"""imageinfo under user-mode QEMU: `import torch` runs in a child process; one that dies of a signal where the
kernel's /proc/cpuinfo is another machine's (emulation) gives torch/version.py's facts and says the crash, one that
dies natively is a finding (`import_error`), as an import that raises."""

from __future__ import annotations

import signal

import pytest

from sglstack.core.resources import TOOLS_DIR

X86_CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel name\t: Xeon\n\n"
ARM_CPUINFO = "processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n\n"
# torch/version.py as the 2.14.1 wheel writes it (typed assignments among plain ones).
VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']
__version__ = '2.14.1+cu130'
debug = False
cuda: Optional[str] = '13.0'
git_version = '0123abcd'
hip: Optional[str] = None
xpu: Optional[str] = None
"""


@pytest.fixture
def imageinfo(monkeypatch):
    monkeypatch.syspath_prepend(str(TOOLS_DIR))
    import imageinfo

    return imageinfo


@pytest.fixture
def crashing_torch(tmp_path, monkeypatch):
    """A `torch` whose import dies of SIGSEGV, as PyTorch's does under QEMU with an x86 /proc/cpuinfo."""
    pkg = tmp_path / "site" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"import os\nos.kill(os.getpid(), {int(signal.SIGSEGV)})\n")
    (pkg / "version.py").write_text(VERSION_PY)
    monkeypatch.syspath_prepend(str(pkg.parent))
    monkeypatch.setenv("PYTHONPATH", str(pkg.parent))
    return pkg


def test_emulation_is_a_cpuinfo_of_another_machine(imageinfo):
    assert imageinfo.emulated("aarch64", X86_CPUINFO)
    assert not imageinfo.emulated("aarch64", ARM_CPUINFO)
    assert not imageinfo.emulated("x86_64", X86_CPUINFO)
    assert imageinfo.emulated("x86_64", ARM_CPUINFO)
    assert not imageinfo.emulated("riscv64", X86_CPUINFO)  # no mark known: never called emulated


def test_the_version_file_is_read_without_importing_torch(imageinfo, crashing_torch):
    assert imageinfo.version_file_facts(str(crashing_torch)) == {"version": "2.14.1+cu130", "cuda": "13.0",
                                                                 "git": "0123abcd"}


def test_a_crash_under_emulation_keeps_the_facts_and_says_the_crash(imageinfo, crashing_torch, monkeypatch):
    monkeypatch.setattr(imageinfo.platform, "machine", lambda: "aarch64")  # this x86 cpuinfo: emulated
    info = imageinfo.torch_info()
    assert (info["version"], info["cuda"], info["git"]) == ("2.14.1+cu130", "13.0", "0123abcd")
    assert info["import_crash"].startswith(f"signal {int(signal.SIGSEGV)} under user-mode emulation")


def test_a_native_crash_is_an_import_error(imageinfo, crashing_torch, monkeypatch):
    monkeypatch.setattr(imageinfo.platform, "machine", lambda: "x86_64")
    info = imageinfo.torch_info()
    assert set(info) == {"import_error"}


def test_no_torch_is_none_and_a_working_torch_is_its_facts(imageinfo, tmp_path, monkeypatch):
    monkeypatch.setattr(imageinfo.importlib.util, "find_spec", lambda name: None)
    assert imageinfo.torch_info() is None
    monkeypatch.undo()
    pkg = tmp_path / "ok" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import version\n__version__ = version.__version__\n")
    (pkg / "version.py").write_text(VERSION_PY)
    monkeypatch.syspath_prepend(str(pkg.parent))
    monkeypatch.setenv("PYTHONPATH", str(pkg.parent))
    assert imageinfo.torch_info() == {"version": "2.14.1+cu130", "cuda": "13.0", "git": "0123abcd"}
