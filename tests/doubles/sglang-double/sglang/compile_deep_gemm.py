"""`python3 -m sglang.compile_deep_gemm SERVER_ARGS [--timeout N]`: as SGLang's, the server's own flags plus
--timeout; the double "compiles" one DeepGEMM kernel file per SGLANG_DOUBLE_KERNELS into SGLANG_DG_CACHE_DIR."""

import argparse
import hashlib
import os
import sys

from sglang.srt.server_args import ServerArgs

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="compile_deep_gemm")
    ServerArgs.add_cli_args(parser)
    parser.add_argument("--timeout", type=int, default=3600)
    args = vars(parser.parse_args(sys.argv[1:]))
    folder = os.environ.get("SGLANG_DG_CACHE_DIR")
    if folder:
        for i in range(int(os.environ.get("SGLANG_DOUBLE_KERNELS", "0"))):
            name = hashlib.sha256(f"{args['model_path']}|{args['tp_size']}|dg|{i}".encode()).hexdigest()[:16]
            os.makedirs(os.path.join(folder, "cache", name), exist_ok=True)
            with open(os.path.join(folder, "cache", name, "kernel.cubin"), "wb") as fh:
                fh.write(b"deepgemm" * 16)
    print("DeepGEMM Kernels compilation finished successfully.", flush=True)
