/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
#include <string.h>

#include "core/tw_crc32c.h"
#include "routing/tw_route_proto.h"

static uint32_t tw_route_crc(const tw_route_hdr_t *h)
{
    tw_route_hdr_t c = *h;

    c.crc = 0;
    return tw_crc32c(0, &c, sizeof(c));
}

void tw_route_seal(void *h)
{
    tw_route_hdr_t *rh = h;

    rh->crc = tw_route_crc(rh);
}

static tw_status_t tw_route_bad(const char **why, const char *what)
{
    *why = what;
    return TW_ERR_INVALID;
}

tw_status_t tw_route_parse(const void *hdr, size_t hdr_len, size_t len, int size, uint64_t max_msg,
                           tw_route_hdr_t *h, const char **why)
{
    if (hdr_len < sizeof(*h)) {
        return tw_route_bad(why, "header too short");
    }
    memcpy(h, hdr, sizeof(*h));
    if (h->crc != tw_route_crc(h)) {
        *why = "checksum";
        return TW_ERR_AGAIN;
    }
    if (h->reserved != 0) {
        return tw_route_bad(why, "reserved bits set");
    }
    if (h->version != TW_ROUTE_PROTO_VERSION) {
        return tw_route_bad(why, "unknown protocol version");
    }
    if (h->src < 0 || h->src >= size || h->dst < 0 || h->dst >= size) {
        return tw_route_bad(why, "rank out of range");
    }
    if (h->hops > TW_ROUTE_MAX_HOPS) {
        return tw_route_bad(why, "too many hops");
    }
    if (h->type == TW_ROUTE_T_DOWN) {
        if (hdr_len != sizeof(*h) || len != 0 || h->am_id > TW_ROUTE_DOWN_FAILED || h->seq != 0 ||
            h->flags != 0 || h->hdr_len != 0 || h->msg_len != 0 || h->offset != 0) {
            return tw_route_bad(why, "malformed DOWN");
        }
        return TW_OK;
    }
    if (h->type != TW_ROUTE_T_DATA) {
        return tw_route_bad(why, "unknown frame type");
    }
    if (hdr_len != sizeof(*h) + h->hdr_len) {
        return tw_route_bad(why, "upper header length does not match");
    }
    if ((h->flags & ~(TW_ROUTE_F_FIRST | TW_ROUTE_F_LAST | TW_ROUTE_F_SEQ)) != 0) {
        return tw_route_bad(why, "unknown flags");
    }
    if (!(h->flags & TW_ROUTE_F_SEQ) && h->seq != 0) {
        return tw_route_bad(why, "a sequence number without SEQ");
    }
    if (h->msg_len > max_msg || h->offset > h->msg_len || len > h->msg_len - h->offset) {
        return tw_route_bad(why, "fragment outside its message");
    }
    if ((h->flags & TW_ROUTE_F_FIRST) ? h->offset != 0 : h->hdr_len != 0) {
        return tw_route_bad(why, "upper header outside the first fragment");
    }
    if ((h->flags & TW_ROUTE_F_LAST) && h->offset + len != h->msg_len) {
        return tw_route_bad(why, "last fragment does not end the message");
    }
    return TW_OK;
}
