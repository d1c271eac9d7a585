/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_rel_parse (the reliability layer's frame check) on arbitrary frames.
 * Input: byte 0 picks the transport am id (16 + its low 3 bits: the five
 * rel ids, the short DATA form among them, and three unknown ones) and, with
 * bit 7 set, asks the harness to write the right CRC32C into the frame
 * first -- so the fuzzer also reaches the field checks behind the
 * checksum; bytes 1-2 are the header length (clipped to what follows);
 * then the header bytes and the payload. An accepted frame must keep the
 * promises tw_rel_proto.h makes: its type matches the am id, a DATA
 * fragment lies inside its message, a short frame is a whole message,
 * control frames carry no data.
 */
#include <stddef.h>
#include <string.h>

#include "reliability/tw_rel_proto.h"
#include "tw_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char buf[1 << 16];
    const char *why = NULL;
    tw_rel_hdr_t h;
    size_t hdr_len, len;
    uint8_t am_id;

    if (size < 3 || size - 3 > sizeof(buf)) {
        return 0;
    }
    am_id = (uint8_t)(TW_REL_AM_DATA + (data[0] & 7));
    hdr_len = (size_t)data[1] | (size_t)data[2] << 8;
    if (hdr_len > size - 3) {
        hdr_len = size - 3;
    }
    len = size - 3 - hdr_len;
    memcpy(buf, data + 3, size - 3);
    if ((data[0] & 0x80) && am_id == TW_REL_AM_SDATA && hdr_len >= sizeof(tw_rel_shdr_t)) {
        uint32_t crc = tw_rel_short_crc(buf, hdr_len, buf + hdr_len, len);
        memcpy(buf + offsetof(tw_rel_shdr_t, crc), &crc, sizeof(crc));
    } else if ((data[0] & 0x80) && hdr_len >= sizeof(h)) {
        memcpy(&h, buf, sizeof(h));
        h.crc = tw_rel_crc(buf, hdr_len, buf + hdr_len, len);
        memcpy(buf, &h, sizeof(h));
    }
    memset(&h, 0x5a, sizeof(h));
    tw_rel_parse_t r = tw_rel_parse(am_id, buf, hdr_len, buf + hdr_len, len, &h, &why);
    if (r != TW_REL_PARSE_OK) {
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        return 0;
    }
    TW_FUZZ_CHECK(h.version == TW_REL_VERSION);
    if (am_id == TW_REL_AM_SDATA) {
        TW_FUZZ_CHECK(h.type == TW_REL_T_DATA && (h.flags & TW_REL_F_SHORT) && h.ack_bits == 0);
        TW_FUZZ_CHECK(h.frag == 0 && h.nfrags == 1 && h.offset == 0 && h.msg_len == len);
        TW_FUZZ_CHECK((size_t)h.hdr_len + sizeof(tw_rel_shdr_t) == hdr_len);
    } else {
        TW_FUZZ_CHECK(tw_rel_am_of(h.type) == am_id && !(h.flags & TW_REL_F_SHORT));
        TW_FUZZ_CHECK((size_t)h.hdr_len + sizeof(h) == hdr_len);
    }
    TW_FUZZ_CHECK(h.len == len);
    if (h.type == TW_REL_T_DATA) {
        TW_FUZZ_CHECK(h.nfrags >= 1 && h.frag < h.nfrags);
        TW_FUZZ_CHECK(h.msg_len <= TW_REL_MAX_MSG && h.hdr_len <= TW_REL_MAX_UHDR);
        TW_FUZZ_CHECK(h.offset <= h.msg_len && h.len <= h.msg_len - h.offset);
        TW_FUZZ_CHECK(h.frag == 0 || h.hdr_len == 0);
    } else {
        TW_FUZZ_CHECK(h.len == 0 && h.hdr_len == 0 && h.msg_len == 0);
    }
    return 0;
}
