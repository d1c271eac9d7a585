#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# A node lost mid-run: 6 ranks on 3 emulated nodes (tw_mp_rank node-loss),
# node n3's link cut by nftables once every rank said hello and never
# restored, reliability off, TW_TCP_TIMEOUT=2s. Ranks 4 and 5 (n3) are lost; each of ranks 0-3
# checks that its receives from them fail TW_ERR_PEER_FAILED and its
# error handler ran once for each and for nobody else, and that the
# survivors still exchange messages, finalizes, then leaves rankR.pass.
# The launcher keeps going and would wait for the lost node until its
# timeout: the sidecar kills it once the 4 survivors passed, and its
# status is not the verdict.
#
# TW_ROUTE (direct by default, or leader) is passed to the ranks. Once
# every rank said hello, the TCP connections between the nodes are
# counted, then n3 is cut (cluster_route.sh --count, a sidecar, so the
# count always comes before the cut): direct, every pair of ranks
# on different nodes (12); leader, the leaders' pairs alone (0-2, 0-4,
# 2-4), so that ranks 1 and 3 can only learn of n3's loss from their
# leaders (DOWN frames), and rank 5's at all from its leader's loss.
#   cluster_node_loss.sh RUN_CLUSTER mpirun|srun TW_MP_RANK
set -eu
run=$1 launcher=$2 rank=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cluster_lib.sh"
route=${TW_ROUTE:-direct}
work=$(mktemp -d /tmp/twtest-nodeloss.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work"
rc=0
"$run" --launcher "$launcher" --keep-going --nodes 3 --np 6 --timeout 16 \
  --env TW_ROUTE="$route" --env TW_TCP_TIMEOUT=2s --env TWTEST_NODE_LOSS_S=10 \
  --launcher-pid "$work/launcher.pid" \
  --sidecar "$here/cluster_route.sh --count $work 6 up n3" \
  --sidecar "$here/cluster_stop_when.sh $work 4 pass" -- "$rank" node-loss "$work" 4,5 || rc=$?
[ "$rc" -ne 77 ] || exit 77
for r in 0 1 2 3 4 5; do
  [ -f "$work/rank$r.up" ] || { echo "FAIL: rank $r never came up (launcher status $rc)"; exit 1; }
done
[ -f "$work/conns" ] || { echo "FAIL: the connections were not counted"; exit 1; }
check_pairs "$work/conns" "$route" 6 3 "TW_ROUTE=$route" ||
  { echo "FAIL: not the connections of TW_ROUTE=$route"; exit 1; }
for r in 0 1 2 3; do
  [ -f "$work/rank$r.pass" ] || { echo "FAIL: survivor rank $r did not pass (launcher status $rc)"; exit 1; }
done
echo "ok: n3 cut off under $launcher, TW_ROUTE=$route ($(wc -l <"$work/conns") connections" \
  "between the nodes: $(tr '\n' , <"$work/conns" | sed 's/,$//')): ranks 4 and 5 failed at" \
  "ranks 0-3, which still talk"
