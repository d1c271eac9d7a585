/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Devices of the verbs transport. Per device: a PD (and, where the
 * provider has them, a thread domain for the QPs); one registered pool of
 * 9 KiB buffers -- TW_VERBS_RX_DEPTH for the SRQ, 256 for sends that do
 * not fit inline, and a few small ones for the UD QP; one SRQ shared by
 * every RC QP of the device; one CQ with a completion channel; one UD QP
 * for connection setup and liveness; a progress engine of its own.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "transports/verbs/tw_verbs_int.h"

/* ---- buffers, SRQ ------------------------------------------------------- */

void tw_verbs_rx_refill(tw_verbs_dev_t *dev, bool all)
{
    struct ibv_recv_wr wr[32], *bad = NULL;
    struct ibv_sge sge[32];

    if (dev->nrx_free == 0 || (!all && dev->nrx_free < dev->rx_depth / 4)) {
        return;
    }
    while (dev->nrx_free > 0) {
        unsigned n = TW_MIN(dev->nrx_free, 32u);
        for (unsigned k = 0; k < n; k++) {
            uint32_t idx = dev->rx_free[dev->nrx_free - 1 - k];
            sge[k] = (struct ibv_sge){.addr = (uintptr_t)tw_verbs_buf(dev, idx),
                                      .length = TW_VERBS_SEG,
                                      .lkey = dev->pool_mr->lkey};
            wr[k] = (struct ibv_recv_wr){.wr_id = TW_VERBS_WR(idx, TW_VERBS_WR_RECV),
                                         .sg_list = &sge[k],
                                         .num_sge = 1,
                                         .next = k + 1 < n ? &wr[k + 1] : NULL};
        }
        int rc = ibv_post_srq_recv(dev->srq, wr, &bad);
        unsigned posted = rc == 0 ? n : (unsigned)(bad - wr);
        dev->nrx_free -= posted;
        dev->rx_posted += posted;
        if (rc != 0) {
            tw_error("verbs", "%s: cannot post receives to the SRQ: %s", dev->name, strerror(rc));
            return;
        }
    }
}

bool tw_verbs_ud_post_recv(tw_verbs_dev_t *dev, uint32_t idx)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(dev->ud_pool + (size_t)idx * TW_VERBS_UD_BUF),
                          .length = TW_VERBS_UD_BUF,
                          .lkey = dev->pool_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = TW_VERBS_WR_UD(dev, idx, TW_VERBS_WR_UD_RECV),
                             .sg_list = &sge,
                             .num_sge = 1},
                       *bad;

    return ibv_post_recv(dev->ud, &wr, &bad) == 0;
}

/* Arm the SRQ's limit event: a quarter of the receives left. Engine owner
 * (or before the engine runs). */
void tw_verbs_srq_arm(tw_verbs_dev_t *dev)
{
    struct ibv_srq_attr a = {.srq_limit = TW_MAX(dev->rx_depth / 4, 1u)};
    int rc = ibv_modify_srq(dev->srq, &a, IBV_SRQ_LIMIT);

    if (rc != 0) {
        tw_debug("verbs", "%s: no SRQ limit event (ibv_modify_srq: %s): refills by count only",
                 dev->name, strerror(rc));
    }
}

/* SRQ_LIMIT_REACHED: receives ran low between two refills (a burst faster
 * than the engine's passes): refill now and re-arm (the event fires once
 * per arming). Thread: the device's engine. */
void tw_verbs_srq_low(tw_verbs_dev_t *dev)
{
    tw_debug("verbs", "%s: SRQ limit reached: refilling", dev->name);
    tw_verbs_rx_refill(dev, true);
    tw_verbs_srq_arm(dev);
}

/* ---- the UD QP, port and GID ----------------------------------------------- */

/* The UD QP (new, or just reset) to RTS, with every receive posted. */
bool tw_verbs_ud_up(tw_verbs_dev_t *dev)
{
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = dev->port, .qkey = dev->vb->qkey};
    int rc =
        ibv_modify_qp(dev->ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);

    if (rc == 0) {
        a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
        rc = ibv_modify_qp(dev->ud, &a, IBV_QP_STATE);
    }
    if (rc == 0) {
        a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
        rc = ibv_modify_qp(dev->ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }
    if (rc != 0) {
        tw_error("verbs", "%s: cannot bring the UD QP up: %s", dev->name, strerror(rc));
        return false;
    }
    for (unsigned i = 0; i < TW_VERBS_UD_RX; i++) {
        if (!tw_verbs_ud_post_recv(dev, i)) {
            tw_error("verbs", "%s: cannot post UD receives", dev->name);
            return false;
        }
    }
    return true;
}

