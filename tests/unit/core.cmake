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
