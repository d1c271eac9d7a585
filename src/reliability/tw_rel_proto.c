/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Parsing and checksums of rel frames (tw_rel_proto.h). Pure functions. */
#include "reliability/tw_rel_proto.h"

#include <string.h>

#include "core/tw_crc32c.h"

uint32_t tw_rel_crc(const void *frame, size_t hdr_len, const void *payload, size_t len)
{
    static const unsigned char zero[sizeof(uint32_t)];
    const size_t at = offsetof(tw_rel_hdr_t, crc);
    const unsigned char *f = frame;
    uint32_t crc;

    /* The crc field counts as zero; it is the header's last field, so the
     * header and the upper header behind it take three runs. */
    _Static_assert(offsetof(tw_rel_hdr_t, crc) + sizeof(uint32_t) == sizeof(tw_rel_hdr_t),
                   "crc is the last header field");
    crc = tw_crc32c(0, f, at);
    crc = tw_crc32c(crc, zero, sizeof(zero));
    if (hdr_len > sizeof(tw_rel_hdr_t)) {
        crc = tw_crc32c(crc, f + sizeof(tw_rel_hdr_t), hdr_len - sizeof(tw_rel_hdr_t));
    }
    if (len > 0) {
        crc = tw_crc32c(crc, payload, len);
    }
    return crc;
}

uint32_t tw_rel_short_crc(const void *frame, size_t hdr_len, const void *payload, size_t len)
{
    const size_t skip = sizeof(uint32_t); /* the crc field */
    uint32_t crc;

    _Static_assert(offsetof(tw_rel_shdr_t, crc) == 0, "crc is the short header's first field");
    crc = tw_crc32c(0, (const unsigned char *)frame + skip, hdr_len - skip);
    if (len > 0) {
        crc = tw_crc32c(crc, payload, len);
    }
    return crc;
}

uint8_t tw_rel_am_of(uint8_t type)
{
    switch (type) {
    case TW_REL_T_DATA:
        return TW_REL_AM_DATA;
    case TW_REL_T_ACK:
        return TW_REL_AM_ACK;
    case TW_REL_T_NACK:
        return TW_REL_AM_NACK;
    default:
        return TW_REL_AM_CTRL;
    }
}

static tw_rel_parse_t tw_rel_bad(const char **why, const char *what, tw_rel_parse_t r)
{
    if (why != NULL) {
        *why = what;
    }
    return r;
}

/* The short DATA form: checked, then expanded. */
static tw_rel_parse_t tw_rel_parse_short(const void *hdr, size_t hdr_len, const void *data,
                                         size_t len, tw_rel_hdr_t *out, const char **why)
{
    tw_rel_shdr_t s;

    if (hdr_len < sizeof(s)) {
        return tw_rel_bad(why, "shorter than a short rel header", TW_REL_PARSE_BAD);
    }
    memcpy(&s, hdr, sizeof(s));
    if (s.hdr_len != hdr_len - sizeof(s) || s.crc != tw_rel_short_crc(hdr, hdr_len, data, len)) {
        return tw_rel_bad(why, "checksum mismatch", TW_REL_PARSE_CRC);
    }
    if (s.version != TW_REL_VERSION) {
        return tw_rel_bad(why, "unsupported version", TW_REL_PARSE_BAD);
    }
    if (s.flags != TW_REL_F_ACK || s.reserved != 0) {
        return tw_rel_bad(why, "reserved bits set", TW_REL_PARSE_BAD);
    }
    if (len > TW_REL_MAX_MSG || s.hdr_len > TW_REL_MAX_UHDR) {
        return tw_rel_bad(why, "message or header too large", TW_REL_PARSE_BAD);
    }
    *out = (tw_rel_hdr_t){.version = s.version,
                          .type = TW_REL_T_DATA,
                          .flags = TW_REL_F_ACK | TW_REL_F_SHORT,
                          .am_id = s.am_id,
                          .path = s.path,
                          .hdr_len = s.hdr_len,
                          .src_epoch = s.epochs,
                          .seq = s.seq,
                          .ack_base = s.ack_base,
                          .nfrags = 1,
                          .msg_len = len,
                          .len = (uint32_t)len};
    return TW_REL_PARSE_OK;
}

