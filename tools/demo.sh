#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The README's main job: install packages, build (Release), run tw_demo --
# many threads of one process exchanging checksummed messages -- and print
# its summary. Arguments go to tw_demo (tw_demo -h lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh >/dev/null
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DTW_TEST_PREFIX=release/ >/dev/null
cmake --build build/release -j2 --target tw_demo >/dev/null
if [ $# -eq 0 ]; then set -- -t 4 -n 200000; fi
exec build/release/tools/tw_demo "$@"
