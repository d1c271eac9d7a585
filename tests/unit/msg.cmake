# Matching engine, one-sided protocol and wire formats, transport table unit tests.
tw_add_test(NAME match SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_match.c
            LABELS unit INTERNAL TIMEOUT 120)
tw_add_test(NAME rma_proto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rma_proto.c
            LABELS unit INTERNAL TIMEOUT 60)
tw_add_test(NAME rma_wire SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rma_wire.c
            LABELS unit INTERNAL TIMEOUT 30)
tw_add_test(NAME tl_caps SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tl_caps.c
            LABELS unit INTERNAL TIMEOUT 30)
