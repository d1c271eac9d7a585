/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Devices of the verbs transport. Per device: a PD (and, where the
 * provider has them, a thread domain for the QPs); one registered pool of
 * 9 KiB buffers -- TW_VERBS_RX_DEPTH for the SRQ, 256 for sends that do
 * not fit inline, and a few small ones for the UD QP; one SRQ shared by
 * every RC QP of the device; one CQ with a completion channel; one UD QP
 * for connection setup and liveness; a progress engine of its own.
 *
 * tw_verbs_dev_open acquires them in that order through helpers, each of
 * which cleans up after itself; on failure it undoes what it got in
 * reverse order, so a device either opens whole or leaves nothing behind,
 * and tw_verbs_dev_close undoes a whole one with the same helpers.
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

tw_status_t tw_verbs_ud_post_recv(tw_verbs_dev_t *dev, uint32_t idx)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(dev->ud_pool + (size_t)idx * TW_VERBS_UD_BUF),
                          .length = TW_VERBS_UD_BUF,
                          .lkey = dev->pool_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = TW_VERBS_WR_UD(dev, idx, TW_VERBS_WR_UD_RECV),
                             .sg_list = &sge,
                             .num_sge = 1},
                       *bad;

    return ibv_post_recv(dev->ud, &wr, &bad) == 0 ? TW_OK : TW_ERR_TRANSPORT;
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

/* The UD QP (new, or just reset) to RTS, with every receive posted.
 * TW_ERR_TRANSPORT (logged). */
tw_status_t tw_verbs_ud_up(tw_verbs_dev_t *dev)
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
        return TW_ERR_TRANSPORT;
    }
    for (unsigned i = 0; i < TW_VERBS_UD_RX; i++) {
        if (tw_verbs_ud_post_recv(dev, i) != TW_OK) {
            tw_error("verbs", "%s: cannot post UD receives", dev->name);
            return TW_ERR_TRANSPORT;
        }
    }
    return TW_OK;
}

/* Choose the GID: TW_VERBS_GID_INDEX, else on Ethernet the first
 * IPv4-mapped RoCE v2 GID of slots 0-15 (then any RoCE v2, then any
 * non-zero); on InfiniBand slot 0. TW_ERR_TRANSPORT (logged). */
static tw_status_t tw_verbs_pick_gid(tw_verbs_dev_t *dev, const struct ibv_port_attr *pa)
{
    int want = dev->vb->cfg.gid_index, best = -1, rank_best = 0;
    int scan = TW_MIN(pa->gid_tbl_len, TW_VERBS_GID_SCAN);

    if (want >= 0) {
        if (want >= pa->gid_tbl_len || ibv_query_gid(dev->ctx, dev->port, want, &dev->gid) != 0) {
            tw_error("verbs", "%s: TW_VERBS_GID_INDEX=%d is not a GID of port %u", dev->name, want,
                     dev->port);
            return TW_ERR_TRANSPORT;
        }
        dev->gid_index = want;
        return TW_OK;
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
        return TW_ERR_TRANSPORT;
    }
    dev->gid_index = best;
    return TW_OK;
}

/* ---- open, close ----------------------------------------------------------- */

/* Open @p ibdev, take its first active port (or @p want_port) and choose
 * the GID; @p da gets the device's attributes. */
static tw_status_t tw_verbs_dev_port_open(tw_verbs_dev_t *dev, struct ibv_device *ibdev,
                                          int want_port, struct ibv_device_attr *da)
{
    struct ibv_port_attr pa;
    struct ibv_gid_entry e;
    tw_status_t st = TW_ERR_TRANSPORT;
    int rc;

    dev->ctx = ibv_open_device(ibdev);
    if (dev->ctx == NULL) {
        tw_error("verbs", "cannot open %s: %m", dev->name);
        return TW_ERR_TRANSPORT;
    }
    if ((rc = ibv_query_device(dev->ctx, da)) != 0) {
        tw_error("verbs", "%s: ibv_query_device failed: %s", dev->name, strerror(rc));
        goto err_ctx;
    }
    for (int p = want_port > 0 ? want_port : 1; p <= da->phys_port_cnt; p++) {
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
        goto err_ctx;
    }
    dev->link = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? TW_VERBS_LINK_ETH : TW_VERBS_LINK_IB;
    dev->lid = pa.lid;
    dev->mtu = pa.active_mtu;
    dev->max_msg = pa.max_msg_sz;
    st = tw_verbs_pick_gid(dev, &pa);
    if (st != TW_OK) {
        goto err_ctx;
    }
    dev->gid_type = ibv_query_gid_ex(dev->ctx, dev->port, (uint32_t)dev->gid_index, &e, 0) == 0
                        ? (int)e.gid_type
                        : -1;
    if (dev->link == TW_VERBS_LINK_IB && dev->lid == 0) {
        tw_error("verbs", "%s: InfiniBand port %u has no LID (no subnet manager?)", dev->name,
                 dev->port);
        st = TW_ERR_TRANSPORT;
        goto err_ctx;
    }
    return TW_OK;

err_ctx:
    (void)ibv_close_device(dev->ctx);
    dev->ctx = NULL;
    return st;
}

