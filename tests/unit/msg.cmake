# Matching engine, one-sided protocol and wire formats, transport table unit tests.
tw_add_test(NAME match SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_match.c
            LABELS unit INTERNAL TIMEOUT 120)
tw_add_case_tests(NAME rma_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rma_proto.c
                  LABELS unit INTERNAL TIMEOUT 60
                  CASES put get flush forged_replies dup_ack get_rep_len refused deferred dereg_key
                        origin_checks dereg_wait peer_down finalize)
tw_add_test(NAME rma_wire SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rma_wire.c
            LABELS unit INTERNAL TIMEOUT 30)
tw_add_test(NAME tl_caps SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tl_caps.c
            LABELS unit INTERNAL TIMEOUT 30)
