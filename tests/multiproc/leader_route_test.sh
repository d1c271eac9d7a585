#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Routing through node leaders (TW_ROUTE=leader; src/routing) on nodes
# emulated by TW_NODE_ID under twrun. test_alltoall checks every message
# arrives exactly once, intact and in order; the counters of tw_stats_json
# (through tests/common/twt_stats.py) show which way the traffic went.
#
#   leader_route_test.sh TWRUN TEST_ALLTOALL TW_MP_RANK CASE
#     spread    6 ranks on 3 nodes: ranks that are not leaders send nothing
#               over tcp, the leaders pass the others' frames on; under
#               TW_TRANSPORTS=self,tcp too (a node's ranks reach their
#               leader over tcp); and one rank per node (all leaders)
#     rel       4 ranks on 2 nodes under TW_RELIABLE=1 and injected faults
#               (drop, corrupt, dup, reorder) on every transport
#     failover  TW_ROUTE=direct, TW_RELIABLE=1: the tcp of ranks 1 and 3
#               (not leaders, on two nodes) goes dark for 1 s; their
#               traffic to the other node fails over to the leaders' route
#               and back to tcp once probes answer; nobody fails
#     node_kill 6 ranks on 3 nodes, ranks 4 and 5 (node 2, its leader
#               with it) SIGKILLed: the others fail both (tw_mp_rank
#               node-loss), and still talk
#     rank_kill the same, rank 5 alone (not a leader): its leader tells
#               the other leaders, who tell their nodes
#     leader_kill the same under TW_RELIABLE=1, rank 2 alone (node 1's
#               leader): the others fail it alone -- rank 3, its node's
#               other rank, stays reachable over rel's direct paths
#     mismatch  rank 1 asks for TW_ROUTE=leader, the others not: tw_init
#               fails on every rank, naming the variable
set -eu
twrun=$1 prog=$2 mprank=$3 case=$4
stats="$(dirname "$0")/../common/twt_stats.py"
unset TW_TRANSPORTS TW_NODE_ID TW_ROUTE TW_RELIABLE TW_FAULT TW_FAULT_ON TW_FAULT_RANKS

fail() { echo "$out" | tail -40; echo "FAIL: $*"; exit 1; }
check() { "$stats" - "$@" <<<"$out" || fail "counters: see twt_stats above"; }
sum() { "$stats" - "print sum $1" <<<"$out"; }
run() { out=$("$twrun" "$@" 2>&1) || fail "job failed: $*"; }

# kill_case LOST_LIST VICTIMS: 6 ranks on 3 nodes; VICTIMS SIGKILLed once
# every rank is up; every other rank must pass.
kill_case() {
  local lost=$1 victims=$2 work pid r
  work=$(mktemp -d /tmp/twtest-leader.XXXXXX)
  trap 'rm -rf "$work"' RETURN
  TW_ROUTE=leader TW_NODE_ID=0,0,1,1,2,2 TWTEST_NODE_LOSS_S=20 TW_RELIABLE=${rel:-0} \
    "$twrun" --keep-going -n 6 "$mprank" node-loss "$work" "$lost" >"$work/out" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    [ "$(find "$work" -name 'rank*.up' | wc -l)" -eq 6 ] && break
    sleep 0.1
  done
  [ "$(find "$work" -name 'rank*.up' | wc -l)" -eq 6 ] ||
    { kill "$pid" 2>/dev/null; out=$(cat "$work/out"); fail "not every rank came up"; }
  for r in $victims; do
    kill -KILL "$(cat "$work/rank$r.up")"
  done
  wait "$pid" || true
  out=$(cat "$work/out")
  for r in 0 1 2 3 4 5; do
    [[ ",$lost," == *",$r,"* ]] && continue
    [ -f "$work/rank$r.pass" ] || fail "survivor rank $r did not pass"
  done
  grep -c '^node-loss: rank' <<<"$out" | grep -qx "$((6 - $(tr ',' '\n' <<<"$lost" | wc -l)))" ||
    fail "not every survivor reported"
}

