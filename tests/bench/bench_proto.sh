#!/usr/bin/env bash
# Builds bench_proto optimised (Release, in build-bench/ or
# $RS_BENCH_BUILD_DIR) and runs it; arguments go to bench_proto, e.g.
#   tests/bench/bench_proto.sh --resync /tmp/resync-src
# where /tmp/resync-src is a checkout of resync/resync kept outside this tree.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${RS_BENCH_BUILD_DIR:-$root/build-bench}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
         -DRS_TESTS=OFF -DRS_BENCH=ON &&
       cmake --build "$build" -j "$(nproc)" --target bench_proto; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "bench_proto.sh: build failed" >&2
  exit 1
fi
"$build/tests/bench/bench_proto" "$@"
