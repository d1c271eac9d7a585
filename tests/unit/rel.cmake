# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/reliability unit tests: two ranks in one process over a wire the
# test controls (exact counters for each targeted fault).
tw_add_test(NAME rel SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rel.c
            LABELS unit INTERNAL TIMEOUT 300)
# Matrix row B6: 10^6 fragments with 1% corrupted, 0 corrupted deliveries.
tw_add_test(NAME rel SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rel.c ARGS b6
            LABELS stress INTERNAL TIMEOUT 600)
