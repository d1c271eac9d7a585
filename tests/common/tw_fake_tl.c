/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* The scripted fake transport (tw_fake_tl.h). Thread: the test's only. */
#include "tw_fake_tl.h"

#include <stdlib.h>
#include <string.h>

#include "tw_test.h"

#if defined(__SANITIZE_ADDRESS__)
#define TWT_FAKE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TWT_FAKE_ASAN 1
#endif
#endif
#ifdef TWT_FAKE_ASAN
#include <sanitizer/asan_interface.h>
/* Bytes of a frame nobody may read: past its length, or all of a
 * recycled one. */
#define twt_fake_poison(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define twt_fake_unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define twt_fake_poison(p, n)   ((void)(p), (void)(n))
#define twt_fake_unpoison(p, n) ((void)(p), (void)(n))
#endif

typedef struct twt_fake_iface {
    tw_tl_iface_t super;
    twt_fake_t *wire;
    int path;
} twt_fake_iface_t;

/* The endpoint twt_fake_open is opening: iface_open has no argument of
 * its own to carry it. Thread: the test's only, like the wire. */
static struct {
    twt_fake_t *wire;
    int path;
} twt_fake_opening;

/* ---- frames ------------------------------------------------------------ */

/* A frame of @p hdr_len + @p len bytes, copied in: recycled when one is
 * free, else allocated (and kept on the all list). NULL: out of memory. */
static twt_fake_frame_t *twt_fake_frame_get(twt_fake_t *w, const void *hdr, size_t hdr_len,
                                            const void *data, size_t len)
{
    size_t cap = w->attr.max_short;
    twt_fake_frame_t *f = w->free;

    if (f != NULL) {
        w->free = f->next;
    } else {
        f = calloc(1, sizeof(*f));
        if (f == NULL || (f->bytes = malloc(cap)) == NULL) {
            free(f);
            return NULL;
        }
        f->all = w->all;
        w->all = f;
    }
    twt_fake_unpoison(f->bytes, hdr_len + len);
    twt_fake_poison(f->bytes + hdr_len + len, cap - hdr_len - len);
    memcpy(f->bytes, hdr, hdr_len);
    if (len > 0) {
        memcpy(f->bytes + hdr_len, data, len);
    }
    f->next = NULL;
    f->hdr_len = hdr_len;
    f->len = len;
    return f;
}

static void twt_fake_frame_put(twt_fake_t *w, twt_fake_frame_t *f)
{
    twt_fake_poison(f->bytes, w->attr.max_short);
    f->next = w->free;
    w->free = f;
}

static void twt_fake_enqueue(twt_fake_t *w, twt_fake_frame_t *f)
{
    f->next = NULL;
    if (w->tail != NULL) {
        w->tail->next = f;
    } else {
        w->head = f;
    }
    w->tail = f;
    w->queued++;
}

static twt_fake_frame_t *twt_fake_dequeue(twt_fake_t *w)
{
    twt_fake_frame_t *f = w->head;

    if (f != NULL) {
        w->head = f->next;
        if (w->head == NULL) {
            w->tail = NULL;
        }
        w->queued--;
    }
    return f;
}

static twt_fake_frame_t *twt_fake_dup(twt_fake_t *w, const twt_fake_frame_t *f)
{
    twt_fake_frame_t *c =
        twt_fake_frame_get(w, f->bytes, f->hdr_len, f->bytes + f->hdr_len, f->len);

    TWT_CHECKF(c != NULL, "fake: out of memory for a copy");
    c->src = f->src;
    c->dst = f->dst;
    c->path = f->path;
    c->am_id = f->am_id;
    c->cls = f->cls;
    return c;
}

/* Hand @p f to its endpoint (or lose it), then recycle it. */
static void twt_fake_hand_up(twt_fake_t *w, twt_fake_frame_t *f)
{
    twt_fake_ep_t *ep = NULL;

    if (f->dst >= 0 && f->dst < w->size && f->path >= 0 && f->path < TWT_FAKE_PATHS) {
        ep = &w->ep[f->dst][f->path];
    }
    if (ep == NULL || ep->iface == NULL) {
        w->stray++;
    } else if (ep->deaf) {
        w->dropped++;
    } else {
        tw_tl_iface_t *i = ep->iface;
        ep->received++;
        w->delivered++;
        i->recv(i->recv_arg, f->src, f->am_id, f->bytes, f->hdr_len, f->bytes + f->hdr_len, f->len);
    }
    twt_fake_frame_put(w, f);
}