/* Choose the GID: TW_VERBS_GID_INDEX, else on Ethernet the first
 * IPv4-mapped RoCE v2 GID of slots 0-15 (then any RoCE v2, then any
 * non-zero); on InfiniBand slot 0. */
static bool tw_verbs_pick_gid(tw_verbs_dev_t *dev, const struct ibv_port_attr *pa)
{
    int want = dev->vb->cfg.gid_index, best = -1, rank_best = 0;
    int scan = TW_MIN(pa->gid_tbl_len, TW_VERBS_GID_SCAN);

    if (want >= 0) {
        if (want >= pa->gid_tbl_len || ibv_query_gid(dev->ctx, dev->port, want, &dev->gid) != 0) {
            tw_error("verbs", "%s: TW_VERBS_GID_INDEX=%d is not a GID of port %u", dev->name, want,
                     dev->port);
            return false;
        }
        dev->gid_index = want;
        return true;
    }
    for (int i = 0; i < scan; i++) {
        struct ibv_gid_entry e;
        static const uint8_t v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        int score;
        bool zero = true;

        if (ibv_query_gid_ex(dev->ctx, dev->port, (uint32_t)i, &e, 0) != 0) {
            continue;
        }
        for (int k = 0; k < 16; k++) {
            zero = zero && e.gid.raw[k] == 0;
        }
        if (zero) {
            continue;
        }
        if (dev->link == TW_VERBS_LINK_IB) {
            score = 1;
        } else if (e.gid_type == IBV_GID_TYPE_ROCE_V2) {
            score = memcmp(e.gid.raw, v4map, 12) == 0 ? 3 : 2;
        } else {
            score = 1;
        }
        if (score > rank_best) {
            rank_best = score;
            best = i;
            dev->gid = e.gid;
        }
        if (score == 3 || (dev->link == TW_VERBS_LINK_IB && score == 1)) {
            break;
        }
    }
    if (best < 0) {
        tw_error("verbs", "%s: port %u has no usable GID among indexes 0-%d", dev->name, dev->port,
                 scan - 1);
        return false;
    }
    dev->gid_index = best;
    return true;
}

/* ---- open, close ----------------------------------------------------------- */

