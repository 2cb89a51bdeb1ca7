#!/bin/sh
# fa3-gen cache ls | clear | warm, on a fresh folder (removed at the end). $1: the fa3-gen program,
# $2: the CUDA toolkit's root (its stub libcuda.so; default /usr/local/cuda).
#   warm one config (plain lines when stdout is not a terminal), again (already cached), ls (one
#   line per entry: config, backend, size, age, key), an invalid entry shown as such, clear (only
#   fa3jit's files), warm --all --dry-run (the library's list), warm --all --jobs 2 (every supported
#   config compiled and on disk, then all already cached), ls columns aligned, the progress bar on
#   a terminal (script) fitted to its width, a payload-damaged entry shown as invalid, a read-only
#   folder (injected: warning, exit 1), a folder that is a file (refused before compiling), the
#   cache turned off, a FIFO entry, a benchmark variant (FA3JIT_PLAN_DEBUG) marked, a full stdout
#   (exit 1), the toolkit's stub libcuda named, bad command lines (64).
set -u
gen=$1
cuda=${2:-/usr/local/cuda}
dir=$(mktemp -d /tmp/fa3jit-test-cli-XXXXXX)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/sh_util.sh"

unset FA3JIT_CACHE_DISABLE FA3JIT_TEST_FAIL
c="$dir/cache"
check "ls on a missing folder" 0 "$gen" cache ls --cache-dir "$c"
has "ls: empty" "$dir/out" "^0 entries"
check "warm one config" 0 "$gen" cache warm --cache-dir "$c" --head-dim 64 --causal
has "warm: plain progress line" "$dir/out" "^\[1/1\] hd64 bf16 causal .*: compiled"
has "warm: summary" "$dir/out" "^warm: 1 configuration, 1 compiled, 0 already cached, 0 failed, 0 not on disk"
check "warm again" 0 "$gen" cache warm --cache-dir "$c" --head-dim 64 --causal
has "warm again: already cached" "$dir/out" "already cached"
check "ls" 0 "$gen" cache ls --cache-dir "$c"
has "ls: entry line" "$dir/out" "^hd64 bf16 causal sm_90a bn[0-9]+ st[0-9]+ +(ptx-compiler|nvjitlink) +[0-9.]+ KiB +[0-9]+s  [0-9a-f]{32}$"
has "ls: summary" "$dir/out" "^1 entry \(0 invalid"
key=$(grep -Eo '[0-9a-f]{32}$' "$dir/out" | head -n 1)
if [ -f "$c/$key.fa3k" ]; then ok "ls: key names the entry file"; else bad "ls: no $c/$key.fa3k"; fi

# A payload byte changed (the header still checks out): ls reads the payload and says so.
cp "$c/$key.fa3k" "$dir/good.fa3k"
size=$(wc -c < "$c/$key.fa3k")
off=$((size / 2))
b=$(od -An -tu1 -j "$off" -N1 "$c/$key.fa3k" | tr -d ' ')
printf "\\$(printf %03o $(( (b + 1) % 256 )))" | dd of="$c/$key.fa3k" bs=1 seek="$off" conv=notrunc 2> /dev/null
check "ls with a payload byte changed" 0 "$gen" cache ls --cache-dir "$c"
has "ls: payload damage shown" "$dir/out" "^\(invalid: payload checksum mismatch\) .* $key$"
has "ls: payload damage counted" "$dir/out" "^1 entry \(1 invalid"
mv "$dir/good.fa3k" "$c/$key.fa3k"

printf 'garbage' > "$c/ffffffffffffffffffffffffffffffff.fa3k"
: > "$c/.ffffffffffffffffffffffffffffffff.tmp.Ab12Cd"
: > "$c/notes.txt"
check "ls with an invalid entry" 0 "$gen" cache ls --cache-dir "$c"
has "ls: invalid entry shown" "$dir/out" "^\(invalid: truncated \(shorter than a header\)\) .* ffffffffffffffffffffffffffffffff$"
has "ls: counts" "$dir/out" "^2 entries \(1 invalid.*\), 1 index file, 0 locks, 1 temporary file,"
check "clear" 0 "$gen" cache clear --cache-dir "$c"
has "clear: count" "$dir/out" "^removed 4 files"
if [ -f "$c/notes.txt" ] && [ "$(ls -A "$c")" = notes.txt ]; then ok "clear: only fa3jit's files";
else bad "clear left: $(ls -A "$c")"; fi

