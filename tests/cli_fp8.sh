#!/bin/sh
# fa3-gen's FP8 flags without a GPU: --dtype e4m3 and --out-dtype (auto = the default, fp16 named
# in the PTX header), and the refusals that must come as usage errors (exit 64) naming the bad
# value before any GPU work, on every command that takes them (check and bench validate their
# CONFIG before opening the device; check's --descales is for e4m3 configurations only).
# $1: the fa3-gen program.
set -u
gen=$1
dir=$(mktemp -d /tmp/fa3jit-test-cli-fp8-XXXXXX)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/sh_util.sh"

unset FA3JIT_CACHE_DIR FA3JIT_CACHE_DISABLE FA3JIT_CACHE_LOCK_TIMEOUT FA3JIT_PLAN_DEBUG FA3JIT_TEST_FAIL

# --out-dtype: auto and bf16 are e4m3's default kernel; fp16 is another, named in the header
"$gen" --emit-ptx --dtype e4m3 > "$dir/e4m3.ptx" 2>/dev/null
check "--out-dtype auto" 0 "$gen" --emit-ptx --dtype e4m3 --out-dtype auto
if cmp -s "$dir/out" "$dir/e4m3.ptx"; then ok "auto: the default kernel"; else bad "auto: another PTX"; fi
check "--out-dtype bf16" 0 "$gen" --emit-ptx --dtype e4m3 --out-dtype bf16
if cmp -s "$dir/out" "$dir/e4m3.ptx"; then ok "bf16: the default kernel"; else bad "bf16: another PTX"; fi
check "--out-dtype fp16" 0 "$gen" --emit-ptx --dtype e4m3 --out-dtype fp16
count "fp16: in the header" "$dir/out" "// Config: hd128 e4m3 none sm_90a bn192 st2 out fp16" 1
check "--dtype e5m2" 64 "$gen" --emit-ptx --dtype e5m2
count "e5m2 named" "$dir/err" "option '--dtype': unknown dtype 'e5m2' (bf16, fp16, e4m3)" 1
check "--out-dtype xx" 64 "$gen" --emit-ptx --dtype e4m3 --out-dtype xx
count "xx named, auto listed" "$dir/err" "option '--out-dtype': unknown dtype 'xx' (auto, bf16, fp16, e4m3)" 1
check "--dtype auto" 64 "$gen" --emit-ptx --dtype auto
count "auto is no input dtype" "$dir/err" "option '--dtype': unknown dtype 'auto' (bf16, fp16, e4m3)" 1
check "--out-dtype e4m3" 64 "$gen" --emit-ptx --dtype e4m3 --out-dtype e4m3
count "e4m3 output named" "$dir/err" "out_dtype 2" 1

# check: a bad CONFIG is refused at once (exit 64), not after opening the GPU
check "check: bf16 with --out-dtype fp16" 64 "$gen" check --dtype bf16 --out-dtype fp16
count "check: out_dtype named" "$dir/err" "out_dtype 1" 1
check "check: e4m3 with --out-dtype e4m3" 64 "$gen" check --dtype e4m3 --out-dtype e4m3
count "check: e4m3 out_dtype named" "$dir/err" "out_dtype 2" 1
check "check: e4m3 with --block-n 96" 64 "$gen" check --dtype e4m3 --block-n 96
count "check: block_n named" "$dir/err" "block_n 96" 1
check "check: --head-dim 72" 64 "$gen" check --head-dim 72
count "check: head_dim named" "$dir/err" "head_dim 72" 1
check "check: --descales with bf16" 64 "$gen" check --dtype bf16 --descales none
count "check: --descales refused for bf16" "$dir/err" "option '--descales' is for e4m3 inputs" 1
check "check: --descales with fp16" 64 "$gen" check --dtype fp16 --head-dim 64 --descales amax
count "check: --descales refused for fp16" "$dir/err" "this fp16 configuration" 1
check "check: --descales bad value" 64 "$gen" check --dtype e4m3 --descales unit
count "check: the value named" "$dir/err" "unknown value 'unit'" 1
# bench validates its configurations before the GPU too
check "bench: bf16 with --out-dtype fp16" 64 "$gen" bench --dtype bf16 --out-dtype fp16
count "bench: out_dtype named" "$dir/err" "out_dtype 1" 1

summary
