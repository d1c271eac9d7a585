/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Wire formats of the TCP transport (see tw_tcp_proto.h). */
#include "transports/tcp/tw_tcp_proto.h"

#include <string.h>

#include "core/tw_bytes.h"
#include "core/tw_siphash.h"

static tw_status_t tw_tcp_bad(const char **why, const char *reason)
{
    if (why != NULL) {
        *why = reason;
    }
    return TW_ERR_PROTOCOL;
}

/* Layout: magic 0 | version 4 | type 6 | reserved 7 | rank 8 | size 12 |
 * nonce 16..31 | proof 32..39 | reserved 40..47 (zero). */
void tw_tcp_hs_pack(const tw_tcp_hs_t *hs, uint8_t buf[TW_TCP_HS_LEN])
{
    memset(buf, 0, TW_TCP_HS_LEN);
    tw_put32(buf, TW_TCP_MAGIC);
    tw_put16(buf + 4, TW_TCP_VERSION);
    buf[6] = hs->type;
    tw_put32(buf + 8, hs->rank);
    tw_put32(buf + 12, hs->size);
    memcpy(buf + 16, hs->nonce, 16);
    tw_put64(buf + 32, hs->proof);
}

tw_status_t tw_tcp_hs_parse(const void *buf, size_t len, uint8_t want, uint32_t job_size,
                            tw_tcp_hs_t *out, const char **why)
{
    const uint8_t *p = buf;
    tw_tcp_hs_t hs_, *hs = &hs_;

    if (want < TW_TCP_HS_HELLO || want > TW_TCP_HS_PROVE) {
        return tw_tcp_bad(why, "no such handshake message");
    }
    if (len < TW_TCP_HS_LEN) {
        return TW_ERR_AGAIN;
    }
    if (tw_get32(p) != TW_TCP_MAGIC) {
        return tw_tcp_bad(why, "wrong magic");
    }
    if (tw_get16(p + 4) != TW_TCP_VERSION) {
        return tw_tcp_bad(why, "unsupported protocol version");
    }
    if (p[6] != want) {
        return tw_tcp_bad(why, "unexpected handshake message");
    }
    if (p[7] != 0 || tw_get64(p + 40) != 0) {
        return tw_tcp_bad(why, "reserved bytes set");
    }
    hs->type = p[6];
    hs->rank = tw_get32(p + 8);
    hs->size = tw_get32(p + 12);
    if (hs->size != job_size) {
        return tw_tcp_bad(why, "job size differs (another job?)");
    }
    if (hs->rank >= hs->size) {
        return tw_tcp_bad(why, "rank out of range");
    }
    memcpy(hs->nonce, p + 16, 16);
    hs->proof = tw_get64(p + 32);
    if (want == TW_TCP_HS_HELLO && hs->proof != 0) {
        return tw_tcp_bad(why, "HELLO carries a proof");
    }
    *out = *hs; /* only on success */
    return TW_OK;
}

uint64_t tw_tcp_hs_proof(const uint8_t key[16], char role, const uint8_t their_nonce[16],
                         const uint8_t my_nonce[16], uint32_t acceptor_rank,
                         uint32_t connector_rank)
{
    uint8_t m[1 + 16 + 16 + 4 + 4];

    m[0] = (uint8_t)role;
    memcpy(m + 1, their_nonce, 16);
    memcpy(m + 17, my_nonce, 16);
    tw_put32(m + 33, acceptor_rank);
    tw_put32(m + 37, connector_rank);
    return tw_siphash24(key, m, sizeof(m));
}

void tw_tcp_frame_pack(const tw_tcp_frame_t *f, uint8_t buf[TW_TCP_FRAME_LEN])
{
    buf[0] = TW_TCP_VERSION;
    buf[1] = f->type;
    buf[2] = f->am_id;
    buf[3] = f->flags;
    tw_put32(buf + 4, f->hdr_len);
    tw_put64(buf + 8, f->len);
}

