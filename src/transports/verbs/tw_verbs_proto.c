/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Wire formats of the verbs transport: see tw_verbs_proto.h. */
#include "transports/verbs/tw_verbs_proto.h"

#include <string.h>

#include "core/tw_bytes.h"
#include "core/tw_siphash.h"

static tw_status_t bad(const char **why, const char *what)
{
    if (why != NULL) {
        *why = what;
    }
    return TW_ERR_PROTOCOL;
}

/* ---- frames ------------------------------------------------------------ */

size_t tw_verbs_frame_pack(const tw_verbs_frame_t *f, uint8_t *buf)
{
    size_t n = TW_VERBS_FRAME_LEN;

    buf[0] = TW_VERBS_VERSION;
    buf[1] = f->type;
    buf[2] = f->am_id;
    buf[3] = 0;
    tw_put16(buf + 4, f->hdr_len);
    tw_put16(buf + 6, 0);
    tw_put64(buf + 8, f->len);
    if (f->type == TW_VERBS_F_RTS) {
        tw_put64(buf + n, f->sid);
        tw_put64(buf + n + 8, f->raddr);
        tw_put32(buf + n + 16, f->rkey);
        tw_put32(buf + n + 20, 0);
        n += TW_VERBS_RTS_LEN;
    } else if (f->type == TW_VERBS_F_FIN) {
        tw_put64(buf + n, f->sid);
        tw_put32(buf + n + 8, (uint32_t)f->status);
        tw_put32(buf + n + 12, 0);
        n += TW_VERBS_FIN_LEN;
    }
    return n;
}

tw_status_t tw_verbs_frame_parse(const void *buf, size_t len, size_t max_hdr, uint64_t max_rndv,
                                 tw_verbs_frame_t *out, const char **why)
{
    const uint8_t *p = buf;
    tw_verbs_frame_t f = {0};

    if (len < TW_VERBS_FRAME_LEN) {
        return bad(why, "frame shorter than its header");
    }
    if (p[0] != TW_VERBS_VERSION) {
        return bad(why, "unknown frame version");
    }
    f.type = p[1];
    f.am_id = p[2];
    f.hdr_len = tw_get16(p + 4);
    f.len = tw_get64(p + 8);
    if (p[3] != 0 || tw_get16(p + 6) != 0) {
        return bad(why, "reserved header bits set");
    }
    if (f.hdr_len > max_hdr) {
        return bad(why, "header longer than the limit");
    }
    switch (f.type) {
    case TW_VERBS_F_AM:
        f.hdr_off = TW_VERBS_FRAME_LEN;
        f.data_off = f.hdr_off + f.hdr_len;
        if (f.data_off > len || f.len > len - f.data_off) {
            return bad(why, "AM longer than the bytes received");
        }
        f.total = f.data_off + (size_t)f.len;
        break;
    case TW_VERBS_F_RTS:
        f.hdr_off = TW_VERBS_FRAME_LEN + TW_VERBS_RTS_LEN;
        if (len < f.hdr_off + f.hdr_len) {
            return bad(why, "RTS longer than the bytes received");
        }
        if (f.len == 0 || f.len > max_rndv) {
            return bad(why, "RTS announces a length out of range");
        }
        f.sid = tw_get64(p + TW_VERBS_FRAME_LEN);
        f.raddr = tw_get64(p + TW_VERBS_FRAME_LEN + 8);
        f.rkey = tw_get32(p + TW_VERBS_FRAME_LEN + 16);
        if (tw_get32(p + TW_VERBS_FRAME_LEN + 20) != 0) {
            return bad(why, "reserved RTS bits set");
        }
        f.data_off = f.total = f.hdr_off + f.hdr_len;
        break;
    case TW_VERBS_F_FIN:
        if (len < TW_VERBS_FRAME_LEN + TW_VERBS_FIN_LEN || f.hdr_len != 0 || f.len != 0) {
            return bad(why, "FIN of the wrong size");
        }
        f.sid = tw_get64(p + TW_VERBS_FRAME_LEN);
        f.status = (int32_t)tw_get32(p + TW_VERBS_FRAME_LEN + 8);
        if (f.status > 0 || f.status < TW_ERR_BOOTSTRAP) {
            return bad(why, "FIN carries an unknown status");
        }
        f.hdr_off = f.data_off = f.total = TW_VERBS_FRAME_LEN + TW_VERBS_FIN_LEN;
        break;
    case TW_VERBS_F_BYE:
        if (f.hdr_len != 0 || f.len != 0) {
            return bad(why, "BYE carries bytes");
        }
        f.hdr_off = f.data_off = f.total = TW_VERBS_FRAME_LEN;
        break;
    default:
        return bad(why, "unknown frame type");
    }
    *out = f;
    return TW_OK;
}

