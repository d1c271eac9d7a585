# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/progress benchmarks: CQ hand-off against a plain SPSC ring measured in
# the same run, and the idle cost / wake-up latency of progress threads.
tw_add_bench(bench_cq ${CMAKE_CURRENT_LIST_DIR}/bench_cq.cc ${CMAKE_CURRENT_LIST_DIR}/bench_spsc_ref.c)
tw_add_bench(bench_pe_idle ${CMAKE_CURRENT_LIST_DIR}/bench_pe_idle.cc)
