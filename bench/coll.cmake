# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/coll benchmarks: the hardware floor of a barrier through shared
# memory (two threads, single-writer cache lines); tw_coll_perf and
# tools/perf-coll.sh measure the collectives themselves.
tw_add_bench(bench_line ${CMAKE_CURRENT_LIST_DIR}/bench_line.cc)
