#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Nodes are the runtime's (the node map), not the kernel's: TW_NODE_ID
# splits a twrun job into emulated nodes, and then shm carries traffic only
# within a node while tcp carries it across. Reads the node map and the
# per-transport counters of tw_stats_json (test_alltoall --stats=json)
# through tests/common/twt_stats.py, and tw_info --job's node map.
#   node_split_test.sh TWRUN TEST_ALLTOALL TW_INFO
set -eu
twrun=$1 prog=$2 info=$3
stats="$(dirname "$0")/../common/twt_stats.py"
unset TW_TRANSPORTS TW_NODE_ID
fail() { echo "$out"; echo "FAIL: $*"; exit 1; }

# Two nodes of two ranks: shm within each, tcp between them.
out=$(TW_NODE_ID=0,0,1,1 "$twrun" -n 4 "$prog" -t 2 -m 4 --stats=json 2>&1) || fail "4 ranks on 2 nodes"
"$stats" - 'all nnodes == 2' 'rank 0 node == 0' 'rank 1 node == 0' 'rank 2 node == 1' \
  'rank 3 node == 1' 'all ifaces/tl:shm/tx_msgs >= 1' 'all ifaces/tl:tcp/tx_msgs >= 1' <<<"$out" ||
  fail "TW_NODE_ID=0,0,1,1: want 2 nodes, shm within them and tcp across"

# One rank per node: shm carries nothing at all.
out=$(TW_NODE_ID=0,1 "$twrun" -n 2 "$prog" -t 2 -m 4 --stats=json 2>&1) || fail "2 ranks on 2 nodes"
"$stats" - 'all nnodes == 2' 'all ifaces/tl:shm/tx_msgs == 0' 'all ifaces/tl:tcp/tx_msgs >= 1' <<<"$out" ||
  fail "TW_NODE_ID=0,1: shm must not carry traffic between nodes, tcp must"

# One number for every rank: one node, shm carries it all.
out=$(TW_NODE_ID=5 "$twrun" -n 2 "$prog" -t 2 -m 4 --stats=json 2>&1) || fail "TW_NODE_ID=5"
"$stats" - 'all nnodes == 1' 'all node == 0' 'all ifaces/tl:shm/tx_msgs >= 1' \
  'all ifaces/tl:tcp/tx_msgs == 0' <<<"$out" || fail "TW_NODE_ID=5: one node"

# tw_info --job prints the map.
out=$(TW_NODE_ID=0,1,1 "$twrun" -n 3 "$info" --job 2>&1) || fail "tw_info --job"
grep -qx "job: 3 rank(s), bootstrap twrun; 2 nodes: node 0: rank 0; node 1: ranks 1-2" <<<"$out" ||
  fail "tw_info --job: wrong node map"
# The node round races with the next one: a rank that read every node
# puts its address blob, which replaces its node blob at twrun, while
# slower ranks still read. 8 ranks on 4 nodes, 20 jobs (the race lost 6
# jobs of 30 before readers took the node from a blob a round ahead).
for i in $(seq 20); do
  out=$(TW_NODE_ID=0,0,1,1,2,2,3,3 "$twrun" -n 8 "$info" --job 2>&1) || fail "8 ranks on 4 nodes, job $i"
  grep -qx "job: 8 rank(s), bootstrap twrun; 4 nodes: node 0: ranks 0-1; node 1: ranks 2-3; node 2: ranks 4-5; node 3: ranks 6-7" <<<"$out" ||
    fail "8 ranks on 4 nodes, job $i: wrong node map"
done
echo "node split: shm within emulated nodes, tcp across them"
