/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Transport registry, shared stub operations and iface base helpers. */
#include "transports/base/tw_tl.h"

#include <stdio.h>
#include <string.h>

#include "core/tw_atomic.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"

extern const tw_tl_ops_t tw_self_ops;
extern const tw_tl_ops_t tw_shm_ops;
extern const tw_tl_ops_t tw_tcp_ops;
extern const tw_tl_ops_t tw_verbs_ops;
extern const tw_tl_ops_t tw_lossy_ops;

/* Routing order: the first that reaches a peer carries its traffic. */
const tw_tl_ops_t *const tw_tl_all[] = {&tw_self_ops, &tw_shm_ops, &tw_verbs_ops, &tw_tcp_ops,
                                        NULL};
const tw_tl_ops_t *const tw_tl_wrappers[] = {&tw_lossy_ops, NULL};

const tw_stat_desc_t tw_tl_stat_descs[TW_TL_STAT_COUNT] = {
    [TW_TL_STAT_TX_MSGS] = {"tx_msgs", TW_STAT_COUNTER},
    [TW_TL_STAT_TX_BYTES] = {"tx_bytes", TW_STAT_COUNTER},
    [TW_TL_STAT_RX_MSGS] = {"rx_msgs", TW_STAT_COUNTER},
    [TW_TL_STAT_RX_BYTES] = {"rx_bytes", TW_STAT_COUNTER},
    [TW_TL_STAT_AGAIN] = {"again", TW_STAT_COUNTER},
    [TW_TL_STAT_REFUSED] = {"refused", TW_STAT_COUNTER},
    [TW_TL_STAT_BAD_FRAMES] = {"bad_frames", TW_STAT_COUNTER},
    [TW_TL_STAT_HANDED] = {"handed", TW_STAT_COUNTER},
    [TW_TL_STAT_RX_DIRECT] = {"rx_direct", TW_STAT_COUNTER},
};

const tw_tl_ops_t *tw_tl_find(const char *name)
{
    for (size_t i = 0; tw_tl_all[i] != NULL; i++) {
        if (strcmp(tw_tl_all[i]->name, name) == 0) {
            return tw_tl_all[i];
        }
    }
    return NULL;
}

tw_status_t tw_tl_stub_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    (void)params, (void)iface_p;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_tl_stub_wrap_wants(const tw_tl_params_t *params, const tw_tl_iface_t *inner,
                                  bool *wants_p)
{
    (void)params, (void)inner;
    *wants_p = false;
    return TW_OK;
}

