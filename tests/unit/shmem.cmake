# Node segments (src/shmem).
tw_add_test(NAME shm_seg SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shm_seg.c
            LABELS unit INTERNAL TIMEOUT 60)
# Another uid (65534, via setpriv) against root's segments; skips unless root.
tw_add_test(NAME shm_seg SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shm_seg.c
            LABELS unit INTERNAL TIMEOUT 60 ARGS other-uid)

# Hygiene checks on purpose: a name taken (O_EXCL), a symlink, a segment of
# another uid or mode, a missing one, a full tmpfs.
tw_expect_log(shm_seg shm_seg:other-uid PATTERNS
  "shmem. error: cannot create segment /tw-[0-9a-f-]+: File exists$"
  "shmem. error: segment /tw-[0-9a-f-]+ refused: uid [0-9]+ mode [0-7]+ size [0-9]+ .want uid "
  "shmem. error: cannot attach segment /tw-[0-9a-f-]+: (No such file or directory|Too many levels of symbolic links|Permission denied)$"
  "shmem. error: cannot reserve [0-9]+ bytes for segment /tw-[0-9a-f-]+: No space left on device$")
