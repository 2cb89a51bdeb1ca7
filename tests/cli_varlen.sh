#!/bin/sh
# fa3-gen check's varlen / paged-KV flags without a GPU: the cases --varlen, --paged P and --all
# make (check --list prints them and runs nothing), and the refusals that must come as usage
# errors (exit 64) naming the bad value before any GPU work.
# $1: the fa3-gen program.
set -u
gen=$1
dir=$(mktemp -d /tmp/fa3jit-test-cli-varlen-XXXXXX)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/sh_util.sh"

unset FA3JIT_CACHE_DIR FA3JIT_CACHE_DISABLE FA3JIT_CACHE_LOCK_TIMEOUT FA3JIT_PLAN_DEBUG FA3JIT_TEST_FAIL

# ---- the cases
check "--varlen --list" 0 "$gen" check --varlen --head-dim 128 --causal --list
count "varlen: the five cases" "$dir/out" "hd128 bf16 causal varlen h3/3" 5
for c in random long+tiny with-empty short-k seqused; do
    count "varlen: case $c" "$dir/out" "varlen $c " 1
done
has "varlen: one varlen config, five cases" "$dir/out" "^1 configs: 0 dense x [0-9]+ seqlen pairs, 1 varlen/paged with 5 cases$"
has "long+tiny: one sequence of 1500 among 40" "$dir/out" "varlen long\+tiny +b40 max_q=1500 max_k=1500"

check "--varlen: the default set" 0 "$gen" check --varlen --list
count "default set as varlen configs" "$dir/out" "18 varlen/paged with 90 cases" 1
count "no dense case" "$dir/out" "sq=" 0

check "--paged 16 --list" 0 "$gen" check --paged 16 --head-dim 64 --list
count "paged: rectangular Q cases" "$dir/out" "hd64 bf16 none paged h3/3 " 3
count "paged: varlen Q cases" "$dir/out" "hd64 bf16 none varlen paged h3/3 " 5
count "paged: decode among them" "$dir/out" "rect paged16 decode" 1
has "paged: decode has one query" "$dir/out" "rect paged16 decode +b16 max_q=1 "
check "--varlen --paged 256 --list" 0 "$gen" check --varlen --paged 256 --head-dim 64 --list
count "varlen + paged: varlen Q only" "$dir/out" "varlen paged256 " 5
count "varlen + paged: no rectangular Q" "$dir/out" "rect paged" 0

check "--quick drops long+tiny" 0 "$gen" check --varlen --paged 1 --quick --list
count "quick: no long+tiny" "$dir/out" "long+tiny" 0
check "--batch / --seqlen-q replace the shapes" 0 "$gen" check --varlen --head-dim 64 --batch 7 --seqlen-q 33 --list
count "batch 7, lengths up to 33/33" "$dir/out" "b7 max_q=33 max_k=33" 5
check "--seqlen-k alone: both lengths" 0 "$gen" check --varlen --head-dim 64 --seqlen-k 65536 --list
count "65536 accepted" "$dir/out" "max_q=65536 max_k=65536" 5
check "e4m3 out fp16 local, hd192x128" 0 "$gen" check --varlen --head-dim 192 --head-dim-v 128 --dtype e4m3 --out-dtype fp16 --local --window-left 8 --window-right -1 --list
count "the config's label" "$dir/out" "hd192x128 e4m3>fp16 local(8,-1) varlen h3/3" 5

# --all: the dense configs once each (fa3_supported_configs lists every pair twice, dense and
# varlen), then a varlen config for every varlen entry of the supported list
check "--all --list" 0 "$gen" check --all --list
grep ' sq=' "$dir/out" > "$dir/dense"
grep ' varlen h' "$dir/out" > "$dir/varlen"
if [ -s "$dir/dense" ] && [ -s "$dir/varlen" ]; then ok "--all: dense and varlen cases"; else bad "--all: dense $(wc -l < "$dir/dense"), varlen $(wc -l < "$dir/varlen") lines"; fi
dups=$(sort "$dir/dense" | uniq -d | wc -l)
if [ "$dups" = 0 ]; then ok "--all: no dense case twice"; else bad "--all: $dups dense cases twice"; fi
count "--all: no dense config labelled varlen" "$dir/dense" "varlen" 0
count "--all: no paged config" "$dir/out" " paged" 0
"$gen" cache warm --all --dry-run 2>/dev/null | grep ' varlen$' > "$dir/supported"
missing=0
while read -r hd dt mask rest; do
    case $rest in *softcap*) sc=" softcap=30";; *) sc="";; esac
    grep -q "^$hd $dt $mask[^ ]*$sc varlen " "$dir/varlen" || { missing=$((missing + 1)); echo "  missing: $hd $dt $mask$sc"; }
