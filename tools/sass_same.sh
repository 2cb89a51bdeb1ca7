#!/usr/bin/env bash
# Whether the generator's PTX change since BASE (a git revision) leaves the machine code as it
# was, with no GPU: builds BASE in a temporary worktree, writes the PTX of every ptx-hash case
# for BASE and for this work tree's build (test_ptx_hash with FA3JIT_PTX_DUMP_DIR; this tree's
# tests/test_ptx_hash.c is built into BASE too, so BASE needs no dump support of its own),
# compiles each case whose PTX differs with ptxas for sm_90a, and compares the two cubins' code
# sections (.text.*) byte for byte. A change whose cases all compile to the same code runs the
# kernels the GPU checks already ran.
#
#   tools/sass_same.sh BASE [BUILD]   BUILD: this tree's build directory (default build, built
#                                     first with ninja)
#   SASS_SAME_ALL=1: every knob set of the ptx-hash cases, not only the default plan's
#   SASS_SAME_JOBS=N: parallel ptxas runs (default: nproc)
#   SASS_SAME_MATCH=ERE: only the cases whose name (e.g. hd128_bf16_causal_sm_90a_bn128_st2)
#   matches the extended regular expression
#
# Exit 0: every case whose PTX differs has the same code (or none differs); 1: some differ, fail
# to compile or are new cases (listed); 2: bad usage or a build that failed. About 0.4 s of ptxas per
# changed case and side on a 2-core machine (the default plan's 1144 cases: ~8 min at most).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-}
build=$(cd "$root" && realpath -m "${2:-build}")
[ -n "$base" ] || { echo "usage: $0 BASE [BUILD]" >&2; exit 2; }
git -C "$root" rev-parse --verify -q "$base^{commit}" > /dev/null ||
  { echo "sass_same: '$base' is not a commit" >&2; exit 2; }
ptxas=${PTXAS:-/usr/local/cuda/bin/ptxas}
[ -x "$ptxas" ] || { echo "sass_same: no ptxas at $ptxas (set PTXAS)" >&2; exit 2; }
jobs=${SASS_SAME_JOBS:-$(nproc)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "sass_same: SASS_SAME_JOBS '$jobs' is not a positive count" >&2; exit 2; }
ninja -C "$build" tests/test_ptx_hash > /dev/null || { echo "sass_same: $build does not build" >&2; exit 2; }

work=$(mktemp -d /tmp/sass_same.XXXX)
cleanup() {
  git -C "$root" worktree remove --force "$work/base" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
git -C "$root" worktree add -q --detach "$work/base" "$base" || exit 2
cp "$root/tests/test_ptx_hash.c" "$work/base/tests/test_ptx_hash.c"
# the same options as this build (tools/setup-and-run.sh's)
opts=$(sed -n 's/^Build Options: //p' "$build/meson-logs/meson-log.txt" | tail -1)
# shellcheck disable=SC2086
(cd "$work/base" && meson setup build $opts > "$work/setup.log" 2>&1 &&
  ninja -C build tests/test_ptx_hash > "$work/build.log" 2>&1) ||
  { echo "sass_same: $base does not build with this tree's test_ptx_hash.c:"; tail -15 "$work"/*.log; exit 2; }

mkdir -p "$work/old" "$work/new" "$work/cubin"
for side in old new; do
  exe=$build/tests/test_ptx_hash; [ $side = old ] && exe=$work/base/build/tests/test_ptx_hash
  FA3JIT_PTX_DUMP_DIR=$work/$side "$exe" "$root/tests/ptx_hashes.txt" > /dev/null 2>&1
  n=$(find "$work/$side" -name '*.ptx' | wc -l)
  [ "$n" -gt 0 ] || { echo "sass_same: no PTX written for the $side side" >&2; exit 2; }
done
changed=$work/changed.txt
(cd "$work/new" && for f in *.ptx; do
   [ "${SASS_SAME_ALL:-0}" = 1 ] || [[ $f != *+* ]] || continue
   [ -z "${SASS_SAME_MATCH:-}" ] || grep -qE -- "$SASS_SAME_MATCH" <<<"${f%.ptx}" || continue
   [ -f "../old/$f" ] || { echo "$f (new case)"; continue; }
   cmp -s "$f" "../old/$f" || echo "$f"
 done) > "$changed"
n_changed=$(grep -vc ' (new case)' "$changed")
n_new=$(grep -c ' (new case)' "$changed")
grep ' (new case)' "$changed" | sed 's/^/  /'
echo "sass_same: $n_changed cases' PTX differs from $base's$([ "${SASS_SAME_ALL:-0}" = 1 ] || echo ' (default plan)'); compiling them"
export work ptxas
compare_one() {
  local f=$1
  "$ptxas" -arch=sm_90a "$work/old/$f" -o "$work/cubin/$f.old" 2> /dev/null || { echo "$f: base does not compile"; return; }
  "$ptxas" -arch=sm_90a "$work/new/$f" -o "$work/cubin/$f.new" 2> /dev/null || { echo "$f: does not compile"; return; }
  python3 - "$work/cubin/$f.old" "$work/cubin/$f.new" << 'EOF' || echo "$f: code differs"
import struct, sys
def code(path):
    """The ELF's .text.* sections by name."""
    b = open(path, "rb").read()
    if b[:4] != b"\x7fELF" or b[4] != 2:
        sys.exit(2)
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", b, shoff + i * shentsize) for i in range(shnum)]
    names = secs[shstrndx][4]
    def name(off):
        return b[names + off:b.index(b"\0", names + off)].decode()
    return {name(s[0]): b[s[4]:s[4] + s[5]] for s in secs if name(s[0]).startswith(".text")}
a, b = code(sys.argv[1]), code(sys.argv[2])
sys.exit(0 if a and a == b else 1)
EOF
  rm -f "$work/cubin/$f.old" "$work/cubin/$f.new"
}
export -f compare_one
bad=$(grep -v ' (new case)' "$changed" | xargs -r -P "$jobs" -I{} bash -c 'compare_one "$1"' _ {})
if [ -n "$bad" ]; then
  echo "$bad" | sed 's/^/  /'
  echo "sass_same: $(echo "$bad" | wc -l) of $n_changed changed cases do not compile to the same code"
  exit 1
fi
echo "sass_same: all $n_changed changed cases compile to the same code as $base's"
if [ "$n_new" -gt 0 ]; then
  echo "sass_same: $n_new cases are new (listed above): $base has no code to compare them with"
  exit 1
fi
