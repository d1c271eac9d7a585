#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# A sidecar (run-cluster.sh --sidecar) for scenarios that lose a node or
# its PMIx server on purpose: the launcher then waits for that node until
# the driver's timeout, long after the verdict is in. Once N files
# DIR/rank*.EXT exist (the survivors' word that they are done: written
# after tw_finalize), it SIGKILLs the launcher, whose pid run-cluster.sh
# --launcher-pid wrote to DIR/launcher.pid; the teardown stops the rest.
# It gives up (and leaves the launcher alone) after S seconds.
#   cluster_stop_when.sh DIR N EXT [S]
set -eu
dir=$1 n=$2 ext=$3 secs=${4:-60}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cluster_lib.sh"
wait_ranks "$dir" "$ext" "$n" "$secs" || exit 0
kill -KILL "$(cat "$dir/launcher.pid")" 2>/dev/null || true
