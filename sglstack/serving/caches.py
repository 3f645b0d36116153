"""Where a server's kernel caches go: every JIT compiler SGLang runs writes into a folder an environment
variable names, and the serving spec points all of them at one folder, so that one folder is the whole cache
(`kernelcache` packs, keys and restores it; smoke, compose and k8s serve with these variables).

| variable | what fills it |
|---|---|
| TRITON_CACHE_DIR | Triton kernels (SGLang's Triton attention and MoE kernels, torch.compile's) |
| TORCHINDUCTOR_CACHE_DIR | TorchInductor (torch.compile, `--enable-torch-compile`) |
| FLASHINFER_WORKSPACE_BASE | FlashInfer's JIT (`.cache/flashinfer/<version>/<arch>/cached_ops`), its cubins |
| SGLANG_DG_CACHE_DIR, DG_JIT_CACHE_DIR | DeepGEMM's JIT (SGLang sets the second from the first) |
| TVM_FFI_CACHE_DIR | SGLang's own JIT kernels (`sglang/kernels/jit`, `sgl_kernel_jit_*`) |
| SGLANG_CACHE_DIR | SGLang's FlashInfer autotune results |
| CUDA_CACHE_PATH | the driver's PTX JIT cache (ComputeCache) |
| XDG_CACHE_HOME | anything else that follows the XDG rule |
"""

from __future__ import annotations

import posixpath
from dataclasses import replace

from .spec import ServingSpec

# variable -> the subfolder of the one cache folder it names
CACHE_DIRS: dict[str, str] = {
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "SGLANG_DG_CACHE_DIR": "deep_gemm",
    "DG_JIT_CACHE_DIR": "deep_gemm",
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
    "SGLANG_CACHE_DIR": "sglang",
    "CUDA_CACHE_PATH": "nv-compute-cache",
    "XDG_CACHE_HOME": "xdg",
}
# Where a container keeps it: compose and k8s mount the restored volume here, the docker smoke binds it here.
CONTAINER_CACHE_ROOT = "/root/.cache/sglstack-kernels"


def cache_environment(root: str) -> dict[str, str]:
    """The variables that point every kernel cache of a server at subfolders of `root`."""
    return {name: posixpath.join(root, sub) for name, sub in CACHE_DIRS.items()}


# SGLang's DeepGEMM pre-compiler: the server's own arguments plus --timeout (sglang/compile_deep_gemm.py).
COMPILE_DEEP_GEMM = "sglang.compile_deep_gemm"


def compile_deep_gemm_argv(argv: list[str] | tuple[str, ...], timeout_s: float) -> list[str]:
    """The serving argv (`PYTHON -m sglang.launch_server ARGS`) as `PYTHON -m sglang.compile_deep_gemm ARGS
    --timeout N`: the same flags, so the same GEMM shapes are compiled."""
    words = list(argv)
    if words[1:3] != ["-m", "sglang.launch_server"]:
        raise ValueError(f"not a serving argv: {' '.join(words[:3])}")
    return [words[0], "-m", COMPILE_DEEP_GEMM, *words[3:], "--timeout", str(max(1, int(timeout_s)))]


def with_kernel_caches(spec: ServingSpec, root: str = CONTAINER_CACHE_ROOT) -> ServingSpec:
    """`spec` with every kernel cache pointed under `root` (its own values for these variables replaced)."""
    env = {**dict(spec.env), **cache_environment(root)}
    return replace(spec, env=tuple(sorted(env.items())))
