/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The self transport: messages from a process to itself.
 *
 * Arrivals whose am id the upper layer marked inline (tagged messages: no
 * user code runs for them) are delivered on the sending thread, at once:
 * the receiver's match and copy happen in the call, and a zero-copy send
 * completes before it returns. One thread's messages thus arrive in its
 * send order, and self traffic scales with threads instead of funnelling
 * through one progress thread.
 *
 * Everything else (active messages, whose handlers must run on the
 * progress engine) is handed to the engine: am_short copies header and
 * payload into one fragment and submits it through the caller's
 * submission lane; am_zcopy submits a small descriptor that points at the
 * caller's payload, and completes once the engine delivered it. Lanes are
 * FIFO per thread, so order holds here too. A full lane is TW_ERR_AGAIN.
 */
#include <string.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "transports/base/tw_tl.h"

#define TW_SELF_MAX_SHORT (64u * 1024u)
_Static_assert(TW_SELF_MAX_SHORT >= TW_TL_SHORT_MIN, "self's am_short holds TW_TL_SHORT_MIN");
#define TW_SELF_MAX_HDR 4096u

typedef struct tw_self_iface {
    tw_tl_iface_t super;
} tw_self_iface_t;

/* One message in flight; header bytes follow, then (short) the payload. */
typedef struct tw_self_frag {
    size_t alloc_len;
    size_t hdr_len;
    size_t len;
    const void *zdata;  /* zcopy: the caller's payload, else NULL */
    tw_tl_comp_t *comp; /* zcopy: completion to run after delivery */
    uint8_t am_id;
    unsigned char bytes[];
} tw_self_frag_t;

/* Thread: engine owner (a submission command). */
static void tw_self_deliver(void *arg, void *data, uint64_t u64)
{
    tw_self_iface_t *self = arg;
    tw_self_frag_t *frag = data;
    const void *payload = frag->zdata != NULL ? frag->zdata : frag->bytes + frag->hdr_len;

    (void)u64;
    tw_pe_assert_owner(self->super.pe);
    tw_stats_inc(self->super.stats, TW_TL_STAT_RX_MSGS);
    tw_stats_add(self->super.stats, TW_TL_STAT_RX_BYTES, frag->len);
    self->super.recv(self->super.recv_arg, self->super.rank, frag->am_id, frag->bytes,
                     frag->hdr_len, payload, frag->len);
    if (frag->comp != NULL) {
        frag->comp->cb(frag->comp, TW_OK);
    }
    tw_free(frag, frag->alloc_len);
}

static tw_status_t tw_self_post(tw_self_iface_t *self, int peer, uint8_t am_id, const void *hdr,
                                size_t hdr_len, const void *data, size_t len, bool copy,
                                tw_tl_comp_t *comp)
{
    size_t alloc_len = sizeof(tw_self_frag_t) + hdr_len + (copy ? len : 0);
    tw_self_frag_t *frag;

    if (peer != self->super.rank) {
        return TW_ERR_UNREACHABLE;
    }
    if (am_id < 64 && (self->super.inline_am_ids & (1ull << am_id)) != 0) {
        tw_stats_inc(self->super.stats, TW_TL_STAT_TX_MSGS);
        tw_stats_add(self->super.stats, TW_TL_STAT_TX_BYTES, len);
        tw_stats_inc(self->super.stats, TW_TL_STAT_RX_MSGS);
        tw_stats_add(self->super.stats, TW_TL_STAT_RX_BYTES, len);
        self->super.recv(self->super.recv_arg, self->super.rank, am_id, hdr, hdr_len, data, len);
        if (comp != NULL) {
            comp->cb(comp, TW_OK);
        }
        return TW_OK;
    }
    frag = tw_malloc(alloc_len);
    if (frag == NULL) {
        tw_error("self", "cannot allocate a %zu-byte fragment", alloc_len);
        return TW_ERR_NOMEM;
    }
    frag->alloc_len = alloc_len;
    frag->hdr_len = hdr_len;
    frag->len = len;
    frag->am_id = am_id;
    frag->comp = comp;
    frag->zdata = copy ? NULL : data;
    if (hdr_len > 0) {
        memcpy(frag->bytes, hdr, hdr_len);
    }
    if (copy && len > 0) {
        memcpy(frag->bytes + hdr_len, data, len);
    }
    return tw_tl_submit(&self->super, self->super.pe, tw_self_deliver, self, frag, alloc_len, len);
}

static tw_status_t tw_self_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                    size_t hdr_len, const void *data, size_t len)
{
    if (hdr_len + len > iface->attr.max_short) {
        return TW_ERR_INVALID;
    }
    return tw_self_post((tw_self_iface_t *)iface, peer, am_id, hdr, hdr_len, data, len, true, NULL);
}

static tw_status_t tw_self_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                    size_t hdr_len, const void *data, size_t len,
                                    tw_tl_comp_t *comp)
{
    if (hdr_len > iface->attr.max_hdr || comp == NULL) {
        return TW_ERR_INVALID;
    }
    return tw_self_post((tw_self_iface_t *)iface, peer, am_id, hdr, hdr_len, data, len, false,
                        comp);
}

static tw_status_t tw_self_query(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return TW_OK; /* always usable */
}

static bool tw_self_reachable(tw_tl_iface_t *iface, int peer)
{
    return peer == iface->rank;
}

static tw_status_t tw_self_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
static void tw_self_iface_close(tw_tl_iface_t *iface);

const tw_tl_ops_t tw_self_ops = {
    .name = "self",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_INLINE_SEND | TW_TL_CAP_ALWAYS_ON,
    .cfg = NULL,
    .query = tw_self_query,
    .iface_open = tw_self_iface_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = tw_self_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_tl_noaddr_pack,
    .addr_connect = tw_tl_noaddr_connect,
    .ready = tw_tl_noaddr_ready,
    .quiesce = tw_tl_noop_quiesce,
    .reachable = tw_self_reachable,
    .am_short = tw_self_am_short,
    .am_zcopy = tw_self_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tl_stub_rndv_get,
    .progress = tw_tl_stub_progress, /* all work arrives as engine commands */
    .poll = tw_tl_stub_poll,         /* tagged messages are delivered inline */
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

static tw_status_t tw_self_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    const tw_tl_attr_t attr = {
        .max_short = TW_SELF_MAX_SHORT,
        .max_hdr = TW_SELF_MAX_HDR,
        .max_zcopy = SIZE_MAX,
    };
    tw_self_iface_t *self = tw_calloc(1, sizeof(*self));
    tw_status_t st;

    if (self == NULL) {
        return TW_ERR_NOMEM;
    }
    st = tw_tl_iface_init(&self->super, &tw_self_ops, params, &attr);
    if (st != TW_OK) {
        goto err_free;
    }
    *iface_p = &self->super;
    return TW_OK;

err_free:
    tw_free(self, sizeof(*self));
    return st;
}

/* The engine was drained before, and what the layers above queued on it
 * since ran in tw_tl_close: every fragment was delivered. */
static void tw_self_iface_close(tw_tl_iface_t *iface)
{
    tw_tl_iface_cleanup(iface);
    tw_free(iface, sizeof(tw_self_iface_t));
}
