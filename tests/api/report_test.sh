#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
# tools/report.sh end to end, in its quick mode (perf-peers.sh over shm and
# tcp, perf-coll.sh, a few iterations each): it exits 0 and its report.md
# has every section, the machine and the commit, the commands, tables whose
# threadwire column is a number in every row (a ratio beside each peer
# this machine has), and the plots, each a PNG -- or, without gnuplot,
# the message that says so. Then --render with gnuplot hidden from PATH:
# no PNG, the message on stderr and in the notes. And a usage error.
#   report_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/r
md=$out/report.md

fail() {
  echo "report_test: $*"
  exit 1
}

rc=0
"$src/tools/report.sh" --bogus >/dev/null 2>"$tmp/usage" || rc=$?
if [ "$rc" -ne 2 ] || ! grep -q '^usage: tools/report.sh' "$tmp/usage"; then
  fail "an unknown option: want exit 2 and the usage, got $rc: $(cat "$tmp/usage")"
fi

start=$SECONDS
rc=0
"$src/tools/report.sh" --quick -o "$out" "$build" || rc=$?
echo "report_test: report.sh --quick took $((SECONDS - start)) s"
[ "$rc" -eq 0 ] || fail "report.sh --quick exited $rc"
[ -s "$md" ] || fail "no $md"

for s in "Machine and build" "How to read it" Commands "Headline ratios" \
  "Point to point over shm" "Point to point over tcp" \
  "Latency and bandwidth against message size" "Message rate against threads per process" \
  "Collective latency against size" Notes; do
  grep -q "^## $s" "$md" || fail "report.md has no section '## $s'"
done
grep -q '^\*\*Quick mode\*\*' "$md" || fail "report.md does not say it is quick"
grep -Eq '^\| CPUs \(nproc\) \| [0-9]+ \|$' "$md" || fail "report.md does not name the CPU count"
grep -Eq '^\| kernel \| Linux ' "$md" || fail "report.md does not name the kernel"
# The commit it names is one (others may commit meanwhile: not HEAD).
# shellcheck disable=SC2016 # the backquotes are Markdown's
commit=$(sed -n 's/^commit `\([^`]*\)`.*/\1/p' "$md")
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$src" rev-parse -q --verify "${commit%-dirty}^{commit}" >/dev/null ||
    fail "report.md does not name the commit: '$commit'"
fi
for s in "tools/perf-peers.sh shm" "tools/perf-peers.sh tcp" "tools/perf-coll.sh"; do
  grep -q "^REPS=1 .*$s .*# [0-9]* s$" "$md" || fail "report.md does not give the command '$s'"
done

# table SECTION: the lines of the tables under '## SECTION' (up to the
# next '## ').
table() {
  awk -v s="## $1" 'index($0, s) == 1 { f = 1; next } /^## / { f = 0 } f && /^\| /' "$md"
}
# check_rows SECTION MIN: at least MIN data rows in its tables, each with a
# number in the column its table's header calls threadwire.
check_rows() {
  table "$1" | awk -F'|' -v s="$1" -v min="$2" '
    /^\|---/ { next }
    $2 ~ /^ measurement/ { c = 0; for (i = 2; i <= NF; i++) if ($i == " threadwire ") c = i; next }
    { n++ }
    !c || $(c) !~ /^ [0-9]+([.][0-9]+)?(e[-+][0-9]+)? $/ { print "no threadwire number: " $0; bad = 1 }
    END { if (n < min) { print n " table rows, want " min " or more"; bad = 1 }; exit bad }' ||
    fail "the tables of '## $1' (above)"
}
check_rows "Headline ratios" 20 # shm, tcp: 2 latency, 2 bandwidth, 4 rate rows; 4 collectives
check_rows "Point to point over shm" 10
check_rows "Point to point over tcp" 10
check_rows "Latency and bandwidth against message size" 16 # 2 sizes x 2 tests x 2 modes, twice
check_rows "Message rate against threads per process" 14   # 2 x 2 x 2, and 6 collective rows
check_rows "Collective latency against size" 13
# A peer this machine has: numbers and ratios in its columns.
if command -v ucx_perftest >/dev/null; then
  table "Point to point over shm" | grep -Eq '^\| 8 B latency, us \(manual progress, spin\) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$' ||
    fail "no UCX latency and ratio in the shm table"
fi
if command -v mpirun >/dev/null && command -v mpicc >/dev/null; then
  table "Point to point over tcp" | grep -Eq '^\| 8 B latency, .* \| [0-9.]+ \| [0-9.]+ \|$' ||
    fail "no Open MPI latency and ratio in the tcp table"
  table "Collective latency against size" | grep -Eq '^\| allreduce 8 B \| [0-9.]+ \| .* \| [0-9.]+ \|$' ||
    fail "no Open MPI collective latency and ratio"
fi

pngs="lat-size.png bw-size.png rate-threads.png coll-size.png"
if command -v gnuplot >/dev/null; then
  for p in $pngs; do
    [ "$(head -c 4 "$out/$p" 2>/dev/null | od -An -c | tr -d ' ')" = '211PNG' ] ||
      fail "$p is not a PNG"
    grep -q "^!\[.*\]($p)$" "$md" || fail "report.md does not show $p"
  done
else
  grep -q 'gnuplot is not installed' "$md" || fail "no gnuplot, and report.md does not say so"
fi

# gnuplot hidden: a PATH of links to every other program (the first of
# each name, as PATH finds it).
mkdir "$tmp/bin"
IFS=: read -r -a dirs <<<"$PATH"
declare -A seen=([gnuplot]=1)
progs=()
for d in "${dirs[@]}"; do
  for f in "$d"/*; do
    b=${f##*/}
    if [ ! -x "$f" ] || [ -n "${seen[$b]:-}" ]; then continue; fi
    seen[$b]=1
    progs+=("$f")
  done
done
ln -s -t "$tmp/bin" "${progs[@]}"
rc=0
PATH=$tmp/bin "$src/tools/report.sh" --render "$out" 2>"$tmp/render.err" || rc=$?
[ "$rc" -eq 0 ] || { cat "$tmp/render.err"; fail "report.sh --render without gnuplot exited $rc"; }
grep -q 'gnuplot is not installed (Debian: gnuplot-nox): no plots' "$tmp/render.err" ||
  { cat "$tmp/render.err"; fail "--render without gnuplot: no message on stderr"; }
grep -q '^- gnuplot is not installed' "$md" || fail "--render without gnuplot: not in the notes"
for p in $pngs; do
  [ ! -e "$out/$p" ] || fail "--render without gnuplot left $p"
  ! grep -q "($p)" "$md" || fail "--render without gnuplot: report.md still shows $p"
done
check_rows "Point to point over shm" 10 2
echo "report_test: ok"
