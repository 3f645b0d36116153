#!/bin/bash
# Build what the field run carries to a GPU node that has Python 3.12 and torch but no network (issue 28):
# the packages of the field lock that the node lacks, installed for cp312/manylinux_2_34 x86_64, with the
# extension files the chosen backends never import taken out (whole files; no binary is edited), as one
# tar.gz split into parts that each fit one device call (64 MiB with the working tree).
#
#   benchmarks/field_carry.sh WORK_DIR NODE_FREEZE   (NODE_FREEZE: `python3 -m pip list --format=freeze` there)
#
# Leaves WORK_DIR/part-00.. (join with cat, unpack with tar -xzf into the folder put first on PYTHONPATH),
# WORK_DIR/parts.sha256 and WORK_DIR/tf/*.whl (the two pinned packages whose node versions break SGLang).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$1 freeze=$2
lock="$here/field/sglang-0.5.17-py312-manylinux_2_34.lock.txt"
mkdir -p "$work/whl" "$work/tf"
plat=(--only-binary=:all: --no-deps --python-version 3.12 --implementation cp)
for n in 39 35 34 31 28 27 24 17 12; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
plat+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform any)

# 1. What the node lacks: every locked name the node's freeze does not list (versions the node has are used).
python3 - "$lock" "$freeze" > "$work/missing.txt" <<'PY'
import re, sys
norm = lambda n: n.lower().replace("_", "-")
node = {norm(l.split("==")[0]) for l in open(sys.argv[2]) if "==" in l}
for line in open(sys.argv[1]):
    m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
    if m and norm(m.group(1)) not in node:
        print(f"{m.group(1)}=={m.group(2)}")
PY
echo "docker==7.1.0" >> "$work/missing.txt"   # sglstack's own smoke code runs there too (pydantic is in the lock)

# 2. Left out whole (see benchmarks/RESULTS.md, "Field run"): never imported by a Llama + EAGLE-3 server on
#    sm_90 with the Triton attention backend.
leave_out='^(tokenspeed[-_]triton|tokenspeed[-_]mla|nvidia[-_]cutlass[-_]dsl[-_]libs[-_]cu1[23]|nvidia[-_]nvvm|nvidia[-_]cuda[-_]nvcc|nvidia[-_]cuda[-_]crt|nvidia[-_]cuda[-_]cccl|nvidia[-_]cuda[-_]nvdisasm|tilelang|z3[-_]solver|nvidia[-_]mathdx)=='
grep -Eiv "$leave_out" "$work/missing.txt" > "$work/carry.txt"
python3 -m pip download -q "${plat[@]}" -d "$work/whl" -r "$work/carry.txt"
python3 -m pip download -q "${plat[@]}" -d "$work/tf" transformers==5.12.1 tokenizers==0.22.2

# 3. Installed for the node's interpreter, then the extension files no chosen backend loads are removed.
rm -rf "$work/site"
uv pip install -q --no-deps --no-index --target "$work/site" --python-version 3.12 \
  --python-platform x86_64-manylinux_2_34 "$work"/whl/*.whl
rm -v "$work/site/sgl_kernel/flash_ops.abi3.so" "$work/site/sgl_kernel/flashmla_ops.abi3.so" \
  "$work/site/sgl_kernel"/infllm_ops*.so "$work/site/xgrammar/lib/libxgrammar.a"
rm -rv "$work/site/sgl_kernel/sm100"

# 4. One archive, four parts of under 36 MiB (each travels with the working tree and the model in one call).
tar -C "$work/site" -cf - . | gzip -6 > "$work/site.tar.gz"
(cd "$work" && split -n 4 -d site.tar.gz part- && sha256sum site.tar.gz part-* > parts.sha256)
ls -l "$work"/part-* "$work"/tf
