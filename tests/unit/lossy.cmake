# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/transports/lossy unit tests (TW_FAULT parser and decisions -- tests/fuzz
# fuzzes the same parser; the lossy wrapper around self and around the
# scripted fake transport, one ctest entry per case).
tw_add_case_tests(NAME fault_spec SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fault.c
                  LABELS unit INTERNAL TIMEOUT 60
                  CASES parse determinism rates schedule blackhole_heal)
tw_add_case_tests(NAME lossy SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lossy.c
                  LABELS unit INTERNAL TIMEOUT 60
                  CASES passthrough drop_all drop_seeded corrupt dup reorder delay scoped kill_self
                        kill_reports again blackhole blackhole_after set_spec close_held threads)
target_link_libraries(test_lossy PRIVATE tw_fake_tl)
# Bad wrap arguments on purpose (two inner ifaces, NULLs).
tw_expect_log(lossy:passthrough lossy:drop_all lossy:drop_seeded lossy:corrupt lossy:dup
              lossy:reorder lossy:delay lossy:scoped lossy:kill_self lossy:kill_reports lossy:again
              lossy:blackhole lossy:blackhole_after lossy:set_spec lossy:close_held lossy:threads
              PATTERNS "lossy. error: lossy wraps one transport at a time, not [0-9]+$"
                       "lossy. error: tw_lossy_wrap: NULL argument, no recv callback or a bad spec$")
