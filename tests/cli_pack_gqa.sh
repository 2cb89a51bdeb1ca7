#!/bin/sh
# fa3-gen's --pack-gqa without a GPU: the packed kernel's PTX (5-D Q loads and O stores, the
# header's " packgqa"), its refusal with --varlen (a usage error naming pack_gqa), and check
# --pack-gqa's cases (--list): 72 configurations (hd 64/128/256 x dtype x none/causal x split 0/1
# x GQA 4 and 8) at 6 decode pairs, or the CONFIG's two, and its usage errors.
# $1: the fa3-gen program.
set -u
gen=$1
dir=$(mktemp -d /tmp/fa3jit-test-cli-pack-XXXXXX)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/sh_util.sh"

unset FA3JIT_CACHE_DIR FA3JIT_CACHE_DISABLE FA3JIT_CACHE_LOCK_TIMEOUT FA3JIT_PLAN_DEBUG FA3JIT_TEST_FAIL

check "--emit-ptx --pack-gqa" 0 "$gen" --emit-ptx --pack-gqa
count "packgqa in the header" "$dir/out" "// Config: hd128 bf16 none sm_90a bn128 st2 packgqa" 1
count "Q by 5-D loads (two 64-column boxes)" "$dir/out" "cp.async.bulk.tensor.5d.shared::cluster.global" 2
count "O by 5-D stores" "$dir/out" "cp.async.bulk.tensor.5d.global.shared::cta" 2
"$gen" --emit-ptx > "$dir/plain.ptx" 2>/dev/null
if grep -q "tensor.5d" "$dir/plain.ptx"; then bad "pack_gqa 0: a 5-D copy"; else ok "pack_gqa 0: 4-D copies only"; fi
check "--emit-ptx --pack-gqa --split-kv --paged-kv" 0 "$gen" --emit-ptx --pack-gqa --split-kv --paged-kv
count "split packed: 5-D Q loads" "$dir/out" "cp.async.bulk.tensor.5d.shared::cluster.global" 2
count "split packed: no TMA store" "$dir/out" "cp.async.bulk.tensor.5d.global.shared::cta" 0
check "--pack-gqa --varlen" 64 "$gen" --emit-ptx --pack-gqa --varlen
has "varlen refusal names pack_gqa" "$dir/err" "pack_gqa 1 with varlen 1"

check "check --pack-gqa --list" 0 "$gen" check --pack-gqa --list
has "check: 72 configs x 6 pairs" "$dir/out" "^72 configs: 72 dense x 6 seqlen pairs"
count "check: GQA 4 decode case" "$dir/out" "hd128 e4m3 causal split packgqa h32/8" 6
count "check: GQA 8 decode case" "$dir/out" "hd64 fp16 none packgqa h16/2" 6
has "check: (8, 4096)" "$dir/out" "sq=8 sk=4096$"
check "check --pack-gqa CONFIG --list" 0 "$gen" check --pack-gqa --head-dim 256 --local --list
has "check CONFIG: 2 configs" "$dir/out" "^2 configs: 2 dense x 6 seqlen pairs"
check "check --pack-gqa --seqlen-q 5 --list" 0 "$gen" check --pack-gqa --seqlen-q 5 --seqlen-k 300 --list
has "check: the given pair" "$dir/out" "^72 configs: 72 dense x 1 seqlen pairs"
check "check --pack-gqa --varlen" 64 "$gen" check --pack-gqa --varlen
count "check: --varlen named" "$dir/err" "cannot be combined with --varlen" 1
check "check --pack-gqa --all" 64 "$gen" check --pack-gqa --all
count "check: --all named" "$dir/err" "cannot be combined with --all" 1
summary
