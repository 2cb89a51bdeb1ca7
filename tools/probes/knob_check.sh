#!/usr/bin/env bash
# fa3-gen check of a kernel knob set before its speed counts (session 13): every head dim, bf16
# and fp16, non-causal and causal, plus hd128 local, under each KNOBS argument (FA3JIT_PLAN_DEBUG
# syntax); under the first also hd128's varlen, paged, packed-GQA, split-KV and block_m 64
# layouts (session 15), then several tiles per CTA (batch 4, 16 heads: seqlen 1000 gives 384-512
# tiles over 132 CTAs, among them tiles without key blocks at seqlen_q 1000 / seqlen_k 63: the
# tile loop's joins), then racecheck and synccheck of hd128 causal. Run on the
# device after
# tools/gpu-bundle.sh (carry .gpu): bash tools/probes/knob_check.sh pv_wait_fence=1 ...
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
rc=0
[ $# -gt 0 ] || { echo "usage: $0 KNOBS..." >&2; exit 2; }
run() {
  printf '%s: ' "$1"; shift
  timeout 200 "$@" 2>&1 | tail -2 | tr '\n' ' '
  local s=${PIPESTATUS[0]}
  echo
  [ "$s" = 0 ] || { echo "  FAILED (exit $s)"; rc=1; }
}
for k in "$@"; do
  for hd in 64 128 256; do
    for dt in bf16 fp16; do
      for m in --non-causal --causal; do
        run "$k hd$hd $dt $m" env FA3JIT_PLAN_DEBUG=$k $g check --head-dim $hd --dtype $dt ${m/--non-causal/}
      done
    done
  done
  run "$k hd128 local" env FA3JIT_PLAN_DEBUG=$k $g check --head-dim 128 --local
done
for layout in "--causal --varlen" "--paged 64" "--pack-gqa" "--causal --split-kv" "--block-m 64"; do
  run "$1 hd128 $layout" env FA3JIT_PLAN_DEBUG=$1 $g check --head-dim 128 $layout
done
for shape in "--head-dim 64 --causal" "--head-dim 64 --causal --block-m 128" "--head-dim 64 --local" \
             "--head-dim 128" "--head-dim 128 --causal --dtype fp16"; do
  run "$1 $shape b4 h16" env FA3JIT_PLAN_DEBUG=$1 $g check $shape --quick --batch 4 --heads 16
done
run "$1 hd128 causal 2048 b4 h16" env FA3JIT_PLAN_DEBUG=$1 $g check --head-dim 128 --causal \
  --batch 4 --heads 16 --seqlen-q 2048 --seqlen-k 2048
# --error-exitcode: a hazard or error fails the run (without it compute-sanitizer exits 0 and the
# summary line alone told: session 26, tile_bcast's two hazards passed as rc 0); the first
# report's lines are kept in /tmp/knob_check_<tool>_<case>.txt
san() {
  local t=$1 tag=$2; shift 2
  run "$t $1 $tag" env FA3JIT_PLAN_DEBUG=$1 compute-sanitizer --tool $t --error-exitcode 9 \
    --print-limit 4 --log-file "/tmp/knob_check_${t}_${tag// /_}.txt" $g check "${@:2}"
  grep -m 12 -E "SUMMARY|Error|Warning|hazard|at .*0x" "/tmp/knob_check_${t}_${tag// /_}.txt" || true
}
for t in racecheck synccheck; do
  san $t one "$1" --head-dim 128 --causal --quick
  san $t "two tiles a CTA" "$1" --head-dim 64 --causal --block-m 128 --batch 4 --heads 16 \
    --seqlen-q 512 --seqlen-k 512
done
exit $rc
