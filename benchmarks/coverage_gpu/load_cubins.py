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

from cudriver import cuda, error_name, open_device


def main(folder: Path, out_json: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    device = open_device()
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
    report = {"device": device.name, "capability": device.capability, "driver_api": device.driver_api,
              "stack": manifest["stack"],
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