case $case in
spread)
  export TW_ROUTE=leader
  TW_NODE_ID=0,0,1,1,2,2 run -n 6 "$prog" -t 2 -m 16 --stats=json
  # leaders 0, 2, 4: tcp between them only; the others reach no tcp peer
  check 'rank 1 ifaces/tl:tcp/tx_msgs == 0' 'rank 3 ifaces/tl:tcp/tx_msgs == 0' \
    'rank 5 ifaces/tl:tcp/tx_msgs == 0' 'rank 0 ifaces/route/forwarded > 0' \
    'rank 2 ifaces/route/forwarded > 0' 'rank 4 ifaces/route/forwarded > 0' \
    'rank 1 ifaces/route/forwarded == 0' 'all ifaces/route/dropped == 0' \
    'all ifaces/route/sent > 0' 'all ifaces/route/delivered > 0'
  echo "spread: 6 ranks on 3 nodes, every message once: $(sum ifaces/route/forwarded) frames" \
    "passed on by the leaders, none over tcp from the other ranks"
  TW_NODE_ID=0,0,1,1 TW_TRANSPORTS=self,tcp run -n 4 "$prog" -t 2 -m 16 --stats=json
  check 'rank 0 ifaces/route/forwarded > 0' 'rank 2 ifaces/route/forwarded > 0' \
    'all ifaces/route/dropped == 0'
  TW_NODE_ID=0,1,2 run -n 3 "$prog" -t 2 -m 16 --stats=json
  check 'all ifaces/route/forwarded == 0' 'all ifaces/route/sent > 0' \
    'all ifaces/tl:tcp/tx_msgs > 0'
  echo "spread: over tcp alone, and one rank per node (every rank a leader): every message once"
  ;;
rel)
  # The keepalive doubled (as in cluster_alltoall_leader_rel_srun_2n): a
  # leader that finished and tears down (its engines stopped, tcp's clean
  # close up to 2 s) went 3 s without a word under faults on 2 busy cores
  # while a peer still retransmitted to it, and was failed (about 1 run in
  # 10 under load).
  export TW_ROUTE=leader TW_RELIABLE=1 TW_NODE_ID=0,0,1,1 TW_REL_KEEPALIVE=2s
  export TW_FAULT=drop=0.05,corrupt=0.01,dup=0.01,reorder=0.1,seed=${TWTEST_SEED:-7}
  run -n 4 "$prog" -t 2 -m 400 --max-size 64k --stats=json
  check 'sum ifaces/rel/retransmits > 0' 'all ifaces/rel/peer_failures == 0' \
    'rank 0 ifaces/route/forwarded > 0' 'rank 2 ifaces/route/forwarded > 0'
  echo "rel: through the leaders under faults, every message once: retransmits" \
    "$(sum ifaces/rel/retransmits), route frames damaged $(sum ifaces/route/crc_failures)"
  ;;
failover)
  # Timeouts loose enough for 4 ranks of a sanitizer build on 2 cores:
  # only the blackhole may fail a path.
  export TW_RELIABLE=1 TW_NODE_ID=0,0,1,1 TW_FAULT_ON=tcp TW_FAULT_RANKS=1,3 \
    TW_REL_PATH_TIMEOUT=500ms TW_REL_RTO_MAX=50ms TW_REL_PROBE=50ms \
    TW_FAULT=blackhole=100ms,blackhole_for=1s
  # Long enough to outlast the blackhole and the probes in every build
  # (about 4 s in Release; sanitizer builds send a quarter as many).
  run -n 4 "$prog" -t 2 -m 10000 --max-size 16k --stats=json
  check 'rank 1 ifaces/rel/failovers >= 1' 'rank 3 ifaces/rel/failovers >= 1' \
    'rank 1 ifaces/rel/failbacks >= 1' 'all ifaces/rel/peer_failures == 0' \
    'rank 0 ifaces/route/forwarded > 0' 'rank 2 ifaces/route/forwarded > 0' \
    'rank 1 ifaces/lossy:tcp/blackholed > 0'
  echo "failover: tcp of ranks 1 and 3 dark for 1 s: $(sum ifaces/rel/failovers) failovers" \
    "to the leaders' route, $(sum ifaces/rel/failbacks) fail-backs, every message once"
  ;;
node_kill)
  kill_case 4,5 "4 5"
  echo "node_kill: node 2 (ranks 4, 5) killed: the others failed both through the leaders, still talk"
  ;;
rank_kill)
  kill_case 5 5
  echo "rank_kill: rank 5 killed: its leader told the others, who failed it alone, still talk"
  ;;
leader_kill)
  rel=1 kill_case 2 2
  echo "leader_kill: node 1's leader killed under TW_RELIABLE=1: the others failed it alone," \
    "and reach rank 3 directly"
  ;;
mismatch)
  rc=0
  out=$(TW_NODE_ID=0,1,1 "$twrun" -n 3 bash -c '[ "$TW_RANK" != 1 ] || export TW_ROUTE=leader; exec "$0" -t 1 -m 1' \
    "$prog" 2>&1) || rc=$?
  [ "$rc" -ne 0 ] || fail "ranks that disagree on TW_ROUTE started"
  grep -q "TW_ROUTE alike on every rank\|runs 'route' and this rank does not\|does not run 'route'" \
    <<<"$out" || fail "no rank said why"
  echo "mismatch: rank 1 alone on leader routing: tw_init failed, saying why"
  ;;
*)
  echo "leader_route_test.sh: unknown case $case"
  exit 2
  ;;
esac
