#!/usr/bin/env bash
# The smoke pipeline on this CPU machine against the SGLang test double (tests/doubles/sglang-double),
# with the seed's figures scaled 5x: the measured speedup must show the gate's arithmetic end to end.
# Prints, per scenario, the verdict and the measured baseline / EAGLE-3 tok/s and their ratio.
set -uo pipefail
IMAGE=sglstack-test/sglang-double:latest-test
DOCKER=${SGLSTACK_DOCKER_CLI:-/usr/bin/docker}
DOCKER_BUILDKIT=1 "$DOCKER" build -q -t "$IMAGE" tests/doubles/sglang-double >/dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
run() {  # name, extra args...
  local name=$1; shift
  python3 -m invoke smoke --image "$IMAGE" --model moonshotai/Kimi-K2.5 --draft-model AQ-MedAI/Kimi-K25-eagle3 \
    --tp 1 --gpus 0 --timeout 60 --num-prompts 8 --max-new-tokens 32 --concurrency 4 --no-history \
    --report "$OUT/$name.json" "$@" >/dev/null 2>&1
  python3 - "$OUT/$name.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
b, e = r["baseline"]["tokens_per_s"], r["eagle3"]["tokens_per_s"]
print(f"{sys.argv[2]:<28} {r['verdict']:<5} baseline {b:7.1f} tok/s  EAGLE-3 {e:7.1f} tok/s  "
      f"ratio {e / b if b else 0:.2f}  accept {r['accept_length'] or 0:.2f}  ttft {r['baseline']['ttft_s']:.3f}s")
PY
}
run "seed 82 vs 59 (x5)" --env SGLANG_DOUBLE_TOKENS_PER_S=410 --env SGLANG_DOUBLE_SPEC_SPEEDUP=0.72
run "after CUDA 13: 82 vs 95 (x5)" --env SGLANG_DOUBLE_TOKENS_PER_S=410 --env SGLANG_DOUBLE_SPEC_SPEEDUP=1.16
