#!/usr/bin/env bash
# fa3-gen check of a kernel knob set before its speed counts (session 13): every head dim, bf16
# and fp16, non-causal and causal, plus hd128 local, under each KNOBS argument (FA3JIT_PLAN_DEBUG
# syntax); under the first also hd128's varlen, paged, packed-GQA, split-KV and block_m 64
# layouts (session 15), then racecheck and synccheck of hd128 causal. Run on the device after
# tools/gpu-bundle.sh (carry .gpu): bash tools/probes/knob_check.sh pv_wait_fence=1 ...
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH=$root/.gpu FA3JIT_LIBRARY=$(ls "$root"/.gpu/libfa3jit.so* | head -1)
export FA3JIT_CACHE_DIR=${FA3JIT_CACHE_DIR:-/tmp/fa3c}
g=$root/.gpu/fa3-gen rc=0
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
for t in racecheck synccheck; do
  run "$t $1" env FA3JIT_PLAN_DEBUG=$1 compute-sanitizer --tool $t $g check --head-dim 128 --causal --quick
done
exit $rc
