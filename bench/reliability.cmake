# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
# The reliability layer's CPU cost per message, on and off.
tw_add_bench(bench_rel ${CMAKE_CURRENT_LIST_DIR}/bench_rel.cc
             ${CMAKE_CURRENT_LIST_DIR}/bench_rel_ops.c)
