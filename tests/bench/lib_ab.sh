# shellcheck shell=bash
# lib_ab.sh - sourced by the benchmarks that compare two builds, A and B,
# in alternating rounds (bench_restart.sh, bench_bigfile.sh): each round
# appends a line "TAG FIGURE..." (TAG a or b) to a rounds file, and
# ab_table prints the median of each figure per build with B/A, as the
# markdown table docs/benchmarks.md takes.

# ab_median FILE TAG COLUMN: the median of COLUMN over TAG's lines
ab_median() {
    awk -v t="$2" -v c="$3" '$1 == t { print $c }' "$1" | sort -g |
        awk '{ v[NR] = $1 }
             END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ab_table FILE TITLE A B COLUMN LABEL...: a row per LABEL, the figures
# from COLUMN on, one column each
ab_table() {
    local file=$1 title=$2 a=$3 b=$4 col=$5 label ma mb
    shift 5
    echo "| $title | A ($a) | B ($b) | B/A |"
    echo "|---|---:|---:|---:|"
    for label in "$@"; do
        ma=$(ab_median "$file" a "$col")
        mb=$(ab_median "$file" b "$col")
        echo "| $label | $ma | $mb | $(awk -v a="$ma" -v b="$mb" \
            'BEGIN { printf "%.3f", (a > 0 ? b / a : 0) }') |"
        col=$((col + 1))
    done
}
