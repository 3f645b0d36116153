#!/bin/bash
# The last device call of the field run (issue 28; benchmarks/RESULTS.md, "Field run"): join the carried parts,
# unpack the packages the node lacks, put the two pinned wheels over the node's versions, run the field smoke.
#
# Carried before, one device call each, made back to back (the machine goes back 30 s after a call):
#   $HOME/g28/part-00 ...                 (benchmarks/field_carry.sh; the last part comes with the run's call)
#   $HOME/g28/tf/*.whl                    (transformers 5.12.1, tokenizers 0.22.2)
#   $HOME/g28/run/ = this script as go.sh, benchmarks/field_run.py, sglstack/, parts.sha256 and
#                    model/{target,draft} (benchmarks/field_model.py OUT)
# Then: cp LAST_PART $HOME/g28/ && bash $HOME/g28/run/go.sh [field_run.py options]   (results under $OUT)
set -u
R=$(cd "$(dirname "$0")" && pwd)
# A second run on the same machine (it stays warm 30 s after a call) finds the packages already unpacked.
if [ ! -d $HOME/site/sglang ]; then
cd $HOME/g28 && cat part-0* > site.tar.gz && sha256sum site.tar.gz part-0* > got.sha256
diff <(sort "$R/parts.sha256" | awk '{print $1}' | sort) <(awk '{print $1}' got.sha256 | sort) && echo "parts: sha256 ok" || echo "parts: SHA256 MISMATCH"
rm -f part-0*
mkdir -p $HOME/site && tar -C $HOME/site -xzf site.tar.gz && rm -f site.tar.gz
# SGLang 0.5.17 pins transformers 5.12.1 (the node's 5.17 already registers 'qwen3_asr', which SGLang registers
# itself), and transformers 5.12.1 wants tokenizers <= 0.23.0 (the node has 0.23.2): both travel as wheels.
for w in $HOME/g28/tf/*.whl; do python3 -m zipfile -e "$w" $HOME/site/; echo "unpacked $(basename "$w")"; done
fi
du -sh $HOME/site
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$R" && PYTHONPATH=$HOME/site PYTHONUNBUFFERED=1 timeout 540 python3 benchmarks/field_run.py --python-env /opt/torch/.venv --site $HOME/site \
  --model "$R/model/target" --draft "$R/model/draft" --out "$OUT" --timeout 200 "$@"
echo "field_run exit $?"
