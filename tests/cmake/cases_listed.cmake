# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# cmake -DPROG=<test program> -DWANT="<case> <case> ..." -P cases_listed.cmake
# Fails when the cases CMake registers (tw_add_case_tests CASES) differ from
# what the program lists (--list): a case left out of ctest never runs.
execute_process(COMMAND ${PROG} --list OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROG} --list failed (${rc})")
endif()
string(STRIP "${out}" out)
string(REPLACE "\n" ";" have "${out}")
separate_arguments(want UNIX_COMMAND "${WANT}")
list(SORT have)
list(SORT want)
if(NOT have STREQUAL want)
  message(FATAL_ERROR "cases registered with ctest: ${want}\ncases the program has: ${have}")
endif()
message(STATUS "${PROG}: the ${WANT} cases are all registered")
