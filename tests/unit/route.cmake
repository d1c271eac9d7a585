# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/routing unit tests: the frame header (seal, parse; tests/fuzz fuzzes
# the same parser).
tw_add_case_tests(NAME route_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_route_proto.c
                  LABELS unit INTERNAL TIMEOUT 30
                  CASES known_bytes accept checksum reject precedence)
