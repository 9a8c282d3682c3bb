#!/usr/bin/env bash
# Fails when project C code calls a function we ban: unbounded copies and
# formats, non-reentrant tokenizers, unchecked number parsing.
set -u
root=${1:-.}
pattern='\b(strcpy|strcat|sprintf|vsprintf|gets|strtok|atoi|atol|atoll|atof|tmpnam|mktemp)[[:space:]]*\('
hits=$(grep -rnE "$pattern" "$root"/proto "$root"/common "$root"/hub "$root"/subscriber \
       "$root"/source "$root"/tests --include='*.c' --include='*.h' 2>/dev/null)
if [ -n "$hits" ]; then
  echo "banned functions used (use snprintf, strtol/strtoull with checks, strtok_r, memcpy with sizes):"
  echo "$hits"
  exit 1
fi
echo "lint/banned: 1 passed, 0 failed"
