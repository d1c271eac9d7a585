#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The lifeline across nodes: 4 ranks on 2 emulated nodes; 3 s into the
# job, the PMIx server of node n2 (mpirun's orted there, or slurmstepd) is
# SIGKILLed (lifeline_rank.sh). Every rank of n2 must exit within 1 s. The
# launcher is told to keep going and would wait for the lost node until
# its timeout: n1's ranks leave once DIR/lifeline.ms is written, and the
# sidecar kills the launcher once they did. Its status is not the verdict,
# DIR/lifeline.ms is.
#   cluster_lifeline.sh RUN_CLUSTER mpirun|srun TW_MP_RANK
set -eu
run=$1 launcher=$2 rank=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/twtest-lifeline.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work"
rc=0
"$run" --launcher "$launcher" --keep-going --nodes 2 --np 4 --timeout 14 \
  --launcher-pid "$work/launcher.pid" --sidecar "$here/cluster_stop_when.sh $work 2 left" -- \
  "$here/lifeline_rank.sh" "$rank" "$work" || rc=$?
[ "$rc" -ne 77 ] || exit 77
n=$(find "$work" -name 'n2.*' | wc -l)
[ "$n" -eq 2 ] || { echo "FAIL: $n ranks on n2, want 2 (launcher status $rc)"; exit 1; }
[ -f "$work/lifeline.ms" ] || { echo "FAIL: the killer on n2 left no result (launcher status $rc)"; exit 1; }
ms=$(cat "$work/lifeline.ms")
[[ $ms =~ ^[0-9]+$ ]] || { echo "FAIL: $ms"; exit 1; }
[ "$ms" -le 1000 ] || { echo "FAIL: n2's ranks took $ms ms to exit after their server died (bound 1000)"; exit 1; }
echo "ok: both ranks of n2 exited $ms ms after $launcher's PMIx server on n2 was killed"
