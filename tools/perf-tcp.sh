#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# tw_perf over tcp (TW_TRANSPORTS=tcp, loopback) beside UCX's ucx_perftest
# (UCX_TLS=tcp on lo) and Open MPI's tcp BTL (tools/bench-peers/mpi_pingpong.c)
# in one run, so the ratios hold on a shared, noisy machine: medians of REPS
# runs (default 5) and threadwire / peer. tools/perf-peers.sh does the work.
#   tools/perf-tcp.sh [BUILD_DIR [BASE_BUILD_DIR]]   (default build/release)
# Needs ucx-utils for the UCX column, openmpi-bin and libopenmpi-dev for the
# Open MPI one; a missing peer shows "-".
exec "$(dirname "$0")/perf-peers.sh" tcp "$@"
