"""The built image checks itself (stdlib only): run by `invoke build` in a container of the image, with the
network off, after the image is exported and before it is tagged. Prints one JSON object; the host judges it
(`sglstack/build/verify.py`), so a failure fails the build, not the first deploy. (`pip check` runs in every
verified image, from `imageinfo.py`, and is judged with the stack's declared overrides.)

- shared libraries: every DT_NEEDED of every compiled file in site-packages exists in the image
  (`elfdeps.py`), except the driver's, which the host provides;
- the server: `python -m sglang.launch_server --help` answers, and each serving argv the stack runs (smoke,
  compose, manifests: the same flags) parses with the image's own SGLang argument parser, so a flag renamed
  upstream is named here;
- the JIT toolchain (a CUDA stack): `$CUDA_HOME/bin/nvcc` compiles a CUDA source that includes what the JIT
  compilers' sources include (the runtime, fp16/bf16 and CCCL headers) for each capability of the stack, and
  links it into a shared library the way FlashInfer's JIT links (`-L$CUDA_HOME/lib64 -lcudart`). No GPU is
  needed to compile; on a GPU node this is the first thing FlashInfer, DeepGEMM and torch's cpp_extension do,
  so an nvcc that does not match the CUDA headers (CCCL refuses to compile) or a toolkit layout without
  `lib64` fails the build here instead of the first request there. `-lcuda` is the driver's, mounted at
  run time: the check only finds what it will link (`lib64/stubs/libcuda.so`, a stub or a link to it).

- the import closure (`importcheck.py`, in a process of its own): the serving path's modules imported, the
  installed tree's imports that no installed distribution provides. Asked for with the server's checks, the
  closure's process runs them once its imports are done (the --help in a child forked from it, the argv through
  the parser already loaded), so SGLang and torch are imported once, not twice; should that process give no
  answer for them, they run here as alone.

    python imagecheck.py [--server-help] [--argv JSON_LIST ...] [--jit-arch 9.0 ...] [--site DIR ...]
                         [--import-closure JSON_LIST] [--no-shared-libraries]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import sysconfig
import tempfile
import time

from elfdeps import check_needs  # its siblings in the image's tools folder (on sys.path as the script's dir)
from importcheck import SERVER_MODULE, SERVER_REPORTS, parse_argv

OUTPUT_TAIL = 4000  # characters of a failing command's output kept in the report


def _tail(text: str) -> str:
    return text[-OUTPUT_TAIL:]


def shared_libraries(sites: list[str]) -> dict:
    start = time.monotonic()
    report = check_needs(sites, machine=platform.machine(), ld_library_path=os.environ.get("LD_LIBRARY_PATH", ""))
    return {**report.to_dict(), "folders": sites, "seconds": round(time.monotonic() - start, 2)}


def server_help(timeout: float) -> dict:
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", SERVER_MODULE, "--help"], capture_output=True, text=True,
                              check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"returncode": None, "error": f"no answer within {timeout:.0f} s", "seconds": timeout}
    ok = proc.returncode == 0 and "--model-path" in proc.stdout
    return {"returncode": proc.returncode, "lists_model_path": "--model-path" in proc.stdout,
            "error": None if ok else _tail(proc.stderr or proc.stdout), "seconds": round(time.monotonic() - start, 2)}


JIT_SOURCE = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda/std/utility>
__global__ void sglstack_scale(__nv_bfloat16* x, __half* y, float a) {
  auto pair = cuda::std::make_pair(threadIdx.x, a);
  x[pair.first] = __float2bfloat16(pair.second * __bfloat162float(x[pair.first]));
  y[pair.first] = __float2half(pair.second);
}
extern "C" int sglstack_launch(void* x, void* y) {
  sglstack_scale<<<1, 32>>>((__nv_bfloat16*)x, (__half*)y, 2.0f);
  return (int)cudaGetLastError();
}
"""
JIT_TIMEOUT_S = 900


def gencode(arch: str) -> str:
    """`9.0` -> `-gencode=arch=compute_90,code=sm_90` (FlashInfer's form)."""
    digits = arch.replace(".", "")
    return f"-gencode=arch=compute_{digits},code=sm_{digits}"


