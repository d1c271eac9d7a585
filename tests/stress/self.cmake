# Self-traffic stress through the public API (tests/stress/test_self_stress.c).
set(_src ${CMAKE_CURRENT_LIST_DIR}/test_self_stress.c)
foreach(_mode_wait "thread;adaptive" "thread;spin" "thread;block" "manual;adaptive")
  tw_add_test(NAME self_stress SOURCES ${_src} LABELS stress TIMEOUT 300
              ARGS ${_mode_wait})
endforeach()
# 10 threads on 2 cores, then everything on one core: no livelock.
tw_add_test(NAME self_stress SOURCES ${_src} LABELS stress TIMEOUT 300
            ARGS thread adaptive 10 20000)
tw_add_test(NAME self_stress SOURCES ${_src} LABELS stress TIMEOUT 300
            ARGS manual spin 10 20000)
add_test(NAME ${TW_TEST_PREFIX}self_stress_taskset_cpu0
         COMMAND taskset -c 0 $<TARGET_FILE:test_self_stress> thread spin 10 20000)
add_test(NAME ${TW_TEST_PREFIX}self_stress_taskset_cpu0_manual
         COMMAND taskset -c 0 $<TARGET_FILE:test_self_stress> manual adaptive 10 20000)
set_tests_properties(${TW_TEST_PREFIX}self_stress_taskset_cpu0
                     ${TW_TEST_PREFIX}self_stress_taskset_cpu0_manual PROPERTIES
  LABELS stress TIMEOUT 300 ENVIRONMENT "${TW_TEST_ENV}")
