#!/bin/sh
# Memcheck (valgrind) over fa3jit's CPU paths: config validation and codegen, the FP8 quantizer's
# argument checks and NVRTC build, whole-program compiles with both backends, the disk cache
# (store, load, damaged entries, locks), the cache CLI,
# and with --full the cache and fault-injection test programs too (slow: every compile runs ~20x
# slower under valgrind).
#   tools/valgrind.sh BUILD_DIR [--full]
# Fails on any memcheck error and on definite leaks. Suppressions: tests/valgrind.supp (the static
# PTX Compiler and nvJitLink keep process-lifetime allocations; none is needed for definite leaks
# or errors as of CUDA 13.0, the file documents the format and holds any that become necessary).
# meson: `meson test -C BUILD_DIR --suite valgrind` runs the default set.
set -u
build=$(cd "${1:?usage: tools/valgrind.sh BUILD_DIR [--full]}" && pwd)
full=${2:-}
src=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v valgrind > /dev/null 2>&1; then
    echo "SKIP: valgrind is not installed (apt-get install valgrind)"; exit 77
fi
work=$(mktemp -d /tmp/fa3jit-valgrind-XXXXXX)
trap 'rm -rf "$work"' EXIT
export FA3JIT_CACHE_DIR="$work/cache"
unset FA3JIT_CACHE_DISABLE FA3JIT_TEST_FAIL
vg="valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite --track-origins=yes --suppressions=$src/tests/valgrind.supp -q"
pass=0
fail=0
run() { # run "what" command...
    what=$1; shift
    start=$(date +%s)
    # shellcheck disable=SC2086
    $vg "$@" > "$work/out" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    if [ "$rc" = 0 ] && ! grep -q '^==[0-9]*== ' "$work/out"; then
        pass=$((pass + 1)); echo "ok: $what (${secs} s)"
    else
        fail=$((fail + 1)); echo "FAIL: $what (exit $rc, ${secs} s)"; grep -A40 '^==[0-9]*== ' "$work/out" | head -80
        [ "$rc" = 99 ] || tail -20 "$work/out"
    fi
}
gen="$build/fa3-gen"
run "test_config" "$build/tests/test_config"
run "test_golden" "$build/tests/test_golden" "$src/tests/golden"
run "test_embed" "$build/tests/test_embed"
run "test_fwd_args" "$build/tests/test_fwd_args"
run "test_quantize_args (checks, signs, NVRTC build)" "$build/tests/test_quantize_args"
run "test_combine_ptx (the combine kernel interpreted)" "$build/tests/test_combine_ptx"
run "test_splitkv_args (split-KV checks, a compile, the cache)" "$build/tests/test_splitkv_args"
run "test_kvcache_args (checks, kernel parameters, NVRTC build)" "$build/tests/test_kvcache_args"
run "fa3-gen --emit-ptx (hd192x128 local softcap)" "$gen" --emit-ptx --head-dim 192 --head-dim-v 128 --local --softcap
run "fa3-gen --info (PTX Compiler, compile)" "$gen" --info --head-dim 64 --causal --backend auto
run "fa3-gen --info (from the disk cache)" "$gen" --info --head-dim 64 --causal --backend auto
run "fa3-gen --info (nvJitLink, no cache)" "$gen" --info --head-dim 128 --backend nvjitlink --no-cache
run "fa3-gen cache warm (hd96)" "$gen" cache warm --head-dim 96
run "fa3-gen cache ls" "$gen" cache ls
printf 'junk' > "$FA3JIT_CACHE_DIR/0123456789abcdef0123456789abcdef.fa3k"
run "fa3-gen cache ls (invalid entry)" "$gen" cache ls
run "fa3-gen cache clear" "$gen" cache clear
FA3JIT_TEST_FAIL=write run "fa3-gen --info (disk full: warning)" "$gen" --info --head-dim 64
if [ "$full" = --full ]; then
    run "test_cache" "$build/tests/test_cache"
    run "test_faults" "$build/tests/test_faults"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
