#!/bin/bash
# On the GPU node, after field_go.sh's unpacking: start the field smoke, SIGTERM it while the real SGLang
# server (launch_server, its scheduler and detokenizer) holds the GPU, then list what is left of it.
#   bash field_sigterm.sh RUN_DIR SITE OUT_FILE
# The run of 2026-12-03 waited for the first GPU process, which was the kernel_load probe, not the server
# (benchmarks/RESULTS.md, "Field run"); it now waits for the baseline server's "ready" line (not yet run so).
R=$1 SITE=$2 OUT_FILE=$3
cd "$R" && PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 python3 benchmarks/field_run.py --python-env /opt/torch/.venv \
  --site "$SITE" --model "$R/model/target" --draft "$R/model/draft" --out /tmp/field-sigterm --timeout 200 \
  > /tmp/field-sigterm.log 2>&1 &
driver=$!
for _ in $(seq 1 300); do
  grep -qs "fired up and ready" /tmp/field-sigterm/report.baseline.log && break
  sleep 1
done
apps=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)
{
  echo "== before SIGTERM: GPU processes $apps; sglang processes:"
  ps -eo pid,pgid,comm,args | grep -E "sglang|python3 -m sglang" | grep -v grep | cut -c1-150
  kill -TERM "$driver"; wait "$driver"; echo "== the field smoke exited $?"
  sleep 2
  echo "== after: GPU processes $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l); sglang processes:"
  ps -eo pid,pgid,stat,comm,args | grep -E "sglang" | grep -v grep | cut -c1-150
  echo "== end; the driver's last lines:"; tail -4 /tmp/field-sigterm.log
} > "$OUT_FILE" 2>&1
cat "$OUT_FILE"
