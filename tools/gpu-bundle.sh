#!/usr/bin/env bash
# Packs what the GPU machine needs into .gpu/ (git-ignored): the stripped shared library (one file,
# named by its SONAME, which the programs look for), fa3-gen, the GPU test binaries and the two
# shared libraries the GPU image lacks (cmocka, xxhash). Then the device tool runs
# tools/gpu-run.sh with carry [".gpu"]. Build first: ninja -C build.
set -euo pipefail
cd "$(dirname "$0")/.."
soname() { readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'; }
rm -rf .gpu && mkdir -p .gpu
strip --strip-unneeded -o ".gpu/$(soname build/libfa3jit.so)" build/libfa3jit.so
for lib in libcmocka.so.0 libxxhash.so.0; do
  cp "$(readlink -f "$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')")" ".gpu/$lib"
done
# SLIM=1: the library (xz'd: gpu-run unpacks it), fa3-gen and the two libraries only, about 10 MB,
# to travel beside .peers/b (32 MB) for the compare step with FA4
if [ "${SLIM:-0}" = 1 ]; then
  xz -T2 -1 .gpu/libfa3jit.so*
  cp build/fa3-gen .gpu/
  du -sh .gpu
  exit 0
fi
cp build/fa3-gen build/tests/test_gpu build/tests/test_edge build/tests/test_magnitude \
  build/tests/test_fp8 build/tests/test_fwd_args build/tests/test_quantize \
  build/tests/test_varlen build/tests/test_varlen_args build/tests/test_splitkv \
  build/tests/test_splitkv_combine build/tests/test_splitkv_fwd build/tests/test_kvcache \
  build/tests/test_pack_gqa build/tests/test_block_m64 .gpu/
# test_fwd_args and test_varlen_args link the static library (41 MB): stripped and xz'd to fit
# the 64 MiB carry
# XZ_LIB=1: the library xz'd too (gpu-run unpacks it) and all three at level 6, 29 MB in all:
# the whole bundle then travels beside .peers/b (33 MB) and the work tree (4 MB) for a call that
# runs compare with FA4 and test steps
lvl=-1; [ "${XZ_LIB:-0}" = 1 ] && lvl=-6
for t in test_fwd_args test_varlen_args; do strip --strip-unneeded .gpu/$t && xz -T2 $lvl .gpu/$t; done
[ "${XZ_LIB:-0}" = 1 ] && xz -T2 $lvl .gpu/libfa3jit.so*
# BASE_BUILD=dir: another build folder (e.g. of the last commit) for A/B runs, as .gpu/base
# (bench/ab.py variant gen:.gpu/base/fa3-gen).
if [ -n "${BASE_BUILD:-}" ]; then
  mkdir -p .gpu/base
  base_lib=.gpu/base/$(soname "$BASE_BUILD/libfa3jit.so")
  strip --strip-unneeded -o "$base_lib" "$BASE_BUILD/libfa3jit.so"
  xz -T2 -1 "$base_lib"   # two libraries exceed the 64 MiB carry; gpu-run unpacks
  cp "$BASE_BUILD/fa3-gen" .gpu/base/
fi
du -sh .gpu
