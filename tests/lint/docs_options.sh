#!/usr/bin/env bash
# The option reference in docs/operations.md and in man/PROG.1 is generated
# from each program's --help, between "BEGIN GENERATED: PROG options" and
# "END GENERATED: PROG options" markers. This lint fails when --help prints
# an option that a block lacks, or a block lists one --help no longer has;
# other drift (wording, defaults) is only reported. --write regenerates.
#
#   docs_options.sh [--write] [SOURCE_DIR [BUILD_DIR]]
#
# BUILD_DIR holds the built programs (default SOURCE_DIR/build).
set -u
export LC_ALL=C

write=0
if [ "${1:-}" = "--write" ]; then write=1; shift; fi
root=${1:-.}
build=${2:-$root/build}
md=$root/docs/operations.md

progs="rshub:hub/rshub rssub:subscriber/rssub rssource:source/rssource rsbridge:bridge/rsbridge rspub:tools/rspub rsdoc:tools/rsdoc"

# --help on stdin -> one record per line: "S<TAB>section" or
# "O<TAB>spec<TAB>description". An option line is indented at most six
# columns and starts with -X, or --name; its description follows two or more
# spaces, or comes on lines indented eight or more after it (continuation).
# (No regex intervals: Debian's awk is mawk.)
parse_help() {
  awk '
    function flush() { if (open) print "O\t" spec "\t" desc; open = 0 }
    /^(Options|[A-Z][a-z]+ options)/ {
      flush(); match($0, /^(Options|[A-Z][a-z]+ options)/)
      print "S\t" substr($0, 1, RLENGTH); next
    }
    { ind = match($0, /[^ ]/) - 1; line = substr($0, ind + 1) }
    ind >= 1 && ind <= 6 && line ~ /^(-[A-Za-z0-9], )?--[a-z[]/ {
      flush()
      if (match(line, /  +/)) {
        spec = substr(line, 1, RSTART - 1); desc = substr(line, RSTART + RLENGTH)
      } else { spec = line; desc = "" }
      open = 1; next
    }
    open && ind >= 8 && line !~ /^-/ {
      desc = desc == "" ? line : desc " " line; next
    }
    { flush() }
    END { flush() }'
}

# Records -> option names, one per line: --name (for --[no-]name too) and -X.
names_of_records() {
  awk -F'\t' '$1 == "O" {
    s = $2
    if (match(s, /^-[A-Za-z0-9],/)) print substr(s, 1, 2)
    if (match(s, /--(\[no-\])?[a-z0-9][a-z0-9-]*/)) {
      n = substr(s, RSTART, RLENGTH); sub(/\[no-\]/, "", n); print n
    }
  }'
}

# Records -> the Markdown block body, blank lines around the tables.
md_of_records() {
  awk -F'\t' '
    function esc(s) {
      gsub(/\|/, "\\|", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s)
      gsub(/\*/, "\\*", s); return s
    }
    $1 == "S" { cur = $2; next }
    $1 == "O" {
      if (ns == 0 || sec[ns] != cur) sec[++ns] = cur
      d = $3; def = ""
      if (match(d, / ?\(default: [^()]*\)$/)) {
        def = substr(d, RSTART, RLENGTH); d = substr(d, 1, RSTART - 1)
        sub(/^ ?\(default: /, "", def); sub(/\)$/, "", def)
      }
      row[ns] = row[ns] "| `" $2 "` | " \
        (def == "" ? "" : "`" def "`") " | " esc(d) " |\n"
    }
    END {
      print ""
      for (i = 1; i <= ns; i++) {
        if (ns > 1) printf "%s**%s**\n\n", (i > 1 ? "\n" : ""), sec[i]
        printf "| option | default | description |\n|---|---|---|\n%s", row[i]
      }
      print ""
    }'
}

