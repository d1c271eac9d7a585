#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# tw_perf over shm beside UCX's ucx_perftest (UCX_TLS=sm) in one run, so the
# ratios hold on a shared, noisy machine: medians of REPS runs (default 5)
# and threadwire / UCX. tools/perf-peers.sh does the work.
#   tools/perf-shm.sh [BUILD_DIR [BASE_BUILD_DIR]]   (default build/release)
# Needs ucx-utils (apt-get install ucx-utils) for the UCX column.
exec "$(dirname "$0")/perf-peers.sh" shm "$@"