/* ---- connection messages ------------------------------------------------ */

void tw_verbs_conn_pack(const tw_verbs_conn_t *c, const uint8_t key[16],
                        uint8_t buf[TW_VERBS_CONN_LEN])
{
    memset(buf, 0, TW_VERBS_CONN_LEN);
    tw_put32(buf, TW_VERBS_CONN_MAGIC);
    buf[4] = TW_VERBS_VERSION;
    buf[5] = c->type;
    tw_put32(buf + 8, c->src_rank);
    tw_put32(buf + 12, c->dst_rank);
    tw_put32(buf + 16, c->size);
    buf[20] = c->src_dev;
    buf[21] = c->dst_dev;
    tw_put32(buf + 24, c->qpn);
    tw_put32(buf + 28, c->psn);
    tw_put32(buf + 32, c->gen);
    tw_put32(buf + 36, c->echo);
    tw_put64(buf + 40, tw_siphash24(key, buf, 40));
}

tw_status_t tw_verbs_conn_parse(const void *buf, size_t len, const uint8_t key[16],
                                uint32_t my_rank, uint32_t size, tw_verbs_conn_t *out,
                                const char **why)
{
    const uint8_t *p = buf;
    tw_verbs_conn_t c;

    if (len < TW_VERBS_CONN_LEN) {
        return bad(why, "connection message too short");
    }
    if (tw_get32(p) != TW_VERBS_CONN_MAGIC || p[4] != TW_VERBS_VERSION) {
        return bad(why, "connection message of another protocol or version");
    }
    if (tw_get64(p + 40) != tw_siphash24(key, p, 40)) {
        return bad(why, "connection message not signed with the job key");
    }
    c.type = p[5];
    c.src_rank = tw_get32(p + 8);
    c.dst_rank = tw_get32(p + 12);
    c.size = tw_get32(p + 16);
    c.src_dev = p[20];
    c.dst_dev = p[21];
    c.qpn = tw_get32(p + 24);
    c.psn = tw_get32(p + 28);
    c.gen = tw_get32(p + 32);
    c.echo = tw_get32(p + 36);
    if (c.type == 0 || c.type >= TW_VERBS_C_TYPE_MAX) {
        return bad(why, "unknown connection message type");
    }
    if (c.size != size || c.src_rank >= size || c.dst_rank != my_rank || c.src_rank == my_rank) {
        return bad(why, "connection message for another rank or job size");
    }
    if (c.src_dev >= TW_VERBS_MAX_DEVS || c.dst_dev >= TW_VERBS_MAX_DEVS) {
        return bad(why, "connection message names a device out of range");
    }
    if (c.qpn > 0xffffffu || c.psn > 0xffffffu) {
        return bad(why, "QP number or PSN wider than 24 bits");
    }
    if (c.gen == 0) {
        return bad(why, "connection message without an endpoint generation");
    }
    *out = c;
    return TW_OK;
}

bool tw_verbs_conn_stale(const tw_verbs_conn_t *c, uint32_t gen, bool connected, uint32_t rgen,
                         uint32_t rgen_min)
{
    if (c->gen < rgen_min || (connected && c->gen < rgen)) {
        return true; /* from an endpoint of the peer's that is gone */
    }
    if (c->type == TW_VERBS_C_REQ || c->echo == gen) {
        return false;
    }
    return c->echo != 0 || (c->type != TW_VERBS_C_DOWN && c->type != TW_VERBS_C_RESET);
}

/* ---- addresses ------------------------------------------------------------ */

size_t tw_verbs_addr_len(unsigned ndev)
{
    return TW_VERBS_ADDR_HDR + (size_t)ndev * TW_VERBS_ADDR_ENTRY;
}

