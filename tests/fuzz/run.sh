#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build for an equal share of a time
# budget, one after the other:
#   tests/fuzz/run.sh BUILD_DIR SECONDS
# Seeds: every *.xml under tests/data/ (up to 1 MB) plus
# tests/fuzz/corpus/<target>/. The corpus a run grows goes to a temp dir
# that is removed afterwards (never into the repo); crash inputs are kept in
# BUILD_DIR/fuzz-artifacts/<target>/. One summary line per target, then
# `fuzz: N passed, M failed`; exits 1 when any target failed.
set -uo pipefail

if [ $# -ne 2 ] || ! [[ $2 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$(cd "$1" 2>/dev/null && pwd) || { echo "fuzz: no build dir $1" >&2; exit 2; }
budget=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bindir=$build/tests/fuzz

targets=()
for f in "$bindir"/fuzz_*; do
  [ -f "$f" ] && [ -x "$f" ] && targets+=("$f")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no targets in $bindir (configure with CC=clang -DRS_FUZZ=ON," \
       "build --target fuzz_all)" >&2
  exit 1
fi
per=$(( budget / ${#targets[@]} ))
[ "$per" -ge 1 ] || per=1

work=$(mktemp -d "${TMPDIR:-/tmp}/rsfuzz.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

# Data files can share a name across valid/ and invalid/: name the copies
# by their path.
mkdir "$work/xml"
while IFS= read -r -d '' f; do
  cp "$f" "$work/xml/$(printf '%s' "$f" | md5sum | cut -c1-16).xml"
done < <(find "$root/tests/data" -type f -name '*.xml' -size -1025k -print0 2>/dev/null)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

passed=0 failed=0
for t in "${targets[@]}"; do
  name=$(basename "$t")
  corpus=$work/corpus-$name
  art=$build/fuzz-artifacts/$name/
  log=$work/$name.log
  mkdir -p "$corpus" "$art"
  seeds=("$work/xml")
  [ -d "$here/corpus/$name" ] && seeds+=("$here/corpus/$name")

  (cd "$work" && "$t" -max_total_time="$per" -rss_limit_mb=2048 -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$art" \
      "$corpus" "${seeds[@]}") >"$log" 2>&1
  rc=$?

  runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  ncorp=$(find "$corpus" -type f | wc -l)
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "$name: ok, ${runs:-?} runs in ${per}s, cov ${cov:-?}, $ncorp new corpus inputs"
  else
    failed=$((failed + 1))
    unit=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    echo "$name: FAILED (exit $rc) ${unit:+input $unit}; reproduce: $t ${unit:-<input>}"
    echo "---- last lines of $name's log ----" >&2
    tail -n 40 "$log" >&2
    echo "----" >&2
  fi
done

echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
