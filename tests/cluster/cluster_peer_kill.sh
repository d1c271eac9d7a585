#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# A rank SIGKILLed mid-transfer on another node (tw_mp_rank peer-kill, 2
# ranks on 2 emulated nodes, the launcher told to keep going): rank 0
# checks the failure contract itself (operations with rank 1 fail
# TW_ERR_PEER_FAILED within the bound, error handler once, new operations
# refused, ANY_SOURCE receive kept, finalize) and leaves rank0.pass in a
# directory both nodes see. The launcher's status is not the verdict:
# mpirun says 0 after a recovered death, srun the dead rank's 137.
# TW_ROUTE (direct by default, or leader) is passed to the ranks; through
# the leaders (each rank leads its node), rank 0's route must say that it
# lost rank 1, the leader of node 1 -- route carried the traffic.
#   cluster_peer_kill.sh RUN_CLUSTER mpirun|srun TW_MP_RANK [run-cluster options...]
set -euo pipefail
run=$1 launcher=$2 rank=$3
shift 3
route=${TW_ROUTE:-direct}
work=$(mktemp -d /tmp/twtest-clkill.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work"
rc=0
"$run" --launcher "$launcher" --keep-going --nodes 2 --np 2 --env TW_ROUTE="$route" "$@" -- \
  "$rank" peer-kill "$work" 2>&1 | tee "$work/log" || rc=${PIPESTATUS[0]}
[ "$rc" -ne 77 ] || exit 77
[ -f "$work/rank0.pass" ] || { echo "FAIL: rank 0 did not pass (launcher status $rc)"; exit 1; }
if [ "$route" = leader ] &&
  ! grep -q "r0 route. warn: rank 1, the leader of node 1, failed" "$work/log"; then
  echo "FAIL: rank 0's route did not report losing rank 1, the leader of node 1"
  exit 1
fi
echo "ok: rank 0 on n1 survived rank 1's SIGKILL on n2 under $launcher, TW_ROUTE=$route" \
  "(launcher status $rc)"
