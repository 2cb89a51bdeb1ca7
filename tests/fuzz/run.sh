#!/bin/sh
# Runs a libFuzzer harness for a bounded time: run.sh FUZZER SECONDS ARTIFACT_DIR [SEED_DIR]
# With SEED_DIR: the seeds are copied into a fresh temporary corpus that the run grows (the source
# tree is never written). Without: a corpus-free run, starting from nothing. A crash leaves its
# input in ARTIFACT_DIR (crash-*, leak-*, timeout-*, oom-*); replay it with FUZZER FILE.
set -u
fuzzer=$1
secs=$2
artifacts=$3
seeds=${4:-}
mkdir -p "$artifacts"
opts="-max_total_time=$secs -timeout=20 -rss_limit_mb=4096 -print_final_stats=1"
if [ -n "$seeds" ]; then
    corpus=$(mktemp -d /tmp/fa3jit-fuzz-corpus-XXXXXX)
    trap 'rm -rf "$corpus"' EXIT
    cp "$seeds"/* "$corpus"/
    # shellcheck disable=SC2086
    "$fuzzer" $opts -artifact_prefix="$artifacts/" "$corpus"
else
    # shellcheck disable=SC2086
    "$fuzzer" $opts -artifact_prefix="$artifacts/"
fi