tw_status_t tw_tcp_frame_parse(const void *buf, size_t len, uint32_t max_hdr, uint64_t max_len,
                               tw_tcp_frame_t *out, const char **why)
{
    const uint8_t *p = buf;
    tw_tcp_frame_t f_, *f = &f_;

    if (len < TW_TCP_FRAME_LEN) {
        return TW_ERR_AGAIN;
    }
    if (p[0] != TW_TCP_VERSION) {
        return tw_tcp_bad(why, "unsupported frame version");
    }
    if (p[1] < TW_TCP_FRAME_AM || p[1] >= TW_TCP_FRAME_NTYPES) {
        return tw_tcp_bad(why, "unknown frame type");
    }
    if (p[3] != 0) {
        return tw_tcp_bad(why, "unknown frame flags");
    }
    f->type = p[1];
    f->am_id = p[2];
    f->flags = p[3];
    f->hdr_len = tw_get32(p + 4);
    f->len = tw_get64(p + 8);
    switch (f->type) {
    case TW_TCP_FRAME_AM:
        break;
    case TW_TCP_FRAME_FIN:
    case TW_TCP_FRAME_PING:
        if (f->hdr_len != 0 || f->len != 0 || f->am_id != 0) {
            return tw_tcp_bad(why, f->type == TW_TCP_FRAME_FIN ? "FIN carries bytes"
                                                               : "PING carries bytes");
        }
        break;
    case TW_TCP_FRAME_RTS:
        if (f->hdr_len < TW_TCP_COOKIE_LEN) {
            return tw_tcp_bad(why, "RTS shorter than its cookie");
        }
        break;
    default: /* CTS, DATA, DONE: a cookie, and a length (not DONE) */
        if (f->hdr_len != TW_TCP_COOKIE_LEN || f->am_id != 0) {
            return tw_tcp_bad(why, "rendezvous frame with bytes beside its cookie");
        }
        if (f->type == TW_TCP_FRAME_DONE && f->len != 0) {
            return tw_tcp_bad(why, "DONE carries a length");
        }
        break;
    }
    if (tw_tcp_frame_am_hdr_len(f) > max_hdr) {
        return tw_tcp_bad(why, "header length above the limit");
    }
    if (f->len > max_len) {
        return tw_tcp_bad(why, "payload length above the limit");
    }
    *out = *f; /* only on success */
    return TW_OK;
}

size_t tw_tcp_addr_blob_len(unsigned lanes, unsigned naddrs)
{
    return TW_TCP_ADDR_HDR + (size_t)naddrs * (TW_TCP_ADDR_ENTRY + 2u * (size_t)lanes);
}

/* NULL, or the reason @p e (of a blob with @p lanes lanes) is refused. */
static const char *tw_tcp_addr_entry_bad(const tw_tcp_addr_entry_t *e, unsigned lanes)
{
    static const uint8_t zero[12];

    if (e->family != 4 && e->family != 6) {
        return "address family not 4 or 6";
    }
    if (e->family == 4 && memcmp(e->addr + 4, zero, sizeof(zero)) != 0) {
        return "IPv4 address with bytes past its 4";
    }
    for (unsigned k = 0; k < lanes; k++) {
        if (e->ports[k] == 0) {
            return "port 0";
        }
    }
    return NULL;
}

/* Header: magic 0 | version 4 | lanes 5 | naddrs 6 | flags 7 | timeout 8.
 * Entry: family 0 | reserved 1..3 | address 4..19 | ports 20... */
