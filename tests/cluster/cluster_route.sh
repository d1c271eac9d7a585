#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Node-leader routing (src/routing) across emulated nodes: which way the
# traffic went, by the counters of tw_stats_json (tests/common/twt_stats.py)
# and by the TCP connections `ss` sees in the nodes' namespaces
# (cluster_lib.sh). Each rank runs under cluster_rank.sh, so its stdout
# (the stats) comes back whole.
#
#   cluster_route.sh RUN_CLUSTER mpirun|srun CASE ARGS...
#     leader NODES NP [VAR=VAL...] -- PROG ARGS...
#               PROG (test_alltoall, test_rma: they check every message)
#               with TW_ROUTE=leader and --stats=json: every rank on the
#               node map's NODES nodes, sent and delivered through route,
#               none dropped; the ranks that are not leaders sent nothing
#               over tcp (under rel: no byte, only its empty pings, unless
#               it failed route over to tcp) and passed nothing on; the leaders sent over tcp, and passed frames on
#               where their node has other ranks
#     conncount NODES NP HOLD
#               HOLD (cluster_hold) once with TW_ROUTE=direct, once with
#               leader; while it holds, the connections between the nodes
#               are counted and must be exactly the pairs that exchanged
#               (direct: every pair of ranks on different nodes) or the
#               pairs of leaders (leader), each connected once
#     pathcut ALLTOALL
#               TW_RELIABLE=1, TW_ROUTE=direct, 4 ranks on 2 nodes
#               (leaders 0 and 2): once every connection between the
#               nodes is up, nftables drops every threadwire connection
#               between them but the leaders' (0-2, 0-3, 1-2, 1-3 cut),
#               mid-run, for good; test_alltoall must still get every
#               message exactly once, rel must fail over exactly the cut
#               paths to route (failovers: 1 at ranks 0 and 2, 2 at 1 and
#               3) and never back, the leaders pass frames on, nobody fails
#
# Inside the scenario (run-cluster.sh --sidecar):
#   cluster_route.sh --count DIR NP EXT [NODE]
#                                       once NP ranks wrote DIR/rank*.EXT
#                                       (their pids), records the connections
#                                       in DIR/conns, then writes DIR/go and
#                                       cuts NODE's link for good (if given)
#   cluster_route.sh --cut DIR NP N     the cut of pathcut; DIR/cut says what
#                                       it cut, DIR/counters what it dropped
set -eu
here=$(cd "$(dirname "$0")" && pwd)
me=$here/$(basename "$0")
. "$here/cluster_lib.sh"
stats="$here/../common/twt_stats.py"

# ---- the sidecars ---------------------------------------------------------
case ${1:-} in
--count)
  dir=$2 np=$3 ext=$4 cut=${5:-}
  wait_ranks "$dir" "$ext" "$np" 60 || { echo "cluster_route: not every rank wrote rank*.$ext"; exit 1; }
  stable_conns "$dir" "$ext" >"$dir/conns.tmp"
  mv "$dir/conns.tmp" "$dir/conns"
  touch "$dir/go"
  if [ -n "$cut" ]; then
    "$TWCLUSTER_LINK" down "$cut"
    echo "cluster_route: cut $cut's link"
  fi
  exit 0
  ;;
--cut)
  dir=$2 np=$3 nodes=$4
  wait_ranks "$dir" where "$np" 60 || { echo "cluster_route: not every rank started"; exit 1; }
  # Every pair of ranks on different nodes connected once, by the same
  # sockets 200 ms later (a simultaneous connect settled): the run is on.
  want=$(want_pairs direct "$np" "$nodes") ends=""
  settled() {
    [ "$ends" = "$last" ] &&
      [ "$(awk '$1 < $2 { print $1, $2 }' <<<"$ends" | sort -n -k1,1 -k2,2)" = "$want" ]
  }
  for _ in $(seq 300); do
    last=$ends
    ends=$(conn_ends "$dir" where | sort)
    ! settled || break
    sleep 0.2
  done
  settled || { echo "cluster_route: the ranks never connected: $(rank_conns "$dir" where | tr '\n' ,)"; exit 1; }
  pids=$(for f in "$dir"/rank*.where; do awk '{ print $1 }' "$f"; done | tr '\n' ' ')
  # Every rank's listening socket (addr . port): one end of each of their
  # connections. Those between two leaders are kept, by their addresses
  # and ports as each node sees them.
  tw="" i=0
  for n in $TWCLUSTER_NODES; do
    i=$((i + 1))
    tw="$tw$(ip netns exec "$n" ss -tlnpH | awk -v pids=" $pids" -v ip="198.18.0.$((10 + i))" '
      match($0, /pid=[0-9]+/) && index(pids, " " substr($0, RSTART + 4, RLENGTH - 4) " ") {
        n = split($4, a, ":"); addr = a[1]
        if (addr == "0.0.0.0" || addr == "*") addr = ip
        if (addr ~ /^[0-9.]+$/) printf "%s . %s, ", addr, a[n]
      }')"
  done
  [ -n "$tw" ] || { echo "cluster_route: no listening socket of a rank"; exit 1; }
  i=0
  for n in $TWCLUSTER_NODES; do
    i=$((i + 1))
    keep=$(awk -v ip="198.18.0.$((10 + i))" '
      { split($3, l, ":"); split($4, r, ":") }
      l[1] == ip { print $1, $2, l[1], l[2], r[1], r[2] }' <<<"$ends" |
      while read -r a b la lp ra rp; do
        is_leader "$a" "$np" "$nodes" && is_leader "$b" "$np" "$nodes" &&
          printf '%s . %s . %s . %s, ' "$la" "$lp" "$ra" "$rp"
      done || true)
    [ -n "$keep" ] || { echo "cluster_route: no connection between leaders on $n"; exit 1; }
    ip netns exec "$n" nft -f - <<NFT