/* Queue depths: TW_VERBS_* as far as the device allows. */
static void tw_verbs_dev_limits(tw_verbs_dev_t *dev, const struct ibv_device_attr *da)
{
    tw_verbs_iface_t *vb = dev->vb;

    dev->sq_depth = (uint32_t)TW_MIN(vb->cfg.sq_depth, (uint64_t)da->max_qp_wr);
    dev->rd_atomic = (uint32_t)TW_MIN(16, TW_MIN(da->max_qp_rd_atom, da->max_qp_init_rd_atom));
    if (dev->rd_atomic == 0) {
        dev->rd_atomic = 1;
    }
    dev->max_inline = TW_VERBS_INLINE_WANT;
    dev->rx_depth = (unsigned)TW_MIN(vb->cfg.rx_depth, (uint64_t)da->max_srq_wr);
}

/* The PD and, where the provider has them (and TW_VERBS_TD), a thread
 * domain with a parent domain for the QPs: the engine owns them, so the
 * provider may drop its own locks. Without them, a plain PD, logged at
 * debug level (rxe has single-threaded CQs but no thread domains). */
static tw_status_t tw_verbs_dev_pd_open(tw_verbs_dev_t *dev)
{
    dev->pd = ibv_alloc_pd(dev->ctx);
    if (dev->pd == NULL) {
        tw_error("verbs", "%s: cannot allocate a PD: %m", dev->name);
        return TW_ERR_TRANSPORT;
    }
    dev->qp_pd = dev->pd;
    if (dev->vb->cfg.td) {
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
    return TW_OK;
}

static void tw_verbs_dev_pd_close(tw_verbs_dev_t *dev)
{
    if (dev->qp_pd != dev->pd) {
        (void)ibv_dealloc_pd(dev->qp_pd);
    }
    if (dev->td != NULL) {
        (void)ibv_dealloc_td(dev->td);
    }
    (void)ibv_dealloc_pd(dev->pd);
}

/* What tw_verbs_dev_pool_open allocated (any of it). */
static void tw_verbs_dev_pool_free(tw_verbs_dev_t *dev)
{
    if (dev->pool != NULL) {
        tw_free_aligned(dev->pool, 4096, dev->pool_len);
    }
    if (dev->rx_free != NULL) {
        tw_free(dev->rx_free, dev->rx_depth * sizeof(*dev->rx_free));
    }
    if (dev->tx_free != NULL) {
        tw_free(dev->tx_free, TW_VERBS_TX_BUFS * sizeof(*dev->tx_free));
    }
}

/* The buffers, registered: receives, sends, then UD receives and sends;
 * every one free. */
static tw_status_t tw_verbs_dev_pool_open(tw_verbs_dev_t *dev)
{
    tw_status_t st = TW_ERR_NOMEM;

    dev->pool_len = (size_t)(dev->rx_depth + TW_VERBS_TX_BUFS) * TW_VERBS_SEG +
                    (size_t)(TW_VERBS_UD_RX + TW_VERBS_UD_TX) * TW_VERBS_UD_BUF;
    dev->pool = tw_malloc_aligned(4096, dev->pool_len);
    dev->rx_free = tw_calloc(dev->rx_depth, sizeof(*dev->rx_free));
    dev->tx_free = tw_calloc(TW_VERBS_TX_BUFS, sizeof(*dev->tx_free));
    if (dev->pool == NULL || dev->rx_free == NULL || dev->tx_free == NULL) {
        goto err_mem;
    }
    dev->pool_mr = ibv_reg_mr(dev->pd, dev->pool, dev->pool_len, IBV_ACCESS_LOCAL_WRITE);
    if (dev->pool_mr == NULL) {
        tw_error("verbs", "%s: cannot register %zu bytes of buffers: %m", dev->name, dev->pool_len);
        st = TW_ERR_TRANSPORT;
        goto err_mem;
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
    return TW_OK;

err_mem:
    tw_verbs_dev_pool_free(dev);
    return st;
}

static void tw_verbs_dev_pool_close(tw_verbs_dev_t *dev)
{
    (void)ibv_dereg_mr(dev->pool_mr);
    tw_verbs_dev_pool_free(dev);
}

/* CQ entries: one CQ holds every completion the device can owe at once:
 * the receives, the UD queues and each peer's send credits. Where the
 * device's CQ cannot, the per-peer credits shrink to fit (a full CQ
 * overruns: CQ_ERR, and the device is lost). */
static int tw_verbs_dev_cq_size(tw_verbs_dev_t *dev, const struct ibv_device_attr *da, int size)
{
    uint64_t fixed = (uint64_t)dev->rx_depth + TW_VERBS_UD_RX + TW_VERBS_UD_TX;
    uint64_t peers = size > 1 ? (uint64_t)size - 1 : 1;

    if (fixed + (uint64_t)dev->sq_depth * peers > (uint64_t)da->max_cqe) {
        uint64_t room = (uint64_t)da->max_cqe > fixed ? (uint64_t)da->max_cqe - fixed : 0;
        uint32_t sq = (uint32_t)TW_MAX(room / peers, 1);
        if (room / peers == 0) {
            tw_warn("verbs",
                    "%s: its CQ (%d entries) cannot hold one send per peer besides %llu "
                    "receives: lower TW_VERBS_RX_DEPTH for %llu peers",
                    dev->name, da->max_cqe, (unsigned long long)fixed, (unsigned long long)peers);
        } else {
            tw_info("verbs",
                    "%s: %u sends in flight per peer (not %u): its CQ holds %d entries for "
                    "%llu peers",
                    dev->name, sq, dev->sq_depth, da->max_cqe, (unsigned long long)peers);
        }
        dev->sq_depth = sq;
    }
    return (int)TW_MIN((uint64_t)da->max_cqe, fixed + (uint64_t)dev->sq_depth * peers);
}

/* The completion channel (non-blocking: the engine sleeps on its fd) and
 * the CQ, single-threaded where the provider has that (and TW_VERBS_TD),
 * else a plain one (logged at debug level). */
static tw_status_t tw_verbs_dev_cq_open(tw_verbs_dev_t *dev, const struct ibv_device_attr *da,
                                        int size)
{
    tw_verbs_iface_t *vb = dev->vb;

    dev->chan = ibv_create_comp_channel(dev->ctx);
    if (dev->chan == NULL) {
        tw_error("verbs", "%s: cannot create a completion channel: %m", dev->name);
        return TW_ERR_TRANSPORT;
    }
    (void)fcntl(dev->chan->fd, F_SETFL, fcntl(dev->chan->fd, F_GETFL) | O_NONBLOCK);
    int cqe = tw_verbs_dev_cq_size(dev, da, size);
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
        goto err_chan;
    }
    return TW_OK;

err_chan:
    (void)ibv_destroy_comp_channel(dev->chan);
    dev->chan = NULL;
    return TW_ERR_TRANSPORT;
}

static void tw_verbs_dev_cq_close(tw_verbs_dev_t *dev)
{
    (void)ibv_destroy_cq(dev->cq);
    (void)ibv_destroy_comp_channel(dev->chan);
}

/* The SRQ, full. */
static tw_status_t tw_verbs_dev_srq_open(tw_verbs_dev_t *dev)
{
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = dev->rx_depth, .max_sge = 1}};

    dev->srq = ibv_create_srq(dev->pd, &sa);
    if (dev->srq == NULL) {
        tw_error("verbs", "%s: cannot create an SRQ of %u: %m", dev->name, dev->rx_depth);
        return TW_ERR_TRANSPORT;
    }
    tw_verbs_rx_refill(dev, true);
    return TW_OK;
}

