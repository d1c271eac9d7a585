#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The README's main job: install packages, build (Release), and run a job of
# two processes on the embedded launcher -- twrun -n 2 stencil -t 4, the
# threaded 2-D stencil of examples/: eight strips of a 1024 x 1024 grid, each
# thread exchanging its halo rows with tw_send/tw_recv while it computes its
# interior, a tw_allreduce of the residual per step -- and print its result:
# the residual (checked against a serial computation of the same grid),
# steps per second, and how much of the exchange the progress threads hid.
# Arguments replace the stencil's (examples/stencil --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh >/dev/null
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DTW_TEST_PREFIX=release/ >/dev/null
cmake --build build/release -j2 --target stencil twrun >/dev/null
if [ $# -eq 0 ]; then set -- -t 4; fi
exec build/release/tools/twrun -n 2 build/release/examples/stencil "$@"
