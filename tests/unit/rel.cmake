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
                        crc_long far_stale left_then_closed left_then_due leaving_bye_lost
                        leaving_data_unacked closed_before_bye closed_then_ack
                        reenter wrap corrupt failover failback_due fornow fornow_refused
                        fornow_forgood refusing refusing_only nopath keepalive early_stamp
                        pause)
target_link_libraries(test_rel PRIVATE tw_fake_tl)
# The faults the cases inject on purpose: frames far ahead or of another
# incarnation (far_stale), paths failing and healing (failover, fornow*),
# peers failing (nopath, keepalive). Cases that must log nothing assert it
# themselves (left_then_closed).
set(_tw_rel_expected
  "rel. warn: rank [0-9]+ sent fragment [0-9]+, [0-9]+ past the window: dropped$"
  "rel. warn: dropped a frame from another incarnation of rank [0-9]+ or of this rank$"
  "rel. warn: path fake to rank [0-9]+ failed .(retransmissions unanswered|transport error|peer failed|it refused every frame).: failing over to fake$"
  "rel. warn: path fake to rank [0-9]+ is healthy again: failing back$"
  "rel. error: rank [0-9]+ failed: (retransmissions unanswered|it refused every frame|silent for [0-9]+ ms .keepalive [0-9]+ ms x [0-9]+.). its operations complete with TW_ERR_PEER_FAILED$")
tw_expect_log(rel:far_stale PATTERNS ${_tw_rel_expected})
foreach(_c failover failback_due fornow fornow_refused fornow_forgood refusing refusing_only nopath keepalive pause early_stamp wrap
           corrupt)
  tw_expect_log(rel:${_c} PATTERNS ${_tw_rel_expected})
endforeach()
# Matrix row B6: 10^6 fragments with 1% corrupted, 0 corrupted deliveries
# (run by name only: not one of the cases above).
tw_add_test(NAME rel SOURCES ${_tw_rel_srcs} ARGS b6 LABELS stress INTERNAL TIMEOUT 600)
tw_expect_log(rel:b6 PATTERNS ${_tw_rel_expected})
