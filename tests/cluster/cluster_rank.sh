#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# A rank's program under the launcher, wrapped (run-cluster.sh ... --
# cluster_rank.sh DIR PROG ARGS...): writes DIR/rankR.where ("PID NODE",
# R = PMIX_RANK, which both launchers set) and runs PROG in its place
# (same pid) with its stdout in DIR/rankR.out, whole: srun's I/O
# forwarding splits long lines (tw_stats_json) and mixes them with other
# ranks'. stderr (log lines, failures) still goes to the launcher.
set -eu
dir=$1
shift
r=${PMIX_RANK:?cluster_rank.sh: no PMIX_RANK (run me under mpirun or srun)}
echo "$$ $(hostname)" >"$dir/rank$r.where.tmp"
mv "$dir/rank$r.where.tmp" "$dir/rank$r.where"
exec "$@" >"$dir/rank$r.out"
