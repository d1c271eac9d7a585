/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Registration cache of the verbs transport: see tw_verbs_rcache.h. */
#include "transports/verbs/tw_verbs_rcache.h"

#include <string.h>

#include "core/tw_mem.h"

tw_status_t tw_verbs_rcache_init(tw_verbs_rcache_t *rc, tw_verbs_rcache_release_fn_t release,
                                 void *arg)
{
    memset(rc, 0, sizeof(*rc));
    if (tw_mutex_init(&rc->lock, TW_LOCK_RANK_VERBS_RCACHE, "registration cache") != TW_OK) {
        return TW_ERR_NOMEM;
    }
    rc->release = release;
    rc->arg = arg;
    return TW_OK;
}

void tw_verbs_rcache_cleanup(tw_verbs_rcache_t *rc)
{
    while (rc->n > 0) {
        tw_verbs_region_t *r = rc->v[rc->n - 1];
        (void)tw_verbs_rcache_remove(rc, r);
    }
    if (rc->v != NULL) {
        tw_free(rc->v, rc->cap * sizeof(*rc->v));
    }
    rc->v = NULL;
    rc->cap = 0;
    tw_mutex_destroy(&rc->lock);
}

/* First index whose region starts after @p addr. Caller holds the lock. */
static size_t tw_verbs_rcache_upper_locked(const tw_verbs_rcache_t *rc, uintptr_t addr)
    TW_REQUIRES(rc->lock)
{
    size_t lo = 0, hi = rc->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rc->v[mid]->start <= addr) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

tw_status_t tw_verbs_rcache_insert(tw_verbs_rcache_t *rc, tw_verbs_region_t *r)
{
    size_t at;

    if (r->end <= r->start) {
        return TW_ERR_INVALID;
    }
    r->refs = 1;
    r->dead = false;
    tw_mutex_lock(&rc->lock);
    if (rc->n == rc->cap) {
        size_t cap = rc->cap == 0 ? 16 : rc->cap * 2;
        tw_verbs_region_t **v = tw_calloc(cap, sizeof(*v));
        if (v == NULL) {
            tw_mutex_unlock(&rc->lock);
            return TW_ERR_NOMEM;
        }
        if (rc->n > 0) {
            memcpy(v, rc->v, rc->n * sizeof(*v));
        }
        if (rc->v != NULL) {
            tw_free(rc->v, rc->cap * sizeof(*rc->v));
        }
        rc->v = v;
        rc->cap = cap;
    }
    at = tw_verbs_rcache_upper_locked(rc, r->start);
    memmove(rc->v + at + 1, rc->v + at, (rc->n - at) * sizeof(*rc->v));
    rc->v[at] = r;
    rc->n++;
    tw_mutex_unlock(&rc->lock);
    return TW_OK;
}

tw_verbs_region_t *tw_verbs_rcache_lookup(tw_verbs_rcache_t *rc, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, e = a + len;
    tw_verbs_region_t *hit = NULL;

    if (e < a) {
        return NULL; /* wraps */
    }
    tw_mutex_lock(&rc->lock);
    /* Regions may overlap: every one that starts at or before @p addr is a
     * candidate, nearest first. */
    for (size_t i = tw_verbs_rcache_upper_locked(rc, a); i-- > 0;) {
        tw_verbs_region_t *r = rc->v[i];
        if (r->start <= a && e <= r->end) {
            hit = r;
            hit->refs++;
            break;
        }
    }
    tw_mutex_unlock(&rc->lock);
    return hit;
}

void tw_verbs_rcache_put(tw_verbs_rcache_t *rc, tw_verbs_region_t *r)
{
    bool last;

    tw_mutex_lock(&rc->lock);
    last = --r->refs == 0;
    tw_mutex_unlock(&rc->lock);
    if (last) {
        rc->release(rc->arg, r);
    }
}

tw_status_t tw_verbs_rcache_remove(tw_verbs_rcache_t *rc, tw_verbs_region_t *r)
{
    size_t i;

    tw_mutex_lock(&rc->lock);
    for (i = 0; i < rc->n && rc->v[i] != r; i++) {
    }
    if (i == rc->n || r->dead) {
        tw_mutex_unlock(&rc->lock);
        return TW_ERR_INVALID;
    }
    memmove(rc->v + i, rc->v + i + 1, (rc->n - i - 1) * sizeof(*rc->v));
    rc->n--;
    r->dead = true;
    tw_mutex_unlock(&rc->lock);
    tw_verbs_rcache_put(rc, r);
    return TW_OK;
}

size_t tw_verbs_rcache_count(tw_verbs_rcache_t *rc)
{
    size_t n;

    tw_mutex_lock(&rc->lock);
    n = rc->n;
    tw_mutex_unlock(&rc->lock);
    return n;
}