/* Carry out @p fate for @p f: what passes goes on through @p pass (onto
 * the wire, or up), a duplicate's copy onto the wire behind it. */
static void twt_fake_settle(twt_fake_t *w, twt_fake_frame_t *f, twt_fake_fate_t fate,
                            void (*pass)(twt_fake_t *w, twt_fake_frame_t *f))
{
    twt_fake_frame_t *c;

    switch (fate) {
    case TWT_FAKE_DROP:
        twt_fake_frame_put(w, f);
        w->dropped++;
        break;
    case TWT_FAKE_HOLD:
        w->held++;
        break;
    case TWT_FAKE_DUP:
        c = twt_fake_dup(w, f);
        w->duplicated++;
        pass(w, f);
        twt_fake_enqueue(w, c);
        break;
    default:
        pass(w, f);
        break;
    }
}

/* ---- the ops table ------------------------------------------------------ */

static tw_status_t twt_fake_query(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return TW_OK;
}

static tw_status_t twt_fake_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    twt_fake_t *w = twt_fake_opening.wire;
    int path = twt_fake_opening.path;
    twt_fake_iface_t *fi;

    if (w == NULL || params->rank < 0 || params->rank >= w->size || path < 0 ||
        path >= TWT_FAKE_PATHS || w->ep[params->rank][path].iface != NULL) {
        return TW_ERR_INVALID;
    }
    fi = calloc(1, sizeof(*fi));
    if (fi == NULL) {
        return TW_ERR_NOMEM;
    }
    if (tw_tl_iface_init(&fi->super, &twt_fake_ops, params, &w->attr) != TW_OK) {
        free(fi);
        return TW_ERR_NOMEM;
    }
    fi->wire = w;
    fi->path = path;
    w->ep[params->rank][path].iface = &fi->super;
    *iface_p = &fi->super;
    return TW_OK;
}

static void twt_fake_iface_close(tw_tl_iface_t *iface)
{
    twt_fake_iface_t *fi = (twt_fake_iface_t *)iface;

    fi->wire->ep[iface->rank][fi->path].iface = NULL;
    tw_tl_iface_cleanup(iface);
    free(fi);
}

static bool twt_fake_reachable(tw_tl_iface_t *iface, int peer)
{
    return peer >= 0 && peer < iface->size;
}

static tw_status_t twt_fake_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                     size_t hdr_len, const void *data, size_t len)
{
    twt_fake_iface_t *fi = (twt_fake_iface_t *)iface;
    twt_fake_t *w = fi->wire;
    twt_fake_ep_t *ep = &w->ep[iface->rank][fi->path];
    twt_fake_fate_t fate = TWT_FAKE_PASS;
    twt_fake_frame_t *f;

    TWT_CHECKF(hdr_len <= iface->attr.max_hdr && hdr_len + len <= iface->attr.max_short,
               "fake: a send of %zu + %zu bytes, beyond the iface's attr", hdr_len, len);
    if (ep->refuse != TW_OK) {
        ep->refused++;
        return ep->refuse;
    }
    if (w->max_frames != 0 && w->queued >= w->max_frames) {
        ep->refused++;
        return TW_ERR_AGAIN;
    }
    f = twt_fake_frame_get(w, hdr, hdr_len, data, len);
    if (f == NULL) {
        return TW_ERR_NOMEM;
    }
    f->src = iface->rank;
    f->dst = peer;
    f->path = fi->path;
    f->am_id = am_id;
    f->cls = am_id < 64 && iface->am_class != NULL ? iface->am_class[am_id] : TW_TL_FRAME_DATA;
    if (!ep->dark && w->on_send != NULL) {
        fate = w->on_send(w->hook_arg, f);
    }
    if (fate == TWT_FAKE_AGAIN) {
        twt_fake_frame_put(w, f);
        ep->refused++;
        return TW_ERR_AGAIN;
    }
    ep->sent[f->cls]++;
    if (ep->dark) {
        fate = TWT_FAKE_DROP;
    }
    twt_fake_settle(w, f, fate, twt_fake_enqueue);
    return TW_OK;
}

