# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/transports/tcp unit tests (wire format; tests/fuzz fuzzes the same parsers).
tw_add_case_tests(NAME tcp_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tcp_proto.c
                  LABELS unit INTERNAL TIMEOUT 30
                  CASES siphash hs_round_trip hs_reject hs_proof frame frame_rndv key_parse addr_good
                        addr_reject contract_edges)
