# Public-API tests: they link the shared library, as applications do.
foreach(_mode thread manual)
  tw_add_test(NAME api_basic SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_api_basic.c
              LABELS api TIMEOUT 120 ARGS ${_mode})
endforeach()
tw_add_test(NAME api_badargs SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_api_badargs.c
            LABELS api TIMEOUT 60)
tw_add_test(NAME api_cycles SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_api_cycles.c
            LABELS api TIMEOUT 300)
# The README's main job, small: both progress modes, checksums verified.
foreach(_mode thread manual)
  add_test(NAME ${TW_TEST_PREFIX}demo:${_mode}
           COMMAND tw_demo -t 4 -n 20000 -m ${_mode})
  set_tests_properties(${TW_TEST_PREFIX}demo:${_mode} PROPERTIES
    LABELS api TIMEOUT 120 ENVIRONMENT "${TW_TEST_ENV}"
    PASS_REGULAR_EXPRESSION "all intact")
endforeach()
add_test(NAME ${TW_TEST_PREFIX}tw_info
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/tw_info_test.sh $<TARGET_FILE:tw_info>)
set_tests_properties(${TW_TEST_PREFIX}tw_info PROPERTIES
  LABELS api TIMEOUT 60 ENVIRONMENT "${TW_TEST_ENV}")
# tw_perf in a job of one (and, through twrun, a job of two once it can be).
add_test(NAME ${TW_TEST_PREFIX}tw_perf
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/tw_perf_test.sh $<TARGET_FILE:tw_perf> $<TARGET_FILE:twrun>)
set_tests_properties(${TW_TEST_PREFIX}tw_perf PROPERTIES
  LABELS api TIMEOUT 120 ENVIRONMENT "${TW_TEST_ENV}")
