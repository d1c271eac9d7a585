/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The verbs transport's iface: its ops table, query, the address blob
 * (each device's GID, LID, port, link layer, MTU and UD QP number, and
 * whether the rank runs progress threads), and open and close. Ranks a
 * and b talk through device (a + b) mod the smaller of their device
 * counts, the same index on both sides: devices of one index form a
 * rail, and pairs spread over the rails.
 *
 * Thread: as the ops table says (tw_tl.h); close drives every device's
 * engine itself once it stopped their threads.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/tw_atomic.h"
#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_siphash.h"
#include "core/tw_time.h"
#include "transports/verbs/tw_verbs_int.h"

static int tw_verbs_progress(tw_tl_iface_t *iface)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    int events = 0;

    if (!vb->threads) {
        for (int d = 0; d < vb->ndev; d++) {
            events += tw_pe_progress(vb->devs[d].pe);
        }
    }
    return events;
}

static tw_status_t tw_verbs_query(char *why, size_t why_len)
{
    tw_verbs_cfg_t cfg;
    struct ibv_device **list;
    int n = 0, usable = 0;
    char names[160] = "";

    tw_cfg_set_defaults(&tw_verbs_cfg_table, &cfg);
    if (tw_cfg_apply_env(&tw_verbs_cfg_table, &cfg) != TW_OK) {
        snprintf(why, why_len, "a TW_VERBS_* variable has a bad value");
        return TW_ERR_INVALID;
    }
    list = ibv_get_device_list(&n);
    if (list == NULL || n == 0) {
        if (list == NULL) {
            snprintf(why, why_len,
                     "no RDMA device: ibv_get_device_list failed (%s: no RDMA support in "
                     "this kernel?)",
                     strerror(errno));
        } else {
            snprintf(why, why_len, "no RDMA device (ibv_get_device_list found none)");
        }
        if (list != NULL) {
            ibv_free_device_list(list);
        }
        return TW_ERR_UNSUPPORTED;
    }
    for (int i = 0; i < n; i++) {
        int port;
        const char *name = ibv_get_device_name(list[i]);
        if (strlen(names) + strlen(name) + 2 < sizeof(names)) {
            strcat(names, names[0] != '\0' ? "," : "");
            strcat(names, name);
        }
        if (tw_cfg_list_has(cfg.devices, name, &port)) {
            usable++;
        }
    }
    ibv_free_device_list(list);
    if (usable == 0) {
        snprintf(why, why_len, "TW_VERBS_DEVICES='%s' names none of the RDMA devices here (%s)",
                 cfg.devices, names);
        return TW_ERR_UNSUPPORTED;
    }
    return TW_OK;
}

static bool tw_verbs_reachable(tw_tl_iface_t *iface, int peer)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;

    return peer != iface->rank && peer >= 0 && peer < iface->size && vb->eps[peer].rud_qpn != 0;
}

static tw_status_t tw_verbs_addr_pack_op(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_verbs_addr_t a = {.ndev = (uint8_t)vb->ndev,
                         .flags = vb->threads ? TW_VERBS_ADDR_FLAG_THREAD : 0};

    for (int d = 0; d < vb->ndev; d++) {
        tw_verbs_dev_t *dev = &vb->devs[d];
        memcpy(a.dev[d].gid, dev->gid.raw, 16);
        a.dev[d].lid = dev->lid;
        a.dev[d].port = dev->port;
        a.dev[d].link = dev->link;
        a.dev[d].ud_qpn = dev->ud->qp_num;
        a.dev[d].mtu = (uint8_t)dev->mtu;
    }
    return tw_verbs_addr_pack(&a, buf, cap, len_p);
}

