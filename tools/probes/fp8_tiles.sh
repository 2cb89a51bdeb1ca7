#!/usr/bin/env bash
# FP8 tile variants on the H200, same run, order rotated each round: fa3-gen bench (TFLOP/s) of
# each "hd bn stages" variant at seqlen 4096 and 16384, non-causal and causal.
#   FP8_TILE_VARIANTS="128,128,2 128,192,2 ..." FP8_TILE_ROUNDS=3 bash tools/probes/fp8_tiles.sh
set -uo pipefail
gen=${GEN:-.gpu/fa3-gen}
variants=(${FP8_TILE_VARIANTS:-64,128,2 64,192,2 64,256,2 128,128,2 128,128,3 128,192,2 256,64,2 256,64,3})
rounds=${FP8_TILE_ROUNDS:-3}
for ((r = 0; r < rounds; r++)); do
  n=${#variants[@]}
  for ((i = 0; i < n; i++)); do
    v=${variants[$(((i + r) % n))]}
    IFS=, read -r hd bn st <<<"$v"
    for s in 4096 16384; do
      $gen bench --dtype e4m3 --head-dim "$hd" --block-n "$bn" --stages "$st" --both --seqlen "$s" \
        --reps 20 --warmup 5 2>&1 | awk -v v="$v" -v r="$r" 'NR > 1 {print "round", r, "variant", v, $0}'
    done
  done
done
