#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# tw_perf over verbs beside UCX's ucx_perftest (UCX_TLS=rc_v) in one run, on
# a node with an RDMA device (latency, bandwidth, message rate with 1, 4
# and 8 thread pairs per HCA; one-sided put and get latency and bandwidth
# beside ucp_put_lat, ucp_put_bw and ucp_get): medians of REPS runs
# (default 5) and threadwire / UCX. tools/perf-peers.sh does the work (and
# says how the one-sided figures compare).
#   TW_VERBS_DEVICES=mlx5_0:1 tools/perf-verbs.sh [BUILD_DIR]   (default build/release)
# Needs ucx-utils for the UCX column. Not for emulated devices: Soft-RoCE
# under QEMU's TCG (tests/vm) checks function, not speed.
exec "$(dirname "$0")/perf-peers.sh" verbs "$@"
