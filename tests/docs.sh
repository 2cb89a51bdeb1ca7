#!/bin/sh
# README.md's claims checked against this build: every ptxas advisory code "(Cnnnn)" that the
# nvJitLink compile of the default kernel prints (fa3-gen --info --backend nvjitlink) is named in
# README's nvJitLink bullet, so the note says all that this backend costs.
# $1: the fa3-gen program, $2: README.md.
set -u
gen=$1
readme=$2
dir=$(mktemp -d /tmp/fa3jit-test-docs-XXXXXX)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/sh_util.sh"

check "--info --backend nvjitlink" 0 "$gen" --info --backend nvjitlink --no-cache
codes=$(grep -o '(C[0-9]\{4\})' "$dir/out" | tr -d '()' | sort -u)
if [ -n "$codes" ]; then ok "nvJitLink advisories: $(echo $codes)"; else bad "no advisory code in:"; sed 's/^/  | /' "$dir/out"; fi
# the bullet: from '- **nvJitLink**' to the next line that starts a bullet or is empty
sed -n '/^- \*\*nvJitLink\*\*/,/^\(- \|$\)/p' "$readme" | sed '$d' > "$dir/note"
[ -s "$dir/note" ] || sed -n '/^- \*\*nvJitLink\*\*/p' "$readme" > "$dir/note"
for c in $codes; do
    if grep -q "$c" "$dir/note"; then ok "README's nvJitLink note names $c"
    else bad "README's nvJitLink note does not name $c:"; sed 's/^/  | /' "$dir/note"; fi
done
summary
