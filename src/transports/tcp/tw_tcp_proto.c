/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Wire format of the TCP transport (see tw_tcp_proto.h). */
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
    if (p[1] != TW_TCP_FRAME_AM && p[1] != TW_TCP_FRAME_FIN && p[1] != TW_TCP_FRAME_PING) {
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
    if (f->hdr_len > max_hdr) {
        return tw_tcp_bad(why, "header length above the limit");
    }
    if (f->len > max_len) {
        return tw_tcp_bad(why, "payload length above the limit");
    }
    if (f->type != TW_TCP_FRAME_AM && (f->hdr_len != 0 || f->len != 0 || f->am_id != 0)) {
        return tw_tcp_bad(why,
                          f->type == TW_TCP_FRAME_FIN ? "FIN carries bytes" : "PING carries bytes");
    }
    *out = *f; /* only on success */
    return TW_OK;
}
