# Helpers of the shell tests (cli_cache.sh, cli_env.sh, install.sh), sourced once $dir names the
# test's temporary folder: pass/fail counters, ok/bad, check (a command's exit status; its output
# left in $dir/out and $dir/err), has (a pattern in a file), count (a string on exactly N lines),
# summary (the 'N passed, M failed' line; the status of the script).
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
check() { # check "what" expected-exit command...
    what=$1; want=$2; shift 2
    "$@" > "$dir/out" 2> "$dir/err"; rc=$?
    if [ "$rc" = "$want" ]; then ok "$what (exit $rc)"; else
        bad "$what: exit $rc, expected $want"; sed 's/^/  | /' "$dir/out" "$dir/err"; fi
}
has() { # has "what" file pattern
    if grep -Eq -- "$3" "$2"; then ok "$1"; else bad "$1: no /$3/ in:"; sed 's/^/  | /' "$2"; fi
}
count() { # count "what" file fixed-string n
    got=$(grep -Fc -- "$3" "$2")
    if [ "$got" = "$4" ]; then ok "$1"; else
        bad "$1: '$3' on $got lines of $(basename "$2"), expected $4:"; sed 's/^/  | /' "$2"; fi
}
summary() {
    echo "$pass passed, $fail failed"
    [ "$fail" = 0 ]
}
