"""Load every cubin image_cubins.py took out of an image on the GPU here, with cuModuleLoadData (ctypes).

Loading is the driver's own verdict on a cubin for this GPU: CUDA_SUCCESS, or CUDA_ERROR_NO_BINARY_FOR_GPU
for SASS of another architecture. Nothing is launched (a library's kernels need their own arguments).
Writes OUT_JSON: the device, and per cubin its package, coverage row, object, target and the driver's answer.
Standard library only, so it runs on any node with a driver.

Usage: python3 load_cubins.py CUBINS_DIR OUT_JSON
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from pathlib import Path

cuda = ctypes.CDLL("libcuda.so.1")


def error_name(code: int) -> str:
    name = ctypes.c_char_p()
    cuda.cuGetErrorName(code, ctypes.byref(name))
    return name.value.decode() if name.value else str(code)


def check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what}: {error_name(code)}")


def main(folder: Path, out_json: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
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
    rows = []
    start = time.monotonic()
    for entry in manifest["cubins"]:
        data = (folder / entry["file"]).read_bytes()
        module = ctypes.c_void_p()
        code = cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(data))
        if code == 0:
            cuda.cuModuleUnload(module)
        rows.append({k: entry[k] for k in ("package", "extension", "object", "name", "target")}
                    | {"bytes": len(data), "load": error_name(code)})
    report = {"device": name.value.decode(), "capability": f"{major.value}.{minor.value}",
              "driver_api": f"{version.value // 1000}.{version.value % 1000 // 10}", "stack": manifest["stack"],
              "sampling": {"per_object": manifest["per_object"], "others": manifest["others"],
                           "max_cubin": manifest["max_cubin"]},
              "objects": manifest["objects"], "seconds": round(time.monotonic() - start, 2), "cubins": rows}
    out_json.write_text(json.dumps(report, indent=1) + "\n")
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["load"]] = counts.get(row["load"], 0) + 1
    print(report["device"], report["capability"], report["driver_api"], counts)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
