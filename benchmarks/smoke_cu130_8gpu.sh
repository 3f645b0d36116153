#!/usr/bin/env bash
# The real EAGLE-3 smoke of the cu130 stack: Kimi K2.5 + AQ-MedAI/Kimi-K25-eagle3, tp 8, on one 8-GPU node.
#
# Run from the repository root on a machine that can reach the node's Docker engine (or on the node itself).
#   IMAGE        the image to test: the candidate digest from `invoke build --stack cu130 --push`
#                (repo@sha256:...; the node pulls it), or a local tag on the node
#   DOCKER_HOST  the node's engine, e.g. ssh://user@gpu-node (default: the local engine)
#   HF_CACHE     the node's Hugging Face cache holding both models (about 600 GB for Kimi K2.5)
#   HF_TOKEN     passed into the containers from this environment, never printed
# Outputs: build/cu130/smoke-report.{json,md,png}; the run is appended to build/cu130/smoke-history.jsonl.
set -euo pipefail
: "${IMAGE:?set IMAGE to the image under test (repo@sha256:... or a tag on the node)}"
HF_CACHE=${HF_CACHE:-$HOME/.cache/huggingface}
OUT=${OUT:-build/cu130}
mkdir -p "$OUT"

# Every value not given here comes from the cu130 entry of stacks.yaml (serving: tp 8, gpus 8; smoke: 256 new tokens,
# 8 prompts, concurrency 8, timeout 3600 s, gates min_speedup 1.0, min_accept_length 2.0, min_agreement 0.9,
# max_regression 0.05). The two launches it runs, in containers with --ipc host, --shm-size 32g,
# memlock -1, stack 64 MiB and 8 GPUs:
#   python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp-size 8 --host 0.0.0.0 --port 30000 \
#       --trust-remote-code
#   python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp-size 8 --host 0.0.0.0 --port 30000 \
#       --speculative-algorithm EAGLE3 --speculative-draft-model-path AQ-MedAI/Kimi-K25-eagle3 \
#       --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --trust-remote-code
python3 -m invoke smoke --stack cu130 --image "$IMAGE" \
  ${DOCKER_HOST:+--docker-host "$DOCKER_HOST"} \
  --mount "$HF_CACHE:/root/.cache/huggingface" \
  --report "$OUT/smoke-report.json"
# exit 0: every gate passed; 1: a gate failed (each named in the report's "failures"); 130: interrupted.