static tw_status_t tw_verbs_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr,
                                         size_t len)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_verbs_ep_t *ep = &vb->eps[peer];
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_addr_t a;
    const char *why = "?";
    const tw_verbs_addr_dev_t *r;

    if (tw_verbs_addr_parse(addr, len, &a, &why) != TW_OK) {
        tw_error("verbs", "rank %d published a bad verbs address: %s", peer, why);
        return TW_ERR_PROTOCOL;
    }
    /* The pair uses the same device index on both sides (a rail), chosen
     * by both ranks alike, so pairs spread over the devices. */
    ep->rdev = (uint8_t)((unsigned)(iface->rank + peer) % TW_MIN((unsigned)vb->ndev, a.ndev));
    ep->dev = dev = &vb->devs[ep->rdev];
    r = &a.dev[ep->rdev];
    if ((r->link == TW_VERBS_LINK_ETH) != (dev->link == TW_VERBS_LINK_ETH)) {
        tw_warn("verbs", "rank %d's device is on another link layer than %s: not reachable", peer,
                dev->name);
        return TW_OK;
    }
    memset(&ep->ah_attr, 0, sizeof(ep->ah_attr));
    ep->ah_attr.port_num = dev->port;
    ep->ah_attr.sl = 0;
    if (dev->link == TW_VERBS_LINK_ETH ||
        memcmp(r->gid, dev->gid.raw, 8) != 0 /* another subnet: route by GRH */) {
        ep->ah_attr.is_global = 1;
        memcpy(ep->ah_attr.grh.dgid.raw, r->gid, 16);
        ep->ah_attr.grh.sgid_index = (uint8_t)dev->gid_index;
        ep->ah_attr.grh.hop_limit = 64;
    }
    ep->ah_attr.dlid = r->lid;
    ep->rud_qpn = r->ud_qpn;
    ep->silence_fails = (a.flags & TW_VERBS_ADDR_FLAG_THREAD) != 0;
    ep->mtu = TW_MIN(dev->mtu, (enum ibv_mtu)r->mtu);
    return TW_OK;
}

static void tw_verbs_ready(tw_tl_iface_t *iface)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;

    for (int d = 0; d < vb->ndev && vb->threads; d++) {
        if (tw_pe_start(vb->devs[d].pe) != TW_OK) {
            tw_warn("verbs",
                    "cannot start the progress thread of %s: the context's engine "
                    "drives it",
                    vb->devs[d].name);
            vb->threads = false;
        }
    }
}

static tw_status_t tw_verbs_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
static void tw_verbs_iface_close(tw_tl_iface_t *iface);

const tw_tl_ops_t tw_verbs_ops = {
    .name = "verbs",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_RNDV | TW_TL_CAP_PUT |
            TW_TL_CAP_GET | TW_TL_CAP_FLUSH | TW_TL_CAP_MEM_REG | TW_TL_CAP_OPT_IN,
    .cfg = &tw_verbs_cfg_table,
    .query = tw_verbs_query,
    .iface_open = tw_verbs_iface_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = tw_verbs_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_verbs_addr_pack_op,
    .addr_connect = tw_verbs_addr_connect,
    .ready = tw_verbs_ready,
    .quiesce = tw_tl_noop_quiesce,
    .reachable = tw_verbs_reachable,
    .am_short = tw_verbs_am_short,
    .am_zcopy = tw_verbs_am_zcopy,
    .put_zcopy = tw_verbs_put_zcopy,
    .get_zcopy = tw_verbs_get_zcopy,
    .flush = tw_verbs_flush,
    .rndv_get = tw_verbs_rndv_get,
    .progress = tw_verbs_progress,
    .poll = tw_tl_stub_poll,
    .mem_reg = tw_verbs_mem_reg_op,
    .mem_dereg = tw_verbs_mem_dereg_op,
};

/* ---- open, close ----------------------------------------------------------------- */

_Static_assert(TW_VERBS_SEG - TW_VERBS_FRAME_LEN >= TW_TL_SHORT_MIN,
               "verbs' am_short holds TW_TL_SHORT_MIN");

