#!/usr/bin/env bash
# The l2_hint knob on the GPU in one call (carry [".gpu"]): DRAM bytes of one launch from a cold
# L2 at the short causal rows (ncu_short.sh, fp16, fa3jit alone: the default, l2_hint=1, =7),
# then bench/ab.py (bf16, 3 rounds rotated, causal and not, L2HINT_HEAD_DIMS) of the same
# variants, and fa3-gen check of each variant (gpu-run.sh checkvar).
#   bash tools/probes/l2_hint_ab.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
variants=${L2HINT_VARIANTS:-l2_hint=1 l2_hint=7}
NCU_SHORT_DTYPE=fp16 NCU_SHORT_SHAPES="${L2HINT_NCU_SHAPES:-256:512:causal 128:512:causal}" \
  NCU_SHORT_LAYOUTS=bshd NCU_SHORT_CUDNN=0 NCU_SHORT_VARIANTS="${variants// /;}" \
  bash tools/probes/ncu_short.sh 2>&1 | tee "${OUT:-/tmp}/ncu_l2hint.txt" |
  grep -E '^---|dram__bytes_read|gpu__time|hit_rate|rc='
AB_HEAD_DIMS="${L2HINT_HEAD_DIMS:-256 128 64}" AB_VARIANTS="$variants" AB_ROUNDS=3 \
  bash tools/gpu-run.sh ab checkvar
