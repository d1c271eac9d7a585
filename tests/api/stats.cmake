# tw_stats_json: the same counters as tw_stats_print, valid JSON
# (tests/common/twt_stats.py parses it), the traffic counted.
tw_add_test(NAME stats_json SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_stats_json.c INTERNAL
            LABELS api TIMEOUT 60)
set(_q "all ifaces/tl:self/tx_msgs == 5" "all ifaces/tl:self/rx_msgs == 5" "all msg/sent == 5"
       "all msg/received == 5" "all cq/pushed == 10" "none ifaces/tl:shm" "all size == 1"
       "all nnodes == 1" "all node == 0")
add_test(NAME ${TW_TEST_PREFIX}stats_json_parses
         COMMAND sh -c "$<TARGET_FILE:test_stats_json> | ${PROJECT_SOURCE_DIR}/tests/common/twt_stats.py - \"$@\"" sh ${_q})
set_tests_properties(${TW_TEST_PREFIX}stats_json_parses PROPERTIES
  LABELS api TIMEOUT 60 ENVIRONMENT "${TW_TEST_ENV}")
# The refused arguments test_stats_json checks on purpose.
tw_expect_log(stats_json stats_json_parses PATTERNS "api. error: tw_stats_json: (NULL stream|NULL context)$")
