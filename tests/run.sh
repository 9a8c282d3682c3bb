#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh Debian machine:
# installs what is missing, builds with ASan+UBSan and -Werror, runs the unit
# and integration tests with ctest, the threaded modules' tests again under
# ThreadSanitizer, the quickstart in --smoke mode on an
# optimised -Werror build, then a short libFuzzer run of each fuzz target
# (when clang is available).
#   tests/run.sh            everything
#   RS_FUZZ_SECONDS=600 tests/run.sh   a longer fuzz run
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

bash deploy/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
build=${RS_TEST_BUILD_DIR:-$root/build-test}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DRS_SANITIZE=ON -DRS_WERROR=ON \
      -DRS_TESTS=ON -DRS_BENCH=ON >/dev/null
cmake --build "$build" -j "$jobs"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build" -L 'unit|integration' --output-on-failure -j "$jobs"

# The modules that run threads again under ThreadSanitizer: the parser
# (parse/threads), rssub's dump with its writer, opener and remover threads
# and what they call (dumpzip, the ledger, rs_http's pause), the syncer's
# thread and apply's jobs waiting on it, the SQLite checkpointer
# thread of rssub's ledger and rssource's state (rs_sqlckpt), and
# rssource's hashing thread (hashwork).
tbuild=${RS_TSAN_BUILD_DIR:-$root/build-tsan-test}
tsan_tests="test_parse test_sub_dump test_sub_dumpzip test_sub_ledger test_http"
tsan_tests="$tsan_tests test_sub_syncer test_sub_apply test_source_state"
tsan_tests="$tsan_tests test_source_hashwork"
cmake -S . -B "$tbuild" -DCMAKE_BUILD_TYPE=Debug -DRS_TSAN=ON -DRS_WERROR=ON \
      -DRS_TESTS=ON -DRS_BENCH=OFF >/dev/null
# shellcheck disable=SC2086
cmake --build "$tbuild" -j "$jobs" --target $tsan_tests
TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1} \
  ctest --test-dir "$tbuild" --output-on-failure -j "$jobs" \
        -R "^unit/($(echo "$tsan_tests" | tr ' ' '|'))\$"

# The README's quickstart, non-interactively, on an optimised -Werror build
# (some warnings only appear with the optimiser on), which also compiles
# the tests and benchmarks, so that their -O2 warnings fail here too.
qsrun=$(mktemp -d /tmp/rs-quickstart.XXXXXX)
RS_BUILD_DIR=${RS_RELEASE_BUILD_DIR:-$root/build-release-test} \
RS_RUN_DIR=$qsrun \
RS_CMAKE_ARGS="-DRS_WERROR=ON -DRS_TESTS=ON -DRS_BENCH=ON" \
  deploy/quickstart.sh --smoke
rm -rf "$qsrun"

if command -v clang >/dev/null 2>&1; then
  fbuild=${RS_FUZZ_BUILD_DIR:-$root/build-fuzz}
  CC=clang cmake -S . -B "$fbuild" -DCMAKE_BUILD_TYPE=Debug -DRS_FUZZ=ON \
        -DRS_TESTS=OFF -DRS_BENCH=OFF -DRS_WERROR=ON >/dev/null
  cmake --build "$fbuild" -j "$jobs" --target fuzz_all
  bash tests/fuzz/run.sh "$fbuild" "${RS_FUZZ_SECONDS:-20}"
else
  echo "fuzz: clang not found, fuzz targets skipped"
fi