table inet twpath {
  set tw { type ipv4_addr . inet_service; elements = { ${tw%, } } }
  set keep { type ipv4_addr . inet_service . ipv4_addr . inet_service; elements = { ${keep%, } } }
  chain out {
    type filter hook output priority -10; policy accept;
    oifname "eth0" ip saddr . tcp sport . ip daddr . tcp dport @keep counter accept
    oifname "eth0" ip saddr . tcp sport @tw counter drop
    oifname "eth0" ip daddr . tcp dport @tw counter drop
  }
  chain in {
    type filter hook input priority -10; policy accept;
    iifname "eth0" ip daddr . tcp dport . ip saddr . tcp sport @keep counter accept
    iifname "eth0" ip saddr . tcp sport @tw counter drop
    iifname "eth0" ip daddr . tcp dport @tw counter drop
  }
}
NFT
  done
  echo "listeners ${tw%, }; kept the leaders' connection" >"$dir/cut"
  # The counters (packets kept, dropped) while a rank lives.
  trap 'kill $! 2>/dev/null; exit 0' TERM
  while for p in $pids; do kill -0 "$p" 2>/dev/null && break; done; do
    for n in $TWCLUSTER_NODES; do ip netns exec "$n" nft list table inet twpath; done |
      awk '/counter packets/ { for (i = 1; i < NF; i++) if ($i == "packets") c[$NF] += $(i + 1) }
           END { print c["accept"] + 0, c["drop"] + 0 }' >"$dir/counters.tmp"
    mv "$dir/counters.tmp" "$dir/counters"
    sleep 0.2 &
    wait $!
  done
  exit 0
  ;;
esac

