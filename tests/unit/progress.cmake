# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/progress: rings, completion queues, progress engines.
set(_d ${CMAKE_CURRENT_LIST_DIR})
tw_add_test(NAME progress_ring SOURCES ${_d}/test_progress_ring.c
            LABELS unit INTERNAL TIMEOUT 60)
tw_add_test(NAME progress_cq SOURCES ${_d}/test_progress_cq.c
            LABELS unit INTERNAL TIMEOUT 60)
tw_add_test(NAME progress_cq_wait SOURCES ${_d}/test_progress_cq_wait.c
            LABELS unit INTERNAL TIMEOUT 60)
tw_add_test(NAME progress_cq_fd SOURCES ${_d}/test_progress_cq_fd.c
            LABELS unit INTERNAL TIMEOUT 60)
tw_add_case_tests(NAME progress_pe SOURCES ${_d}/test_progress_pe.c
                  LABELS unit INTERNAL TIMEOUT 120
                  CASES threads modes manual doorbell fds pinned bind handover)
