#!/usr/bin/env bash
# Fuzzes every target for SECONDS each (default 5) with -max_len=65536, starting from the
# committed seeds; fails on the first crash, sanitizer report, abort or failed check. Targets:
# fuzz_decode_<codec> (every decoder), fuzz_message (every request message the server reads)
# and fuzz_push (the Push path into an in-process core); the last two are absent from a
# GA_KERNELS_ONLY build and are then skipped with a note.
# Usage: tests/fuzz/run.sh [BUILD_DIR (default build-fuzz)] [SECONDS]
# The build dir must be configured with -DCMAKE_C_COMPILER=clang -DGA_BUILD_FUZZ=ON. New corpus
# entries go to a temporary directory, never into the committed seeds; crash inputs are kept
# in BUILD_DIR/fuzz-artifacts/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build-fuzz}
seconds=${2:-5}
codecs="none fp16 bf16 2bit 1bit 1bit_scaled topk"

# target:corpus pairs
targets=""
for codec in $codecs; do targets="$targets fuzz_decode_$codec:$codec"; done
if grep -q '^GA_KERNELS_ONLY:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
    echo "run.sh: kernels-only build: fuzz_message and fuzz_push are not built, skipped"
else
    targets="$targets fuzz_message:message fuzz_push:push"
fi

artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=""
for pair in $targets; do
    target=${pair%%:*}
    corpus=${pair#*:}
    bin="$build/tests/fuzz/$target"
    if [ ! -x "$bin" ]; then
        echo "run.sh: $bin not built (configure with -DGA_BUILD_FUZZ=ON and build)" >&2
        exit 2
    fi
    mkdir -p "$work/$corpus"
    echo "== $target: ${seconds}s"
    if "$bin" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$artifacts/$corpus-" "$work/$corpus" "$here/corpus/$corpus" >"$work/$corpus.log" 2>&1; then
        grep -E "^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb|#[0-9]+[[:space:]]+DONE)" \
            "$work/$corpus.log" || true
    else
        echo "FAILED: $target (log tail below; crash input under $artifacts)"
        tail -n 40 "$work/$corpus.log"
        failed="$failed $target"
    fi
done
if [ -n "$failed" ]; then
    echo "fuzz failures:$failed"
    exit 1
fi
echo "all fuzz targets ran ${seconds}s without a finding"
