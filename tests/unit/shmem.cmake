# Node segments (src/shmem).
tw_add_test(NAME shm_seg SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shm_seg.c
            LABELS unit INTERNAL TIMEOUT 60)
# Another uid (65534, via setpriv) against root's segments; skips unless root.
tw_add_test(NAME shm_seg SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shm_seg.c
            LABELS unit INTERNAL TIMEOUT 60 ARGS other-uid)
