#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The README's main job: install packages, build (Release), and run a job of
# two processes on the embedded launcher -- twrun -n 2 tw_perf -t 4: four
# thread pairs across the processes measure latency, bandwidth and message
# rate over the shm transport, every payload checked -- and print the table.
# Arguments replace tw_perf's (tw_perf --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh >/dev/null
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DTW_TEST_PREFIX=release/ >/dev/null
cmake --build build/release -j2 --target tw_perf twrun >/dev/null
if [ $# -eq 0 ]; then set -- -x lat,bw,rate -t 4; fi
exec build/release/tools/twrun -n 2 build/release/tools/tw_perf "$@"
