/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The library's bootstrap client against twrun (run as `twrun -n N
 * test_boot`): put a blob, fence, get every rank's blob and check it; bad
 * ranks and small buffers are errors; a fence on a dead launcher fails.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/tw_boot.h"
#include "tw_test.h"

int main(void)
{
    const char *addr = getenv("TW_BOOT_ADDR"), *key = getenv("TW_JOB_KEY");
    int rank, size;
    tw_boot_t *b;
    char blob[128], got[TW_BOOT_BLOB_MAX];
    size_t len;

    if (addr == NULL || key == NULL || getenv("TW_RANK") == NULL) {
        printf("skipped: run me under twrun\n");
        return TWT_SKIP;
    }
    rank = atoi(getenv("TW_RANK"));
    size = atoi(getenv("TW_SIZE"));
    TWT_EQ(tw_boot_connect("/nonexistent/socket", rank, size, &b), TW_ERR_BOOTSTRAP);
    TWT_EQ(tw_boot_connect(addr, rank, size, &b), TW_OK);
    snprintf(blob, sizeof(blob), "addr-of-%d/%s", rank, key);
    TWT_EQ(tw_boot_put(b, blob, strlen(blob)), TW_OK);
    TWT_EQ(tw_boot_put(b, blob, TW_BOOT_BLOB_MAX + 1), TW_ERR_INVALID);
    TWT_EQ(tw_boot_fence(b, 20000), TW_OK);
    for (int r = 0; r < size; r++) {
        snprintf(blob, sizeof(blob), "addr-of-%d/%s", r, key);
        len = sizeof(got);
        TWT_EQ(tw_boot_get(b, r, got, &len), TW_OK);
        TWT_EQ(len, strlen(blob));
        TWT_CHECK(memcmp(got, blob, len) == 0);
        len = 3; /* too small: an error, and the connection stays usable */
        TWT_EQ(tw_boot_get(b, r, got, &len), TW_ERR_INVALID);
    }
    len = sizeof(got);
    TWT_EQ(tw_boot_get(b, size, got, &len), TW_ERR_INVALID);
    TWT_EQ(tw_boot_get(b, -1, got, &len), TW_ERR_INVALID);
    TWT_EQ(tw_boot_fence(b, 20000), TW_OK); /* fences repeat */
    tw_boot_close(b);
    printf("rank %d of %d: bootstrap exchange ok\n", rank, size);
    return 0;
}
