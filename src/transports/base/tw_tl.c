/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Transport registry, shared stub operations and iface base helpers. */
#include "transports/base/tw_tl.h"

#include <stdio.h>
#include <string.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"

extern const tw_tl_ops_t tw_self_ops;
extern const tw_tl_ops_t tw_shm_ops;
extern const tw_tl_ops_t tw_tcp_ops;
extern const tw_tl_ops_t tw_verbs_ops;

/* Routing order: the first that reaches a peer carries its traffic. */
const tw_tl_ops_t *const tw_tl_all[] = {&tw_self_ops, &tw_shm_ops, &tw_verbs_ops, &tw_tcp_ops,
                                        NULL};

const tw_stat_desc_t tw_tl_stat_descs[TW_TL_STAT_COUNT] = {
    [TW_TL_STAT_TX_MSGS] = {"tx_msgs", TW_STAT_COUNTER},
    [TW_TL_STAT_TX_BYTES] = {"tx_bytes", TW_STAT_COUNTER},
    [TW_TL_STAT_RX_MSGS] = {"rx_msgs", TW_STAT_COUNTER},
    [TW_TL_STAT_RX_BYTES] = {"rx_bytes", TW_STAT_COUNTER},
    [TW_TL_STAT_AGAIN] = {"again", TW_STAT_COUNTER},
    [TW_TL_STAT_REFUSED] = {"refused", TW_STAT_COUNTER},
    [TW_TL_STAT_BAD_FRAMES] = {"bad_frames", TW_STAT_COUNTER},
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
                               size_t *key_len, void **handle)
{
    (void)iface, (void)addr, (void)len, (void)key, (void)key_len, (void)handle;
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

bool tw_tl_caps_consistent(const tw_tl_ops_t *ops)
{
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
        {TW_TL_CAP_PUT, ops->mem_reg == tw_tl_stub_mem_reg},
        {TW_TL_CAP_PUT, ops->mem_dereg == tw_tl_stub_mem_dereg},
    };
    if (ops->name == NULL || ops->query == NULL || ops->iface_open == NULL ||
        ops->iface_close == NULL || ops->reachable == NULL || ops->am_short == NULL ||
        ops->am_zcopy == NULL || ops->put_zcopy == NULL || ops->get_zcopy == NULL ||
        ops->flush == NULL || ops->progress == NULL || ops->poll == NULL || ops->rndv_get == NULL ||
        ops->addr_pack == NULL || ops->addr_connect == NULL || ops->ready == NULL ||
        ops->mem_reg == NULL || ops->mem_dereg == NULL) {
        return false;
    }
    for (size_t i = 0; i < TW_ARRAY_SIZE(slots); i++) {
        bool advertised = (ops->caps & slots[i].cap) != 0;
        if (advertised == slots[i].stub) {
            return false;
        }
    }
    return true;
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
    iface->pe = params->pe;
    iface->attr = *attr;
    iface->rank = params->rank;
    iface->size = params->size;
    iface->recv = params->recv;
    iface->recv_arg = params->recv_arg;
    iface->inline_am_ids = params->inline_am_ids;
    iface->recv_rndv = params->recv_rndv;
    iface->peer_down = params->peer_down;
    iface->peer_down_arg = params->peer_down_arg;
    return TW_OK;
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
    tw_stats_add(iface->stats, TW_TL_STAT_TX_BYTES, len);
    return TW_OK;
}

void tw_tl_iface_cleanup(tw_tl_iface_t *iface)
{
    tw_stats_destroy(iface->stats);
    iface->stats = NULL;
}
