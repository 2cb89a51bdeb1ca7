#!/usr/bin/env bash
# The forward kernel's generated PTX run on the CPU emulator (tools/ctasim) against an fp64
# reference, fresh random inputs each run: the default kernel and the knob variants not yet
# measured on a GPU (xtile, mask_branch) on a few shapes that walk several tiles a CTA (small grids), and two
# planted defects that must fail (a check that cannot fail checks nothing). No GPU needed.
# usage: ctasim.sh FA3GEN
set -uo pipefail
gen=$1
here=$(cd "$(dirname "$0")/.." && pwd)
run=(${CTASIM_PYTHON:-python3} "$here/tools/ctasim/run.py" --gen "$gen")
python3 -c 'import numpy' || { echo "ctasim: numpy is missing (tools/install-deps.sh installs it)"; exit 1; }
rc=0
cases=(
  "--hd 64 --sq 384 --sk 384 --heads 2 --grid 2 --causal --block-m 128"
  "--hd 64 --sq 320 --sk 200 --heads 2 --grid 2 --causal --no-otma"
  "--hd 128 --sq 300 --sk 300 --heads 1 --grid 2 --local 100,0 --fp16"
  "--hd 256 --sq 200 --sk 200 --heads 1 --grid 1 --causal"
)
for knobs in "" "xtile=1" "mask_branch=1"; do
  for c in "${cases[@]}"; do
    out=$("${run[@]}" --knobs "$knobs" $c 2>&1)
    s=$?
    echo "$out" | head -1
    [ $s = 0 ] || { echo "FAILED (exit $s): ${knobs:-default} $c"; echo "$out" | tail -6; rc=1; }
  done
done
# (block_m 192 on 128-key blocks: diagonal tiles hold a masked block inside the loop)
for p in no_s_wait:"" xtile_zero_early:xtile=1 mask_branch_never:mask_branch=1; do
  if "${run[@]}" --knobs "${p#*:}" --hd 64 --sq 384 --sk 384 --heads 2 --grid 2 --causal \
      --plant "${p%%:*}" > /dev/null 2>&1; then
    echo "FAILED: the planted defect ${p%%:*} was not caught"; rc=1
  else
    echo "planted ${p%%:*}: caught"
  fi
done
exit $rc
