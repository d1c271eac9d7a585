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
# Every command of README.md's sh blocks, as a user would type it (this
# build's programs for build/release's, short iteration counts).
add_test(NAME ${TW_TEST_PREFIX}readme_commands
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/readme_commands.sh ${PROJECT_SOURCE_DIR}
                 ${PROJECT_BINARY_DIR})
set_tests_properties(${TW_TEST_PREFIX}readme_commands PROPERTIES
  LABELS api TIMEOUT 120 ENVIRONMENT "${TW_TEST_ENV}")
# tw_coll_perf, a few iterations of each collective over 2 ranks: the output
# well-formed (cheap: a few seconds).
add_test(NAME ${TW_TEST_PREFIX}tw_coll_perf
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/tw_coll_perf_test.sh $<TARGET_FILE:tw_coll_perf>
                 $<TARGET_FILE:twrun>)
set_tests_properties(${TW_TEST_PREFIX}tw_coll_perf PROPERTIES
  LABELS api TIMEOUT 120 ENVIRONMENT "${TW_TEST_ENV}")
# tools/report.sh --quick end to end (report_test.sh): perf-peers.sh over
# shm and tcp and perf-coll.sh at a few iterations, report.md's sections and
# numeric rows, the plots; about 40 s. Not in sanitizer builds (their slow
# runs prove nothing more here); RUN_SERIAL: it binds and pins both cores.
if(NOT TW_SANITIZER)
  add_test(NAME ${TW_TEST_PREFIX}perf_report
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/report_test.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  set_tests_properties(${TW_TEST_PREFIX}perf_report PROPERTIES
    LABELS api TIMEOUT 600 RUN_SERIAL TRUE ENVIRONMENT "${TW_TEST_ENV}")
endif()

# api_basic registers an active-message id twice, and sends to an id
# nobody registered, on purpose.
tw_expect_log(api_basic:thread api_basic:manual PATTERNS
  "msg. error: active-message id [0-9]+ is already registered$"
  "msg. warn: dropped a message from rank [0-9]+: no handler registered for its active-message id ")
# api_badargs: every call and every variable in it is wrong on purpose.
tw_expect_log(api_badargs PATTERNS
  "init. error: (tw_init: NULL ctx_p|tw_config_t[.](size|progress_threads|wait_mode) )"
  "init. error: (unknown transport 'carrier-pigeon'|transport 'verbs' in TW_TRANSPORTS is not usable here: |'lossy' in TW_TRANSPORTS is a layer)"
  "init. error: (TW_MATCH_BUCKETS|TW_PROGRESS_RING)=[0-9]+ is not a power of two$"
  "init. error: TW_FAULT(=drop=|=explode=|_ON=tpc: |_RANKS=)"
  "init. error: (OMPI_COMM_WORLD_SIZE=[0-9]+ but no PMIx in the environment: |TW_SIZE=[0-9]+ but no TW_BOOT_ADDR|bad launcher environment: )"
  "config. error: bad value '[^']*' for TW_[A-Z_]+: expected "
  "config. warn: unknown environment variable TW_NO_SUCH_KNOB ignored"
  "boot. error: rank [0-9]+: cannot reach the launcher at /nonexistent/twrun.sock: "
  "api. error: tw_[a-z_]+: (NULL |rank -?[0-9]+ is not in the job|buffer |completion queue |header |context )"
  "cq. error: (tw_cq_destroy: NULL cq|completion queue depth [0-9]+ out of range)")
# tw_info_test.sh sets an unknown TW_* variable: tw_info must warn.
tw_expect_log(tw_info PATTERNS
              "config. warn: unknown environment variable TW_NO_SUCH_KNOB ignored")
# tw_perf_test.sh sets TW_STATS=yaml on purpose: tw_init must refuse it.
tw_expect_log(tw_perf PATTERNS "config. error: bad value 'yaml' for TW_STATS: expected ")
