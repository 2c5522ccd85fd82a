#!/usr/bin/env bash
# Fuzzes every decoder for SECONDS each (default 5) with -max_len=65536, starting from the
# committed seeds; fails on the first crash, sanitizer report or abort.
# Usage: tests/fuzz/run.sh [BUILD_DIR (default build-fuzz)] [SECONDS]
# The build dir must be configured with -DCMAKE_C_COMPILER=clang -DGA_BUILD_FUZZ=ON. New corpus
# entries go to a temporary directory, never into the committed seeds; crash inputs are kept
# in BUILD_DIR/fuzz-artifacts/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build-fuzz}
seconds=${2:-5}
codecs="none fp16 bf16 2bit 1bit 1bit_scaled topk"

artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=""
for codec in $codecs; do
    bin="$build/tests/fuzz/fuzz_decode_$codec"
    if [ ! -x "$bin" ]; then
        echo "run.sh: $bin not built (configure with -DGA_BUILD_FUZZ=ON and build)" >&2
        exit 2
    fi
    mkdir -p "$work/$codec"
    echo "== fuzz_decode_$codec: ${seconds}s"
    if "$bin" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$artifacts/$codec-" "$work/$codec" "$here/corpus/$codec" >"$work/$codec.log" 2>&1; then
        grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)" "$work/$codec.log" || true
    else
        echo "FAILED: fuzz_decode_$codec (log tail below; crash input under $artifacts)"
        tail -n 40 "$work/$codec.log"
        failed="$failed $codec"
    fi
done
if [ -n "$failed" ]; then
    echo "fuzz failures:$failed"
    exit 1
fi
echo "all fuzz targets ran ${seconds}s without a finding"
