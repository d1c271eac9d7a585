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

# match: bucket counts that are not powers of two, on purpose. rma_proto
# feeds hostile and stale one-sided messages and bad remote keys, and
# finalizes with a region still registered.
tw_expect_log(match PATTERNS "msg. error: match bucket count [0-9]+ is not a power of two")
tw_expect_log(rma_proto:put rma_proto:get rma_proto:flush rma_proto:forged_replies rma_proto:dup_ack
              rma_proto:get_rep_len rma_proto:refused rma_proto:deferred rma_proto:dereg_key
              rma_proto:origin_checks rma_proto:dereg_wait rma_proto:peer_down rma_proto:finalize
              PATTERNS
  "rma. warn: dropped a one-sided message from rank [0-9]+: "
  "rma. warn: refused rank [0-9]+'s (put|get) of [0-9]+ bytes at "
  "rma. warn: rank [0-9]+ refused a (put|get) of [0-9]+ bytes: invalid argument"
  "rma. error: tw_(put|get): "
  "rma. warn: 1 memory region.s. still registered at tw_finalize"
  "rma. error: tw_mr_pack: the region was released when its context finalized$")
