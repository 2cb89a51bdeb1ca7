#!/usr/bin/env bash
# DRAM traffic and time of one launch, fa3jit beside cuDNN (PyTorch SDPA), at the short causal
# rows where fa3jit trails cuDNN on the H100 (hd128 causal 512: 0.87). ncu flushes the caches
# before each profiled launch (its default --cache-control all), so both start from a cold L2.
#   NCU_SHORT_SHAPES="128:512:causal 128:512:none" NCU_SHORT_DTYPE=fp16
#   NCU_SHORT_LAYOUTS="bshd bhsd" (fa3jit's layouts), NCU_SHORT_CUDNN=1 (0: fa3jit alone),
#   NCU_SHORT_VARIANTS="section=33;section=16": fa3jit again under each FA3JIT_PLAN_DEBUG value
#   bash tools/probes/ncu_short.sh      (after tools/gpu-bundle.sh, .gpu carried)
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
dtype=${NCU_SHORT_DTYPE:-fp16}
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__shared_mem_per_block_dynamic,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
rc=0
prof() { # LABEL KERNEL_REGEX SKIP CMD...: one launch's metrics
  local label=$1 kre=$2 skip=$3 r; shift 3
  echo "--- $label"
  timeout 120 ncu --target-processes all -k "regex:$kre" --launch-skip "$skip" --launch-count 1 \
    --metrics "$metrics" --csv "$@" > /tmp/ncu_short.csv 2>/tmp/ncu_short.err
  r=$?
  grep -E '^"' /tmp/ncu_short.csv | awk -F'","' 'NR > 1 {
      gsub(/"/, "", $NF); if (NR == 2) printf "  kernel %s\n", substr($5, 1, 100); printf "  %-60s %s %s\n", $(NF-2), $(NF-1), $NF }'
  if [ "$r" != 0 ] || ! grep -q dram__bytes_read /tmp/ncu_short.csv; then
    echo "  no launch profiled (ncu exit $r):"; tail -5 /tmp/ncu_short.err /tmp/ncu_short.csv; rc=1
  fi
}
for sh in ${NCU_SHORT_SHAPES:-128:512:causal 128:512:none}; do
  IFS=: read -r hd s mask <<<"$sh"
  flag=--non-causal pyc=False; [ "$mask" = causal ] && flag=--causal pyc=True
  b=$((16384 / s)) h=$((2048 / hd))
  IFS=';' read -ra variants <<<";${NCU_SHORT_VARIANTS:-}"
  for v in "${variants[@]}"; do
    for layout in ${NCU_SHORT_LAYOUTS:-bshd bhsd}; do
      prof "fa3jit $dtype hd$hd $mask $s $layout (batch $b, heads $h)${v:+ $v}" 'fa3_fwd' 2 \
        env ${v:+FA3JIT_PLAN_DEBUG=$v} "$g" bench --dtype "$dtype" --head-dim "$hd" --seqlen "$s" \
        $flag --layout $layout --reps 1 --warmup 2
    done
  done
  [ "${NCU_SHORT_CUDNN:-1}" = 1 ] || continue
  prof "cuDNN $dtype hd$hd $mask $s (SDPA, bhsd)" 'cudnn|sdpa|fmha|flash' 2 python3 -c "
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
dt = getattr(torch, {'fp16': 'float16', 'bf16': 'bfloat16'}['$dtype'])
q, k, v = (torch.randn($b, $h, $s, $hd, device='cuda', dtype=dt) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(4):
        F.scaled_dot_product_attention(q, k, v, is_causal=$pyc)
torch.cuda.synchronize()"
done
echo "ncu_short rc=$rc"
exit $rc
