# Lock-free object pool (src/progress/tw_pool.c).
tw_add_test(NAME progress_pool SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_progress_pool.c
            LABELS unit INTERNAL TIMEOUT 60)
