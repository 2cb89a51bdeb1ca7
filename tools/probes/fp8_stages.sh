#!/usr/bin/env bash
# FP8 leave-one-stage-out timing on the H200 (fa3-gen bench, same run, order rotated): the default
# plan, without the V transpose's work (dbg_no_vt=1), without the softmax (dbg_no_softmax=1), and
# without both; hd 128 and 256 at seqlen 16k, non-causal. Wrong results by design (timing only).
set -uo pipefail
gen=${GEN:-.gpu/fa3-gen}
variants=("" "dbg_no_vt=1" "dbg_no_softmax=1" "dbg_no_vt=1,dbg_no_softmax=1")
for ((r = 0; r < ${FP8_STAGE_ROUNDS:-3}; r++)); do
  for ((i = 0; i < 4; i++)); do
    v=${variants[$(((i + r) % 4))]}
    for hd in 128 256; do
      FA3JIT_PLAN_DEBUG=$v $gen bench --dtype e4m3 --head-dim $hd --non-causal --seqlen 16384 \
        --reps 20 --warmup 5 2>&1 | awk -v v="${v:-default}" -v r=$r 'NR > 1 {print "round", r, v, $0}'
    done
  done
done
