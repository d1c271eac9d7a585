#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# What node-leader routing (TW_ROUTE=leader, src/routing) costs between
# nodes, against TW_ROUTE=direct, in one run: tw_perf between two ranks of
# different emulated nodes that are not leaders (their routed path is rank
# -> shm -> leader -> tcp -> leader -> shm -> rank, two relays), and between
# the two leaders (the route adds its header and numbering only), beside Open
# MPI's tcp BTL between two processes (tools/bench-peers/mpi_pingpong.c) for
# scale. Each measurement runs REPS times (default 5), alternating direct,
# leader and the peer, at high priority; the markdown table on stdout shows
# medians and leader / direct.
#   tools/perf-route.sh [BUILD_DIR]        (default build/release)
#   SIZES="8 4k 64k 1m"                    sizes of the non-leader pair
# The job: twrun -n 4 --bind core, TW_NODE_ID=0,1,0,1 -- node 0 is ranks 0
# and 2 on the first CPU, node 1 ranks 1 and 3 on the second, leaders 0 and
# 1; tw_perf --pair 2,3 (non-leaders) or --pair 0,1 (leaders), the other two
# ranks bystanders that wait in the same loop (a leader passes frames on
# from its progress thread, or in manual mode from its tw_progress). Rows:
# latency (half the round trip, median) and, per size, the 8 B message
# rate or the bandwidth (windows of 32), in tw_perf's default configuration
# (a progress thread, adaptive wait); the 8 B rows again in manual progress
# (-p 0 -m spin: all 4 processes busy-poll), with a poll loop (-l poll: the
# 4 main threads spin on tw_cq_poll) and with spinning progress threads
# (-m spin: 8 threads spin), and the leaders' in manual progress, where
# no thread hands frames over (the route's own work alone). Before the
# measurements one short run under each route checks, from the library's
# counters, which way the frames went. Needs openmpi-bin and libopenmpi-dev
# for the OMPI column ("-" without). About 2 minutes at REPS=5 on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
reps=${REPS:-5}
sizes=${SIZES:-"8 4k 64k 1m"}
if [ ! -x "$build/tools/tw_perf" ] || [ ! -x "$build/tools/twrun" ]; then
  echo "build $build first (cmake --build $build --target tw_perf twrun)" >&2
  exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/perf-route.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log
# hiprio, median, ratio, fail, tw_value, ompi_build, ompi_pingpong
. tools/perf-lib.sh
nodes=0,1,0,1
stats=tests/common/twt_stats.py

# Iterations per size: a second or two per run at the speeds of the leader
# path on 2 cores (lat: round trips; rate, bw: windows of 32).
iters() {
  case $1 in
    8 | 4k) echo 2000 ;;
    64k) echo 300 ;;
    *) echo 40 ;;
  esac
}
label() { case $1 in 8) echo "8 B" ;; *k) echo "${1%k} KiB" ;; *m) echo "${1%m} MiB" ;; *) echo "$1 B" ;; esac; }
# The second kind of a size: the rate of 8 B messages, the bandwidth of
# larger ones.
stream() { [ "$1" = 8 ] && echo rate || echo bw; }

# Rows: "PAIR|SIZE|label|tw_perf options".
rows=()
for s in $sizes; do
  rows+=("2,3|$s|non-leaders 2 <-> 3, $(label "$s")|-s $s -n $(iters "$s")")
done
rows+=(
  "0,1|8|leaders 0 <-> 1, 8 B|-s 8 -n 2000"
  "0,1|1m|leaders 0 <-> 1, 1 MiB|-s 1m -n 40"
  "2,3|8|non-leaders, 8 B, manual (-p 0 -m spin)|-s 8 -n 2000 -p 0 -m spin"
  "2,3|8|non-leaders, 8 B, poll loop (-l poll)|-s 8 -n 2000 -l poll"
  "2,3|8|non-leaders, 8 B, spinning progress (-m spin)|-s 8 -n 1000 -m spin"
  "0,1|8|leaders, 8 B, manual (-p 0 -m spin)|-s 8 -n 2000 -p 0 -m spin"
)