check "warm --all --dry-run" 0 "$gen" cache warm --all --dry-run
n=$(grep -Ec '^hd[0-9]' "$dir/out")
has "dry run: count line" "$dir/out" "^$n configurations$"
has "dry run: hd192x128" "$dir/out" "^hd192x128 "
ns=$(grep -Ec '^hd.* split' "$dir/out") # split-KV configs: two kernels each
check "warm --all --jobs 2" 0 "$gen" cache warm --all --jobs 2 --cache-dir "$c"
has "warm --all: all compiled" "$dir/out" "^warm: $n configurations, $n compiled, 0 already cached, 0 failed, 0 not on disk"
check "ls after warm --all" 0 "$gen" cache ls --cache-dir "$c"
# split-KV configs bring their combine kernels, one entry per (head_dim_v, out dtype, varlen)
nc=$(grep -Ec '^combine ' "$dir/out")
has "ls: every config" "$dir/out" "^$((n + nc)) entries \(0 invalid"
if [ "$nc" -gt 0 ]; then ok "ls: $nc combine kernels"; else bad "ls: no combine kernel after warm --all"; fi
# Columns line up whatever the config's length (hd192x128 fp16 local softcap is the longest):
# the backend and the key start at one column on every entry line.
cols=$(awk '/^hd/ { b = match($0, / (ptx-compiler|nvjitlink) /); print b, length($0) - 32 }' "$dir/out" | sort -u)
if [ "$(printf '%s\n' "$cols" | wc -l)" = 1 ]; then ok "ls: columns aligned ($cols)";
else bad "ls: columns misaligned (backend column, key column): $(echo $cols)"; grep -E '^hd(192x128|64 )' "$dir/out" | head -4 | sed 's/^/  | /'; fi
check "warm --all again" 0 "$gen" cache warm --all --jobs 2 --cache-dir "$c"
has "warm --all again: all cached" "$dir/out" "^warm: $n configurations, 0 compiled, $n already cached"
if ls -A "$c" | grep -Eqv '^([0-9a-f]{32}\.fa3[kx]|notes\.txt)$'; then bad "stray files: $(ls -A "$c" | grep -Ev '\.fa3[kx]$')";
else ok "no lock or temporary files left"; fi
# one index file per kernel of each config (a combine entry serves several split configs): the
# warm loads of the next process skip the generator
check "ls after warm --all again" 0 "$gen" cache ls --cache-dir "$c"
has "ls: an index file per config's kernel" "$dir/out" "^$((n + nc)) entries \(0 invalid.*\), $((n + ns)) index files,"

