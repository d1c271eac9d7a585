# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The reliability layer under injected faults (rel_test.sh, through
# test_alltoall): test-matrix rows B1, B2 over shm and tcp, B4, B8, and
# fail-back over real transports.
foreach(_v "b1;shm" "b1;tcp" "b2;shm" "b2;tcp" "b4;shm" "b8;" "failback;")
  list(GET _v 0 _case)
  list(GET _v 1 _tl)
  set(_name rel_${_case})
  if(_tl)
    set(_name rel_${_case}_${_tl})
  endif()
  add_test(NAME ${TW_TEST_PREFIX}${_name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/rel_test.sh $<TARGET_FILE:twrun>
                   $<TARGET_FILE:test_alltoall> ${_case} ${_tl})
  set_tests_properties(${TW_TEST_PREFIX}${_name} PROPERTIES LABELS multiproc TIMEOUT 300
                       ENVIRONMENT "${TW_TEST_ENV}")
endforeach()
