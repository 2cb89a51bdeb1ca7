#!/usr/bin/env bash
# First command on a fresh machine: installs the dependencies (tools/install-deps.sh), configures
# and builds build/, then runs the main job:
#   fa3-gen --info      the default kernel (head_dim 128, bf16, no mask): compile, resource use
#   fa3-gen --emit-ptx  the start of its generated PTX
# and, on a machine with a Hopper GPU (nvidia-smi reports compute capability 9.x):
#   fa3-gen check       every default config against the fp32 reference
#   fa3-gen bench       the FlashAttention-3 paper's forward sweep
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh

opts=(-Dptx_compiler=enabled "-Dptx_compiler_dir=$PWD/.deps/nvidia/cu13/lib")
if [ -n "${FA3JIT_CUDA_DIR:-}" ]; then
    opts+=("-Dtoolkit_dir=$FA3JIT_CUDA_DIR")
fi
if [ -f build/build.ninja ]; then
    meson setup --reconfigure build "${opts[@]}"
else
    meson setup build "${opts[@]}"
fi
ninja -C build

echo
echo "== build/fa3-gen --info   (default config)"
build/fa3-gen --info
echo
echo "== build/fa3-gen --emit-ptx   (first 40 lines; whole text in build/default.ptx)"
build/fa3-gen --emit-ptx > build/default.ptx
head -n 40 build/default.ptx
echo "... ($(wc -l < build/default.ptx) lines)"

cc=""
if command -v nvidia-smi >/dev/null 2>&1; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 || true)
fi
echo
if [ "${cc%%.*}" = 9 ]; then
    echo "== Hopper GPU (compute capability $cc): build/fa3-gen check"
    build/fa3-gen check
    echo
    echo "== build/fa3-gen bench"
    build/fa3-gen bench
else
    echo "No Hopper GPU here (nvidia-smi: ${cc:-not available}): skipping 'fa3-gen check' and" \
         "'fa3-gen bench'."
fi
