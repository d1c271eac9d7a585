/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_tcp_addr_blob_parse on arbitrary bytes: the input is the whole of what
 * a rank published. Checks the contract of tw_tcp_proto.h: bad input is
 * TW_ERR_PROTOCOL with a reason and leaves the output alone; an accepted
 * blob has counts in range, the length they say, known flags, families 4
 * or 6, zero IPv4 padding and no port 0, and packs back to exactly the
 * bytes it was parsed from. A blob is accepted only whole: no shorter or
 * longer run of the same bytes is.
 */
#include <stdlib.h>
#include <string.h>

#include "transports/tcp/tw_tcp_proto.h"
#include "tw_fuzz.h"

static void fz_addr_accepted(const uint8_t *data, size_t size, const tw_tcp_addr_blob_t *b)
{
    static const uint8_t zero[12];
    uint8_t packed[TW_TCP_ADDR_MAX];
    size_t len = 0;

    TW_FUZZ_CHECK(b->lanes >= 1 && b->lanes <= TW_TCP_MAX_LANES);
    TW_FUZZ_CHECK(b->naddrs >= 1 && b->naddrs <= TW_TCP_MAX_ADDRS);
    TW_FUZZ_CHECK((b->flags & ~TW_TCP_ADDR_THREADS) == 0);
    TW_FUZZ_CHECK(size == tw_tcp_addr_blob_len(b->lanes, b->naddrs));
    TW_FUZZ_CHECK(size <= TW_TCP_ADDR_MAX);
    for (unsigned a = 0; a < b->naddrs; a++) {
        const tw_tcp_addr_entry_t *e = &b->addrs[a];
        TW_FUZZ_CHECK(e->family == 4 || e->family == 6);
        TW_FUZZ_CHECK(e->family == 6 || memcmp(e->addr + 4, zero, sizeof(zero)) == 0);
        for (unsigned k = 0; k < b->lanes; k++) {
            TW_FUZZ_CHECK(e->ports[k] != 0);
        }
    }
    /* Round trip: what was accepted is exactly what pack writes, and a
     * buffer one byte short is refused. */
    TW_FUZZ_CHECK(tw_tcp_addr_blob_pack(b, packed, sizeof(packed), &len) == TW_OK);
    TW_FUZZ_CHECK(len == size && memcmp(packed, data, size) == 0);
    TW_FUZZ_CHECK(tw_tcp_addr_blob_pack(b, packed, size - 1, &len) == TW_ERR_INVALID);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tw_tcp_addr_blob_t b, again;
    const char *why = NULL;
    tw_status_t st;

    memset(&b, 0xa5, sizeof(b));
    st = tw_tcp_addr_blob_parse(data, size, &b, &why);
    TW_FUZZ_CHECK(st == TW_OK || st == TW_ERR_PROTOCOL);
    /* @p why may be NULL, and changes nothing. */
    TW_FUZZ_CHECK(tw_tcp_addr_blob_parse(data, size, &again, NULL) == st);
    if (st != TW_OK) {
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        TW_FUZZ_CHECK(b.lanes == 0xa5 && b.timeout_ms == 0xa5a5a5a5u);
        return 0;
    }
    fz_addr_accepted(data, size, &b);
    fz_addr_accepted(data, size, &again);
    /* Only the whole blob: one byte less (the caller's length lies) or one
     * more (trailing garbage) is refused. Each in a block of its size. */
    uint8_t *shorter = malloc(size), *longer = malloc(size + 1);
    TW_FUZZ_CHECK(shorter != NULL && longer != NULL);
    memcpy(shorter, data, size - 1);
    memcpy(longer, data, size);
    longer[size] = 0;
    TW_FUZZ_CHECK(tw_tcp_addr_blob_parse(shorter, size - 1, &again, NULL) == TW_ERR_PROTOCOL);
    TW_FUZZ_CHECK(tw_tcp_addr_blob_parse(longer, size + 1, &again, NULL) == TW_ERR_PROTOCOL);
    free(shorter);
    free(longer);
    return 0;
}