# Records -> the roff block body (-man macros): one .TP per option.
man_of_records() {
  awk -F'\t' '
    function esc(s) {
      gsub(/\\/, "\\e", s); gsub(/-/, "\\-", s); return s
    }
    $1 == "S" { cur = $2; next }
    $1 == "O" {
      if (ns == 0 || sec[ns] != cur) sec[++ns] = cur
      s = $2; tag = ""
      if (match(s, /^-[A-Za-z0-9], /)) {
        tag = "\\fB" esc(substr(s, 1, 2)) "\\fR, "; s = substr(s, RLENGTH + 1)
      }
      match(s, /^--(\[no-\])?[a-z0-9][a-z0-9-]*/)
      tag = tag "\\fB" esc(substr(s, 1, RLENGTH)) "\\fR"; s = substr(s, RLENGTH + 1)
      if (s != "") tag = tag esc(substr(s, 1, 1)) "\\fI" esc(substr(s, 2)) "\\fR"
      d = esc($3); if (d ~ /^[.'"'"']/) d = "\\&" d
      out[ns] = out[ns] ".TP\n" tag "\n" d "\n"
    }
    END {
      for (i = 1; i <= ns; i++) {
        if (ns > 1) printf ".SS \"%s\"\n", sec[i]
        printf "%s", out[i]
      }
    }'
}

# The text between the markers of prog in file (markers excluded).
block_of() {   # file prog
  awk -v b="BEGIN GENERATED: $2 options" -v e="END GENERATED: $2 options" '
    index($0, e) { inb = 0 } inb { print } index($0, b) { inb = 1 }' "$1"
}

has_markers() {   # file prog
  grep -qF "BEGIN GENERATED: $2 options" "$1" && grep -qF "END GENERATED: $2 options" "$1"
}

replace_block() {   # file prog newbody-file
  awk -v b="BEGIN GENERATED: $2 options" -v e="END GENERATED: $2 options" -v nb="$3" '
    index($0, e) { inb = 0 }
    !inb { print }
    index($0, b) { inb = 1; while ((getline l < nb) > 0) print l; close(nb) }' \
    "$1" > "$1.tmp" && mv "$1.tmp" "$1"
}

# Option names a block mentions: roff escapes undone, --[no-]x read as --x.
names_in_block() {
  sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\&//g' -e 's/--\[no-\]/--/g' |
    grep -oE -- '(^|[^A-Za-z0-9-])--?[A-Za-z0-9][A-Za-z0-9-]*' |
    sed -E 's/^[^-]*//' | sort -u
}

fails=0
checked=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

for p in $progs; do
  name=${p%%:*}
  bin=$build/${p#*:}
  man=$root/man/$name.1
  if [ ! -x "$bin" ]; then
    echo "lint/docs_options: $bin is not built (build it, or pass BUILD_DIR)"
    fails=$((fails + 1)); continue
  fi
  if ! "$bin" --help > "$tmp/help" 2>&1; then
    echo "lint/docs_options: $name --help failed"; fails=$((fails + 1)); continue
  fi
  parse_help < "$tmp/help" > "$tmp/rec"
  names_of_records < "$tmp/rec" | sort -u > "$tmp/want"
  if [ ! -s "$tmp/want" ]; then
    echo "lint/docs_options: no option found in $name --help"; fails=$((fails + 1)); continue
  fi
  md_of_records < "$tmp/rec" > "$tmp/md"
  man_of_records < "$tmp/rec" > "$tmp/man"
  for doc in "$md:$tmp/md" "$man:$tmp/man"; do
    file=${doc%%:*}; gen=${doc#*:}
    checked=$((checked + 1))
    if [ ! -f "$file" ] || ! has_markers "$file" "$name"; then
      echo "lint/docs_options: $file has no 'BEGIN/END GENERATED: $name options' block"
      fails=$((fails + 1)); continue
    fi
    if [ $write -eq 1 ]; then
      replace_block "$file" "$name" "$gen"
    fi
    block_of "$file" "$name" > "$tmp/have"
    # Only the option column (Markdown) or the .TP tag lines (roff) name options.
    if [ "$file" = "$md" ]; then
      awk -F'`' '/^\| `/ { print $2 }' "$tmp/have"
    else
      awk 'prev == ".TP" { print } { prev = $0 }' "$tmp/have"
    fi | names_in_block > "$tmp/got"
    missing=$(comm -23 "$tmp/want" "$tmp/got" | tr '\n' ' ')
    stale=$(comm -13 "$tmp/want" "$tmp/got" | tr '\n' ' ')
    if [ -n "$missing" ] || [ -n "$stale" ]; then
      echo "lint/docs_options: $file ($name):${missing:+ missing $missing}${stale:+ no longer in --help: $stale}"
      echo "  regenerate: tests/lint/docs_options.sh --write $root $build"
      fails=$((fails + 1))
    elif ! cmp -s "$gen" "$tmp/have"; then
      echo "lint/docs_options: note: $file ($name) differs from --help in wording or defaults; --write regenerates it"
    fi
  done
done

if [ $fails -ne 0 ]; then
  echo "lint/docs_options: $((checked - fails < 0 ? 0 : checked - fails)) passed, $fails failed"
  exit 1
fi
echo "lint/docs_options: $checked passed, 0 failed"
