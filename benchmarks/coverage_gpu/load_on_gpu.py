"""Load and run every image of make_targets.sh on the GPU here, through the CUDA driver API (ctypes).

For each `*.cubin` (SASS) and `*.ptx` (JIT-compiled by the driver) it calls cuModuleLoadData, launches the
one kernel (it stores 42) and reads the value back. Prints, and writes to OUT_JSON, one row per image:
target, kind, the driver's result (CUDA_SUCCESS, CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_INVALID_PTX, ...)
and whether the kernel ran. Standard library only, so it runs on any node with a driver.

Usage: python3 load_on_gpu.py IMAGES_DIR OUT_JSON
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

from cudriver import check, cuda, error_name, open_device


def main(images: Path, out_json: Path) -> None:
    device = open_device()
    out = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(out), 4), "cuMemAlloc")
    rows = []
    for path in sorted(images.iterdir()):
        if path.suffix not in (".cubin", ".ptx"):
            continue
        data = path.read_bytes() + (b"\0" if path.suffix == ".ptx" else b"")
        module = ctypes.c_void_p()
        code = cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(data))
        ran = False
        if code == 0:
            function = ctypes.c_void_p()
            check(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"sglstack_fixture_kernel"), "function")
            check(cuda.cuMemsetD32_v2(out, 0, 1), "cuMemsetD32")
            arg = ctypes.c_uint64(out.value)
            params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
            check(cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, params, None), "cuLaunchKernel")
            check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
            value = ctypes.c_uint32()
            check(cuda.cuMemcpyDtoH_v2(ctypes.byref(value), out, 4), "cuMemcpyDtoH")
            ran = value.value == 42
            cuda.cuModuleUnload(module)
        rows.append({"target": path.stem, "kind": "sass" if path.suffix == ".cubin" else "ptx",
                     "load": error_name(code), "ran": ran})
        print(f"{path.name:18} {rows[-1]['load']:32} ran={ran}")
    report = {"device": device.name, "capability": device.capability, "driver_api": device.driver_api, "images": rows}
    out_json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
