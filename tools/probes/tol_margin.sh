#!/usr/bin/env bash
# How close one check case comes to the tolerance rule (tools/common/tolerance.h), over fresh
# seeds and over repeats of one seed, under knob sets: a case whose err_o/tol stands apart from
# its seeds' distribution, or an error that moves between repeats of one seed (a race), is a
# defect, not the rule's tail. Session 29: check --all's hd256 bf16 none h6/3 sq=1000 sk=257 read
# 1.006 where the run's other 8215 cases read at most 0.69 (hd256 bf16 p99 0.586).
# usage (device, after tools/gpu-bundle.sh; carry .gpu): tol_margin.sh SEEDS REPEATS "CHECK ARGS"
#   [KNOBS...]   ("" for the default: e.g. "" merge_ends=0)
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
[ $# -ge 3 ] || { echo "usage: $0 SEEDS REPEATS \"CHECK ARGS\" [KNOBS...]" >&2; exit 2; }
seeds=$1 reps=$2 args=$3; shift 3
[ $# -gt 0 ] || set -- ""
# ratios KNOBS SEED...: err_o/tol of every case line, one per line
ratios() {
  local k=$1; shift
  for s in "$@"; do
    FA3JIT_PLAN_DEBUG=$k $g check $args --seed "$s" 2>&1 |
      awk -v s="$s" '/err_o=/ { for (i = 1; i <= NF; i++) { if ($i ~ /^err_o=/) e = substr($i, 7);
                     if ($i ~ /^tol=/) t = substr($i, 5) } printf "%s %.4f %s\n", s, e / t, e }'
  done
}
for k in "$@"; do
  echo "--- knobs '${k:-default}': $args, seeds 1..$seeds"
  ratios "$k" $(seq 1 "$seeds") | sort -k2 -g > /tmp/tm.txt
  awk '{ r[NR] = $2 } END { printf "cases %d: median %.3f p90 %.3f max %.3f (seed of max: see last line)\n",
       NR, r[int(NR / 2) + 1], r[int(NR * 0.9) + 1], r[NR] }' /tmp/tm.txt
  tail -3 /tmp/tm.txt
  worst=$(tail -1 /tmp/tm.txt | cut -d' ' -f1)
  echo "seed $worst repeated $reps times: distinct err_o values:"
  ratios "$k" $(yes "$worst" | head -n "$reps") | cut -d' ' -f3 | sort | uniq -c
done
