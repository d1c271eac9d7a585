# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/transports/shm unit tests: the cross-process format (tests/fuzz fuzzes
# the same checks), and one iface against a hand-played peer that lies.
tw_add_case_tests(NAME shm_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shm_proto.c
                  LABELS unit INTERNAL TIMEOUT 30 CASES layout seg cells addr)
tw_add_test(NAME shm_hostile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shm_hostile.c
            LABELS unit INTERNAL TIMEOUT 60)
