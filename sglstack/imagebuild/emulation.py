"""How the in-image checks of a foreign platform's image run under user-mode QEMU (pure but for a temporary
file): more time, and an Arm /proc/cpuinfo in place of the build machine's."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config.platforms import PLATFORM_OF_MACHINE
from ..config.schema import Stack
from ..core.safefiles import write_text

HELP_TIMEOUT_S = 600  # imagecheck.py's own --help-timeout default
# An image of another platform than the engine's runs its checks under QEMU: its time limits are this many
# times the native ones (Python under user-mode QEMU runs several times slower; a limit is a hang guard, not a
# speed gate).
EMULATED_SLOWDOWN = 4


def time_scale(client: Any, stack: Stack) -> int:
    """EMULATED_SLOWDOWN when the engine's platform is not the (narrowed) stack's, else 1."""
    engine = PLATFORM_OF_MACHINE.get(str((client.info() or {}).get("Architecture")))
    return EMULATED_SLOWDOWN if engine is not None and engine != stack.platforms[0] else 1


# What a container under user-mode QEMU reads as /proc/cpuinfo instead of the build machine's: PyTorch's CPU
# detection (cpuinfo) finds no CPU of its architecture in an x86 file and `import torch` dies of SIGSEGV. One
# processor of an Arm Neoverse N1 (ARMv8.2); features still come from the emulator's HWCAP.
EMULATED_CPUINFO = {"linux/arm64": ("processor\t: {n}\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull "
                                    "sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs\n"
                                    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\n"
                                    "CPU part\t: 0xd0c\nCPU revision\t: 1\n\n")}


@contextlib.contextmanager
def emulated_cpuinfo(stack: Stack, scale: int) -> Iterator[dict[str, Any]]:
    """The container options giving an emulated image its platform's /proc/cpuinfo (a file bind-mounted over it,
    as LXCFS does; removed after the run); none for a native one or a platform without one."""
    text = EMULATED_CPUINFO.get(stack.platforms[0]) if scale > 1 else None
    if text is None:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="sglstack-cpuinfo-") as folder:
        path = write_text(Path(folder), Path(folder) / "cpuinfo",
                          "".join(text.format(n=n) for n in range(os.cpu_count() or 1)), mode=0o644)
        Path(folder).chmod(0o755)
        yield {"volumes": {str(path): {"bind": "/proc/cpuinfo", "mode": "ro"}}}


IMPORT_TIMEOUT_S = JIT_TIMEOUT_S = 900  # imagecheck.py's own --import-timeout and --jit-timeout defaults


def timeout_options(scale: int) -> list[str]:
    """imagecheck.py's time limits (the server's --help, the import closure, the JIT compile), only where they are
    not the defaults (a native check's argv is unchanged)."""
    return [] if scale == 1 else [f"--help-timeout={HELP_TIMEOUT_S * scale}",
                                  f"--import-timeout={IMPORT_TIMEOUT_S * scale}",
                                  f"--jit-timeout={JIT_TIMEOUT_S * scale}"]
