#!/usr/bin/env bash
# fa3-gen check of GQA launches that take the tile counter (session 22): two shapes where the
# runtime's rule cuts the pairs into sections of 2 and 8 KV heads (hd256 causal 16k GQA 8, hd128
# causal 8k GQA 2), then the counter forced (dyn_sched=2) on GQA/MQA causal and local shapes at
# every head dim. Run on the device after SLIM=1 tools/gpu-bundle.sh (carry .gpu), from the
# project root: bash tools/probes/gqa_check.sh
set -u
source "$(dirname "$0")/gpu_env.sh"
rc=0
run() { printf '%s: ' "$*"; timeout 100 "$@" 2>&1 | tail -1; [ "${PIPESTATUS[0]}" = 0 ] || rc=1; }
# the rule's own choice: GQA 8, 64 pairs, hd256 16k causal (2 KV heads a section, counter)
run $g check --head-dim 256 --causal --batch 4 --heads 16 --heads-k 2 --seqlen-q 16384
# GQA 2 at hd128, 16 KV heads... 4 MiB a KV head: 8 KV heads (16 pairs) a section, counter
run $g check --head-dim 128 --causal --batch 2 --heads 32 --heads-k 16 --seqlen-q 8192
# the counter forced on GQA shapes, masks and dtypes
for hd in 64 128 256; do
  FA3JIT_PLAN_DEBUG=dyn_sched=2 run $g check --head-dim $hd --causal --batch 3 --heads 8 --heads-k 2 --seqlen-q 3000
  FA3JIT_PLAN_DEBUG=dyn_sched=2 run $g check --head-dim $hd --local --dtype fp16 --batch 3 --heads 6 --heads-k 1 --seqlen-q 2000 --seqlen-k 2500
done
echo "rc=$rc"; exit $rc