# ---- the cases ------------------------------------------------------------
run=$1 launcher=$2 case=$3
shift 3
work=$(mktemp -d /tmp/twtest-route.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work"
out=""

fail() { echo "FAIL: $*"; exit 1; }
check() { "$stats" - "$@" <<<"$out" || fail "counters: see twt_stats above"; }
# job OPTIONS... -- PROG ARGS...: run-cluster.sh, each rank under
# cluster_rank.sh; out = the ranks' stdout; the programs' own lines shown.
job() {
  local rc=0 opts=()
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  rm -rf "${work:?}"/*
  "$run" --launcher "$launcher" "${opts[@]}" -- "$here/cluster_rank.sh" "$work" "$@" || rc=$?
  [ "$rc" -ne 77 ] || exit 77
  out=$(cat "$work"/rank*.out 2>/dev/null || true)
  grep -v '"threadwire_stats"' <<<"$out" || true
  [ "$rc" -eq 0 ] || fail "the job failed ($rc): $*"
}

case $case in
leader)
  nodes=$1 np=$2
  shift 2
  envs=(--env TW_ROUTE=leader)
  while [ "$1" != -- ]; do envs+=(--env "$1"); shift; done
  shift
  job --nodes "$nodes" --np "$np" --timeout 100 "${envs[@]}" -- "$@" --stats=json
  # Two interpreter starts in all (each costs a few 100 ms on a busy
  # machine): the numbers first, then every query at once.
  rel=0
  [[ " ${envs[*]} " != *" TW_RELIABLE=1 "* ]] || rel=1
  wants=('print sum ifaces/route/sent' 'print sum ifaces/route/forwarded')
  if [ $rel = 1 ]; then
    for ((r = 0; r < np; r++)); do wants+=("print rank $r ifaces/rel/failovers"); done
  fi
  mapfile -t nums < <("$stats" - "${wants[@]}" <<<"$out") || fail "counters: see twt_stats above"
  [ ${#nums[@]} -eq ${#wants[@]} ] || fail "counters: ${#nums[@]} numbers, ${#wants[@]} wanted"
  qs=("all nnodes == $nodes" 'all ifaces/route/sent > 0' 'all ifaces/route/delivered > 0'
    'all ifaces/route/dropped == 0')
  for ((r = 0; r < np; r++)); do
    if ! is_leader $r "$np" "$nodes"; then
      qs+=("rank $r ifaces/route/forwarded == 0")
      # Under rel, tcp stays a failover path (injected faults may fail
      # route over to it) and carries rel's empty pings meanwhile.
      if [ $rel = 0 ]; then
        qs+=("rank $r ifaces/tl:tcp/tx_msgs == 0")
      elif [ "${nums[$((2 + r))]}" -eq 0 ]; then
        qs+=("rank $r ifaces/tl:tcp/tx_bytes == 0")
      fi
    else
      qs+=("rank $r ifaces/tl:tcp/tx_msgs > 0")
      if [ $r -lt $((np - 1)) ] && ! is_leader $((r + 1)) "$np" "$nodes"; then
        qs+=("rank $r ifaces/route/forwarded > 0")
      fi
    fi
  done
  check "${qs[@]}"
  echo "leader: $np ranks on $nodes nodes under $launcher, every message once: route sent" \
    "${nums[0]}, the leaders passed ${nums[1]} frames on, the other ranks none and nothing" \
    "over tcp of their own"
  ;;
conncount)
  nodes=$1 np=$2 hold=$3
  for mode in direct leader; do
    job --nodes "$nodes" --np "$np" --timeout 60 --env TW_ROUTE=$mode \
      --sidecar "$me --count $work $np held" -- "$hold" "$work" --stats=json
    [ -f "$work/conns" ] || fail "TW_ROUTE=$mode: no connections recorded"
    check_pairs "$work/conns" $mode "$np" "$nodes" "TW_ROUTE=$mode" ||
      fail "TW_ROUTE=$mode: not the connections wanted"
    echo "conncount: TW_ROUTE=$mode, $np ranks on $nodes nodes under $launcher:" \
      "$(wc -l <"$work/conns") TCP connection(s) between the nodes," \
      "$(want_pairs $mode "$np" "$nodes" | wc -l) wanted: $(tr '\n' ',' <"$work/conns" | sed 's/,$//')"
    if [ $mode = direct ]; then
      check 'none ifaces/route' 'all ifaces/tl:tcp/tx_msgs > 0'
    else
      qs=()
      for ((r = 0; r < np; r++)); do
        if is_leader $r "$np" "$nodes"; then
          qs+=("rank $r ifaces/route/forwarded > 0")
        else
          qs+=("rank $r ifaces/tl:tcp/tx_msgs == 0")
        fi
      done
      check "${qs[@]}"
    fi
  done
  ;;
pathcut)
  alltoall=$1
  # --gate: the second half of every stream waits for the cut, so that
  # every cut path carries traffic after it (and fails over) however
  # late the cut comes on a busy machine.
  job --nodes 2 --np 4 --timeout 100 --env TW_RELIABLE=1 --env TW_ROUTE=direct \
    --env TW_REL_PATH_TIMEOUT=300ms --sidecar "$me --cut $work 4 2" -- \
    "$alltoall" -t 2 -m 2000 --max-size 16k --gate "$work/cut" --stats=json
  [ -f "$work/cut" ] || fail "the run ended before the cut"
  read -r kept dropped <"$work/counters" || fail "no counters of the cut"
  [ "$dropped" -gt 0 ] || fail "the cut dropped nothing"
  [ "$kept" -gt 0 ] || fail "nothing passed between the leaders after the cut"
  # Exactly the cut paths fail over (0-3 at 0, 1-2 and 1-3 at 1, ...),
  # for good: the cut stops rel's probes too.
  check 'rank 0 ifaces/rel/failovers == 1' 'rank 1 ifaces/rel/failovers == 2' \
    'rank 2 ifaces/rel/failovers == 1' 'rank 3 ifaces/rel/failovers == 2' \
    'all ifaces/rel/failbacks == 0' 'all ifaces/rel/peer_failures == 0' \
    'rank 0 ifaces/route/forwarded > 0' 'rank 2 ifaces/route/forwarded > 0' \
    'rank 1 ifaces/route/forwarded == 0' 'rank 3 ifaces/route/forwarded == 0'
  mapfile -t nums < <("$stats" - 'print sum ifaces/rel/failovers' \
    'print sum ifaces/route/forwarded' <<<"$out")
  echo "pathcut: every connection between n1 and n2 but the leaders' cut mid-run" \
    "($dropped packets dropped, $kept passed between the leaders): every message once," \
    "${nums[0]:-?} failovers, the leaders passed ${nums[1]:-?} frames on"
  ;;
*)
  echo "cluster_route.sh: unknown case $case"
  exit 2
  ;;
esac
