/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Memory regions and their remote keys.
 *
 * tw_mem_register gives a region an id (a counter) and a key (64 random
 * bits), records its bounds in the registry (a hash of ids under
 * reg_lock), and registers it with every transport that does RDMA itself
 * (verbs, when reliability is off): each hands back a transport key,
 * which the packed remote key carries as a section named by the
 * transport (tw_rma_proto.h).
 *
 * A region's rendezvous pulls and zero-copy replies in flight are
 * counted; deregistration unpublishes the region first, waits for the
 * count to drain, then releases the transport keys. A request naming a
 * region that is gone, with a wrong key or out of its bounds, is refused
 * with TW_ERR_INVALID (logged at both ends); a direct RDMA access to a
 * deregistered region is refused by the device, which fails the
 * connection (that is verbs).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/random.h>

#include "core/tw_atomic.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "msg/tw_rma_int.h"

/* ---- remote keys -------------------------------------------------------- */

tw_status_t tw_rma_rkey_check(const char *fn, const void *rkey, int peer, uint64_t raddr,
                              size_t len, tw_rma_rkey_t *k)
{
    const char *why = NULL;

    if (rkey == NULL) {
        tw_error("rma", "%s: NULL remote key", fn);
        return TW_ERR_INVALID;
    }
    /* tw_put and tw_get take no key length: a key is at most TW_RKEY_MAX
     * bytes, and its own length says how many of them are its. */
    if (tw_rma_rkey_parse(rkey, TW_RKEY_MAX, k, &why) != TW_OK) {
        tw_error("rma", "%s: not a remote key packed by tw_mr_pack: %s", fn, why);
        return TW_ERR_INVALID;
    }
    if (k->h.owner != peer) {
        tw_error("rma", "%s: the remote key is of rank %d's memory, not of rank %d's", fn,
                 k->h.owner, peer);
        return TW_ERR_INVALID;
    }
    if (raddr < k->h.base || len > k->h.size || raddr - k->h.base > k->h.size - len) {
        tw_error("rma",
                 "%s: %zu bytes at 0x%llx are not inside rank %d's region "
                 "[0x%llx, +%llu)",
                 fn, len, (unsigned long long)raddr, peer, (unsigned long long)k->h.base,
                 (unsigned long long)k->h.size);
        return TW_ERR_INVALID;
    }
    return TW_OK;
}

tw_status_t tw_rma_mr_pack(const tw_mr_t *mr, void *rkey, size_t *rkey_len)
{
    tw_rma_rkey_t k;
    size_t need;

    if (mr == NULL || mr->magic != TW_MR_MAGIC || rkey_len == NULL) {
        tw_error("rma", "tw_mr_pack: %s", rkey_len == NULL ? "NULL rkey_len" : "not a region");
        return TW_ERR_INVALID;
    }
    if (atomic_load_explicit(&mr->dead, memory_order_acquire)) {
        tw_error("rma", "tw_mr_pack: the region was released when its context finalized");
        return TW_ERR_INVALID;
    }
    k = (tw_rma_rkey_t){.h = {.nsect = (uint8_t)mr->ntl,
                              .owner = mr->rma->rank,
                              .id = mr->id,
                              .key = mr->key,
                              .base = mr->base,
                              .size = mr->len}};
    for (unsigned i = 0; i < mr->ntl; i++) {
        const char *name = mr->tl[i].iface->name;
        k.sect[i] = (tw_rma_rkey_sect_t){.name = name,
                                         .key = mr->tl[i].bytes,
                                         .name_len = (uint8_t)strlen(name),
                                         .key_len = mr->tl[i].len};
    }
    need = tw_rma_rkey_size(&k);
    if (rkey == NULL) {
        *rkey_len = need;
        return TW_OK;
    }
    if (*rkey_len < need) {
        *rkey_len = need;
        return TW_ERR_TRUNCATED;
    }
    tw_rma_rkey_pack(&k, rkey);
    *rkey_len = need;
    return TW_OK;
}

/* ---- regions ------------------------------------------------------------ */

tw_status_t tw_rma_add_registrar(tw_rma_t *rma, tw_tl_iface_t *iface)
{
    if (rma->nreg == TW_RMA_MAX_REG || strlen(iface->name) > TW_RMA_RKEY_NAME_MAX) {
        return TW_ERR_INVALID;
    }
    rma->reg[rma->nreg++] = iface;
    return TW_OK;
}

static void tw_rma_release_tl(tw_mr_t *mr)
{
    for (unsigned k = 0; k < mr->ntl; k++) {
        tw_tl_iface_t *iface = mr->tl[k].iface;
        tw_status_t st = tw_tl_mem_dereg(iface, mr->tl[k].handle);
        if (st != TW_OK) {
            tw_warn("rma", "%s would not deregister a region: %s", mr->tl[k].iface->name,
                    tw_strerror(st));
        }
    }
    mr->ntl = 0;
}

