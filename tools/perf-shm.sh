#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# tw_perf over shm beside UCX's ucx_perftest (UCX_TLS=sm) in one run, so the
# ratios hold on a shared, noisy machine. Each measurement runs REPS times
# (default 5) at high priority in its own autogroup, alternating peer and
# threadwire; the table shows medians and threadwire / UCX.
#   tools/perf-shm.sh [BUILD_DIR]        (default build/release)
# Needs ucx-utils (apt-get install ucx-utils) for the UCX column.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
reps=${REPS:-5}
twrun=$build/tools/twrun
perf=$build/tools/tw_perf
[ -x "$perf" ] || { echo "build $build first (cmake --build $build --target tw_perf twrun)"; exit 2; }
hiprio() { setsid -w bash -c 'echo -20 > /proc/self/autogroup 2>/dev/null; exec nice -n -20 "$@"' hiprio "$@"; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# ucx_perftest pair on localhost, server on CPU 0, client on CPU 1; prints
# the client's final CSV line (-f).
ucx() {
  local port=$((20000 + RANDOM % 20000))
  UCX_TLS=sm hiprio timeout 60 ucx_perftest -c 0 -p $port >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  UCX_TLS=sm hiprio timeout 60 ucx_perftest 127.0.0.1 -p $port -c 1 -f "$@" 2>/dev/null | tail -1
  wait $srv 2>/dev/null || true
}
# tw_perf, 2 processes: prints the 'all' row's CSV fields.
tw() { hiprio "$twrun" -n 2 "$perf" --csv "$@" | awk -F, '$4 == "all"'; }

have_ucx=1
command -v ucx_perftest >/dev/null || have_ucx=0
declare -A r
for _ in $(seq "$reps"); do
  if [ $have_ucx = 1 ]; then
    # Final line (-f): iterations, p50 lat, avg lat, overall lat, avg bw, overall bw (2^20 B/s), avg rate, overall rate
    r[ucx_lat]+="$(ucx -t tag_lat -s 8 -n 100000 | awk '{print $2}') "
    r[ucx_rate]+="$(ucx -t tag_bw -s 8 -n 1000000 | awk '{print $8 / 1e6}') "
    r[ucx_bw]+="$(ucx -t tag_bw -s 1048576 -n 2000 | awk '{print $6 * 1.048576}') "
  fi
  # CSV columns: test,size,threads,thread,iters,warmup,window,median,avg,min,max,bw,rate
  r[tw_lat_manual]+="$(tw -x lat -s 8 -p 0 -m spin -n 100000 | awk -F, '{print $8}') "
  r[tw_lat_spin]+="$(tw -x lat -s 8 -m spin -n 20000 | awk -F, '{print $8}') "
  r[tw_lat_adaptive]+="$(tw -x lat -s 8 -n 20000 | awk -F, '{print $8}') "
  r[tw_rate_manual]+="$(tw -x rate -s 8 -p 0 -m spin | awk -F, '{print $13}') "
  r[tw_rate]+="$(tw -x rate -s 8 | awk -F, '{print $13}') "
  r[tw_rate_t4]+="$(tw -x rate -s 8 -t 4 | awk -F, '{print $13}') "
  r[tw_bw_manual]+="$(tw -x bw -s 1m -p 0 -m spin | awk -F, '{print $12}') "
  r[tw_bw]+="$(tw -x bw -s 1m | awk -F, '{print $12}') "
done
m() { tr ' ' '\n' <<<"${r[$1]:-}" | grep -v '^$' | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "-" || b == 0 || a == "-") print "-"; else printf "%.2f", a / b }'; }
printf '%-44s %12s %12s %8s\n' "measurement (medians of $reps)" threadwire "UCX sm" "tw/UCX"
row() { printf '%-44s %12s %12s %8s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }
ul=$(m ucx_lat) ur=$(m ucx_rate) ub=$(m ucx_bw)
row "8 B latency, us (manual progress, spin)" "$(m tw_lat_manual)" "$ul"
row "8 B latency, us (progress thread, spin)" "$(m tw_lat_spin)" "$ul"
row "8 B latency, us (progress thread, adaptive)" "$(m tw_lat_adaptive)" "$ul"
row "8 B rate, M msg/s (manual, spin)" "$(m tw_rate_manual)" "$ur"
row "8 B rate, M msg/s (progress thread)" "$(m tw_rate)" "$ur"
row "8 B rate, M msg/s (progress thread, 4 thr)" "$(m tw_rate_t4)" "$ur"
row "1 MiB bandwidth, MB/s (manual, spin)" "$(m tw_bw_manual)" "$ub"
row "1 MiB bandwidth, MB/s (progress thread)" "$(m tw_bw)" "$ub"