tw_status_t tw_tl_stub_wrap_open(tw_tl_iface_t *const *inner, unsigned n,
                                 const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    (void)inner, (void)n, (void)params, (void)iface_p;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_tl_stub_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                size_t hdr_len, const void *data, size_t len)
{
    (void)iface, (void)peer, (void)am_id, (void)hdr, (void)hdr_len, (void)data, (void)len;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_tl_stub_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    (void)iface, (void)peer, (void)am_id, (void)hdr, (void)hdr_len, (void)data, (void)len;
    (void)comp;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_tl_stub_put_zcopy(tw_tl_iface_t *iface, int peer, const void *src, size_t len,
                                 uint64_t raddr, const void *rkey, tw_tl_comp_t *comp)
{
    (void)iface, (void)peer, (void)src, (void)len, (void)raddr, (void)rkey, (void)comp;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_tl_stub_get_zcopy(tw_tl_iface_t *iface, int peer, void *dst, size_t len,
                                 uint64_t raddr, const void *rkey, tw_tl_comp_t *comp)
{
    (void)iface, (void)peer, (void)dst, (void)len, (void)raddr, (void)rkey, (void)comp;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_tl_stub_flush(tw_tl_iface_t *iface, int peer, tw_tl_comp_t *comp)
{
    (void)iface, (void)peer, (void)comp;
    return TW_ERR_UNSUPPORTED;
}

int tw_tl_stub_progress(tw_tl_iface_t *iface)
{
    (void)iface;
    return 0;
}

int tw_tl_stub_poll(tw_tl_iface_t *iface)
{
    (void)iface;
    return 0;
}

tw_status_t tw_tl_stub_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *rndv, void *dst, size_t len,
                                tw_tl_comp_t *comp)
{
    (void)iface, (void)rndv, (void)dst, (void)len, (void)comp;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_tl_noaddr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p)
{
    (void)iface, (void)buf, (void)cap;
    *len_p = 0;
    return TW_OK;
}

tw_status_t tw_tl_stub_mem_reg(tw_tl_iface_t *iface, void *addr, size_t len, void *key,
                               size_t *key_len_p, void **handle_p)
{
    (void)iface, (void)addr, (void)len, (void)key, (void)key_len_p, (void)handle_p;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_tl_stub_mem_dereg(tw_tl_iface_t *iface, void *handle)
{
    (void)iface, (void)handle;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_tl_noaddr_connect(tw_tl_iface_t *iface, int peer, const void *addr, size_t len)
{
    (void)iface, (void)peer, (void)addr, (void)len;
    return TW_OK;
}

void tw_tl_noaddr_ready(tw_tl_iface_t *iface)
{
    (void)iface;
}

void tw_tl_noop_quiesce(tw_tl_iface_t *iface)
{
    (void)iface;
}

#define TW_TL_QUIESCE_NS (2ull * 1000 * 1000 * 1000)

void tw_tl_quiesce_wait(tw_tl_iface_t *iface, unsigned (*pending)(tw_tl_iface_t *iface),
                        const char *what)
{
    uint64_t until = tw_time_ns() + TW_TL_QUIESCE_NS;
    tw_backoff_t b = TW_BACKOFF_INIT;
    unsigned n;

    while ((n = pending(iface)) > 0) {
        if (tw_time_ns() >= until) {
            tw_warn(iface->ops->name,
                    "finalize: %u %s not read by their receivers in %llu ms: canceled", n, what,
                    (unsigned long long)(TW_TL_QUIESCE_NS / 1000000));
            return;
        }
        if (iface->pe != NULL && !tw_pe_has_thread(iface->pe)) {
            (void)tw_pe_progress(iface->pe);
        }
        tw_backoff_wait(&b);
    }
}

#define TW_TL_CAP_DEFINED                                                         \
    (((TW_TL_CAP_EAGER_IDS << 1) - 1u) | TW_TL_CAP_ALWAYS_ON | TW_TL_CAP_OPT_IN | \
     TW_TL_CAP_WRAPPER | TW_TL_CAP_WRAP_ALL | TW_TL_CAP_JOB_WIDE | TW_TL_CAP_BESIDE)

bool tw_tl_caps_consistent(const tw_tl_ops_t *ops)
{
    bool wrapper = (ops->caps & TW_TL_CAP_WRAPPER) != 0;
    const struct {
        uint32_t cap;
        bool stub;
    } slots[] = {
        {TW_TL_CAP_AM_SHORT, ops->am_short == tw_tl_stub_am_short},
        {TW_TL_CAP_AM_ZCOPY, ops->am_zcopy == tw_tl_stub_am_zcopy},
        {TW_TL_CAP_PUT, ops->put_zcopy == tw_tl_stub_put_zcopy},
        {TW_TL_CAP_GET, ops->get_zcopy == tw_tl_stub_get_zcopy},
        {TW_TL_CAP_FLUSH, ops->flush == tw_tl_stub_flush},
        {TW_TL_CAP_RNDV, ops->rndv_get == tw_tl_stub_rndv_get},
        {TW_TL_CAP_POLL, ops->poll == tw_tl_stub_poll},
        {TW_TL_CAP_MEM_REG, ops->mem_reg == tw_tl_stub_mem_reg},
        {TW_TL_CAP_MEM_REG, ops->mem_dereg == tw_tl_stub_mem_dereg},
        {TW_TL_CAP_WRAPPER, ops->iface_open != tw_tl_stub_iface_open},
        {TW_TL_CAP_WRAPPER, ops->wrap_open == tw_tl_stub_wrap_open},
        {TW_TL_CAP_WRAPPER, ops->wrap_wants == tw_tl_stub_wrap_wants},
    };
    if (ops->name == NULL || ops->name[0] == '\0' || strlen(ops->name) > 15 || ops->query == NULL ||
        ops->iface_open == NULL || ops->wrap_wants == NULL || ops->wrap_open == NULL ||
        ops->iface_close == NULL || ops->bind == NULL || ops->reachable == NULL ||
        ops->am_short == NULL || ops->am_zcopy == NULL || ops->put_zcopy == NULL ||
        ops->get_zcopy == NULL || ops->flush == NULL || ops->progress == NULL ||
        ops->poll == NULL || ops->rndv_get == NULL || ops->addr_pack == NULL ||
        ops->addr_connect == NULL || ops->ready == NULL || ops->quiesce == NULL ||
        ops->mem_reg == NULL || ops->mem_dereg == NULL) {
        return false;
    }
    for (size_t i = 0; i < TW_ARRAY_SIZE(slots); i++) {
        bool advertised = (ops->caps & slots[i].cap) != 0;
        if (advertised == slots[i].stub) {
            return false;
        }
    }
    /* Selection bits that contradict one another, or need a wrapper. */
    if ((ops->caps & TW_TL_CAP_ALWAYS_ON) && (ops->caps & TW_TL_CAP_OPT_IN)) {
        return false;
    }
    if (!wrapper && (ops->caps & (TW_TL_CAP_WRAP_ALL | TW_TL_CAP_BESIDE | TW_TL_CAP_FIRST))) {
        return false;
    }
    /* No bit nobody defined. */
    return (ops->caps & ~TW_TL_CAP_DEFINED) == 0;
}

tw_status_t tw_tl_iface_init(tw_tl_iface_t *iface, const tw_tl_ops_t *ops,
                             const tw_tl_params_t *params, const tw_tl_attr_t *attr)
{
    char name[64];

    snprintf(name, sizeof(name), "tl:%s", ops->name);
    iface->stats = tw_stats_create(name, tw_tl_stat_descs, TW_TL_STAT_COUNT);
    if (iface->stats == NULL) {
        tw_error("transport", "%s: cannot allocate counters", ops->name);
        return TW_ERR_NOMEM;
    }
    iface->ops = ops;
    iface->name = ops->name;
    iface->caps = ops->caps & TW_TL_CAP_OPS_MASK;
    iface->pe = params->pe;
    iface->attr = *attr;
    iface->rank = params->rank;
    iface->size = params->size;
    iface->tap = NULL;
    iface->inner = NULL;
    iface->ninner = 0;
    iface->closing = false;
    tw_tl_iface_bind(iface, params);
    return TW_OK;
}

void tw_tl_wrapper_init(tw_tl_iface_t *iface, const tw_tl_ops_t *ops, const tw_tl_params_t *params,
                        uint32_t caps, tw_stats_t *stats, tw_tl_iface_t *const *inner, unsigned n)
{
    iface->ops = ops;
    iface->name = ops->name;
    iface->caps = caps & ops->caps & TW_TL_CAP_OPS_MASK;
    iface->pe = params->pe;
    iface->stats = stats;
    iface->rank = params->rank;
    iface->size = params->size;
    iface->tap = NULL;
    iface->inner = inner;
    iface->ninner = n;
    iface->closing = false;
    tw_tl_iface_bind(iface, params);
}

/* ---- taps ----------------------------------------------------------------- */

static void tw_tl_tap_recv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                           const void *data, size_t len)
{
    tw_tl_tap_t *tap = arg;

    if (am_id == tap->am_id) {
        tap->recv(tap, src, hdr, hdr_len, data, len);
    } else {
        tap->up_recv(tap->up_recv_arg, src, am_id, hdr, hdr_len, data, len);
    }
}

static void tw_tl_tap_recv_rndv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                                size_t len, tw_tl_rndv_t *rndv)
{
    tw_tl_tap_t *tap = arg;

    tap->up_recv_rndv(tap->up_recv_arg, src, am_id, hdr, hdr_len, len, rndv);
}

static void tw_tl_tap_peer_down(void *arg, int peer, tw_status_t why)
{
    tw_tl_tap_t *tap = arg;

    if (tap->up_peer_down != NULL) {
        tap->up_peer_down(tap->up_peer_down_arg, peer, why);
    }
    tap->peer_down(tap, peer, why);
}

void tw_tl_tap(tw_tl_iface_t *iface, tw_tl_tap_t *tap)
{
    tap->iface = iface;
    tap->up_recv = iface->recv;
    tap->up_recv_rndv = iface->recv_rndv;
    tap->up_recv_arg = iface->recv_arg;
    tap->up_peer_down = iface->peer_down;
    tap->up_peer_down_arg = iface->peer_down_arg;
    iface->tap = tap;
    iface->recv = tw_tl_tap_recv;
    iface->recv_rndv = tap->up_recv_rndv != NULL ? tw_tl_tap_recv_rndv : NULL;
    iface->recv_arg = tap;
    iface->peer_down = tw_tl_tap_peer_down;
    iface->peer_down_arg = tap;
}

void tw_tl_iface_bind(tw_tl_iface_t *iface, const tw_tl_params_t *up)
{
    if (iface->tap != NULL) {
        tw_tl_tap_t *tap = iface->tap;
        tap->up_recv = up->recv;
        tap->up_recv_rndv = up->recv_rndv;
        tap->up_recv_arg = up->recv_arg;
        tap->up_peer_down = up->peer_down;
        tap->up_peer_down_arg = up->peer_down_arg;
        iface->recv_rndv = up->recv_rndv != NULL ? tw_tl_tap_recv_rndv : NULL;
        iface->inline_am_ids = up->inline_am_ids;
        iface->eager_am_ids = up->eager_am_ids;
        iface->am_class = up->am_class;
        return;
    }
    iface->recv = up->recv;
    iface->recv_arg = up->recv_arg;
    iface->inline_am_ids = up->inline_am_ids;
    iface->eager_am_ids = up->eager_am_ids;
    iface->am_class = up->am_class;
    iface->recv_rndv = up->recv_rndv;
    iface->peer_down = up->peer_down;
    iface->peer_down_arg = up->peer_down_arg;
}

tw_status_t tw_tl_submit(tw_tl_iface_t *iface, tw_pe_t *pe, void (*fn)(void *, void *, uint64_t),
                         void *arg, void *data, size_t alloc_len, size_t len)
{
    tw_pe_cmd_t cmd = {.fn = fn, .arg = arg, .data = data, .u64 = 0};
    tw_status_t st = tw_pe_submit(pe, &cmd);

    if (st != TW_OK) {
        tw_stats_inc(iface->stats, TW_TL_STAT_AGAIN);
        tw_free(data, alloc_len);
        return st;
    }
    tw_stats_inc(iface->stats, TW_TL_STAT_TX_MSGS);
    tw_stats_inc(iface->stats, TW_TL_STAT_HANDED);
    tw_stats_add(iface->stats, TW_TL_STAT_TX_BYTES, len);
    return TW_OK;
}

void tw_tl_iface_cleanup(tw_tl_iface_t *iface)
{
    tw_stats_destroy(iface->stats);
    iface->stats = NULL;
}

/* ---- trees ----------------------------------------------------------------- */

int tw_tl_walk(tw_tl_iface_t *root, int (*fn)(tw_tl_iface_t *iface, void *arg), void *arg)
{
    for (unsigned i = 0; i < root->ninner; i++) {
        int rc = tw_tl_walk(root->inner[i], fn, arg);
        if (rc != 0) {
            return rc;
        }
    }
    return fn(root, arg);
}

static int tw_tl_progress_fn(void *arg)
{
    return tw_tl_progress(arg);
}

static int tw_tl_pe_add_one(tw_tl_iface_t *iface, void *arg)
{
    tw_status_t st = tw_pe_add(iface->pe, tw_tl_progress_fn, iface, -1);

    (void)arg;
    if (st == TW_OK && (iface->caps & TW_TL_CAP_POLL)) {
        st = tw_pe_workers_poll(iface->pe); /* tw_progress, tw_cq_wait */
    }
    return st == TW_OK ? 0 : (int)st;
}

tw_status_t tw_tl_pe_add_tree(tw_tl_iface_t *root)
{
    return (tw_status_t)tw_tl_walk(root, tw_tl_pe_add_one, NULL);
}

void tw_tl_ready_tree(tw_tl_iface_t *root)
{
    /* Before the inner ifaces: their threads may deliver to it at once. */
    root->ops->ready(root);
    for (unsigned i = 0; i < root->ninner; i++) {
        tw_tl_ready_tree(root->inner[i]);
    }
}

void tw_tl_quiesce_tree(tw_tl_iface_t *root)
{
    root->ops->quiesce(root);
    for (unsigned i = 0; i < root->ninner; i++) {
        tw_tl_quiesce_tree(root->inner[i]);
    }
}

#define TW_TL_LEFTOVERS_NS (2ull * 1000 * 1000 * 1000)

void tw_tl_run_leftovers(tw_pe_t *pe, uint64_t until_ns)
{
    for (int i = 0; pe != NULL && i < 64 && tw_time_ns() < until_ns && tw_pe_run_cmd_batch(pe) > 0;
         i++) {
    }
}

void tw_tl_close(tw_tl_iface_t *root)
{
    /* The wrapper owns the array of its inner ifaces: close them first,
     * then the wrapper, which frees it. */
    tw_tl_tap_t *tap = root->tap;

    root->closing = true;
    for (unsigned i = 0; i < root->ninner; i++) {
        tw_tl_close(root->inner[i]);
    }
    tw_tl_run_leftovers(root->pe, tw_time_ns() + TW_TL_LEFTOVERS_NS);
    root->ops->iface_close(root);
    if (tap != NULL) {
        tap->release(tap);
    }
}

/* ---- rendezvous handed over ----------------------------------------------- */

/* The handle whose announcement this thread is delivering: a receive that
 * matches inside recv_rndv pulls at once. Thread-local, not a field of the
 * handle: once announced, the handle is visible to other threads, which
 * must not read a flag its engine is still writing. */
static TW_TLS tw_tl_rndv_t *tw_tl_announcing;

void tw_tl_rndv_announce(tw_tl_iface_t *iface, int src, uint8_t am_id, const void *hdr,
                         size_t hdr_len, size_t len, tw_tl_rndv_t *h)
{
    tw_tl_rndv_t *outer = tw_tl_announcing;

    tw_tl_announcing = h;
    iface->recv_rndv(iface->recv_arg, src, am_id, hdr, hdr_len, len, h);
    tw_tl_announcing = outer;
}

static void tw_tl_rndv_pull_cmd(void *arg, void *data, uint64_t u64)
{
    tw_tl_rndv_pull_t *pull = data;

    (void)arg, (void)u64;
    pull->apply(pull->h, pull->dst, pull->len, pull->comp);
}

void tw_tl_rndv_pull_on(tw_pe_t *pe, tw_tl_rndv_t *h, tw_tl_rndv_pull_t *pull,
                        tw_tl_rndv_apply_fn_t apply, void *dst, size_t len, tw_tl_comp_t *comp)
{
    if (tw_tl_announcing == h || tw_pe_is_owner(pe)) {
        apply(h, dst, len, comp);
        return;
    }
    *pull = (tw_tl_rndv_pull_t){.apply = apply, .h = h, .dst = dst, .len = len, .comp = comp};
    tw_pe_cmd_t cmd = {.fn = tw_tl_rndv_pull_cmd, .data = pull};
    tw_pe_hand_over(pe, &cmd);
}
