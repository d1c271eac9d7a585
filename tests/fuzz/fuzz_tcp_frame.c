/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_tcp_frame_parse on arbitrary bytes under several limits (none, small,
 * the largest, and exactly the lengths the input claims). Checks the
 * contract of tw_tcp_proto.h: short input is TW_ERR_AGAIN, bad input
 * TW_ERR_PROTOCOL with a reason; an accepted header has a known type, no
 * flags, lengths within the limits (max_hdr bounds the am header: an
 * RTS's after its cookie), a FIN or PING without bytes, an RTS with room
 * for its cookie, a CTS, DATA or DONE with exactly a cookie and no am id
 * (DONE: no length), and packs back to exactly the 16 bytes it was parsed
 * from. Limits only ever reject: a header accepted under some limits is
 * accepted under the largest.
 */
#include <string.h>

#include "transports/tcp/tw_tcp_proto.h"
#include "tw_fuzz.h"

static uint64_t fz_get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = n - 1; i >= 0; i--) {
        v = v << 8 | p[i];
    }
    return v;
}

static tw_status_t fz_frame_one(const uint8_t *data, size_t size, uint32_t max_hdr,
                                uint64_t max_len)
{
    tw_tcp_frame_t f, again;
    const char *why = NULL;
    uint8_t packed[TW_TCP_FRAME_LEN];
    tw_status_t st;

    memset(&f, 0xa5, sizeof(f));
    st = tw_tcp_frame_parse(data, size, max_hdr, max_len, &f, &why);
    if (size < TW_TCP_FRAME_LEN) {
        TW_FUZZ_CHECK(st == TW_ERR_AGAIN);
        return st;
    }
    TW_FUZZ_CHECK(st == TW_OK || st == TW_ERR_PROTOCOL);
    TW_FUZZ_CHECK(tw_tcp_frame_parse(data, TW_TCP_FRAME_LEN, max_hdr, max_len, &again, NULL) == st);
    if (st != TW_OK) {
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        return st;
    }
    TW_FUZZ_CHECK(f.type >= TW_TCP_FRAME_AM && f.type < TW_TCP_FRAME_NTYPES);
    TW_FUZZ_CHECK(f.flags == 0);
    TW_FUZZ_CHECK(tw_tcp_frame_am_hdr_len(&f) <= max_hdr);
    TW_FUZZ_CHECK(f.len <= max_len);
    switch (f.type) {
    case TW_TCP_FRAME_AM:
        TW_FUZZ_CHECK(tw_tcp_frame_body_len(&f) == (uint64_t)f.hdr_len + f.len);
        break;
    case TW_TCP_FRAME_FIN:
    case TW_TCP_FRAME_PING:
        TW_FUZZ_CHECK(f.hdr_len == 0 && f.len == 0 && f.am_id == 0);
        break;
    case TW_TCP_FRAME_RTS:
        TW_FUZZ_CHECK(f.hdr_len >= TW_TCP_COOKIE_LEN && tw_tcp_frame_body_len(&f) == f.hdr_len);
        break;
    default:
        TW_FUZZ_CHECK(f.hdr_len == TW_TCP_COOKIE_LEN && f.am_id == 0);
        TW_FUZZ_CHECK(f.type != TW_TCP_FRAME_DONE || f.len == 0);
        TW_FUZZ_CHECK(tw_tcp_frame_body_len(&f) ==
                      f.hdr_len + (f.type == TW_TCP_FRAME_DATA ? f.len : 0));
        break;
    }
    TW_FUZZ_CHECK(again.type == f.type && again.am_id == f.am_id && again.hdr_len == f.hdr_len &&
                  again.len == f.len);
    tw_tcp_frame_pack(&f, packed);
    TW_FUZZ_CHECK(memcmp(packed, data, TW_TCP_FRAME_LEN) == 0);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct {
        uint32_t max_hdr;
        uint64_t max_len;
    } limits[] = {
        {0, 0},
        {64, 4096},
        {256, 1ull << 20},
        {UINT32_MAX - 1, INT64_MAX},
    };
    tw_status_t widest = fz_frame_one(data, size, UINT32_MAX, UINT64_MAX);

    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        tw_status_t st = fz_frame_one(data, size, limits[i].max_hdr, limits[i].max_len);
        TW_FUZZ_CHECK(st != TW_OK || widest == TW_OK);
    }
    if (size >= TW_TCP_FRAME_LEN) {
        /* The am header the limit bounds: an RTS's after its cookie, none
         * in the other rendezvous frames. */
        uint32_t hdr_len = (uint32_t)fz_get_le(data + 4, 4);
        uint64_t len = fz_get_le(data + 8, 8);
        if (data[1] == TW_TCP_FRAME_RTS) {
            hdr_len = hdr_len >= TW_TCP_COOKIE_LEN ? hdr_len - TW_TCP_COOKIE_LEN : 0;
        } else if (data[1] > TW_TCP_FRAME_RTS) {
            hdr_len = 0;
        }
        /* Limits equal to the claimed lengths decide nothing. */
        TW_FUZZ_CHECK(fz_frame_one(data, size, hdr_len, len) == widest);
        if (widest == TW_OK) {
            /* One below either claimed length is refused. */
            if (hdr_len > 0) {
                TW_FUZZ_CHECK(fz_frame_one(data, size, hdr_len - 1, len) == TW_ERR_PROTOCOL);
            }
            if (len > 0) {
                TW_FUZZ_CHECK(fz_frame_one(data, size, hdr_len, len - 1) == TW_ERR_PROTOCOL);
            }
        }
    }
    return 0;
}