static tw_status_t tw_verbs_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    const tw_tl_attr_t attr = {
        .max_short = TW_VERBS_SEG - TW_VERBS_FRAME_LEN,
        .max_hdr = TW_VERBS_MAX_HDR,
        .max_zcopy = TW_VERBS_MAX_MSG,
    };
    tw_verbs_iface_t *vb;
    struct ibv_device **list = NULL;
    int n = 0;
    tw_status_t st;

    vb = tw_calloc(1, sizeof(*vb));
    if (vb == NULL) {
        return TW_ERR_NOMEM;
    }
    st = tw_tl_iface_init(&vb->super, &tw_verbs_ops, params, &attr);
    if (st != TW_OK) {
        tw_free(vb, sizeof(*vb));
        return st;
    }
    tw_cfg_set_defaults(&tw_verbs_cfg_table, &vb->cfg);
    if (tw_cfg_apply_env(&tw_verbs_cfg_table, &vb->cfg) != TW_OK) {
        st = TW_ERR_INVALID;
        goto err;
    }
    if (tw_siphash_key_parse(params->job_key, vb->key) != TW_OK) {
        tw_error("verbs", "no job key: the verbs transport needs twrun's TW_JOB_KEY");
        st = TW_ERR_INVALID;
        goto err;
    }
    vb->qkey = tw_verbs_qkey(vb->key);
    vb->threads = params->pe_params->thread;
    if (tw_verbs_rcache_init(&vb->rcache, tw_verbs_release_region, vb) != TW_OK) {
        st = TW_ERR_NOMEM;
        goto err;
    }
    vb->rcache_ok = true;
    vb->eps = tw_calloc((size_t)params->size, sizeof(*vb->eps));
    vb->down = tw_calloc((size_t)params->size, sizeof(*vb->down));
    if (vb->eps == NULL || vb->down == NULL) {
        st = TW_ERR_NOMEM;
        goto err;
    }
    list = ibv_get_device_list(&n);
    for (int i = 0; list != NULL && i < n && vb->ndev < TW_VERBS_MAX_DEVS; i++) {
        int port;
        if (!tw_cfg_list_has(vb->cfg.devices, ibv_get_device_name(list[i]), &port)) {
            continue;
        }
        tw_verbs_dev_t *dev = &vb->devs[vb->ndev];
        dev->index = vb->ndev;
        st = tw_verbs_dev_open(vb, dev, list[i], port, params);
        if (st != TW_OK) {
            goto err; /* (it left nothing open) */
        }
        vb->ndev++;
    }
    if (vb->ndev == 0) {
        tw_error("verbs", "no RDMA device to open (TW_VERBS_DEVICES='%s')", vb->cfg.devices);
        st = TW_ERR_UNSUPPORTED;
        goto err;
    }
    ibv_free_device_list(list);
    list = NULL;
    for (int p = 0; p < params->size; p++) {
        vb->eps[p].peer = p;
        vb->eps[p].dev = &vb->devs[0]; /* addr_connect picks the peer's */
        vb->eps[p].gen = 1;
    }
    /* The async event thread: port, device, QP and SRQ events. */
    st = tw_va_create(&vb->va);
    for (int d = 0; st == TW_OK && d < vb->ndev; d++) {
        tw_verbs_srq_arm(&vb->devs[d]);
        st = tw_va_add_device(vb->va, vb->devs[d].ctx, tw_verbs_async_event, &vb->devs[d]);
        vb->devs[d].watched = st == TW_OK;
    }
    if (st != TW_OK) {
        goto err;
    }
    vb->opened = true;
    *iface_p = &vb->super;
    return TW_OK;

err:
    if (list != NULL) {
        ibv_free_device_list(list);
    }
    tw_verbs_iface_close(&vb->super);
    return st;
}

/* Close steps run as the owner of each device's engine (tw_pe_try_call:
 * a thread in tw_progress may still drive it). */
enum { TW_VERBS_CLOSE_BYE, TW_VERBS_CLOSE_CANCEL };
typedef struct tw_verbs_close_step {
    tw_verbs_dev_t *dev;
    int step;
} tw_verbs_close_step_t;

static int tw_verbs_close_fn(void *arg)
{
    tw_verbs_close_step_t *c = arg;
    tw_verbs_dev_t *dev = c->dev;
    tw_verbs_iface_t *vb = dev->vb;

    for (int p = 0; p < vb->super.size; p++) {
        if (vb->eps[p].dev != dev) {
            continue;
        }
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (p == vb->super.rank) {
            continue;
        }
        if (c->step == TW_VERBS_CLOSE_CANCEL) {
            tw_verbs_fail_peer(ep, TW_ERR_CANCELED, "closing", false);
        } else if (ep->qp != NULL && ep->ready && !ep->failed) {
            tw_verbs_op_t *op = tw_verbs_op_new(0);
            if (op != NULL) {
                op->kind = TW_VERBS_OP_BYE;
                op->peer = p;
                atomic_fetch_add_explicit(&vb->queued, 1, memory_order_relaxed);
                tw_verbs_enqueue(dev, op);
            }
        }
    }
    return 1;
}