done < "$dir/supported"
if [ -s "$dir/supported" ] && [ "$missing" = 0 ]; then ok "--all: every supported varlen config ($(wc -l < "$dir/supported"))"
else bad "--all: $missing of $(wc -l < "$dir/supported") supported varlen configs not checked"; fi
check "--all --varlen --list" 0 "$gen" check --all --varlen --list
count "--all --varlen: no dense case" "$dir/out" " sq=" 0
check "--all --paged 64 --list" 0 "$gen" check --all --paged 64 --list
has "--all --paged: rectangular and varlen Q" "$dir/out" "rect paged64 equal"
has "--all --paged: varlen Q" "$dir/out" "varlen paged64 with-empty"

# --shard I/N: contiguous parts of the configs that together are the whole set, in order, each
# case once, split about evenly by cases (--all in two calls)
check "--all --list (the whole set)" 0 "$gen" check --all --list
grep -v ' configs: ' "$dir/out" > "$dir/whole"
: > "$dir/parts"; : > "$dir/sizes"
for s in 1/3 2/3 3/3; do
    check "--all --list --shard $s" 0 "$gen" check --all --list --shard $s
    has "shard $s named in the summary" "$dir/out" "^[0-9]+ configs: .* \\(shard $s\\)$"
    grep -v ' configs: ' "$dir/out" >> "$dir/parts"
    wc -l < "$dir/out" >> "$dir/sizes"
done
if cmp -s "$dir/whole" "$dir/parts"; then ok "--shard: the three parts are the whole set, in order"
else bad "--shard: the parts differ from the whole set ($(wc -l < "$dir/parts") vs $(wc -l < "$dir/whole") lines)"; fi
min=$(sort -n "$dir/sizes" | head -n 1); max=$(sort -n "$dir/sizes" | tail -n 1)
if [ "$min" -gt 0 ] && [ $((max * 10)) -le $((min * 12)) ]; then ok "--shard: parts within 20% of each other ($min..$max lines)"
else bad "--shard: parts of $min..$max lines"; fi
check "--shard 1/1 is the whole set" 0 "$gen" check --all --list --shard 1/1
grep -v ' configs: ' "$dir/out" | cmp -s - "$dir/whole" && ok "--shard 1/1: the whole set" || bad "--shard 1/1 differs"
for v in 0/2 3/2 1/0 x 1/2x 1/1025 -1/2 +1/2 ' 1/2' 1/2/3 4294967297/4294967298; do
    check "--shard $v refused" 64 "$gen" check --all --list --shard "$v"
    count "--shard $v named" "$dir/err" "option '--shard': '$v' is not I/N with 1 <= I <= N <= 1024" 1
done
check "--shard with more parts than configs" 64 "$gen" check --head-dim 64 --list --shard 2/2
count "the part count named" "$dir/err" "option '--shard': 2 parts of 1 configs" 1
# every N up to the config count on a set of uneven weights (--paged 16: 36 configs of 3 and 5
# cases): no part refused or empty, the parts are the whole set in order
"$gen" check --paged 16 --list | grep -v ' configs: ' > "$dir/pwhole"
n=1; nbad=0
while [ "$n" -le 36 ]; do
    : > "$dir/pparts"; i=1
    while [ "$i" -le "$n" ]; do
        "$gen" check --paged 16 --list --shard "$i/$n" > "$dir/p1" 2>&1 || { nbad=$((nbad + 1)); echo "  --shard $i/$n: exit $?"; }
        grep -q '^[1-9][0-9]* configs: ' "$dir/p1" || { nbad=$((nbad + 1)); echo "  --shard $i/$n: no summary"; }
        grep -v ' configs: ' "$dir/p1" >> "$dir/pparts"; i=$((i + 1))
    done
    cmp -s "$dir/pparts" "$dir/pwhole" || { nbad=$((nbad + 1)); echo "  N=$n: the parts differ from the whole set"; }
    n=$((n + 1))
done
if [ "$nbad" = 0 ] && [ -s "$dir/pwhole" ]; then ok "--paged 16 --shard I/N, every N up to 36: whole set, no empty part"; else bad "--paged 16 --shard: $nbad problems"; fi
# a config heavier than total/N (3 + 5 cases in 2 parts) does not leave the next part empty
for s in 1/2 2/2; do
    check "--paged 16 --head-dim 64 --shard $s" 0 "$gen" check --paged 16 --head-dim 64 --list --shard $s
    has "one config in part $s" "$dir/out" "^1 configs: .* \\(shard $s\\)$"
done