tw_status_t tw_verbs_dev_open(tw_verbs_iface_t *vb, tw_verbs_dev_t *dev, struct ibv_device *ibdev,
                              int want_port, const tw_tl_params_t *params)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    tw_status_t st;
    int rc;

    dev->vb = vb;
    dev->timer_fd = -1;
    dev->handles.next = dev->handles.prev = &dev->handles;
    dev->rsend_free = UINT32_MAX;
    snprintf(dev->name, sizeof(dev->name), "%s", ibv_get_device_name(ibdev));
    dev->ctx = ibv_open_device(ibdev);
    if (dev->ctx == NULL) {
        tw_error("verbs", "cannot open %s: %m", dev->name);
        return TW_ERR_TRANSPORT;
    }
    if ((rc = ibv_query_device(dev->ctx, &da)) != 0) {
        tw_error("verbs", "%s: ibv_query_device failed: %s", dev->name, strerror(rc));
        return TW_ERR_TRANSPORT;
    }
    for (int p = want_port > 0 ? want_port : 1; p <= da.phys_port_cnt; p++) {
        if (ibv_query_port(dev->ctx, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
            dev->port = (uint8_t)p;
            break;
        }
        if (want_port > 0) {
            break;
        }
    }
    if (dev->port == 0) {
        tw_error("verbs", "%s: no active port%s", dev->name, want_port > 0 ? " (as named)" : "");
        return TW_ERR_TRANSPORT;
    }
    dev->link = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? TW_VERBS_LINK_ETH : TW_VERBS_LINK_IB;
    dev->lid = pa.lid;
    dev->mtu = pa.active_mtu;
    dev->max_msg = pa.max_msg_sz;
    if (!tw_verbs_pick_gid(dev, &pa)) {
        return TW_ERR_TRANSPORT;
    }
    {
        struct ibv_gid_entry e;
        dev->gid_type = ibv_query_gid_ex(dev->ctx, dev->port, (uint32_t)dev->gid_index, &e, 0) == 0
                            ? (int)e.gid_type
                            : -1;
    }
    if (dev->link == TW_VERBS_LINK_IB && dev->lid == 0) {
        tw_error("verbs", "%s: InfiniBand port %u has no LID (no subnet manager?)", dev->name,
                 dev->port);
        return TW_ERR_TRANSPORT;
    }
    dev->sq_depth = (uint32_t)TW_MIN(vb->cfg.sq_depth, (uint64_t)da.max_qp_wr);
    dev->rd_atomic = (uint32_t)TW_MIN(16, TW_MIN(da.max_qp_rd_atom, da.max_qp_init_rd_atom));
    if (dev->rd_atomic == 0) {
        dev->rd_atomic = 1;
    }
    dev->max_inline = TW_VERBS_INLINE_WANT;
    dev->rx_depth = (unsigned)TW_MIN(vb->cfg.rx_depth, (uint64_t)da.max_srq_wr);
    dev->pd = ibv_alloc_pd(dev->ctx);
    if (dev->pd == NULL) {
        tw_error("verbs", "%s: cannot allocate a PD: %m", dev->name);
        return TW_ERR_TRANSPORT;
    }
    dev->qp_pd = dev->pd;
    if (vb->cfg.td) {
        struct ibv_td_init_attr ta = {0};
        dev->td = ibv_alloc_td(dev->ctx, &ta);
        if (dev->td != NULL) {
            struct ibv_parent_domain_init_attr pda = {.pd = dev->pd, .td = dev->td};
            struct ibv_pd *pdom = ibv_alloc_parent_domain(dev->ctx, &pda);
            if (pdom != NULL) {
                dev->qp_pd = pdom;
            } else {
                tw_debug("verbs", "%s: no parent domain (%m): QPs without a thread domain",
                         dev->name);
                (void)ibv_dealloc_td(dev->td);
                dev->td = NULL;
            }
        } else {
            tw_debug("verbs", "%s: no thread domains (%m): the provider keeps its QP locks",
                     dev->name);
        }
    }
    dev->chan = ibv_create_comp_channel(dev->ctx);
    if (dev->chan == NULL) {
        tw_error("verbs", "%s: cannot create a completion channel: %m", dev->name);
        return TW_ERR_TRANSPORT;
    }
    (void)fcntl(dev->chan->fd, F_SETFL, fcntl(dev->chan->fd, F_GETFL) | O_NONBLOCK);
    {
        /* One CQ holds every completion the device can owe at once: the
         * receives, the UD queues and each peer's send credits. Where the
         * device's CQ cannot, the per-peer credits shrink to fit (a full
         * CQ overruns: CQ_ERR, and the device is lost). */
        uint64_t fixed = (uint64_t)dev->rx_depth + TW_VERBS_UD_RX + TW_VERBS_UD_TX;
        uint64_t peers = params->size > 1 ? (uint64_t)params->size - 1 : 1;
        if (fixed + (uint64_t)dev->sq_depth * peers > (uint64_t)da.max_cqe) {
            uint64_t room = (uint64_t)da.max_cqe > fixed ? (uint64_t)da.max_cqe - fixed : 0;
            uint32_t sq = (uint32_t)TW_MAX(room / peers, 1);
            if (room / peers == 0) {
                tw_warn("verbs",
                        "%s: its CQ (%d entries) cannot hold one send per peer besides %llu "
                        "receives: lower TW_VERBS_RX_DEPTH for %llu peers",
                        dev->name, da.max_cqe, (unsigned long long)fixed,
                        (unsigned long long)peers);
            } else {
                tw_info("verbs",
                        "%s: %u sends in flight per peer (not %u): its CQ holds %d entries for "
                        "%llu peers",
                        dev->name, sq, dev->sq_depth, da.max_cqe, (unsigned long long)peers);
            }
            dev->sq_depth = sq;
        }
        int cqe = (int)TW_MIN((uint64_t)da.max_cqe, fixed + (uint64_t)dev->sq_depth * peers);
        struct ibv_cq_init_attr_ex ca = {.cqe = (uint32_t)cqe,
                                         .cq_context = dev,
                                         .channel = dev->chan,
                                         .comp_vector = 0,
                                         .wc_flags = IBV_WC_STANDARD_FLAGS,
                                         .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
                                         .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED};
        if (dev->td != NULL) {
            ca.comp_mask |= IBV_CQ_INIT_ATTR_MASK_PD;
            ca.parent_domain = dev->qp_pd;
        }
        dev->cqx = vb->cfg.td ? ibv_create_cq_ex(dev->ctx, &ca) : NULL;
        if (dev->cqx != NULL) {
            dev->cq = ibv_cq_ex_to_cq(dev->cqx);
        } else {
            if (vb->cfg.td) {
                tw_debug("verbs", "%s: no single-threaded CQ (%m): a plain one", dev->name);
            }
            dev->cq = ibv_create_cq(dev->ctx, cqe, dev, dev->chan, 0);
        }
        if (dev->cq == NULL) {
            tw_error("verbs", "%s: cannot create a CQ of %d entries: %m", dev->name, cqe);
            return TW_ERR_TRANSPORT;
        }
    }
    {
        struct ibv_srq_init_attr sa = {.attr = {.max_wr = dev->rx_depth, .max_sge = 1}};
        dev->srq = ibv_create_srq(dev->pd, &sa);
        if (dev->srq == NULL) {
            tw_error("verbs", "%s: cannot create an SRQ of %u: %m", dev->name, dev->rx_depth);
            return TW_ERR_TRANSPORT;
        }
    }
    /* Buffers: receives, sends, then UD receives and sends. */
    dev->pool_len = (size_t)(dev->rx_depth + TW_VERBS_TX_BUFS) * TW_VERBS_SEG +
                    (size_t)(TW_VERBS_UD_RX + TW_VERBS_UD_TX) * TW_VERBS_UD_BUF;
    dev->pool = tw_malloc_aligned(4096, dev->pool_len);
    dev->rx_free = tw_calloc(dev->rx_depth, sizeof(*dev->rx_free));
    dev->tx_free = tw_calloc(TW_VERBS_TX_BUFS, sizeof(*dev->tx_free));
    dev->qpn_cap = 16;
    while (dev->qpn_cap < 2u * (unsigned)params->size) {
        dev->qpn_cap *= 2;
    }
    dev->qpn_keys = tw_calloc(dev->qpn_cap, sizeof(*dev->qpn_keys));
    dev->qpn_vals = tw_calloc(dev->qpn_cap, sizeof(*dev->qpn_vals));
    if (dev->pool == NULL || dev->rx_free == NULL || dev->tx_free == NULL ||
        dev->qpn_keys == NULL || dev->qpn_vals == NULL) {
        return TW_ERR_NOMEM;
    }
    for (unsigned i = 0; i < dev->qpn_cap; i++) {
        dev->qpn_vals[i] = -1;
    }
    dev->pool_mr = ibv_reg_mr(dev->pd, dev->pool, dev->pool_len, IBV_ACCESS_LOCAL_WRITE);
    if (dev->pool_mr == NULL) {
        tw_error("verbs", "%s: cannot register %zu bytes of buffers: %m", dev->name, dev->pool_len);
        return TW_ERR_TRANSPORT;
    }
    dev->ud_pool = dev->pool + (size_t)(dev->rx_depth + TW_VERBS_TX_BUFS) * TW_VERBS_SEG;
    for (unsigned i = 0; i < dev->rx_depth; i++) {
        dev->rx_free[dev->nrx_free++] = dev->rx_depth - 1 - i;
    }
    for (unsigned i = 0; i < TW_VERBS_TX_BUFS; i++) {
        dev->tx_free[dev->ntx_free++] = dev->rx_depth + TW_VERBS_TX_BUFS - 1 - i;
    }
    for (unsigned i = 0; i < TW_VERBS_UD_TX; i++) {
        dev->ud_tx_free[dev->nud_tx_free++] = i;
    }
    tw_verbs_rx_refill(dev, true);
    /* The UD QP for connection setup. */
    {
        struct ibv_qp_init_attr ia = {.send_cq = dev->cq,
                                      .recv_cq = dev->cq,
                                      .qp_type = IBV_QPT_UD,
                                      .sq_sig_all = 1,
                                      .cap = {.max_send_wr = TW_VERBS_UD_TX,
                                              .max_recv_wr = TW_VERBS_UD_RX,
                                              .max_send_sge = 1,
                                              .max_recv_sge = 1}};
        dev->ud = ibv_create_qp(dev->qp_pd, &ia);
        if (dev->ud == NULL) {
            tw_error("verbs", "%s: cannot create the UD QP: %m", dev->name);
            return TW_ERR_TRANSPORT;
        }
        if (!tw_verbs_ud_up(dev)) {
            return TW_ERR_TRANSPORT;
        }
    }
    /* Its engine. */
    {
        tw_pe_params_t p = *params->pe_params;
        char name[80];
        snprintf(name, sizeof(name), "hca:%s", dev->name);
        p.name = name;
        p.bind_package = -1;
        st = tw_pe_create(&p, &dev->pe);
        if (st != TW_OK) {
            dev->pe = NULL;
            return st;
        }
        dev->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (dev->timer_fd < 0) {
            tw_error("verbs", "cannot make a timer: %m");
            return TW_ERR_TRANSPORT;
        }
        st = tw_pe_add(dev->pe, tw_verbs_dev_progress, dev, dev->chan->fd);
        if (st == TW_OK) {
            st = tw_pe_watch(dev->pe, dev->timer_fd);
        }
        if (st != TW_OK) {
            return st;
        }
    }
    tw_debug("verbs",
             "%s port %u: %s, MTU %d, LID %u, GID index %d, thread domain %s, CQ %s, "
             "max inline %u",
             dev->name, dev->port, dev->link == TW_VERBS_LINK_ETH ? "RoCE" : "InfiniBand",
             128 << dev->mtu, dev->lid, dev->gid_index, dev->td != NULL ? "yes" : "no",
             dev->cqx != NULL ? "single-threaded" : "plain", dev->max_inline);
    return TW_OK;
}