/* The UD QP for connection setup, up. */
static tw_status_t tw_verbs_dev_ud_open(tw_verbs_dev_t *dev)
{
    struct ibv_qp_init_attr ia = {.send_cq = dev->cq,
                                  .recv_cq = dev->cq,
                                  .qp_type = IBV_QPT_UD,
                                  .sq_sig_all = 1,
                                  .cap = {.max_send_wr = TW_VERBS_UD_TX,
                                          .max_recv_wr = TW_VERBS_UD_RX,
                                          .max_send_sge = 1,
                                          .max_recv_sge = 1}};
    tw_status_t st;

    dev->ud = ibv_create_qp(dev->qp_pd, &ia);
    if (dev->ud == NULL) {
        tw_error("verbs", "%s: cannot create the UD QP: %m", dev->name);
        return TW_ERR_TRANSPORT;
    }
    st = tw_verbs_ud_up(dev);
    if (st != TW_OK) {
        goto err_qp;
    }
    return TW_OK;

err_qp:
    (void)ibv_destroy_qp(dev->ud);
    dev->ud = NULL;
    return st;
}

/* The device's engine (not started: tw_verbs_ready does that), woken by
 * the completion channel and by the timerfd of connection setup and
 * liveness (tw_verbs_timer_update). */
static tw_status_t tw_verbs_dev_engine_open(tw_verbs_dev_t *dev, const tw_tl_params_t *params)
{
    tw_pe_params_t p = *params->pe_params;
    char name[80];
    tw_status_t st;

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
        st = TW_ERR_TRANSPORT;
        goto err_pe;
    }
    st = tw_pe_add(dev->pe, tw_verbs_dev_progress, dev, dev->chan->fd);
    if (st == TW_OK) {
        st = tw_pe_watch(dev->pe, dev->timer_fd);
    }
    if (st != TW_OK) {
        goto err_timer;
    }
    return TW_OK;

