# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/core unit tests.
foreach(t atomic crc32c log mem stats lock)
  tw_add_test(NAME core_${t} SOURCES test_core_${t}.c LABELS unit INTERNAL TIMEOUT 60)
endforeach()
tw_add_case_tests(NAME core_config SOURCES test_core_config.c LABELS unit INTERNAL
                  CASES defaults list bool int uint64 size duration enum string error_text
                        apply_env unknown print)

# Links the public shared library, as users do: the host's malloc must stay
# libc's even though libthreadwire pulls in jemalloc.
tw_add_test(NAME core_mem_host_malloc SOURCES test_mem_host_malloc.c LABELS unit TIMEOUT 60)
target_link_libraries(test_core_mem_host_malloc PRIVATE ${CMAKE_DL_LIBS})

# core_log logs on purpose: every level, the line format, a truncated line,
# concurrent writers, and a bad TW_LOG_LEVEL (in a child).
tw_expect_log(core_log PATTERNS
  "test. (error: an error 1|warn: a warning 2)$"
  "core. warn: (cq .nil. overflow on peer 3|with newline|x+[.][.][.])$"
  "r5 progress. error: device mlx5_0 failed$"
  "mt. warn: writer [0-9]+ line [0-9]+ payload"
  "log. warn: bad value 'loud' for TW_LOG_LEVEL")

# The log rule can fail (tests/README.md): test_core_log's child logs two
# lines the first entry declares and two it does not, and leaves by
# _exit(0), so only the marker in its output can fail it: ctest must
# (WILL_FAIL turns that into a pass). The second entry declares all four
# and must pass.
foreach(_v undeclared declared)
  add_test(NAME ${TW_TEST_PREFIX}log_rule:${_v} COMMAND test_core_log child-rule-_exit0)
  set_tests_properties(${TW_TEST_PREFIX}log_rule:${_v} PROPERTIES LABELS unit TIMEOUT 30
                       ENVIRONMENT "${TW_TEST_ENV}")
endforeach()
set_tests_properties(${TW_TEST_PREFIX}log_rule:undeclared PROPERTIES WILL_FAIL TRUE)
tw_expect_log(log_rule:undeclared log_rule:declared PATTERNS
              "peer [0-9]+ declared gone$" "declared too: device mlx5_0$")
tw_expect_log(log_rule:declared PATTERNS "a surprise on peer 4$" "an unexpected error$")

# core_config parses bad values on purpose, and sets unknown TW_* variables.
tw_expect_log(core_config:bool core_config:int core_config:uint64 core_config:size
              core_config:duration core_config:enum core_config:string core_config:apply_env
              core_config:error_text
              PATTERNS "config. error: bad value '[^']*' for TWT_[A-Z_]+: expected ")
tw_expect_log(core_config:error_text
              PATTERNS "config. error: bad value 'fast' for TW_WAIT_MODE: expected ")
tw_expect_log(core_config:unknown PATTERNS
  "config. warn: unknown environment variable TW_(KNOWN|KNOWN_ON|KNOWN_ONE|KNOWN_ONE_MORE|FOO|LOG_LEVEL) ignored")
