# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/reliability unit tests: two ranks in one process over the scripted
# fake transport (tests/common/tw_fake_tl.h), exact counters for each
# targeted fault; one ctest entry per case.
set(_tw_rel_srcs ${CMAKE_CURRENT_LIST_DIR}/test_rel.c ${CMAKE_CURRENT_LIST_DIR}/test_rel_rig.c
                 ${CMAKE_CURRENT_LIST_DIR}/test_rel_frames.c
                 ${CMAKE_CURRENT_LIST_DIR}/test_rel_paths.c)
tw_add_case_tests(NAME rel SOURCES ${_tw_rel_srcs} LABELS unit INTERNAL TIMEOUT 120
                  CASES basic first_frag last_frag ack_lost nack_lost dup_done dup_held crc_short
                        crc_long far_stale left_then_closed reenter wrap corrupt failover fornow fornow_refused
                        fornow_forgood nopath keepalive early_stamp pause)
target_link_libraries(test_rel PRIVATE tw_fake_tl)
# Matrix row B6: 10^6 fragments with 1% corrupted, 0 corrupted deliveries
# (run by name only: not one of the cases above).
tw_add_test(NAME rel SOURCES ${_tw_rel_srcs} ARGS b6 LABELS stress INTERNAL TIMEOUT 600)
