#!/usr/bin/env bash
# test_rsdoc_corpus.sh - the `rsdoc validate` command over every document of
# tests/data/corpus.tsv in its three modes (default: the spec; --lenient:
# the reader's view; --strict): exit code, the stdout verdict (NAME: OK
# CAPABILITY ROOT N entries, or a NAME:LINE: error: MSG line per error, the
# first the manifest's), warnings on stderr; then whole-corpus runs (each
# document's lines together, in order; exit 0 only when all are valid), and
# the spec's own examples valid by default in one run. Last line: "N
# passed, M failed".
set -u

here=$(cd "$(dirname "$0")" && pwd)
data=${RS_TEST_DATA:-$here/../data}
build=${RS_BUILD_DIR:-$here/../../build}
case $build in /*) ;; *) build=$PWD/$build ;; esac
case $data in /*) ;; *) data=$PWD/$data ;; esac
rsdoc=$build/tools/rsdoc
manifest=$data/corpus.tsv

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    printf 'FAIL %s\n' "$*"
}

if [ ! -x "$rsdoc" ]; then
    bad "rsdoc not built: $rsdoc"
    echo "$pass passed, $fail failed"
    exit 1
fi
if [ ! -r "$manifest" ]; then
    bad "no manifest: $manifest"
    echo "$pass passed, $fail failed"
    exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rsdoc-corpus.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# NAME in rsdoc's output is the path as given: run from the data directory
cd "$data" || exit 1

# contains HAYSTACK NEEDLE: case-insensitive substring test
contains() {
    local h=${1,,} n=${2,,}
    [[ "$h" == *"$n"* ]]
}

# run_one PATH [--lenient|--strict]: sets rc, out (stdout), err (stderr)
run_one() {
    local path=$1
    shift
    "$rsdoc" validate "$@" "$path" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
}

# check_error PATH MODE LINE MSG: rsdoc rejected PATH; its first stdout
# line has the manifest's line and message, and every line is an error of
# PATH.
check_error() {
    local path=$1 mode=$2 line=$3 msg=$4
    local others
    if [ "$rc" -eq 0 ]; then
        bad "$path [$mode]: exit 0, want non-zero; stdout: $out"
        return
    fi
    others=$(printf '%s\n' "$out" | grep -v -F -e "$path:" | head -3)
    if [ -n "$others" ]; then
        bad "$path [$mode]: stdout lines not about $path: $others"
        return
    fi
    out=$(printf '%s\n' "$out" | head -n 1)
    local want_prefix
    if [ "$line" -ne 0 ]; then
        want_prefix="$path:$line: error: "
    else
        want_prefix="$path"
    fi
    if [[ "$out" != "$want_prefix"* ]] || [[ "$out" != *": error: "* ]]; then
        bad "$path [$mode]: want '$want_prefix...', got: $out"
        return
    fi
    if [ "$msg" != "-" ] && ! contains "${out#*: error: }" "$msg"; then
        bad "$path [$mode]: message lacks '$msg': $out"
        return
    fi
    ok
}

# check_ok PATH MODE CAP ROOT N: rsdoc accepted PATH with exactly this line.
# (A warning's output: stderr.)
check_ok() {
    local path=$1 mode=$2 cap=$3 root=$4 n=$5
    local want="$path: OK $cap $root $n entries"
    if [ "$rc" -ne 0 ] || [ "$out" != "$want" ]; then
        bad "$path [$mode]: exit $rc, want exit 0 and '$want', got: $out"
        return
    fi
    ok
}

# check_warning PATH MODE LINE MSG: the first warning on stderr has the
# manifest's line and message.
check_warning() {
    local path=$1 mode=$2 line=$3 msg=$4 first
    first=$(printf '%s\n' "$err" | grep -m1 ': warning: ')
    if [ -z "$first" ]; then
        bad "$path [$mode]: no warning on stderr"
    elif [ "$line" -ne 0 ] && [[ "$first" != "$path:$line: warning: "* ]]; then
        bad "$path [$mode]: want warning at line $line, got: $first"
    elif ! contains "${first#*: warning: }" "$msg"; then
        bad "$path [$mode]: warning lacks '$msg': $first"
    else
        ok
    fi
}

ndocs=0
: >"$tmp/all-paths"
: >"$tmp/ok-paths"
: >"$tmp/spec-paths"
: >"$tmp/lenient-paths"
while IFS=$'\t' read -r path expect line msg cap entries root; do
    case $path in '' | '#'*) continue ;; esac
    ndocs=$((ndocs + 1))
    printf '%s\n' "$path" >>"$tmp/all-paths"
    case $expect in
    ok)
        printf '%s\n' "$path" >>"$tmp/ok-paths"
        printf '%s\n' "$path" >>"$tmp/spec-paths"
        for mode in default lenient strict; do
            if [ "$mode" = default ]; then run_one "$path"; else run_one "$path" "--$mode"; fi
            check_ok "$path" "$mode" "$cap" "$root" "$entries"
            if [ -n "$err" ]; then
                bad "$path [$mode]: unexpected stderr: $err"
            else
                ok
            fi
        done
        ;;
    warn)
        printf '%s\n' "$path" >>"$tmp/spec-paths"
        run_one "$path"
        check_ok "$path" default "$cap" "$root" "$entries"
        check_warning "$path" default "$line" "$msg"
        run_one "$path" --lenient
        check_ok "$path" lenient "$cap" "$root" "$entries"
        check_warning "$path" lenient "$line" "$msg"
        run_one "$path" --strict
        check_error "$path" strict "$line" "$msg"
        ;;
    lenient)
        printf '%s\n' "$path" >>"$tmp/lenient-paths"
        run_one "$path" --lenient
        check_ok "$path" lenient "$cap" "$root" "$entries"
        check_warning "$path" lenient "$line" "$msg"
        run_one "$path"
        check_error "$path" default "$line" "$msg"
        run_one "$path" --strict
        check_error "$path" strict "$line" "$msg"
        ;;
    error-*)
        for mode in default lenient strict; do
            if [ "$mode" = default ]; then run_one "$path"; else run_one "$path" "--$mode"; fi
            check_error "$path" "$mode" "$line" "$msg"
        done
        ;;
    *)
        bad "corpus.tsv: unknown expect '$expect' for $path"
        ;;
    esac
done <"$manifest"

if [ "$ndocs" -lt 50 ]; then
    bad "corpus.tsv lists only $ndocs documents"
fi

# Every document in one run: each document's lines together, in order, and
# a non-zero exit because some are invalid.
mapfile -t all <"$tmp/all-paths"
"$rsdoc" validate "${all[@]}" >"$tmp/out" 2>/dev/null
rc=$?
if [ "$rc" -eq 0 ]; then
    bad "whole corpus: exit 0 although invalid documents are in it"
else
    ok
fi
cut_names() { sed -E 's/^(.*): OK .*$/\1/; s/^(.*):[0-9]+: error: .*$/\1/; s/^(.*): error: .*$/\1/'; }
if cut_names <"$tmp/out" | uniq | diff -q - "$tmp/all-paths" >/dev/null; then
    ok
else
    bad "whole corpus: stdout is not each document's lines, in order:"
    cut_names <"$tmp/out" | uniq | diff - "$tmp/all-paths" | head -20
fi

# The valid documents together: exit 0.
mapfile -t oks <"$tmp/ok-paths"
if "$rsdoc" validate --strict "${oks[@]}" >"$tmp/out" 2>&1; then
    ok
else
    bad "all ok documents with --strict: exit non-zero:"
    grep -v ': OK ' "$tmp/out" | head -20
fi

# Everything valid by default (the ok and warn documents, the spec's own
# examples among them) in one default run: exit 0; and what the reader
# accepts (lenient documents too) in one --lenient run.
mapfile -t specs <"$tmp/spec-paths"
if "$rsdoc" validate "${specs[@]}" >"$tmp/out" 2>/dev/null; then
    ok
else
    bad "ok and warn documents by default: exit non-zero:"
    grep -v ': OK ' "$tmp/out" | head -20
fi
nex=$(grep -cE '/(core|notif-alpha|notif-2017|userguide)-' "$tmp/spec-paths")
if [ "$nex" -ge 42 ]; then ok; else bad "only $nex spec examples among the valid documents"; fi
mapfile -t lens <"$tmp/lenient-paths"
if "$rsdoc" validate --lenient "${specs[@]}" "${lens[@]}" >"$tmp/out" 2>/dev/null; then
    ok
else
    bad "ok, warn and lenient documents with --lenient: exit non-zero:"
    grep -v ': OK ' "$tmp/out" | head -20
fi
if "$rsdoc" validate "${lens[0]}" >/dev/null 2>&1; then
    bad "a lenient document is valid by default: ${lens[0]}"
else
    ok
fi

# Standard input is a document too.
if "$rsdoc" validate - <valid/core-ex14-resourcelist.xml >"$tmp/out" 2>&1 &&
   [ "$(cat "$tmp/out")" = "-: OK resourcelist urlset 2 entries" ]; then
    ok
else
    bad "stdin: $(cat "$tmp/out")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
