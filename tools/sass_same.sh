#!/usr/bin/env bash
# Whether the generator's PTX change since BASE (a git revision) leaves the compiled kernels as
# they were, with no GPU: builds BASE in a temporary worktree, writes the PTX of every ptx-hash
# case for BASE and for this work tree's build (test_ptx_hash with FA3JIT_PTX_DUMP_DIR; this
# tree's tests/test_ptx_hash.c is built into BASE too, so BASE needs no dump support of its own),
# compiles each case whose PTX differs with ptxas for sm_90a, and compares the two cubins byte
# for byte (code, registers, parameter block, shared memory, launch bounds: the whole file). A
# change whose cases all compile to the same cubins runs the kernels the GPU checks already ran.
#
#   tools/sass_same.sh BASE [BUILD]   BUILD: this tree's build directory (default build, built
#                                     first with ninja)
#   SASS_SAME_ALL=1: every knob set of the ptx-hash cases, not only the default plan's
#   SASS_SAME_MATCH=ERE: only the cases whose name (e.g. hd128_bf16_causal_sm_90a_bn128_st2)
#   matches the extended regular expression (one that selects no case is an error)
#   SASS_SAME_JOBS=N: parallel ptxas runs (default: nproc)
#
# Exit 0: every selected case whose PTX differs compiles to the same cubin (or none differs);
# 1: some do not, fail to compile, or are cases only one side has (listed); 2: bad usage, a
# build that failed, or a side that could not write a case's PTX. About 0.4 s of ptxas per
# changed case and side on a 2-core machine (the default plan's 1152 cases: ~8 minutes at most).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-}
build=$(cd "$root" && realpath -m "${2:-build}")
die() { echo "sass_same: $*" >&2; exit 2; }
[ -n "$base" ] || die "usage: $0 BASE [BUILD]"
git -C "$root" rev-parse --verify -q "$base^{commit}" > /dev/null || die "'$base' is not a commit"
ptxas=${PTXAS:-/usr/local/cuda/bin/ptxas}
[ -x "$ptxas" ] || die "no ptxas at $ptxas (set PTXAS)"
jobs=${SASS_SAME_JOBS:-$(nproc)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "SASS_SAME_JOBS '$jobs' is not a positive count"
match=${SASS_SAME_MATCH:-}
if [ -n "$match" ]; then
  grep -qE -- "$match" <<< "" 2> /dev/null; [ $? -lt 2 ] || die "SASS_SAME_MATCH '$match' is not an extended regular expression"
fi
ninja -C "$build" tests/test_ptx_hash > /dev/null || die "$build does not build"

git -C "$root" worktree prune # a worktree of an earlier run that was killed
work=$(mktemp -d /tmp/sass_same.XXXX)
cleanup() {
  git -C "$root" worktree remove --force "$work/base" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
git -C "$root" worktree add -q --detach "$work/base" "$base" || exit 2
cp "$root/tests/test_ptx_hash.c" "$work/base/tests/test_ptx_hash.c"
# the same options as this build (tools/setup-and-run.sh's)
opts=$(sed -n 's/^Build Options: //p' "$build/meson-logs/meson-log.txt" | tail -1)
# shellcheck disable=SC2086
(cd "$work/base" && meson setup build $opts > "$work/setup.log" 2>&1 &&
  ninja -C build tests/test_ptx_hash > "$work/build.log" 2>&1) ||
  { tail -15 "$work"/*.log; die "$base does not build with this tree's test_ptx_hash.c (above)"; }

# Each side's PTX. test_ptx_hash fails on hashes that differ from tests/ptx_hashes.txt (expected
# on one side at least), but a case without PTX ends its loop: that is an error here.
mkdir -p "$work/old" "$work/new" "$work/cubin"
for side in old new; do
  exe=$build/tests/test_ptx_hash; [ $side = old ] && exe=$work/base/build/tests/test_ptx_hash
  FA3JIT_PTX_DUMP_DIR=$work/$side "$exe" "$root/tests/ptx_hashes.txt" > "$work/$side.log" 2>&1
  if grep -E ': no PTX \(|cannot write its PTX' "$work/$side.log"; then
    die "the $side side ($([ $side = old ] && echo "$base" || echo this build)) stopped at the case above"
  fi
  [ -n "$(find "$work/$side" -name '*.ptx' -print -quit)" ] || die "no PTX written for the $side side"
done

# The selected cases of either side, by name
select_cases() {
  (cd "$1" && for f in *.ptx; do
     [ "${SASS_SAME_ALL:-0}" = 1 ] || [[ $f != *+* ]] || continue
     [ -z "$match" ] || grep -qE -- "$match" <<< "${f%.ptx}" || continue
     echo "$f"
   done) | sort
}
select_cases "$work/old" > "$work/old.txt"
select_cases "$work/new" > "$work/new.txt"
n_sel=$(sort -u "$work/old.txt" "$work/new.txt" | wc -l)
[ "$n_sel" -gt 0 ] || die "no case selected${match:+ by SASS_SAME_MATCH '$match'}"
only=$( (comm -13 "$work/old.txt" "$work/new.txt" | sed 's/$/ (only in this build)/'
         comm -23 "$work/old.txt" "$work/new.txt" | sed "s/\$/ (only in $base)/") )
comm -12 "$work/old.txt" "$work/new.txt" | while read -r f; do
  cmp -s "$work/old/$f" "$work/new/$f" || echo "$f"
done > "$work/changed.txt"
n_changed=$(wc -l < "$work/changed.txt")
echo "sass_same: $n_sel cases selected$([ "${SASS_SAME_ALL:-0}" = 1 ] || echo ' (default plan)'); the PTX of $n_changed differs from $base's: compiling them"

export work ptxas
compare_one() { # prints "same NAME" or "NAME: why"
  local f=$1
  if ! "$ptxas" -arch=sm_90a "$work/old/$f" -o "$work/cubin/$f.old" 2> /dev/null; then
    echo "$f: does not compile in the base"
  elif ! "$ptxas" -arch=sm_90a "$work/new/$f" -o "$work/cubin/$f.new" 2> /dev/null; then
    echo "$f: does not compile"
  elif cmp -s "$work/cubin/$f.old" "$work/cubin/$f.new"; then
    echo "same $f"
  else
    echo "$f: the cubin differs"
  fi
  rm -f "$work/cubin/$f.old" "$work/cubin/$f.new"
}
export -f compare_one
xargs -r -P "$jobs" -I{} bash -c 'compare_one "$1"' _ {} < "$work/changed.txt" > "$work/results.txt"
n_same=$(grep -c '^same ' "$work/results.txt")
bad=$(grep -v '^same ' "$work/results.txt")
n_done=$(wc -l < "$work/results.txt")
[ "$n_done" -eq "$n_changed" ] || bad+=$'\n'"$((n_changed - n_done)) changed cases gave no result (a ptxas run killed?)"
[ -z "$only" ] || bad+=$'\n'"$only"
bad=$(sed '/^$/d' <<< "$bad")
if [ -n "$bad" ]; then
  sed 's/^/  /' <<< "$bad"
  echo "sass_same: $n_same of $n_changed changed cases compile to the same cubin as $base's; the lines above do not"
  exit 1
fi
echo "sass_same: all $n_changed changed cases compile to the same cubin as $base's"