tw_status_t tw_tcp_addr_blob_pack(const tw_tcp_addr_blob_t *b, void *buf, size_t cap, size_t *len_p)
{
    uint8_t *p = buf;
    size_t len = tw_tcp_addr_blob_len(b->lanes, b->naddrs), entry;

    if (b->lanes == 0 || b->lanes > TW_TCP_MAX_LANES || b->naddrs == 0 ||
        b->naddrs > TW_TCP_MAX_ADDRS || (b->flags & ~TW_TCP_ADDR_THREADS) != 0 || cap < len) {
        return TW_ERR_INVALID;
    }
    for (unsigned a = 0; a < b->naddrs; a++) {
        if (tw_tcp_addr_entry_bad(&b->addrs[a], b->lanes) != NULL) {
            return TW_ERR_INVALID;
        }
    }
    entry = TW_TCP_ADDR_ENTRY + 2u * (size_t)b->lanes;
    memset(p, 0, len);
    tw_put32(p, TW_TCP_ADDR_MAGIC);
    p[4] = TW_TCP_ADDR_VERSION;
    p[5] = b->lanes;
    p[6] = b->naddrs;
    p[7] = b->flags;
    tw_put32(p + 8, b->timeout_ms);
    for (unsigned a = 0; a < b->naddrs; a++) {
        uint8_t *e = p + TW_TCP_ADDR_HDR + a * entry;
        e[0] = b->addrs[a].family;
        memcpy(e + 4, b->addrs[a].addr, 16);
        for (unsigned k = 0; k < b->lanes; k++) {
            tw_put16(e + TW_TCP_ADDR_ENTRY + 2 * k, b->addrs[a].ports[k]);
        }
    }
    *len_p = len;
    return TW_OK;
}

tw_status_t tw_tcp_addr_blob_parse(const void *buf, size_t len, tw_tcp_addr_blob_t *out,
                                   const char **why)
{
    const uint8_t *p = buf;
    tw_tcp_addr_blob_t b;
    size_t entry;

    if (len < TW_TCP_ADDR_HDR) {
        return tw_tcp_bad(why, "shorter than the address header");
    }
    if (tw_get32(p) != TW_TCP_ADDR_MAGIC) {
        return tw_tcp_bad(why, "wrong magic (not a tcp address)");
    }
    if (p[4] != TW_TCP_ADDR_VERSION) {
        return tw_tcp_bad(why, "unsupported address version");
    }
    memset(&b, 0, sizeof(b));
    b.lanes = p[5];
    b.naddrs = p[6];
    b.flags = p[7];
    b.timeout_ms = tw_get32(p + 8);
    if (b.lanes == 0 || b.lanes > TW_TCP_MAX_LANES) {
        return tw_tcp_bad(why, "lane count out of range");
    }
    if (b.naddrs == 0 || b.naddrs > TW_TCP_MAX_ADDRS) {
        return tw_tcp_bad(why, "address count out of range");
    }
    if ((b.flags & ~TW_TCP_ADDR_THREADS) != 0) {
        return tw_tcp_bad(why, "unknown address flags");
    }
    if (len != tw_tcp_addr_blob_len(b.lanes, b.naddrs)) {
        return tw_tcp_bad(why, "length differs from what its counts say");
    }
    entry = TW_TCP_ADDR_ENTRY + 2u * (size_t)b.lanes;
    for (unsigned a = 0; a < b.naddrs; a++) {
        const uint8_t *e = p + TW_TCP_ADDR_HDR + a * entry;
        tw_tcp_addr_entry_t *d = &b.addrs[a];
        const char *bad;

        if (e[1] != 0 || e[2] != 0 || e[3] != 0) {
            return tw_tcp_bad(why, "reserved address bytes set");
        }
        d->family = e[0];
        memcpy(d->addr, e + 4, 16);
        for (unsigned k = 0; k < b.lanes; k++) {
            d->ports[k] = tw_get16(e + TW_TCP_ADDR_ENTRY + 2 * k);
        }
        if ((bad = tw_tcp_addr_entry_bad(d, b.lanes)) != NULL) {
            return tw_tcp_bad(why, bad);
        }
    }
    *out = b; /* only on success */
    return TW_OK;
}
