#!/usr/bin/env bash
# Tile shapes of one config on the H200, same run, order rotated each round: fa3-gen bench
# (TFLOP/s, CUDA events, back-to-back calls) of each variant's extra arguments at each shape,
# then the median per variant and its ratio to the first variant. fa3-gen bench reads higher
# than the graph-replayed compare.py (docs/notes.md, Measuring): compare variants, not libraries.
#   TILE_SHAPES="64:512:--causal 64:1024:--causal" (head_dim:seqlen:mask flags, ',' for spaces)
#   TILE_VARIANTS="--block-m,128;--block-m,128,--block-n,64" TILE_ROUNDS=3 TILE_DTYPE=bf16
#   (a variant's tokens of the form +knob=v set FA3JIT_PLAN_DEBUG for it: "--block-m,128,+diag_half=1")
#   bash tools/probes/tile_ab.sh   (after tools/gpu-bundle.sh, .gpu carried)
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
gen=${GEN:-$g}
IFS=';' read -r -a variants <<<"${TILE_VARIANTS:?TILE_VARIANTS unset}"
read -r -a shapes <<<"${TILE_SHAPES:?TILE_SHAPES unset}"
rounds=${TILE_ROUNDS:-3} dtype=${TILE_DTYPE:-bf16}
log=$(mktemp) rc=0
for ((r = 0; r < rounds; r++)); do
  for sh in "${shapes[@]}"; do
    IFS=: read -r hd s mask <<<"$sh"
    n=${#variants[@]}
    for ((i = 0; i < n; i++)); do
      j=$(((i + r) % n)) v=${variants[$(((i + r) % n))]} args= knobs=
      IFS=, read -r -a toks <<<"$v"
      for tk in "${toks[@]}"; do
        case $tk in +*) knobs+=${knobs:+,}${tk#+} ;; *) args+=" $tk" ;; esac
      done
      # shellcheck disable=SC2086
      t=$(FA3JIT_PLAN_DEBUG=$knobs $gen bench --dtype "$dtype" --head-dim "$hd" --seqlen "$s" ${mask//,/ } $args \
            --reps 30 --warmup 10 2>&1 | awk 'NR > 1 && $NF ~ /^[0-9.]+$/ {print $NF}' | tail -1)
      [ -n "$t" ] || { echo "variant '$v' at $sh: no result"; rc=1; continue; }
      echo "$sh $j $t" >> "$log"
    done
  done
done
for sh in "${shapes[@]}"; do
  line="$sh:"
  base=
  for ((j = 0; j < ${#variants[@]}; j++)); do
    m=$(awk -v s="$sh" -v j="$j" '$1 == s && $2 == j {print $3}' "$log" | sort -g |
        awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}')
    [ -n "$m" ] || continue
    [ -n "$base" ] || base=$m
    line+=" [${variants[$j]}] $m ($(awk -v a="$m" -v b="$base" 'BEGIN {printf "%.3f", a / b}'))"
  done
  echo "$line"
done
rm -f "$log"
exit $rc