tw_status_t tw_rma_mem_register(tw_rma_t *rma, void *addr, size_t len, tw_mr_t **mr_p)
{
    tw_mr_t *mr = tw_calloc(1, sizeof(*mr));
    tw_status_t st;

    if (mr == NULL) {
        return TW_ERR_NOMEM;
    }
    if (getrandom(&mr->key, sizeof(mr->key), 0) != (ssize_t)sizeof(mr->key)) {
        tw_error("rma", "tw_mem_register: getrandom failed: %m");
        tw_free(mr, sizeof(*mr));
        return TW_ERR_TRANSPORT;
    }
    mr->magic = TW_MR_MAGIC;
    atomic_init(&mr->dead, false);
    atomic_init(&mr->inflight, 0);
    mr->rma = rma;
    mr->id = atomic_fetch_add_explicit(&rma->next_id, 1, memory_order_relaxed);
    mr->base = (uintptr_t)addr;
    mr->len = len;
    for (unsigned k = 0; k < rma->nreg; k++) {
        tw_tl_iface_t *iface = rma->reg[k];
        tw_rma_tlkey_t *t = &mr->tl[mr->ntl];
        size_t klen = sizeof(t->bytes);
        st = tw_tl_mem_reg(iface, addr, len, t->bytes, &klen, &t->handle);
        if (st == TW_ERR_UNSUPPORTED) {
            continue; /* no key of its own (a wrapper over a transport without RDMA) */
        }
        if (st != TW_OK) {
            tw_error("rma", "tw_mem_register: %s refused %zu bytes at %p: %s", iface->name, len,
                     addr, tw_strerror(st));
            tw_rma_release_tl(mr);
            tw_free(mr, sizeof(*mr));
            return st;
        }
        t->iface = iface;
        t->len = (uint8_t)klen;
        mr->ntl++;
    }
    tw_rwlock_wrlock(&rma->reg_lock);
    mr->next = rma->buckets[mr->id % TW_RMA_BUCKETS];
    rma->buckets[mr->id % TW_RMA_BUCKETS] = mr;
    tw_rwlock_unlock(&rma->reg_lock);
    *mr_p = mr;
    return TW_OK;
}

void tw_rma_set_progress(tw_rma_t *rma, int (*fn)(void *), void *arg)
{
    rma->progress = fn;
    rma->progress_arg = arg;
}

tw_status_t tw_rma_mem_deregister(tw_mr_t *mr)
{
    tw_backoff_t b = TW_BACKOFF_INIT;
    tw_rma_t *rma;

    if (mr == NULL || mr->magic != TW_MR_MAGIC) {
        tw_error("rma", "tw_mem_deregister: not a region");
        return TW_ERR_INVALID;
    }
    if (!atomic_load_explicit(&mr->dead, memory_order_acquire)) {
        rma = mr->rma;
        tw_rwlock_wrlock(&rma->reg_lock);
        for (tw_mr_t **pp = &rma->buckets[mr->id % TW_RMA_BUCKETS]; *pp != NULL;
             pp = &(*pp)->next) {
            if (*pp == mr) {
                *pp = mr->next;
                break;
            }
        }
        tw_rwlock_unlock(&rma->reg_lock);
        /* No request finds it now; let the pulls and replies that hold
         * it finish (their transports complete them, whatever happens). */
        while (atomic_load_explicit(&mr->inflight, memory_order_acquire) > 0) {
            if (rma->progress != NULL) {
                rma->progress(rma->progress_arg);
            }
            tw_backoff_wait(&b);
        }
        tw_rma_release_tl(mr);
    }
    mr->magic = 0;
    tw_free(mr, sizeof(*mr));
    return TW_OK;
}

void tw_rma_release_regions(tw_rma_t *rma)
{
    unsigned n = 0;

    tw_rwlock_wrlock(&rma->reg_lock);
    for (unsigned i = 0; i < TW_RMA_BUCKETS; i++) {
        for (tw_mr_t *mr = rma->buckets[i]; mr != NULL; mr = mr->next) {
            tw_rma_release_tl(mr);
            atomic_store_explicit(&mr->dead, true, memory_order_release);
            n++;
        }
        rma->buckets[i] = NULL;
    }
    tw_rwlock_unlock(&rma->reg_lock);
    if (n > 0) {
        tw_warn("rma",
                "%u memory region(s) still registered at tw_finalize: released; "
                "tw_mem_deregister frees their handles",
                n);
    }
}

tw_status_t tw_rma_lookup_locked(tw_rma_t *rma, int src, const tw_rma_hdr_t *h, tw_mr_t **mr_p)
{
    tw_mr_t *mr = rma->buckets[h->region % TW_RMA_BUCKETS];
    const char *why = NULL;

    while (mr != NULL && mr->id != h->region) {
        mr = mr->next;
    }
    if (mr == NULL || mr->key != h->key) {
        why = mr == NULL ? "no such region (deregistered?)" : "wrong region key";
    } else if (h->addr < mr->base || h->len > mr->len || h->addr - mr->base > mr->len - h->len) {
        why = "out of the region's bounds";
    }
    if (why != NULL) {
        uint64_t n = tw_rma_log_due(&rma->refused_logged);
        tw_stats_inc(rma->stats, TW_RMA_STAT_REFUSED);
        if (n != 0) {
            tw_warn("rma", "refused rank %d's %s of %llu bytes at 0x%llx: %s (%llu so far)", src,
                    h->type == TW_RMA_PUT_REQ ? "put" : "get", (unsigned long long)h->len,
                    (unsigned long long)h->addr, why, (unsigned long long)n);
        }
        return TW_ERR_INVALID;
    }
    *mr_p = mr;
    return TW_OK;
}