# tw ROUTE PAIR KIND2 OPTIONS...: tw_perf -x lat,KIND2 on the 4-rank job;
# "LAT VALUE2", either "-" when the run failed.
tw() {
  local route=$1 pair=$2 k2=$3 out lat v2
  shift 3
  out=$(hiprio env TW_ROUTE="$route" TW_NODE_ID=$nodes timeout 120 "$build/tools/twrun" -n 4 \
    --bind core "$build/tools/tw_perf" --pair "$pair" -x "lat,$k2" --csv "$@" 2>"$log" |
    awk -F, '$4 == "all"') || true
  lat=$(awk -F, '$1 == "lat"' <<<"$out" | tw_value lat)
  v2=$(awk -F, -v k="$k2" '$1 == k' <<<"$out" | tw_value "$k2")
  if [ -z "$lat" ] || [ -z "$v2" ]; then
    fail "TW_ROUTE=$route TW_NODE_ID=$nodes twrun -n 4 tw_perf --pair $pair -x lat,$k2 $*"
  fi
  echo "${lat:--} ${v2:--}"
}

# Which way the frames go: under leader the non-leaders send nothing over
# tcp and the leaders pass frames on; under direct the non-leaders use tcp.
check_path() {
  local route=$1 out
  out=$(env TW_ROUTE="$route" TW_NODE_ID=$nodes timeout 60 "$build/tools/twrun" -n 4 \
    "$build/tools/tw_perf" --pair 2,3 -x lat -s 8 -n 100 --stats=json 2>&1) ||
    { echo "$out" | tail -5 >&2; echo "perf-route: TW_ROUTE=$route: the check run failed" >&2; exit 1; }
  if [ "$route" = leader ]; then
    "$stats" - 'rank 2 ifaces/tl:tcp/tx_msgs == 0' 'rank 3 ifaces/tl:tcp/tx_msgs == 0' \
      'rank 0 ifaces/route/forwarded > 0' 'rank 1 ifaces/route/forwarded > 0' <<<"$out" >/dev/null
  else
    "$stats" - 'rank 2 ifaces/tl:tcp/tx_msgs > 0' 'rank 3 ifaces/tl:tcp/tx_msgs > 0' <<<"$out" \
      >/dev/null
  fi || { echo "perf-route: TW_ROUTE=$route: the frames did not go the way it says" >&2; exit 1; }
}
check_path leader
check_path direct

have_ompi=
! ompi_build mpi_pingpong || have_ompi=1
# ompi SIZE: "LAT VALUE2" of Open MPI's tcp BTL, two processes, one per CPU.
ompi() {
  local s=$1 n k2 lat v2
  n=$(iters "$s")
  k2=$(stream "$s")
  lat=$(ompi_pingpong lat -x lat -s "$(numfmt --from=iec "${s^^}")" -n "$n")
  [ -n "$lat" ] || fail "mpirun mpi_pingpong -x lat -s $s"
  v2=$(ompi_pingpong "$k2" -x "$k2" -s "$(numfmt --from=iec "${s^^}")" -n "$n")
  [ -n "$v2" ] || fail "mpirun mpi_pingpong -x $k2 -s $s"
  echo "${lat:--} ${v2:--}"
}

declare -A r
add() { # KEY "LAT VALUE2"
  local a b
  read -r a b <<<"$2"
  r[$1.lat]+="$a "
  r[$1.v2]+="$b "
}
for _ in $(seq "$reps"); do
  for i in "${!rows[@]}"; do
    IFS='|' read -r pair s _ opts <<<"${rows[$i]}"
    for route in direct leader; do
      # shellcheck disable=SC2086 # the options are words
      add "$i.$route" "$(tw "$route" "$pair" "$(stream "$s")" $opts)"
    done
  done
  if [ -n "$have_ompi" ]; then
    for s in $sizes; do
      add "ompi.$s" "$(ompi "$s")"
    done
  fi
done

m() { tr ' ' '\n' <<<"${r[$1]:-}" | awk 'NF && $1 != "-"' | median; }
echo "| measurement (medians of $reps) | direct | leader | leader / direct | OMPI tcp | direct / OMPI | leader / OMPI |"
echo "|---|---|---|---|---|---|---|"
for i in "${!rows[@]}"; do
  IFS='|' read -r _ s label _ <<<"${rows[$i]}"
  k2=$(stream "$s")
  for what in lat v2; do
    case $what.$k2 in
      lat.*) unit="latency, us" ;;
      v2.rate) unit="rate, M msg/s" ;;
      v2.bw) unit="bandwidth, MB/s" ;;
    esac
    d=$(m "$i.direct.$what")
    l=$(m "$i.leader.$what")
    o=-
    # The peer beside the rows of the default configuration.
    [[ $label == *"("* ]] || o=$(m "ompi.$s.$what")
    echo "| $label: $unit | $d | $l | $(ratio "$l" "$d") | $o | $(ratio "$d" "$o") | $(ratio "$l" "$o") |"
  done
done
