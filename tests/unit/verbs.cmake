# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/transports/verbs unit tests: wire formats, credits, registration cache,
# and "no device" reported cleanly (no RDMA device needed).
tw_add_case_tests(NAME verbs_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_verbs_proto.c
                  LABELS unit INTERNAL TIMEOUT 30
                  CASES frames conn conn_stale addr rkey_key credits rcache query)
if(TW_HAVE_VERBS)
  # The async event thread, with pipes standing in for devices.
  tw_add_test(NAME verbs_async SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_verbs_async.c
              LABELS unit INTERNAL TIMEOUT 60)
endif()

if(TW_HAVE_VERBS)
  # Watching an fd twice, unwatching one never watched, a hung-up pipe.
  tw_expect_log(verbs_async PATTERNS
    "verbs. error: async thread: fd [0-9]+ is (watched already|not watched)$"
    "verbs. warn: async thread: fd [0-9]+ hung up: no longer polled$")
endif()