const tw_tl_ops_t twt_fake_ops = {
    .name = "fake",
    .caps = TW_TL_CAP_AM_SHORT,
    .cfg = NULL,
    .query = twt_fake_query,
    .iface_open = twt_fake_iface_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = twt_fake_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_tl_noaddr_pack,
    .addr_connect = tw_tl_noaddr_connect,
    .ready = tw_tl_noaddr_ready,
    .quiesce = tw_tl_noop_quiesce,
    .reachable = twt_fake_reachable,
    .am_short = twt_fake_am_short,
    .am_zcopy = tw_tl_stub_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tl_stub_rndv_get,
    .progress = tw_tl_stub_progress,
    .poll = tw_tl_stub_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

/* ---- the wire ------------------------------------------------------------ */

void twt_fake_init(twt_fake_t *w, int size, const tw_tl_attr_t *attr)
{
    TWT_CHECK(size > 0 && size <= TWT_FAKE_RANKS && attr->max_hdr <= attr->max_short);
    memset(w, 0, sizeof(*w));
    w->size = size;
    w->attr = *attr;
}

void twt_fake_cleanup(twt_fake_t *w)
{
    while (w->all != NULL) {
        twt_fake_frame_t *f = w->all;
        w->all = f->all;
        twt_fake_unpoison(f->bytes, w->attr.max_short);
        free(f->bytes);
        free(f);
    }
    w->head = w->tail = w->free = NULL;
    w->queued = w->held = 0;
}

tw_status_t twt_fake_open(twt_fake_t *w, int path, const tw_tl_params_t *params,
                          tw_tl_iface_t **iface_p)
{
    tw_status_t st;

    twt_fake_opening.wire = w;
    twt_fake_opening.path = path;
    st = tw_tl_iface_open(&twt_fake_ops, params, iface_p);
    twt_fake_opening.wire = NULL;
    return st;
}

unsigned twt_fake_pump(twt_fake_t *w)
{
    unsigned n = 0;
    twt_fake_frame_t *f;

    while ((f = twt_fake_dequeue(w)) != NULL) {
        twt_fake_fate_t fate =
            w->on_deliver != NULL ? w->on_deliver(w->hook_arg, f) : TWT_FAKE_PASS;
        n++;
        TWT_CHECKF(fate != TWT_FAKE_AGAIN, "fake: on_deliver answered TWT_FAKE_AGAIN");
        twt_fake_settle(w, f, fate, twt_fake_hand_up);
    }
    return n;
}

tw_status_t twt_fake_inject(twt_fake_t *w, int src, int dst, int path, uint8_t am_id,
                            const void *hdr, size_t hdr_len, const void *data, size_t len)
{
    twt_fake_frame_t *f;

    if (hdr_len + len > w->attr.max_short) {
        return TW_ERR_INVALID;
    }
    f = twt_fake_frame_get(w, hdr, hdr_len, data, len);
    if (f == NULL) {
        return TW_ERR_NOMEM;
    }
    f->src = src;
    f->dst = dst;
    f->path = path;
    f->am_id = am_id;
    f->cls = TW_TL_FRAME_DATA;
    twt_fake_enqueue(w, f);
    return TW_OK;
}

twt_fake_frame_t *twt_fake_copy(twt_fake_t *w, const twt_fake_frame_t *f)
{
    w->held++;
    return twt_fake_dup(w, f);
}

static void twt_fake_unhold(twt_fake_t *w, twt_fake_frame_t *f)
{
    TWT_CHECKF(f != NULL && w->held > 0, "fake: a frame the test does not hold");
    w->held--;
}

void twt_fake_release(twt_fake_t *w, twt_fake_frame_t *f)
{
    twt_fake_unhold(w, f);
    twt_fake_enqueue(w, f);
}

void twt_fake_deliver(twt_fake_t *w, twt_fake_frame_t *f)
{
    twt_fake_unhold(w, f);
    twt_fake_hand_up(w, f);
}

void twt_fake_discard(twt_fake_t *w, twt_fake_frame_t *f)
{
    twt_fake_unhold(w, f);
    twt_fake_frame_put(w, f);
    w->dropped++;
}

void twt_fake_flip_bit(twt_fake_t *w, twt_fake_frame_t *f, size_t bit)
{
    TWT_CHECK(bit < (f->hdr_len + f->len) * 8);
    f->bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    w->corrupted++;
}

void twt_fake_report_down(twt_fake_t *w, int rank, int path, int peer, tw_status_t why)
{
    tw_tl_iface_t *i = w->ep[rank][path].iface;

    TWT_CHECK(i != NULL && i->peer_down != NULL);
    i->peer_down(i->peer_down_arg, peer, why);
}
