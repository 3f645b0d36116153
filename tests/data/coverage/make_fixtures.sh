#!/usr/bin/env bash
# Rebuild the tiny CUDA fixtures of tests/e2e/test_coverage_fixtures.py (a few KB each, committed).
#
# Device code: kernel.ptx.in, compiled by nvcc/ptxas/fatbinary from the `nvidia-cuda-nvcc` wheel on PyPI
# (CUDA 13.0, the cu130 stack's toolkit). Host side: the system's gcc wraps each fatbin into a shared
# object (wrap_fatbin.S), as nvcc's own host code does. One fixture per compatibility rule:
#   sm80.so               SASS sm_80                   same major, minor >= 0: 8.0, 8.6 native; 9.0 missing
#   sm80_compute80.so     SASS sm_80 + PTX compute_80  9.0, 12.0 get the PTX (JIT)
#   sm90a.so              SASS sm_90a                  `a`: 9.0 only
#   compute90.so          PTX compute_90 only          9.0 and newer: ptx; 8.x missing
#   sm100a_compute100a.so SASS sm_100a + PTX 100a      `a` SASS and `a` PTX: 10.0 only
#   sm100f_compute100f.so SASS sm_100f + PTX 100f      family: 10.0, 10.3; not 11.0 or 12.0
#   sm100f.cubin, sm103a.cubin, sm120a.cubin
#                         bare cubins, as flashinfer-cubin ships them (cuobjdump names sm_100f SASS "sm_100":
#                         family SASS runs exactly where plain SASS does)
#   host_only.so          no device code
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
NVCC_WHEEL="nvidia-cuda-nvcc==13.0.88"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$tmp/nvcc" "$NVCC_WHEEL"
export PATH="$tmp/nvcc/nvidia/cu13/bin:$PATH"

ptx() {  # ptx TARGET -> $tmp/TARGET.ptx
  sed "s/@TARGET@/$1/" "$here/kernel.ptx.in" > "$tmp/$1.ptx"
}

shared_object() {  # shared_object NAME PTX_TARGET GENCODE
  local name="$1" target="$2" gencode="$3"
  ptx "$target"
  nvcc -fatbin -gencode "$gencode" "$tmp/$target.ptx" -o "$tmp/$name.fatbin"
  gcc -shared -nostdlib -Wl,--build-id=none -DFATBIN="\"$tmp/$name.fatbin\"" "$here/wrap_fatbin.S" \
    -o "$here/$name.so"
  strip "$here/$name.so"
}

shared_object sm80               sm_80   "arch=compute_80,code=sm_80"
shared_object sm80_compute80     sm_80   "arch=compute_80,code=[sm_80,compute_80]"
shared_object sm90a              sm_90a  "arch=compute_90a,code=sm_90a"
shared_object compute90          sm_90   "arch=compute_90,code=compute_90"
shared_object sm100a_compute100a sm_100a "arch=compute_100a,code=[sm_100a,compute_100a]"
shared_object sm100f_compute100f sm_100f "arch=compute_100f,code=[sm_100f,compute_100f]"

for target in sm_100f sm_103a sm_120a; do
  ptx "$target"
  ptxas -arch="$target" "$tmp/$target.ptx" -o "$here/${target/_/}.cubin"
done

gcc -shared -nostdlib -Wl,--build-id=none "$here/host_only.c" -o "$here/host_only.so"
strip "$here/host_only.so"

ls -l "$here"/*.so "$here"/*.cubin