static void tw_verbs_close_all(tw_verbs_iface_t *vb, int step)
{
    for (int d = 0; d < vb->ndev; d++) {
        tw_verbs_close_step_t c = {.dev = &vb->devs[d], .step = step};
        tw_backoff_t b = TW_BACKOFF_INIT;
        while (tw_pe_try_call(vb->devs[d].pe, tw_verbs_close_fn, &c) == 0) {
            tw_backoff_wait(&b);
        }
    }
}

static void tw_verbs_iface_close(tw_tl_iface_t *iface)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;

    /* No more events handed to engines that are about to stop. */
    if (vb->va != NULL) {
        for (int d = 0; d < vb->ndev; d++) {
            if (vb->devs[d].watched) {
                (void)tw_va_remove_device(vb->va, vb->devs[d].ctx);
            }
        }
        tw_va_destroy(vb->va);
        vb->va = NULL;
    }

    for (int d = 0; d < vb->ndev; d++) {
        if (vb->devs[d].pe != NULL) {
            tw_pe_stop(vb->devs[d].pe); /* we drive them from here on */
        }
    }
    if (vb->opened) {
        /* Clean close: what was queued goes out, then BYE to every
         * connected peer that has not left, then wait for the sends. */
        uint64_t until = tw_time_ns() + TW_VERBS_CLOSE_NS;
        for (int d = 0; d < vb->ndev; d++) {
            (void)tw_pe_progress(vb->devs[d].pe);
        }
        tw_verbs_close_all(vb, TW_VERBS_CLOSE_BYE);
        for (;;) {
            bool busy = false;
            for (int d = 0; d < vb->ndev; d++) {
                (void)tw_pe_progress(vb->devs[d].pe);
            }
            for (int p = 0; p < iface->size && !busy; p++) {
                tw_verbs_ep_t *ep = &vb->eps[p];
                busy = !ep->failed && ep->qp != NULL &&
                       (ep->head != NULL || ep->sq.posted != ep->sq.done);
            }
            if (!busy || tw_time_ns() >= until) {
                break;
            }
            usleep(50);
        }
        /* Everything else is canceled: QPs to error, wait for the flushes. */
        vb->closing = true;
        tw_verbs_close_all(vb, TW_VERBS_CLOSE_CANCEL);
        until = tw_time_ns() + TW_VERBS_CLOSE_NS;
        for (;;) {
            bool busy = false;
            for (int d = 0; d < vb->ndev; d++) {
                (void)tw_pe_progress(vb->devs[d].pe);
                busy = busy || tw_verbs_dev_busy(&vb->devs[d]);
            }
            if (!busy) {
                break;
            }
            if (tw_time_ns() >= until) {
                tw_warn("verbs", "closing: work requests did not flush in time");
                break;
            }
            usleep(50);
        }
    }
    for (int d = 0; d < vb->ndev; d++) {
        if (vb->devs[d].pe != NULL) {
            tw_pe_destroy(vb->devs[d].pe);
            vb->devs[d].pe = NULL;
        }
    }
    for (int d = 0; d < vb->ndev; d++) {
        tw_verbs_dev_release_handles(&vb->devs[d]);
    }
    if (vb->rcache_ok) {
        tw_verbs_rcache_cleanup(&vb->rcache);
        vb->rcache_ok = false;
    }
    for (int d = 0; d < vb->ndev; d++) {
        tw_verbs_dev_close(&vb->devs[d]);
    }
    if (vb->eps != NULL) {
        tw_free(vb->eps, (size_t)iface->size * sizeof(*vb->eps));
    }
    if (vb->down != NULL) {
        tw_free(vb->down, (size_t)iface->size * sizeof(*vb->down));
    }
    tw_tl_iface_cleanup(iface);
    tw_free(vb, sizeof(*vb));
}
