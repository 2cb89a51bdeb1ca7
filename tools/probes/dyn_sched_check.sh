#!/usr/bin/env bash
# The dynamic tile scheduler's GPU checks (session 12): fa3-gen check of the masked configs under
# each dyn_sched knob value (2: a counter at every launch, 3: the static order through the
# hand-over, 0: the kernel before it), then racecheck and synccheck. Run on the device after
# tools/gpu-bundle.sh (carry .gpu): bash tools/probes/dyn_sched_check.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH=$root/.gpu FA3JIT_LIBRARY=$(ls "$root"/.gpu/libfa3jit.so* | head -1)
export FA3JIT_CACHE_DIR=${FA3JIT_CACHE_DIR:-/tmp/fa3c}
g=$root/.gpu/fa3-gen rc=0
run() {
  printf '%s: ' "$1"; shift
  timeout 200 "$@" 2>&1 | tail -2 | tr '\n' ' '
  local s=${PIPESTATUS[0]}
  echo
  [ "$s" = 0 ] || { echo "  FAILED (exit $s)"; rc=1; }
}
for k in 0 2 3; do
  for hd in 64 128 256; do
    for dt in bf16 fp16; do
      run "dyn_sched=$k hd$hd $dt causal" env FA3JIT_PLAN_DEBUG=dyn_sched=$k $g check --head-dim $hd --dtype $dt --causal
    done
  done
  run "dyn_sched=$k hd128 local" env FA3JIT_PLAN_DEBUG=dyn_sched=$k $g check --head-dim 128 --local
done
for t in racecheck synccheck; do
  run "$t dyn_sched=2" env FA3JIT_PLAN_DEBUG=dyn_sched=2 compute-sanitizer --tool $t $g check --head-dim 128 --causal --quick
done
exit $rc