# --select GLOB: the configs whose labels match, in --all's order; with --shard, the parts of
# what is selected
check "--all --select e4m3 causal" 0 "$gen" check --all --list --select '* e4m3* causal *'
grep -v ' configs: ' "$dir/out" > "$dir/sel"
grep -E ' e4m3(>fp16)? causal ' "$dir/whole" > "$dir/want"
if [ -s "$dir/want" ] && cmp -s "$dir/sel" "$dir/want"; then ok "--select: exactly --all's e4m3 causal cases ($(wc -l < "$dir/want"))"
else bad "--select: $(wc -l < "$dir/sel") cases, --all has $(wc -l < "$dir/want") e4m3 causal ones"; fi
check "--select twice: either pattern" 0 "$gen" check --all --list --select 'hd64 bf16 none h3/3' --select 'hd256 fp16 causal h8/1'
count "the first pattern's config" "$dir/out" "hd64 bf16 none h3/3 " 10
count "the second pattern's config" "$dir/out" "hd256 fp16 causal h8/1 " 10
has "two configs" "$dir/out" "^2 configs: 2 dense x 10 seqlen pairs, 0 varlen/paged with 0 cases$"
: > "$dir/parts"
for s in 1/2 2/2; do
    check "--select with --shard $s" 0 "$gen" check --all --list --select '* e4m3* causal *' --shard $s
    grep -v ' configs: ' "$dir/out" >> "$dir/parts"
done
cmp -s "$dir/parts" "$dir/sel" && ok "--select + --shard: the parts are the selection" || bad "--select + --shard: the parts differ from the selection"
check "--select matching nothing" 64 "$gen" check --all --list --select 'hd999*'
count "the pattern named" "$dir/err" "option '--select': 'hd999*' matches none of the 1200 config labels" 1
check "--select: one pattern matching nothing beside one that matches" 64 "$gen" check --all --list --select 'hd64*' --select 'hd999*'
count "the pattern that matches nothing named" "$dir/err" "option '--select': 'hd999*' matches none" 1
check "--select ''" 64 "$gen" check --all --list --select ''
count "the empty pattern named" "$dir/err" "option '--select': an empty pattern" 1

# ---- usage errors, before the GPU
check "--paged 0" 64 "$gen" check --paged 0
count "0 named" "$dir/err" "option '--paged': 0 is out of range (1..256)" 1
check "--paged 257" 64 "$gen" check --paged 257
count "257 named" "$dir/err" "option '--paged': 257 is out of range (1..256)" 1
check "--paged abc" 64 "$gen" check --paged abc
count "abc named" "$dir/err" "option '--paged': 'abc' is not an integer" 1
check "--paged without a value" 64 "$gen" check --paged
count "the value asked for" "$dir/err" "option '--paged' needs a value" 1
check "--varlen=1" 64 "$gen" check --varlen=1
count "--varlen takes no value" "$dir/err" "option '--varlen' takes no value (got '1')" 1
check "--list=x" 64 "$gen" check --list=x
count "--list takes no value" "$dir/err" "option '--list' takes no value (got 'x')" 1
check "--varlen --head-dim 72" 64 "$gen" check --varlen --head-dim 72
count "head_dim named" "$dir/err" "head_dim 72" 1
check "--paged with a bad block_n" 64 "$gen" check --paged 16 --dtype e4m3 --block-n 96
count "block_n named" "$dir/err" "block_n 96" 1
check "--varlen bf16 with --out-dtype fp16" 64 "$gen" check --varlen --dtype bf16 --out-dtype fp16
count "out_dtype named" "$dir/err" "out_dtype 1" 1
check "--varlen --all with a config flag" 64 "$gen" check --varlen --all --causal
count "--all refuses config flags" "$dir/err" "cannot be combined with config flags" 1
check "--varlen --seqlen-q 65537" 64 "$gen" check --varlen --seqlen-q 65537
count "seqlen_q named" "$dir/err" "option '--seqlen-q': 65537 is above 65536 with --varlen/--paged" 1
check "--paged --seqlen-k 100000" 64 "$gen" check --paged 16 --seqlen-k 100000
count "seqlen_k named" "$dir/err" "option '--seqlen-k': 100000 is above 65536" 1
check "--varlen --batch 4097" 64 "$gen" check --varlen --batch 4097
count "batch named" "$dir/err" "option '--batch': 4097 is above 4096 with --varlen/--paged" 1
check "--all --batch 5000 (its varlen cases)" 64 "$gen" check --all --batch 5000
count "batch named for --all" "$dir/err" "option '--batch': 5000 is above 4096 with --all" 1
check "--paged with --descales and bf16" 64 "$gen" check --paged 16 --dtype bf16 --descales none
count "descales refused" "$dir/err" "option '--descales' is for e4m3 inputs" 1
check "--varlen, heads not a multiple" 64 "$gen" check --varlen --heads 3 --heads-k 2
count "heads named" "$dir/err" "--heads 3 is not a multiple of --heads-k 2" 1
check "--varlen --window-left -2" 64 "$gen" check --varlen --local --window-left -2
count "window named" "$dir/err" "option '--window-left': -2 is out of range" 1
check "--help names --varlen and --paged" 0 "$gen" check --help
count "help: --varlen" "$dir/out" "  --varlen             packed variable-length batches" 1
count "help: --paged" "$dir/out" "  --paged P            K/V in pages of P rows (1..256)" 1

summary
