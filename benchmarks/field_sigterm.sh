#!/bin/bash
# On the GPU node, after field_go.sh's unpacking: start the field smoke, SIGTERM it while the real SGLang
# server (launch_server, its scheduler and detokenizer) holds the GPU, then list what is left of it.
#   bash field_sigterm.sh RUN_DIR SITE OUT_FILE
# Known flaw (benchmarks/RESULTS.md, "Field run"): it waits for the first GPU process, which is the kernel_load
# probe, not the server; wait for /health_generate instead.
R=$1 SITE=$2 OUT_FILE=$3
cd "$R" && PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 python3 benchmarks/field_run.py --python-env /opt/torch/.venv \
  --site "$SITE" --model "$R/model/target" --draft "$R/model/draft" --out /tmp/field-sigterm --timeout 200 \
  > /tmp/field-sigterm.log 2>&1 &
driver=$!
for _ in $(seq 1 180); do
  apps=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)
  [ "$apps" -gt 0 ] && break
  sleep 1
done
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
