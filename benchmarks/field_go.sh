#!/bin/bash
# The last device call of the field run (issues 28, 40; benchmarks/RESULTS.md, "Field run" and the H200 warm start
# of the sixth session), from the repository root on the GPU node: join the carried parts, unpack the packages
# the node lacks, put the two pinned wheels over the node's versions, compile their bytecode as an image build
# does, run the field smoke. Results (report, logs, the cache store, profiler samples) under $OUT.
#
# Carried before, one device call each, made back to back (the machine goes back 30 s after a call), each
# `cp .fieldcarry/part-0N $HOME/g28/` with `carry: [.fieldcarry/part-0N]` (the first also .fieldcarry/tf ->
# $HOME/g28/tf/); .fieldcarry/ is what benchmarks/field_carry.sh made (ignored by git), plus
# .fieldcarry/model (benchmarks/field_model.py --seed 4242 --draft constructed OUT).
# This call carries .fieldcarry/{part-03,model,parts.sha256}:
#   cp .fieldcarry/part-03 $HOME/g28/ && bash benchmarks/field_go.sh --warm-start --no-probes
# FIELD_PROFILE=1: benchmarks/field_profile/sitecustomize.py samples every server process (~/prof -> $OUT/prof).
set -u
R=$(pwd)
if [ ! -d $HOME/site/sglang ]; then
  (cd $HOME/g28 && cat part-0* > site.tar.gz && grep site.tar.gz "$R/.fieldcarry/parts.sha256" | sha256sum -c) || exit 1
  mkdir -p $HOME/site && tar -C $HOME/site -xzf $HOME/g28/site.tar.gz && rm -f $HOME/g28/site.tar.gz $HOME/g28/part-0*
  # SGLang 0.5.17 pins transformers 5.12.1 (the node's 5.17 already registers 'qwen3_asr', which SGLang registers
  # itself), and transformers 5.12.1 wants tokenizers <= 0.23.0 (the node has 0.23.2): both travel as wheels.
  for w in $HOME/g28/tf/*.whl; do python3 -m zipfile -e "$w" $HOME/site/; echo "unpacked $(basename "$w")"; done
  # An image's build compiles bytecode; the carried packages come without it (the cold start would pay it).
  timeout 90 /opt/torch/.venv/bin/python3 -m compileall -q -j 0 $HOME/site > /dev/null 2>&1
fi
if [ "${FIELD_PROFILE:-0}" = 1 ]; then
  cp benchmarks/field_profile/sitecustomize.py $HOME/site/ && mkdir -p $HOME/prof
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/go.log
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PYTHONPATH=$HOME/site PYTHONUNBUFFERED=1 timeout 500 python3 benchmarks/field_run.py --python-env /opt/torch/.venv \
  --site $HOME/site --model "$R/.fieldcarry/model/target" --draft "$R/.fieldcarry/model/draft" --out "$OUT" \
  --timeout 200 "$@" >> $OUT/go.log 2>&1
echo "field_run exit $?"
grep "smoke:\|field:" $OUT/go.log | tail -20
[ -d $HOME/prof ] && cp -r $HOME/prof $OUT/prof
(cd $OUT && tar czf /tmp/all.tgz . && find $OUT -mindepth 1 -delete && mv /tmp/all.tgz $OUT/)  # 8 files come back at most