tw_status_t tw_verbs_addr_pack(const tw_verbs_addr_t *a, void *buf, size_t cap, size_t *len_p)
{
    uint8_t *p = buf;
    size_t len = tw_verbs_addr_len(a->ndev);

    if (a->ndev == 0 || a->ndev > TW_VERBS_MAX_DEVS || cap < len) {
        return TW_ERR_INVALID;
    }
    memset(p, 0, len);
    tw_put32(p, TW_VERBS_ADDR_MAGIC);
    p[4] = TW_VERBS_VERSION;
    p[5] = a->ndev;
    p[6] = a->flags;
    for (unsigned d = 0; d < a->ndev; d++) {
        uint8_t *e = p + TW_VERBS_ADDR_HDR + d * TW_VERBS_ADDR_ENTRY;
        memcpy(e, a->dev[d].gid, 16);
        tw_put16(e + 16, a->dev[d].lid);
        e[18] = a->dev[d].port;
        e[19] = a->dev[d].link;
        tw_put32(e + 20, a->dev[d].ud_qpn);
        e[24] = a->dev[d].mtu;
    }
    *len_p = len;
    return TW_OK;
}

tw_status_t tw_verbs_addr_parse(const void *buf, size_t len, tw_verbs_addr_t *out, const char **why)
{
    const uint8_t *p = buf;
    tw_verbs_addr_t a;

    memset(&a, 0, sizeof(a));
    if (len < TW_VERBS_ADDR_HDR || tw_get32(p) != TW_VERBS_ADDR_MAGIC || p[4] != TW_VERBS_VERSION) {
        return bad(why, "not a verbs address of this version");
    }
    a.ndev = p[5];
    a.flags = p[6];
    if (a.ndev == 0 || a.ndev > TW_VERBS_MAX_DEVS || len != tw_verbs_addr_len(a.ndev)) {
        return bad(why, "verbs address of a wrong length or device count");
    }
    for (unsigned d = 0; d < a.ndev; d++) {
        const uint8_t *e = p + TW_VERBS_ADDR_HDR + d * TW_VERBS_ADDR_ENTRY;
        tw_verbs_addr_dev_t *v = &a.dev[d];
        memcpy(v->gid, e, 16);
        v->lid = tw_get16(e + 16);
        v->port = e[18];
        v->link = e[19];
        v->ud_qpn = tw_get32(e + 20);
        v->mtu = e[24];
        if (v->port == 0 || (v->link != TW_VERBS_LINK_IB && v->link != TW_VERBS_LINK_ETH) ||
            v->ud_qpn == 0 || v->ud_qpn > 0xffffffu || v->mtu < 1 || v->mtu > 5) {
            return bad(why, "verbs address entry out of range");
        }
        if (v->link == TW_VERBS_LINK_IB && v->lid == 0) {
            return bad(why, "InfiniBand address without a LID");
        }
    }
    *out = a;
    return TW_OK;
}

/* ---- remote keys ------------------------------------------------------------ */

size_t tw_verbs_rkey_pack(const uint32_t *rkeys, unsigned ndev, uint8_t *buf)
{
    tw_put16(buf, TW_VERBS_RKEY_MAGIC);
    buf[2] = (uint8_t)ndev;
    buf[3] = 0;
    for (unsigned d = 0; d < ndev; d++) {
        tw_put32(buf + 4 + 4 * d, rkeys[d]);
    }
    return 4u + 4u * ndev;
}

tw_status_t tw_verbs_rkey_parse(const void *buf, unsigned dev, uint32_t *rkey_p)
{
    const uint8_t *p = buf;

    if (buf == NULL || tw_get16(p) != TW_VERBS_RKEY_MAGIC || p[2] == 0 ||
        p[2] > TW_VERBS_MAX_DEVS || dev >= p[2]) {
        return TW_ERR_INVALID;
    }
    *rkey_p = tw_get32(p + 4 + 4 * dev);
    return TW_OK;
}

/* ---- keys --------------------------------------------------------------------- */

uint32_t tw_verbs_qkey(const uint8_t key[16])
{
    static const char label[] = "threadwire verbs qkey";
    uint32_t q = (uint32_t)tw_siphash24(key, label, sizeof(label) - 1) & 0x7fffffffu;

    return q == 0 ? 1 : q;
}
