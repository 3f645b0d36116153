"""The CUDA driver API through ctypes, for the loaders beside this file (load_on_gpu.py, load_cubins.py).

Standard library only: these scripts run on a GPU node with a driver and nothing else.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

cuda = ctypes.CDLL("libcuda.so.1")


def error_name(code: int) -> str:
    name = ctypes.c_char_p()
    cuda.cuGetErrorName(code, ctypes.byref(name))
    return name.value.decode() if name.value else str(code)


def check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what}: {error_name(code)}")


@dataclass(frozen=True)
class Device:
    name: str
    capability: str  # "9.0"
    driver_api: str  # "13.0"


def open_device() -> Device:
    """Device 0 with its primary context current: what cuModuleLoadData loads into."""
    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    major, minor = ctypes.c_int(), ctypes.c_int()
    check(cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device), "major")  # COMPUTE_CAPABILITY_MAJOR
    check(cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device), "minor")  # COMPUTE_CAPABILITY_MINOR
    name = ctypes.create_string_buffer(256)
    cuda.cuDeviceGetName(name, 256, device)
    version = ctypes.c_int()
    cuda.cuDriverGetVersion(ctypes.byref(version))
    context = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    return Device(name.value.decode(), f"{major.value}.{minor.value}",
                  f"{version.value // 1000}.{version.value % 1000 // 10}")
