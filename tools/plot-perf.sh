#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
# Plot tw_perf --csv output with gnuplot: a panel per test over the message
# size, from the 'all' rows (latency tests: median and average; bw:
# bandwidth; rate: message rate). OUT.png defaults to RUN.csv's name, .png.
#   tw_perf -x lat,bw -s 8:1m --csv >run.csv && tools/plot-perf.sh run.csv
set -euo pipefail
[ $# -eq 1 ] || [ $# -eq 2 ] || { echo "usage: plot-perf.sh RUN.csv [OUT.png]" >&2; exit 2; }
csv=$1 png=${2:-${1%.csv}.png}
command -v gnuplot >/dev/null ||
  { echo "plot-perf.sh: gnuplot is not installed (apt-get install gnuplot-nox); no plot" >&2; exit 1; }
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
if ! awk -F, -v d="$tmp" 'NR == 1 && !/^test,size,threads,thread,/ { exit 1 }
  NR > 1 && $4 == "all" { if (!seen[$1]++) print $1; print >(d "/" $1) }' "$csv" >"$tmp/tests" ||
  [ ! -s "$tmp/tests" ]; then
  echo "plot-perf.sh: $csv holds no tw_perf --csv rows" >&2
  exit 1
fi
n=$(wc -l <"$tmp/tests")
avg=", '' using 2:9 with linespoints title 'average'"
{
  echo "set terminal pngcairo size $((500 * n + 100)),500 noenhanced; set output '${png//\'/\'\'}'"
  echo "set datafile separator ','; set grid; set key top left; set logscale x 2"
  echo "set xlabel 'message size (bytes)'; set multiplot layout 1,$n title 'tw_perf'"
  while read -r t; do # y scale, y label, column, key, more lines
    case $t in
      lat) set -- set 'half round trip (us)' 8 median "$avg" ;;
      *_lat) set -- set 'to completion (us)' 8 median "$avg" ;;
      *bw) set -- set 'bandwidth (MB/s)' 12 'all threads' '' ;;
      *) set -- unset 'message rate (M msgs/s)' 13 'all threads' '' ;;
    esac
    echo "set title '$t'; $1 logscale y; set ylabel '$2'"
    echo "plot '$tmp/$t' using 2:$3 with linespoints title '$4'$5"
  done <"$tmp/tests"
} | gnuplot
echo "plot-perf.sh: wrote $png"
