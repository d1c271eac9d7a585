#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Sizes the house style sets: no source file of the library or its tools
# over 1,000 lines, no function over 120 (a body runs from a `{` alone at
# the start of a line to the next `}` alone there -- clang-format puts a
# function's braces so, and nothing else). A lint test (repo_sizes).
#   tools/check-sizes.sh [--report]    --report: the ten largest of each
set -euo pipefail
cd "$(dirname "$0")/.."
max_file=1000
max_fn=120
files=$(git ls-files 'src/*.c' 'src/*.h' 'tools/*.c' 'tools/*.h' 2>/dev/null ||
  find src tools -name '*.[ch]')
fns=$(awk -v max="$max_fn" '
  FNR == 1 { start = 0 }
  /^\{$/ { start = FNR; name = prev }
  /^\}/ && start { n = FNR - start - 1; printf "%d %s:%d %s\n", n, FILENAME, start, name; start = 0 }
  { prev = $0 }' $files | sort -rn)
bad=0
while read -r n where name; do
  [ "$n" -gt "$max_fn" ] || break
  echo "size: $where: a function of $n lines (at most $max_fn): $name"
  bad=1
done <<<"$fns"
while read -r n f; do
  [ "$f" = total ] && continue
  [ "$n" -gt "$max_file" ] || continue
  echo "size: $f has $n lines (at most $max_file)"
  bad=1
done < <(wc -l $files | sort -rn)
if [ "${1:-}" = --report ]; then
  echo "largest functions:"; head -10 <<<"$fns"
  echo "largest files:"; wc -l $files | sort -rn | sed -n 2,11p
fi
[ $bad -eq 0 ] && echo "sizes: no file over $max_file lines, no function over $max_fn"
exit $bad
