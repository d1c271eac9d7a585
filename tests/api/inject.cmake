# tw_send_inject: copied at once, no completion, in order with tw_send,
# refusals. A job of one (self), and two ranks over shm, tcp, manual
# progress and the reliability layer under injected faults.
# The refusals rank 0 checks on purpose, one error line each.
set(_tw_inject_refused "api. error: tw_send_inject: (NULL context|rank -?[0-9]+ is not in the job .size [0-9]+.|[0-9]+ bytes at .* .at most [0-9]+, and a buffer.)$")
tw_add_test(NAME api_inject SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_api_inject.c LABELS api
            TIMEOUT 120 EXPECT_LOG "${_tw_inject_refused}")
foreach(_v "shm;TW_TRANSPORTS=shm" "tcp;TW_TRANSPORTS=tcp"
           "manual;TW_PROGRESS_THREADS=0"
           "rel;TW_RELIABLE=1;TW_FAULT=drop=0.05,dup=0.01,reorder=0.1,seed=5")
  list(GET _v 0 _name)
  list(SUBLIST _v 1 -1 _env)
  add_test(NAME ${TW_TEST_PREFIX}api_inject_n2_${_name}
           COMMAND twrun -n 2 $<TARGET_FILE:test_api_inject>)
  set_tests_properties(${TW_TEST_PREFIX}api_inject_n2_${_name} PROPERTIES
    LABELS "api;multiproc" TIMEOUT 120 ENVIRONMENT "${TW_TEST_ENV};${_env}")
  tw_expect_log(api_inject_n2_${_name} PATTERNS "${_tw_inject_refused}")
endforeach()
