/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_tcp_hs_parse on arbitrary bytes, as each message type and in jobs of
 * several sizes (one of them the size the input claims, so accepted
 * messages are reached). Checks the contract of tw_tcp_proto.h: short input
 * is TW_ERR_AGAIN, bad input TW_ERR_PROTOCOL with a reason, and an accepted
 * message has the wanted type, the job's size, a rank below it, no proof in
 * a HELLO, and packs back to exactly the 48 bytes it was parsed from.
 */
#include <string.h>

#include "transports/tcp/tw_tcp_proto.h"
#include "tw_fuzz.h"

static uint32_t fz_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void fz_hs_one(const uint8_t *data, size_t size, uint8_t want, uint32_t job_size)
{
    tw_tcp_hs_t hs, again;
    const char *why = NULL;
    uint8_t packed[TW_TCP_HS_LEN];
    tw_status_t st;

    memset(&hs, 0xa5, sizeof(hs));
    st = tw_tcp_hs_parse(data, size, want, job_size, &hs, &why);
    if (size < TW_TCP_HS_LEN) {
        TW_FUZZ_CHECK(st == TW_ERR_AGAIN);
        return;
    }
    TW_FUZZ_CHECK(st == TW_OK || st == TW_ERR_PROTOCOL);
    /* Only the first 48 bytes count, and @p why may be NULL. */
    TW_FUZZ_CHECK(tw_tcp_hs_parse(data, TW_TCP_HS_LEN, want, job_size, &again, NULL) == st);
    if (st != TW_OK) {
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        return;
    }
    TW_FUZZ_CHECK(hs.type == want);
    TW_FUZZ_CHECK(hs.size == job_size);
    TW_FUZZ_CHECK(hs.rank < hs.size);
    TW_FUZZ_CHECK(want != TW_TCP_HS_HELLO || hs.proof == 0);
    TW_FUZZ_CHECK(memcmp(&again.nonce, &hs.nonce, sizeof(hs.nonce)) == 0);
    TW_FUZZ_CHECK(again.rank == hs.rank && again.proof == hs.proof);
    /* Round trip: what was accepted is exactly what pack writes. */
    tw_tcp_hs_pack(&hs, packed);
    TW_FUZZ_CHECK(memcmp(packed, data, TW_TCP_HS_LEN) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t job_sizes[] = {1, 2, 8, 1024, UINT32_MAX};

    for (uint8_t want = TW_TCP_HS_HELLO; want <= TW_TCP_HS_PROVE; want++) {
        for (size_t i = 0; i < sizeof(job_sizes) / sizeof(job_sizes[0]); i++) {
            fz_hs_one(data, size, want, job_sizes[i]);
        }
        if (size >= 16) {
            fz_hs_one(data, size, want, fz_get32(data + 12));
        }
    }
    return 0;
}
