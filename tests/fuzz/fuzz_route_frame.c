/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_route_parse (route's frame check) on arbitrary frames. Input: byte 0
 * gives the job size (1 + its low 7 bits) and, with bit 7 set, asks the
 * harness to seal the header first (write its CRC32C) -- so the fuzzer
 * also reaches the field checks behind the checksum; bytes 1-2 are the
 * transport header length (clipped to what follows); then the header
 * bytes (route's, then the upper layer's) and the payload. An accepted
 * frame must keep the promises tw_route_proto.h makes: its header copied
 * out as it came, sealed, ranks in the job, a DOWN bare, a DATA fragment
 * inside its message with the upper header in the first one only. A
 * rejection says why, and TW_ERR_AGAIN means exactly a checksum that
 * does not match.
 */
#include <stddef.h>
#include <string.h>

#include "routing/tw_route_proto.h"
#include "tw_fuzz.h"

#define FUZZ_MAX_MSG (1ull << 30) /* route's own limit (TW_ROUTE_MAX_MSG) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char buf[1 << 16];
    const char *why = NULL;
    tw_route_hdr_t h, in, sealed;
    size_t hdr_len, len;
    int job;
    tw_status_t st;

    if (size < 3 || size - 3 > sizeof(buf)) {
        return 0;
    }
    job = 1 + (data[0] & 0x7f);
    hdr_len = (size_t)data[1] | (size_t)data[2] << 8;
    if (hdr_len > size - 3) {
        hdr_len = size - 3;
    }
    len = size - 3 - hdr_len;
    memcpy(buf, data + 3, size - 3);
    if ((data[0] & 0x80) && hdr_len >= sizeof(h)) {
        tw_route_seal(buf);
    }
    memset(&h, 0x5a, sizeof(h));
    st = tw_route_parse(buf, hdr_len, len, job, FUZZ_MAX_MSG, &h, &why);
    if (st != TW_OK) {
        TW_FUZZ_CHECK(st == TW_ERR_AGAIN || st == TW_ERR_INVALID);
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        if (hdr_len >= sizeof(h)) {
            memcpy(&in, buf, sizeof(in));
            sealed = in;
            tw_route_seal(&sealed);
            TW_FUZZ_CHECK((st == TW_ERR_AGAIN) == (sealed.crc != in.crc));
        } else {
            TW_FUZZ_CHECK(st == TW_ERR_INVALID);
        }
        return 0;
    }
    TW_FUZZ_CHECK(hdr_len >= sizeof(h) && memcmp(&h, buf, sizeof(h)) == 0);
    sealed = h;
    tw_route_seal(&sealed);
    TW_FUZZ_CHECK(sealed.crc == h.crc);
    TW_FUZZ_CHECK(h.version == TW_ROUTE_PROTO_VERSION && h.reserved == 0);
    TW_FUZZ_CHECK(h.src >= 0 && h.src < job && h.dst >= 0 && h.dst < job);
    TW_FUZZ_CHECK(h.hops <= TW_ROUTE_MAX_HOPS);
    if (h.type == TW_ROUTE_T_DOWN) {
        TW_FUZZ_CHECK(hdr_len == sizeof(h) && len == 0 && h.seq == 0);
        TW_FUZZ_CHECK(h.am_id == TW_ROUTE_DOWN_LEFT || h.am_id == TW_ROUTE_DOWN_FAILED);
        return 0;
    }
    TW_FUZZ_CHECK(h.type == TW_ROUTE_T_DATA);
    TW_FUZZ_CHECK(hdr_len == sizeof(h) + h.hdr_len);
    TW_FUZZ_CHECK((h.flags & ~(TW_ROUTE_F_FIRST | TW_ROUTE_F_LAST | TW_ROUTE_F_SEQ)) == 0);
    TW_FUZZ_CHECK((h.flags & TW_ROUTE_F_SEQ) || h.seq == 0);
    TW_FUZZ_CHECK(h.msg_len <= FUZZ_MAX_MSG && h.offset <= h.msg_len);
    TW_FUZZ_CHECK((uint64_t)h.offset + len <= h.msg_len);
    if (h.flags & TW_ROUTE_F_FIRST) {
        TW_FUZZ_CHECK(h.offset == 0);
    } else {
        TW_FUZZ_CHECK(h.hdr_len == 0);
    }
    if (h.flags & TW_ROUTE_F_LAST) {
        TW_FUZZ_CHECK((uint64_t)h.offset + len == h.msg_len);
    }
    return 0;
}