def jit_toolchain(archs: list[str], cuda_home: str | None, timeout: float = JIT_TIMEOUT_S) -> dict:
    """Compile and link JIT_SOURCE with the image's nvcc for `archs`, as the JIT compilers would."""
    start = time.monotonic()
    out: dict = {"cuda_home": cuda_home, "archs": archs, "release": None, "returncode": None, "error": None}
    nvcc = os.path.join(cuda_home, "bin", "nvcc") if cuda_home else ""
    if not cuda_home or not os.access(nvcc, os.X_OK):
        error = f"no nvcc at {nvcc}" if cuda_home else "CUDA_HOME is not set"
        return {**out, "error": error, "seconds": round(time.monotonic() - start, 2)}
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False, timeout=120)
    found = re.search(r"release (\d+\.\d+)", version.stdout)
    out["release"] = found.group(1) if found else None
    with tempfile.TemporaryDirectory(prefix="sglstack-jit-") as tmp:
        source = os.path.join(tmp, "jit_check.cu")
        with open(source, "w", encoding="utf-8") as f:
            f.write(JIT_SOURCE)
        command = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-std=c++17", *(gencode(a) for a in archs),
                   source, "-o", os.path.join(tmp, "jit_check.so"), f"-L{cuda_home}/lib64", "-lcudart"]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            return {**out, "error": f"nvcc did not finish within {timeout:g} s",
                    "seconds": round(time.monotonic() - start, 2)}
    out["returncode"] = proc.returncode
    stub = os.path.join(cuda_home, "lib64", "stubs", "libcuda.so")
    out["driver_stub"] = (os.readlink(stub) if os.path.islink(stub) else stub) if os.path.lexists(stub) else None
    if proc.returncode != 0:
        out["error"] = _tail((proc.stderr or proc.stdout).replace(tmp + os.sep, ""))
    return {**out, "seconds": round(time.monotonic() - start, 2)}


IMPORT_TIMEOUT_S = 900


def import_closure(args: list[str], timeout: float = IMPORT_TIMEOUT_S) -> dict:
    """importcheck.py with `args`, in a child: an import that crashes the interpreter is its finding, not ours."""
    start = time.monotonic()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "importcheck.py")
    with tempfile.TemporaryDirectory(prefix="sglstack-imports-") as tmp:
        out = os.path.join(tmp, "imports.json")
        try:
            proc = subprocess.run([sys.executable, script, *args, "--out", out], capture_output=True, text=True,
                                  check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"no answer within {timeout:g} s", "seconds": round(time.monotonic() - start, 2)}
        if proc.returncode != 0 or not os.path.isfile(out):
            return {"error": f"exit {proc.returncode}: {_tail(proc.stderr or proc.stdout)}",
                    "seconds": round(time.monotonic() - start, 2)}
        with open(out, encoding="utf-8") as f:
            return json.load(f)


def closure_and_server(opts: argparse.Namespace) -> dict:
    """The import closure, and the server's --help and argv in its process after its imports: the closure's
    time limit grows by the --help's own. What that process does not answer is left out (main runs it alone)."""
    server = (["--server-help", f"--help-timeout={opts.help_timeout}"] if opts.server_help else []) + \
        [f"--argv={a}" for a in opts.argv]
    closure = import_closure(json.loads(opts.import_closure) + server,
                             opts.import_timeout + (opts.help_timeout if opts.server_help else 0))
    found = {key: closure.pop(key) for key in SERVER_REPORTS if isinstance(closure.get(key), dict)}
    return {"import_closure": closure, **found}


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-help", action="store_true")
    ap.add_argument("--help-timeout", type=float, default=600)
    ap.add_argument("--import-timeout", type=float, default=IMPORT_TIMEOUT_S)
    ap.add_argument("--jit-timeout", type=float, default=JIT_TIMEOUT_S)
    ap.add_argument("--argv", action="append", default=[], help="a JSON list: one serving argv (after the module)")
    ap.add_argument("--site", action="append", default=[], help="folders to check the shared libraries of")
    ap.add_argument("--no-shared-libraries", action="store_true", help="leave the shared libraries out (a verify "
                    "that reuses their earlier pass)")
    ap.add_argument("--jit-arch", action="append", default=[], help="a CUDA capability the JIT check compiles for")
    ap.add_argument("--import-closure", help="a JSON list: importcheck.py's arguments (the serving path)")
    opts = ap.parse_args(args)
    paths = sysconfig.get_paths()
    sites = opts.site or list(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    out: dict = {"python": platform.python_version()}
    if not opts.no_shared_libraries:
        out["shared_libraries"] = shared_libraries(sites)
    if opts.import_closure is not None:
        out.update(closure_and_server(opts))
    # An import closure that kept its verified outcome (only unstarted bodies edited) keeps the server's checks'.
    kept = ((out.get("import_closure") or {}).get("body_edits") or {}).get("reused") is True
    if opts.server_help and "server_help" not in out and not kept:
        out["server_help"] = server_help(opts.help_timeout)
    if opts.argv and "serving_argv" not in out and not kept:
        out["serving_argv"] = parse_argv([json.loads(a) for a in opts.argv])
    if opts.jit_arch:
        out["jit_toolchain"] = jit_toolchain(opts.jit_arch, os.environ.get("CUDA_HOME"), opts.jit_timeout)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
