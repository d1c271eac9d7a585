# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/transports/lossy unit tests (TW_FAULT parser and decisions -- tests/fuzz
# fuzzes the same parser; the lossy wrapper around self and a fake transport).
tw_add_test(NAME fault_spec SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fault.c
            LABELS unit INTERNAL TIMEOUT 60)
tw_add_test(NAME lossy SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lossy.c
            LABELS unit INTERNAL TIMEOUT 60)