if command -v script > /dev/null 2>&1; then
    script -qec "'$gen' cache warm --cache-dir '$dir/bar' --head-dim 128" /dev/null > "$dir/out" 2>&1
    has "terminal: progress bar" "$dir/out" "\[#{30}\] 1/1 hd128"
    # The bar is redrawn in place (\r), so a line longer than the terminal wraps and leaves a
    # trail: each drawing fits in the width less one column (ioctl, else $COLUMNS, else 80),
    # for the longest label (hd192x128 fp16 local softcap, cached by now).
    esc=$(printf '\033')
    for how in "80:" "60:COLUMNS=60" "50:stty cols 50;" "120:stty cols 120; COLUMNS=60"; do
        width=${how%%:*}; setup=${how#*:}
        script -qec "$setup '$gen' cache warm --cache-dir '$c' --head-dim 192 --head-dim-v 128 --dtype fp16 --local --softcap" /dev/null > "$dir/out" 2>&1
        longest=$(tr '\r' '\n' < "$dir/out" | sed "s/$esc\[K//g" | grep '^\[' | awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }')
        if [ "$longest" -gt 0 ] && [ "$longest" -lt "$width" ]; then ok "terminal of $width columns ($setup): bar lines of at most $longest"
        else bad "terminal of $width columns ($setup): a bar line of $longest columns"; tr '\r' '\n' < "$dir/out" | cat -v | sed 's/^/  | /'; fi
    done
    has "terminal of 120 columns: the terminal's width wins over COLUMNS, nothing cut" "$dir/out" "\] 1/1 hd192x128 fp16 local softcap sm_90a bn128 st2"
else
    echo "skip: no script(1) for the progress-bar check"
fi

check "warm into a read-only folder" 1 env FA3JIT_TEST_FAIL=open "$gen" cache warm --cache-dir "$dir/ro" --head-dim 96
has "read-only: warning" "$dir/err" "warning: cache directory .* is not writable"
has "read-only: not on disk" "$dir/out" "1 not on disk"
# A cache folder that is a file (or under one) fails before anything is compiled.
: > "$dir/afile"
for cd in "$dir/afile" "$dir/afile/sub"; do
    check "warm --cache-dir a file ($cd)" 1 "$gen" cache warm --cache-dir "$cd" --head-dim 64
    has "warm into a file: said so" "$dir/err" "cache warm: cannot use .*afile.* as the cache folder: .*(not a directory|Not a directory)"
    if grep -q "compiled\|^\[" "$dir/out"; then bad "warm into a file: compiled first"; sed 's/^/  | /' "$dir/out"; else ok "warm into a file: nothing compiled"; fi
done

check "warm with the cache off" 1 env FA3JIT_CACHE_DISABLE=1 "$gen" cache warm
has "cache off: said so" "$dir/err" "disk cache is off"
check "ls with the cache off" 1 env FA3JIT_CACHE_DISABLE=1 "$gen" cache ls
check "ls --cache-dir with the cache off" 0 env FA3JIT_CACHE_DISABLE=1 "$gen" cache ls --cache-dir "$c"

# A FIFO planted at an entry's path must not hang the lookup (it is not a regular file: rebuilt).
f="$dir/fifo"
check "warm into a fresh folder" 0 "$gen" cache warm --cache-dir "$f" --head-dim 64
fkey=$("$gen" --info --cache-dir "$f" --head-dim 64 | awk '/^cache key:/ {print $3}')
rm -f "$f/$fkey.fa3k" && mkfifo "$f/$fkey.fa3k"
check "a FIFO at the entry path does not block" 0 timeout 60 "$gen" --info --cache-dir "$f" --head-dim 64
has "FIFO entry: compiled again" "$dir/out" "^source: +compiled"

# A benchmark variant (FA3JIT_PLAN_DEBUG; dbg_no_softmax gives wrong results on purpose) is
# marked by --info, cache ls and cache warm; the default kernel is not.
v="$dir/variant"
check "--info, default plan" 0 "$gen" --info --cache-dir "$v" --head-dim 64
has "--info: default plan" "$dir/out" "^plan: +default$"
check "warm a variant" 0 env FA3JIT_PLAN_DEBUG=dbg_no_softmax=1 "$gen" cache warm --cache-dir "$v" --head-dim 64
has "warm: variant warned about" "$dir/err" "warning: 1 kernel warmed with DEBUG knobs FA3JIT_PLAN_DEBUG=dbg_no_softmax=1 \(a benchmark variant, not for production\)"
check "--info, variant" 0 env FA3JIT_PLAN_DEBUG=dbg_no_softmax=1 "$gen" --info --cache-dir "$v" --head-dim 64
has "--info: variant marked" "$dir/out" "^plan: +DEBUG knobs FA3JIT_PLAN_DEBUG=dbg_no_softmax=1 \(a benchmark variant, not for production\)$"
has "--info: variant from the disk" "$dir/out" "^source: +disk"
check "ls, default and variant" 0 "$gen" cache ls --cache-dir "$v"
has "ls: default entry unmarked" "$dir/out" "^hd64 bf16 none sm_90a bn[0-9]+ st[0-9]+ +(ptx-compiler|nvjitlink) .* [0-9a-f]{32}$"
has "ls: variant marked" "$dir/out" "^hd64 bf16 none sm_90a bn[0-9]+ st[0-9]+ DEBUG +(ptx-compiler|nvjitlink) .* [0-9a-f]{32}  DEBUG knobs FA3JIT_PLAN_DEBUG=dbg_no_softmax=1 \(a benchmark variant, not for production\)$"
has "ls: variant counted" "$dir/out" "^2 entries \(0 invalid: ignored and rebuilt on use; 1 DEBUG: FA3JIT_PLAN_DEBUG variant, not for production\)"

# Standard output that cannot be written (a full disk): exit 1 and say so, for every action.
if [ -w /dev/full ]; then
    for args in "--info --cache-dir $f --head-dim 64" "cache ls --cache-dir $c" \
                "cache warm --cache-dir $f --head-dim 64" "cache clear --cache-dir $dir/none" \
                "--help"; do
        # shellcheck disable=SC2086
        "$gen" $args > /dev/full 2> "$dir/err"; rc=$?
        if [ "$rc" = 1 ] && grep -q "cannot write standard output" "$dir/err"; then
            ok "stdout full: $args (exit 1, said so)"
        else bad "stdout full: $args: exit $rc"; sed 's/^/  | /' "$dir/err"; fi
    done
else
    echo "skip: no /dev/full"
fi

# The toolkit's stub libcuda (link-time only) named as such, not only "cuDriverGetVersion is
# missing": found as libcuda.so.1 ahead of any driver on LD_LIBRARY_PATH (shadowing), and, where
# this machine has no libcuda.so.1, as the libcuda.so fallback (no driver installed).
stub=
for s in "$cuda/lib64/stubs/libcuda.so" "$cuda"/targets/*/lib/stubs/libcuda.so; do
    if [ -f "$s" ]; then stub=$s; break; fi
done
if [ -n "$stub" ]; then
    mkdir -p "$dir/shadow"
    ln -s "$stub" "$dir/shadow/libcuda.so.1"
    check "stub libcuda.so.1 first on the path" 2 env LD_LIBRARY_PATH="$dir/shadow${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$gen" check --quick
    has "stub shadowing: named" "$dir/err" "libcuda.so.1 is $dir/shadow/libcuda.so.1 \(-> .*/stubs/libcuda.so\), the CUDA toolkit's stub library .*shadowing"
    driver=no
    if (PATH=$PATH:/sbin:/usr/sbin ldconfig -p 2> /dev/null | grep -q 'libcuda\.so\.1 '); then driver=yes; fi
    for d in $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do
        if [ -e "$d/libcuda.so.1" ]; then driver=yes; fi
    done
    if [ "$driver" = no ]; then
        check "stub libcuda.so, no driver" 2 env LD_LIBRARY_PATH="$(dirname "$stub")" "$gen" check --quick
        has "stub, no driver: named" "$dir/err" "no NVIDIA driver is installed .*libcuda.so is .*/stubs/libcuda.so.*, the CUDA toolkit's stub library"
    else
        echo "skip: a libcuda.so.1 is installed (the no-driver case needs a machine without one)"
    fi
else
    echo "skip: no stub libcuda.so under $cuda"
fi

check "no action" 64 "$gen" cache
check "unknown action" 64 "$gen" cache bogus
check "config flag on ls" 64 "$gen" cache ls --head-dim 64
check "--all with a config flag" 64 "$gen" cache warm --all --head-dim 64
check "--jobs 0" 64 "$gen" cache warm --jobs 0
check "warm with driver-jit" 64 "$gen" cache warm --backend driver-jit
check "bad head_dim" 64 "$gen" cache warm --head-dim 100 --cache-dir "$c"
has "bad head_dim: named" "$dir/err" "head_dim 100"
check "help" 0 "$gen" cache --help
has "help: actions" "$dir/out" "cache warm"

summary
