#!/usr/bin/env bash
# The CPU emulator's cases (run.py) under each KNOBS argument ("" = the default kernel): dense
# bf16/fp16, every mask, several tiles a CTA (small grids), tiles without key blocks between
# tiles with them (seqlen_q > seqlen_k, causal), O by TMA and from registers, varlen, split-KV
# (and its decode tile), hd256, GQA, packed GQA and paged K/V; then the planted defects, each of which must fail. No GPU
# needed; about 4 minutes a knob set on 2 cores.
#   bash tools/ctasim/suite.sh "" mask_branch=0 mask_branch=1
# CTASIM_FLAGS adds run.py flags to every case (e.g. --poison: registers read before any write
# hold random bits, and each such read is listed).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run="python3 $here/run.py"
rc=0
cases=(
  "--hd 64 --sq 512 --sk 512 --heads 2 --grid 2 --causal --block-m 128"
  "--hd 64 --sq 400 --sk 400 --batch 2 --heads 2 --grid 3 --causal --no-otma"
  "--hd 64 --sq 1000 --sk 500 --heads 2 --grid 3 --causal"
  "--hd 64 --sq 1000 --sk 63 --heads 2 --grid 2 --causal --block-m 128"
  "--hd 64 --sq 63 --sk 1000 --heads 3 --grid 2 --causal"
  "--hd 64 --sq 700 --sk 700 --heads 2 --grid 3 --local 100,20"
  "--hd 64 --sq 300 --sk 300 --heads 2 --grid 2 --fp16"
  "--hd 128 --sq 384 --sk 500 --heads 2 --grid 2 --causal --fp16"
  "--hd 128 --sq 300 --sk 300 --heads 2 --grid 2 --no-otma"
  "--hd 128 --sq 640 --sk 640 --heads 1 --grid 2 --local 200,0"
  "--hd 128 --varlen 300:300,64:500,129:129 --heads 2 --grid 2 --local 100,10 --no-otma"
  "--hd 64 --varlen 200:300,70:70,400:150 --heads 2 --grid 2 --causal"
  "--hd 64 --sq 256 --sk 1024 --heads 2 --grid 2 --splits 3 --causal"
  "--hd 128 --sq 1 --sk 1000 --heads 4 --grid 2 --splits 4 --block-m 64"
  "--hd 256 --sq 400 --sk 300 --heads 1 --grid 1 --causal"
  "--hd 128 --sq 200 --sk 300 --heads 4 --heads-k 1 --pack-gqa --grid 2 --causal"
  "--hd 64 --sq 300 --sk 500 --heads 4 --heads-k 2 --grid 2 --causal --paged 64"
  "--hd 128 --sq 1 --sk 700 --heads 8 --heads-k 2 --pack-gqa --paged 48 --splits 3 --block-m 64"
)
for knobs in "$@"; do
  for c in "${cases[@]}"; do
    out=$($run --knobs "$knobs" $c ${CTASIM_FLAGS:-} 2>&1)
    s=$?
    echo "$out" | head -2
    echo "$out" | grep -A8 "read before any write: [1-9]"
    [ $s = 0 ] || { echo "  FAILED (exit $s): ${knobs:-default} $c"; echo "$out" | tail -4; rc=1; }
  done
done
# each planted defect must make a case fail (a check that cannot fail checks nothing): the loop's
# S wait removed under the first knob set, each knob's own defects where that knob is asked for
# (block_m 192 on 128-key blocks: diagonal tiles hold a masked block inside the loop)
plants=("no_s_wait:${1:-}")
for k in "$@"; do
  case ",$k," in *,mask_branch=1,*) plants+=("mask_branch_never:$k") ;; esac
done
for pk in "${plants[@]}"; do
  p=${pk%%:*} k=${pk#*:}
  if $run --knobs "$k" --hd 64 --sq 384 --sk 384 --heads 2 --grid 2 --causal --plant "$p" \
       > /dev/null 2>&1; then
    echo "planted $p (${k:-default}): NOT caught"; rc=1
  else
    echo "planted $p (${k:-default}): caught"
  fi
done
exit $rc
