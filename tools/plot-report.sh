#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The plots of a tools/report.sh directory, with gnuplot, from the medians
# its runs left there (peers-shm.medians, peers-tcp.medians: perf-peers.sh
# MEDIANS=; coll.medians: perf-coll.sh MEDIANS=), a panel per transport
# or collective, threadwire's series beside each peer's:
#   lat-size.png      latency against message size (perf-peers SWEEP rows)
#   bw-size.png       bandwidth against message size
#   rate-threads.png  8 B message rate against threads per process
#   coll-size.png     collective latency against size (perf-coll, pin)
# A figure without data is left out. Prints the names of the PNGs written.
#   tools/plot-report.sh DIR
# Exit 1 (said why) without gnuplot (Debian: gnuplot-nox).
set -euo pipefail
if [ $# -ne 1 ] || [ ! -d "$1" ]; then echo "usage: tools/plot-report.sh REPORT_DIR" >&2; exit 2; fi
dir=$1
command -v gnuplot >/dev/null ||
  { echo "plot-report.sh: gnuplot is not installed (apt-get install gnuplot-nox): no plots" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot-report.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# p2p_data MEDIANS PREFIX OUT: the rows of kind PREFIX<x> as columns for
# gnuplot in OUT (x, each threadwire series -- the label's parenthesis --,
# each peer), the columns without a number left out; their titles on stdout.
p2p_data() {
  awk -F'|' -v pre="$2" -v out="$3" '
    function num(v) { return v ~ /^[0-9.]+([eE][-+]?[0-9]+)?$/ }
    NR == 1 { for (i = 4; i <= NF; i += 2) if ($i !~ /^(tw\/|base|spread)/) pcol[++np] = i
              for (p = 1; p <= np; p++) title[p] = $(pcol[p]); next }
    index($1, pre) != 1 { next }
    { x = substr($1, length(pre) + 1); s = $2
      if (match(s, /\([^(]*\)$/)) s = substr(s, RSTART + 1, RLENGTH - 2)
      if (!(s in sid)) { sid[s] = ++ns; sname[ns] = "threadwire (" s ")" }
      if (!(x in seen)) { seen[x] = 1; xs[++nx] = x }
      v[x, np + sid[s]] = $3
      for (p = 1; p <= np; p++) if (!((x, p) in v)) v[x, p] = $(pcol[p]) }
    END { for (c = 1; c <= np + ns; c++) for (i = 1; i <= nx; i++) if (num(v[xs[i], c])) keep[c] = 1
      for (i = 1; i <= nx; i++) { l = xs[i]
        for (c = np + 1; c <= np + ns; c++) if (keep[c]) l = l " " v[xs[i], c]
        for (c = 1; c <= np; c++) if (keep[c]) l = l " " v[xs[i], c]
        print l >out }
      for (c = np + 1; c <= np + ns; c++) if (keep[c]) print sname[c - np]
      for (c = 1; c <= np; c++) if (keep[c]) print title[c] }' "$1"
}

# coll_data MEDIANS OP OUT: pin's latency of OP by size, a column per
# implementation (Open MPI tuned, sm, threadwire); titles on stdout.
coll_data() {
  awk -F'|' -v op="$2" -v out="$3" '
    $1 == "pin" && $3 == op && $5 == "lat" && $6 != "-" {
      if (!($2 in seen)) { seen[$2] = 1; impl[++ni] = $2 }
      if (!($4 in sz)) { sz[$4] = 1; xs[++nx] = $4 }
      v[$4, $2] = $6 }
    END { split("tuned sm tw", order, " ")
      n = 0; for (o = 1; o <= 3; o++) if (order[o] in seen) col[++n] = order[o]
      for (i = 1; i <= nx; i++) { l = xs[i]; for (c = 1; c <= n; c++) {
          k = xs[i] SUBSEP col[c]; l = l " " ((k in v) ? v[k] : "-") }
        print l >out }
      name["tuned"] = "Open MPI tuned"; name["sm"] = "Open MPI sm"; name["tw"] = "threadwire"
      for (c = 1; c <= n; c++) print name[col[c]] }' "$1"
}

# panel TITLE DATA TITLES: a gnuplot plot command, a line per column.
panel() {
  local c=2 t sep=""
  echo "set title '$1'"
  printf 'plot '
  while IFS= read -r t; do
    printf "%s'%s' using 1:%d with linespoints lw 2 title '%s'" "$sep" "$2" "$c" "$t"
    sep=", "
    c=$((c + 1))
  done <"$3"
  echo
}

# figure PNG YLABEL XLABEL XTICS YLOG KIND ARG...: one PNG, a panel per
# ARG that has data; KIND p2p=PREFIX (ARG a transport, the rows of kind
# PREFIX<x>) or coll (ARG a collective).
figure() {
  local png=$1 ylabel=$2 xlabel=$3 xtics=$4 ylog=$5 kind=$6 a f n=0 panels=""
  shift 6
  for a in "$@"; do
    f=$tmp/${png%.png}-$a
    case $kind in
      p2p=*) [ -s "$dir/peers-$a.medians" ] && p2p_data "$dir/peers-$a.medians" "${kind#p2p=}" "$f.dat" >"$f.t" ;;
      coll) [ -s "$dir/coll.medians" ] && coll_data "$dir/coll.medians" "$a" "$f.dat" >"$f.t" ;;
    esac || continue
    if [ ! -s "$f.t" ] || [ ! -s "$f.dat" ]; then continue; fi
    n=$((n + 1))
    panels+=" $a"
  done
  [ "$n" -gt 0 ] || return 0
  {
    echo "set terminal pngcairo size $((520 * n + 80)),520 noenhanced; set output '$dir/$png'"
    echo "set grid; set key below; set datafile missing '-'; set logscale x 2"
    echo "set xlabel '$xlabel'; set ylabel '$ylabel'; set xtics $xtics"
    if [ "$ylog" = log ]; then echo "set logscale y"; else echo "set yrange [0:*]"; fi
    echo "set multiplot layout 1,$n"
    for a in $panels; do panel "$a" "$tmp/${png%.png}-$a.dat" "$tmp/${png%.png}-$a.t"; done
    echo "unset multiplot"
  } >"$tmp/plot.gp"
  gnuplot "$tmp/plot.gp"
  echo "$png"
}

bytes="('8' 8, '64' 64, '512' 512, '4K' 4096, '32K' 32768, '256K' 262144, '1M' 1048576)"
figure lat-size.png 'latency, us (half round trip)' 'message size, bytes (K = 1024)' "$bytes" log p2p=lat. shm tcp
figure bw-size.png 'bandwidth, MB/s' 'message size, bytes (K = 1024)' "$bytes" log p2p=bw. shm tcp
figure rate-threads.png '8 B message rate, M msg/s (all threads)' 'threads per process' 2 lin \
  p2p=rate.t shm tcp
figure coll-size.png 'latency, us (OSU loop)' 'message size, bytes (K = 1024)' "$bytes" log coll bcast allreduce reduce