tw_rel_parse_t tw_rel_parse(uint8_t am_id, const void *hdr, size_t hdr_len, const void *data,
                            size_t len, tw_rel_hdr_t *out, const char **why)
{
    tw_rel_hdr_t h;

    if (am_id == TW_REL_AM_SDATA && hdr != NULL && (len == 0 || data != NULL)) {
        return tw_rel_parse_short(hdr, hdr_len, data, len, out, why);
    }

    if (hdr == NULL || hdr_len < sizeof(h) || (len > 0 && data == NULL)) {
        return tw_rel_bad(why, "shorter than a rel header", TW_REL_PARSE_BAD);
    }
    memcpy(&h, hdr, sizeof(h));
    /* Checksum first: a flipped bit anywhere is corruption, not a
     * protocol error, whatever field it landed in. */
    if (h.len != len || h.hdr_len != hdr_len - sizeof(h) ||
        h.crc != tw_rel_crc(hdr, hdr_len, data, len)) {
        return tw_rel_bad(why, "checksum mismatch", TW_REL_PARSE_CRC);
    }
    if (h.version != TW_REL_VERSION) {
        return tw_rel_bad(why, "unsupported version", TW_REL_PARSE_BAD);
    }
    if (h.type < TW_REL_T_DATA || h.type > TW_REL_T_MAX || tw_rel_am_of(h.type) != am_id) {
        return tw_rel_bad(why, "unknown type, or the wrong transport am id for it",
                          TW_REL_PARSE_BAD);
    }
    if (h.reserved != 0 || (h.flags & ~TW_REL_F_ACK) != 0) {
        return tw_rel_bad(why, "reserved bits set", TW_REL_PARSE_BAD);
    }
    if (h.type == TW_REL_T_DATA) {
        if (h.msg_len > TW_REL_MAX_MSG || h.hdr_len > TW_REL_MAX_UHDR) {
            return tw_rel_bad(why, "message or header too large", TW_REL_PARSE_BAD);
        }
        if (h.nfrags == 0 || h.frag >= h.nfrags || h.nfrags > h.msg_len + 1) {
            return tw_rel_bad(why, "bad fragment index or count", TW_REL_PARSE_BAD);
        }
        if (h.offset > h.msg_len || h.len > h.msg_len - h.offset) {
            return tw_rel_bad(why, "fragment outside its message", TW_REL_PARSE_BAD);
        }
        if (h.frag != 0 && h.hdr_len != 0) {
            return tw_rel_bad(why, "upper header outside the first fragment", TW_REL_PARSE_BAD);
        }
        if (h.frag == 0 && h.offset != 0) {
            return tw_rel_bad(why, "first fragment not at offset 0", TW_REL_PARSE_BAD);
        }
        if (h.frag == h.nfrags - 1 && h.offset + h.len != h.msg_len) {
            return tw_rel_bad(why, "last fragment does not end the message", TW_REL_PARSE_BAD);
        }
    } else if (h.hdr_len != 0 || h.len != 0 || h.frag != 0 || h.nfrags != 0 || h.msg_len != 0 ||
               h.offset != 0) {
        return tw_rel_bad(why, "control frame with data fields", TW_REL_PARSE_BAD);
    }
    *out = h;
    return TW_REL_PARSE_OK;
}

bool tw_rel_addr_parse(const void *buf, size_t len, uint32_t *epoch_p)
{
    tw_rel_addr_t a;

    if (buf == NULL || len != sizeof(a)) {
        return false;
    }
    memcpy(&a, buf, sizeof(a));
    if (a.version != TW_REL_ADDR_VERSION || a.reserved[0] != 0 || a.reserved[1] != 0 ||
        a.reserved[2] != 0 || a.epoch == 0) {
        return false;
    }
    *epoch_p = a.epoch;
    return true;
}
