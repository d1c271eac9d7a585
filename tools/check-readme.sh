#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# README's table of environment variables is what `tw_info --markdown`
# prints from the config tables, so it cannot drift from them.
#   tools/check-readme.sh TW_INFO            check (a lint test)
#   tools/check-readme.sh TW_INFO --update   rewrite README's table
set -euo pipefail
tw_info=$1
cd "$(dirname "$0")/.."
begin='<!-- variables: `tw_info --markdown` writes this table (tools/check-readme.sh --update) -->'
end='<!-- end of variables -->'
grep -qxF -- "$begin" README.md && grep -qxF -- "$end" README.md ||
  { echo "readme: the variable table's markers are missing from README.md"; exit 1; }
want=$("$tw_info" --markdown)
have=$(awk -v b="$begin" -v e="$end" '$0 == e {p = 0} p {print} $0 == b {p = 1}' README.md)
if [ "${2:-}" = --update ]; then
  awk -v b="$begin" -v e="$end" -v t="$want" '$0 == b {print; print t; skip = 1; next}
    $0 == e {skip = 0} !skip {print}' README.md >README.md.new
  mv README.md.new README.md
  echo "readme: variable table rewritten"
  exit 0
fi
if [ "$have" != "$want" ]; then
  diff <(echo "$have") <(echo "$want") || true
  echo "readme: the variable table differs from tw_info --markdown (tools/check-readme.sh TW_INFO --update)"
  exit 1
fi
echo "readme: the variable table matches the config tables"
