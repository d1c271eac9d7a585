/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Every transport's ops table: no NULL slot, and the capability bits say
 * exactly which slots are real (the rest point at the shared stubs, which
 * return TW_ERR_UNSUPPORTED). A table that advertises a stub, or hides a
 * real operation, fails here.
 */
#include <string.h>

#include "transports/base/tw_tl.h"
#include "tw_test.h"

int main(void)
{
    int n = 0;
    char why[128];

    for (size_t i = 0; tw_tl_all[i] != NULL; i++) {
        const tw_tl_ops_t *ops = tw_tl_all[i];
        TWT_CHECKF(tw_tl_caps_consistent(ops), "transport %s", ops->name);
        TWT_CHECK(tw_tl_find(ops->name) == ops);
        TWT_CHECK(ops->query(why, sizeof(why)) == TW_OK || why[0] != '\0');
        n++;
    }
    TWT_CHECK(tw_tl_find("self") != NULL);
    TWT_CHECK(tw_tl_find("no-such") == NULL);
    /* The checker itself catches a mismatch. */
    tw_tl_ops_t bad = *tw_tl_find("self");
    bad.caps |= TW_TL_CAP_PUT;
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    bad = *tw_tl_find("self");
    bad.caps &= ~TW_TL_CAP_AM_ZCOPY;
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    bad = *tw_tl_find("self");
    bad.flush = NULL;
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    TWT_EQ(tw_tl_stub_put_zcopy(NULL, 0, NULL, 0, 0, NULL, NULL), TW_ERR_UNSUPPORTED);
    printf("%d transport ops table(s) consistent\n", n);
    return 0;
}
