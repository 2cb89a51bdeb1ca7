#!/usr/bin/env bash
# fa3-gen check of e4m3 kernels under knob sets before their speed counts (session 28: one loop
# body and merged ends for e4m3's cold JIT, mask_branch=1,merge_ends=1): every head dim causal,
# non-causal and local, varlen, paged (page sizes 64 and 16), split-KV, packed GQA and block_m
# 64 at hd128, several tiles per CTA (batch 4, 16 heads), test_fp8 under the first knob set,
# then racecheck and synccheck of hd128 and hd64 causal. Run on the device after
# tools/gpu-bundle.sh (carry .gpu): bash tools/probes/fp8_knob_check.sh mask_branch=1,merge_ends=1
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
rc=0
[ $# -gt 0 ] || { echo "usage: $0 KNOBS..." >&2; exit 2; }
run() {
  local tag=$1; shift
  printf '%s: ' "$tag"
  timeout 200 "$@" 2>&1 | tail -2 | tr '\n' ' '
  local s=${PIPESTATUS[0]}
  echo
  [ "$s" = 0 ] || { echo "  FAILED (exit $s)"; rc=1; }
}
for k in "$@"; do
  for hd in "64" "96" "128" "192" "192 --head-dim-v 128" "256"; do
    for m in --non-causal --causal --local; do
      run "$k hd$hd e4m3 $m" env FA3JIT_PLAN_DEBUG=$k $g check --head-dim $hd --dtype e4m3 ${m/--non-causal/}
    done
  done
done
k=$1
for layout in "--causal --varlen" "--local --varlen" "--causal --paged 64" "--paged 16" \
              "--causal --split-kv" "--causal --pack-gqa" "--causal --block-m 64"; do
  for hd in 64 128 256; do
    run "$k hd$hd e4m3 $layout" env FA3JIT_PLAN_DEBUG=$k $g check --head-dim $hd --dtype e4m3 $layout
  done
done
for shape in "--head-dim 64 --causal" "--head-dim 128 --causal" "--head-dim 128" "--head-dim 256 --causal"; do
  run "$k e4m3 $shape b4 h16" env FA3JIT_PLAN_DEBUG=$k $g check $shape --dtype e4m3 --quick --batch 4 --heads 16
done
run "$k test_fp8" env FA3JIT_PLAN_DEBUG=$k "$root/.gpu/test_fp8"
for tool in racecheck synccheck; do
  for hd in 64 128; do
    run "$k $tool hd$hd e4m3 causal" env FA3JIT_PLAN_DEBUG=$k compute-sanitizer --tool $tool \
      --error-exitcode 9 $g check --head-dim $hd --dtype e4m3 --causal --seqlen-q 300 --seqlen-k 700
  done
done
echo "fp8_knob_check rc=$rc"
exit $rc
