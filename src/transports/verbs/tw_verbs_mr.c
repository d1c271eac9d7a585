/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Memory registration on the verbs transport: regions registered on every
 * device for one-sided operations (mem_reg, tw_verbs_mem_reg), kept in
 * the registration cache (tw_verbs_rcache.c), and the lkey or rkey an
 * operation's own buffer needs -- a cached region's, or a registration
 * made for that operation and dropped when it completes.
 */
#include <infiniband/verbs.h>
#include <string.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "transports/verbs/tw_verbs_int.h"

/* An lkey (or rkey, for remote access) for [addr, addr + len): a cached
 * registration, or one made for this operation. TW_ERR_TRANSPORT
 * (logged). Thread: engine. */
tw_status_t tw_verbs_reg(tw_verbs_dev_t *dev, const void *addr, size_t len, int access,
                         struct ibv_mr **mr_p, tw_verbs_region_t **region_p, uint32_t *lkey_p,
                         uint32_t *rkey_p)
{
    tw_verbs_region_t *r = tw_verbs_rcache_lookup(&dev->vb->rcache, addr, len);

    if (r != NULL) {
        *region_p = r;
        *lkey_p = r->lkey[dev->index];
        *rkey_p = r->rkey[dev->index];
        return TW_OK;
    }
    struct ibv_mr *mr = ibv_reg_mr(dev->pd, (void *)addr, len, access);
    if (mr == NULL) {
        tw_error("verbs", "%s: cannot register %zu bytes at %p: %m", dev->name, len, addr);
        return TW_ERR_TRANSPORT;
    }
    *mr_p = mr;
    *lkey_p = mr->lkey;
    *rkey_p = mr->rkey;
    return TW_OK;
}

/* The cache's release callback: a region's MRs on every device, and the
 * region. Thread: any. */
void tw_verbs_release_region(void *arg, tw_verbs_region_t *r)
{
    (void)arg;
    for (int d = 0; d < TW_VERBS_RCACHE_DEVS; d++) {
        if (r->mr[d] != NULL) {
            (void)ibv_dereg_mr(r->mr[d]);
        }
    }
    tw_free(r, sizeof(tw_verbs_mem_t));
}

tw_status_t tw_verbs_mem_reg(tw_tl_iface_t *iface, void *addr, size_t len, void *rkey,
                             size_t *rkey_len_p, tw_verbs_mem_t **mem_p)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_verbs_mem_t *m;
    uint32_t rkeys[TW_VERBS_MAX_DEVS];

    if (iface == NULL || iface->ops != &tw_verbs_ops || addr == NULL || len == 0 || rkey == NULL ||
        rkey_len_p == NULL || mem_p == NULL) {
        return TW_ERR_INVALID;
    }
    m = tw_calloc(1, sizeof(*m));
    if (m == NULL) {
        return TW_ERR_NOMEM;
    }
    m->region.start = (uintptr_t)addr;
    m->region.end = (uintptr_t)addr + len;
    for (int d = 0; d < vb->ndev; d++) {
        struct ibv_mr *mr =
            ibv_reg_mr(vb->devs[d].pd, addr, len,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
        if (mr == NULL) {
            tw_error("verbs", "%s: cannot register %zu bytes at %p: %m", vb->devs[d].name, len,
                     addr);
            tw_verbs_release_region(vb, &m->region);
            return TW_ERR_TRANSPORT;
        }
        m->region.mr[d] = mr;
        m->region.lkey[d] = mr->lkey;
        m->region.rkey[d] = rkeys[d] = mr->rkey;
    }
    if (tw_verbs_rcache_insert(&vb->rcache, &m->region) != TW_OK) {
        tw_verbs_release_region(vb, &m->region);
        return TW_ERR_NOMEM;
    }
    *rkey_len_p = tw_verbs_rkey_pack(rkeys, (unsigned)vb->ndev, rkey);
    *mem_p = m;
    return TW_OK;
}

tw_status_t tw_verbs_mem_dereg(tw_tl_iface_t *iface, tw_verbs_mem_t *mem)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;

    if (iface == NULL || iface->ops != &tw_verbs_ops || mem == NULL) {
        return TW_ERR_INVALID;
    }
    return tw_verbs_rcache_remove(&vb->rcache, &mem->region);
}

tw_status_t tw_verbs_mem_reg_op(tw_tl_iface_t *iface, void *addr, size_t len, void *key,
                                size_t *key_len, void **handle)
{
    tw_verbs_mem_t *mem = NULL;
    tw_status_t st;

    _Static_assert(TW_VERBS_RKEY_MAX <= TW_TL_KEY_MAX, "a verbs key fits TW_TL_KEY_MAX");
    if (key_len == NULL || *key_len < TW_VERBS_RKEY_MAX) {
        return TW_ERR_INVALID;
    }
    st = tw_verbs_mem_reg(iface, addr, len, key, key_len, &mem);
    *handle = mem;
    return st;
}

tw_status_t tw_verbs_mem_dereg_op(tw_tl_iface_t *iface, void *handle)
{
    return tw_verbs_mem_dereg(iface, handle);
}
