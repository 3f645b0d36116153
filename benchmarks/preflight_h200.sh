#!/usr/bin/env bash
# The preflight run on a GPU node (issue 8: one H200 through the device tool; issue 9: eight).
# Run from the repository root on the node. The node needs python3 with torch; sglstack's own
# dependencies are only needed for step 2 (the lent machines got them as carried wheels, see RESULTS.md).
# Outputs go to $OUT (default build/preflight-run): the JSON reports, the raw nvidia-smi / NVML outputs
# (recorded under tests/data/preflight/ for the parser tests) and the log.
set -uo pipefail
OUT=${OUT:-build/preflight-run}
STACK=${STACK:-cu130}
mkdir -p "$OUT/raw"
# NVLink multicast off everywhere (the device README: NVLS can take shared GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
GPUS=$(nvidia-smi -L | grep -c '^GPU')
echo "== node: $(hostname), $GPUS GPU(s), $(date -u +%FT%TZ)"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'

# 1. The node-side module alone (standard library + torch), with the stack's pins and tp = the GPUs here.
echo "== 1: python3 -m sglstack.preflight (tp $GPUS)"
python3 -m sglstack.preflight --stack-name "$STACK" --cuda 13.0.1 --tp "$GPUS" --arch 9.0,10.0,10.3,12.0 \
  --sizes 1M,64M,1G --json "$OUT/preflight-node.json" --raw-dir "$OUT/raw"
echo "exit $?"

# 2. The real task with the stack from stacks.yaml (its smoke.tp is 8: on fewer GPUs 'gpu count' fails).
echo "== 2: invoke preflight --stack $STACK"
COLUMNS=160 python3 -m invoke preflight --stack "$STACK" --json "$OUT/preflight-$STACK.json"
echo "exit $?"
