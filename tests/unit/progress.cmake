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

# Bad parameters on purpose (depth, wait mode, NULLs); a second start, an
# add after start; binding to a package that does not exist; handover
# arms a submission failure (tw_pe_test_submit_fail).
tw_expect_log(progress_cq PATTERNS "cq. error: (completion queue depth [0-9]+ out of range|completion queue wait mode [0-9]+ unknown|tw_cq_open: NULL (params|cq_p)|tw_cq_destroy: NULL cq)")
tw_expect_log(progress_pe:threads PATTERNS "progress. error: tw_pe_start: started twice$")
tw_expect_log(progress_pe:doorbell PATTERNS "progress. error: tw_pe_add on bell after start$")
tw_expect_log(progress_pe:bind
              PATTERNS "progress. warn: cannot bind progress thread nopkg to package [0-9]+ .*running unbound$")
tw_expect_log(progress_pe:handover PATTERNS
              "progress. warn: no submission lane to handover: running the command as its owner$")
