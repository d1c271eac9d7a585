# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/routing unit tests: the frame header (seal, parse; tests/fuzz fuzzes
# the same parser).
tw_add_case_tests(NAME route_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_route_proto.c
                  LABELS unit INTERNAL TIMEOUT 30
                  CASES known_bytes accept checksum reject precedence)
# The layer over the scripted fake transport: four ranks on two nodes.
tw_add_case_tests(NAME route SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_route.c
                  LABELS unit INTERNAL TIMEOUT 60
                  CASES order dup_held frags forward send not_passed down leader_down leader_lost
                        malformed)
target_link_libraries(test_route PRIVATE tw_fake_tl)
# The frames the cases forge on purpose: ones no rank may pass on
# (not_passed), malformed or stale ones (malformed), and a leader lost
# (leader_lost).
tw_expect_log(route:not_passed PATTERNS
  "route. warn: malformed frame from rank [0-9]+ .a frame for another rank that this one does not pass on.: dropped$")
tw_expect_log(route:dup_held PATTERNS
  "route. warn: malformed frame from rank [0-9]+ .a frame numbered as one already held.: dropped$")
tw_expect_log(route:malformed PATTERNS
  "route. warn: malformed frame from rank [0-9]+ .(reserved bits set|a fragment out of its message|a frame numbered before ones handed up).: dropped$")
tw_expect_log(route:leader_lost PATTERNS
  "route. warn: rank [0-9]+, this node's leader, failed: the ranks of other nodes are unreachable through it$")