err_timer:
    close(dev->timer_fd);
    dev->timer_fd = -1;
err_pe:
    tw_pe_destroy(dev->pe);
    dev->pe = NULL;
    return st;
}

/* Open device @p ibdev as @p dev (whole, or nothing is left of it). */
tw_status_t tw_verbs_dev_open(tw_verbs_iface_t *vb, tw_verbs_dev_t *dev, struct ibv_device *ibdev,
                              int want_port, const tw_tl_params_t *params)
{
    struct ibv_device_attr da;
    tw_status_t st;

    dev->vb = vb;
    dev->timer_fd = -1;
    dev->handles.next = dev->handles.prev = &dev->handles;
    dev->rsend_free = UINT32_MAX;
    snprintf(dev->name, sizeof(dev->name), "%s", ibv_get_device_name(ibdev));
    st = tw_verbs_dev_port_open(dev, ibdev, want_port, &da);
    if (st != TW_OK) {
        return st;
    }
    tw_verbs_dev_limits(dev, &da);
    st = tw_verbs_dev_pd_open(dev);
    if (st != TW_OK) {
        goto err_ctx;
    }
    st = tw_verbs_dev_pool_open(dev);
    if (st != TW_OK) {
        goto err_pd;
    }
    st = tw_verbs_qpn_init(dev, params->size);
    if (st != TW_OK) {
        goto err_pool;
    }
    st = tw_verbs_dev_cq_open(dev, &da, params->size);
    if (st != TW_OK) {
        goto err_qpn;
    }
    st = tw_verbs_dev_srq_open(dev);
    if (st != TW_OK) {
        goto err_cq;
    }
    st = tw_verbs_dev_ud_open(dev);
    if (st != TW_OK) {
        goto err_srq;
    }
    st = tw_verbs_dev_engine_open(dev, params);
    if (st != TW_OK) {
        goto err_ud;
    }
    tw_debug("verbs",
             "%s port %u: %s, MTU %d, LID %u, GID index %d, thread domain %s, CQ %s, "
             "max inline %u",
             dev->name, dev->port, dev->link == TW_VERBS_LINK_ETH ? "RoCE" : "InfiniBand",
             128 << dev->mtu, dev->lid, dev->gid_index, dev->td != NULL ? "yes" : "no",
             dev->cqx != NULL ? "single-threaded" : "plain", dev->max_inline);
    return TW_OK;

err_ud:
    (void)ibv_destroy_qp(dev->ud);
err_srq:
    (void)ibv_destroy_srq(dev->srq);
err_cq:
    tw_verbs_dev_cq_close(dev);
err_qpn:
    tw_verbs_qpn_cleanup(dev);
err_pool:
    tw_verbs_dev_pool_close(dev);
err_pd:
    tw_verbs_dev_pd_close(dev);
err_ctx:
    (void)ibv_close_device(dev->ctx);
    return st;
}

/* Work requests of @p dev still to complete (QPs draining at close). */
bool tw_verbs_dev_busy(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;

    for (int p = 0; p < vb->super.size; p++) {
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

/* Undo tw_verbs_dev_open, with the QPs and address handles of the
 * device's peers: its engine is gone (iface_close destroyed it), and so
 * are the registrations on its PD (tw_verbs_dev_release_handles, the
 * cache). */
void tw_verbs_dev_close(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;

    for (int p = 0; p < vb->super.size; p++) {
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
    (void)ibv_destroy_qp(dev->ud);
    (void)ibv_destroy_srq(dev->srq);
    tw_verbs_dev_cq_close(dev);
    tw_verbs_qpn_cleanup(dev);
    tw_verbs_dev_pool_close(dev);
    tw_verbs_dev_pd_close(dev);
    (void)ibv_close_device(dev->ctx);
    close(dev->timer_fd);
}
