# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The scripted fake transport (tests/common/tw_fake_tl.h) the rel and lossy
# tests and bench_rel stand on.
tw_add_case_tests(NAME fake_tl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fake_tl.c
                  LABELS unit INTERNAL TIMEOUT 60 CASES table order hooks endpoint)
target_link_libraries(test_fake_tl PRIVATE tw_fake_tl)
