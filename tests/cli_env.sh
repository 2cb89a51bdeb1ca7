#!/bin/sh
# fa3-gen and the environment: a bad value of a variable the library reads is named once on stderr
# (the command still runs, with the documented default), whatever the action (--emit-ptx, which
# makes no context; --info and cache warm, whose contexts carry the same text in their warning;
# cache ls with the cache off, whose reason stays the real one), and FA3JIT_PLAN_DEBUG's valid
# items apply beside a refused one. Also --help's wording of head_dim_v's default.
# $1: the fa3-gen program.
set -u
gen=$1
dir=$(mktemp -d /tmp/fa3jit-test-cli-env-XXXXXX)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/sh_util.sh"

unset FA3JIT_CACHE_DIR FA3JIT_CACHE_DISABLE FA3JIT_CACHE_FSYNC FA3JIT_CACHE_LOCK_TIMEOUT FA3JIT_PLAN_DEBUG FA3JIT_TEST_FAIL
c="$dir/cache"

check "--emit-ptx with a bad lock timeout" 0 env FA3JIT_CACHE_LOCK_TIMEOUT=abc "$gen" --emit-ptx --head-dim 64
count "--emit-ptx: the value named once" "$dir/err" "FA3JIT_CACHE_LOCK_TIMEOUT='abc'" 1
count "--emit-ptx: nothing else on stderr" "$dir/err" "warning" 1

"$gen" --emit-ptx --head-dim 64 > "$dir/default.ptx" 2>/dev/null
env FA3JIT_PLAN_DEBUG=wg3=0 "$gen" --emit-ptx --head-dim 64 > "$dir/pp0.ptx" 2>/dev/null
check "--emit-ptx with an unknown knob before a valid one" 0 env FA3JIT_PLAN_DEBUG=xwg3=1,wg3=0 "$gen" --emit-ptx --head-dim 64
count "knobs: the unknown item named once" "$dir/err" "'xwg3=1' (unknown knob)" 1
# the PTX header names the knobs as given (a debug plan): compare the code below it
grep -v '^// DEBUG plan' "$dir/out" > "$dir/out.code"
grep -v '^// DEBUG plan' "$dir/pp0.ptx" > "$dir/pp0.code"
if cmp -s "$dir/out.code" "$dir/pp0.code" && ! cmp -s "$dir/out" "$dir/default.ptx"; then
    ok "knobs: wg3=0 applied beside the refused item"
else bad "knobs: the PTX is not the wg3=0 kernel"; fi

check "--info with a bad cache switch" 0 env FA3JIT_CACHE_DISABLE=yes "$gen" --info --head-dim 64 --cache-dir "$c"
count "--info: the value named once on stderr" "$dir/err" "FA3JIT_CACHE_DISABLE='yes'" 1
count "--info: not repeated on stdout" "$dir/out" "FA3JIT_CACHE_DISABLE" 0

check "cache warm with a bad lock timeout" 0 env FA3JIT_CACHE_LOCK_TIMEOUT=-5 "$gen" cache warm --cache-dir "$c" --head-dim 64
count "warm: the value named once" "$dir/err" "FA3JIT_CACHE_LOCK_TIMEOUT='-5'" 1

check "cache ls, cache off, bad lock timeout" 1 env FA3JIT_CACHE_DISABLE=1 FA3JIT_CACHE_LOCK_TIMEOUT=1e9 "$gen" cache ls
count "ls: the value named once" "$dir/err" "FA3JIT_CACHE_LOCK_TIMEOUT='1e9'" 1
count "ls: the reason is the cache switch" "$dir/err" "the disk cache is off (FA3JIT_CACHE_DISABLE is set)" 1

check "relative FA3JIT_CACHE_DIR" 0 env FA3JIT_CACHE_DIR=relative/cache XDG_CACHE_HOME="$dir/xdg" "$gen" cache warm --dry-run
count "relative folder named" "$dir/err" "FA3JIT_CACHE_DIR='relative/cache' is not an absolute path" 1

# control bytes of a value are shown as '?', never sent to the terminal as they are
check "a lock timeout with a newline and an escape" 0 env "FA3JIT_CACHE_LOCK_TIMEOUT=$(printf '5\n0')" "FA3JIT_CACHE_DIR=$(printf 'rel\033[31m')" "$gen" --emit-ptx --head-dim 64
count "control bytes shown as ?" "$dir/err" "FA3JIT_CACHE_DIR='rel?[31m'" 1
count "a newline shown as ?" "$dir/err" "FA3JIT_CACHE_LOCK_TIMEOUT='5?0'" 1
if grep -q "$(printf '\033')" "$dir/err"; then bad "an escape byte reached stderr"; else ok "no escape byte on stderr"; fi
# an empty --cache-dir (an unset "$DIR") is refused, not taken for the default folder
check "--cache-dir ''" 64 "$gen" cache clear --cache-dir ""
count "empty folder named" "$dir/err" "option '--cache-dir': an empty folder name" 1

check "--help" 0 "$gen" --help
count "--help: head_dim_v defaults to head_dim" "$dir/out" "--head-dim-v N       V/O head dimension (default: the same as head_dim;" 1
count "--help: 128 with 192 is not called the default" "$dir/out" "head_dim; 128 with head_dim 192" 0

summary
