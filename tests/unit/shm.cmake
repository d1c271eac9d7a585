# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/transports/shm unit tests: the cross-process format (tests/fuzz fuzzes
# the same checks), and one iface against a hand-played peer that lies.
tw_add_case_tests(NAME shm_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shm_proto.c
                  LABELS unit INTERNAL TIMEOUT 30 CASES layout seg cells addr)
tw_add_test(NAME shm_hostile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shm_hostile.c
            LABELS unit INTERNAL TIMEOUT 60)

# shm_hostile writes lying cells into the rings: the peer is failed.
tw_expect_log(shm_hostile PATTERNS
  "shm. error: rank [0-9]+ .pid [0-9]+. failed: (cell length beyond the cell|cell header longer than the cell's bytes|corrupt or unexpected ring cell). its operations complete")
