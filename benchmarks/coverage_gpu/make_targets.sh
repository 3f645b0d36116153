#!/usr/bin/env bash
# Compile the one-kernel fixture (tests/data/coverage/kernel.ptx.in) once per CUDA target, as a bare
# cubin (SASS, with ptxas) or as PTX text, with the `nvidia-cuda-nvcc` wheel from PyPI (CUDA 13.0).
# load_on_gpu.py then loads and runs each one on a real GPU. Usage: make_targets.sh OUT_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$here/../../tests/data/coverage/kernel.ptx.in"
out="$1"
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$tmp/nvcc" "nvidia-cuda-nvcc==13.0.88"
export PATH="$tmp/nvcc/nvidia/cu13/bin:$PATH"
for target in sm_80 sm_86 sm_89 sm_90 sm_90a sm_100 sm_100a sm_100f sm_103 sm_103a sm_103f sm_120 sm_120a sm_120f; do
  sed "s/@TARGET@/$target/" "$src" > "$out/${target/sm_/compute_}.ptx"
  ptxas -arch="$target" "$out/${target/sm_/compute_}.ptx" -o "$out/$target.cubin"
done
ls "$out"