/* Work requests of @p dev still to complete (QPs draining at close). */
bool tw_verbs_dev_busy(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;

    for (int p = 0; vb->eps != NULL && p < vb->super.size; p++) {
        if (vb->eps[p].dev != dev) {
            continue;
        }
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (ep->qp != NULL && ep->sq.posted != ep->sq.done) {
            return true;
        }
    }
    return false;
}

void tw_verbs_dev_close(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;

    if (vb == NULL) {
        return; /* never opened */
    }
    for (int p = 0; vb->eps != NULL && p < vb->super.size; p++) {
        if (vb->eps[p].dev != dev) {
            continue;
        }
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (ep->dev != dev) {
            continue;
        }
        if (ep->qp != NULL) {
            (void)ibv_destroy_qp(ep->qp);
        }
        if (ep->ah != NULL) {
            (void)ibv_destroy_ah(ep->ah);
        }
    }
    if (dev->rsends != NULL) {
        tw_free(dev->rsends, dev->nrsends * sizeof(*dev->rsends));
    }
    if (dev->ud != NULL) {
        (void)ibv_destroy_qp(dev->ud);
    }
    if (dev->srq != NULL) {
        (void)ibv_destroy_srq(dev->srq);
    }
    if (dev->cq != NULL) {
        (void)ibv_destroy_cq(dev->cq);
    }
    if (dev->chan != NULL) {
        (void)ibv_destroy_comp_channel(dev->chan);
    }
    if (dev->pool_mr != NULL) {
        (void)ibv_dereg_mr(dev->pool_mr);
    }
    if (dev->pool != NULL) {
        tw_free_aligned(dev->pool, 4096, dev->pool_len);
    }
    if (dev->rx_free != NULL) {
        tw_free(dev->rx_free, dev->rx_depth * sizeof(*dev->rx_free));
    }
    if (dev->tx_free != NULL) {
        tw_free(dev->tx_free, TW_VERBS_TX_BUFS * sizeof(*dev->tx_free));
    }
    if (dev->qpn_keys != NULL) {
        tw_free(dev->qpn_keys, dev->qpn_cap * sizeof(*dev->qpn_keys));
    }
    if (dev->qpn_vals != NULL) {
        tw_free(dev->qpn_vals, dev->qpn_cap * sizeof(*dev->qpn_vals));
    }
    if (dev->qp_pd != NULL && dev->qp_pd != dev->pd) {
        (void)ibv_dealloc_pd(dev->qp_pd);
    }
    if (dev->td != NULL) {
        (void)ibv_dealloc_td(dev->td);
    }
    if (dev->pd != NULL) {
        (void)ibv_dealloc_pd(dev->pd);
    }
    if (dev->ctx != NULL) {
        (void)ibv_close_device(dev->ctx);
    }
    if (dev->timer_fd >= 0) {
        close(dev->timer_fd);
    }
}
