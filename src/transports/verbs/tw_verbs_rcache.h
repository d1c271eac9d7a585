/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Registration cache of the verbs transport: the memory regions the
 * application registered (tw_verbs_mem_reg), looked up by address when an
 * operation's local buffer needs an lkey, so registered buffers are not
 * registered again per operation.
 *
 * Only explicit registrations are cached. A buffer nobody registered is
 * registered for its operation and deregistered when it completes: without
 * hooks on free/munmap a cache of implicit registrations could hand out an
 * lkey for pages that were unmapped and replaced at the same address
 * (silent corruption), and this design has no such hooks.
 *
 * Invalidation: a region holds one reference for its registration and one
 * per operation using it. Deregistration takes it out of the lookup table
 * at once (no new operation finds it) and drops the registration's
 * reference; the memory regions are released (the release callback, e.g.
 * ibv_dereg_mr) when the last operation using it completed.
 *
 * Thread: any (a mutex: registration is rare and lookups are per
 * zero-copy operation, not per small message). The release callback runs
 * without the lock held.
 */
#ifndef TW_VERBS_RCACHE_H
#define TW_VERBS_RCACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tw_lock.h"
#include "threadwire/threadwire.h"

#define TW_VERBS_RCACHE_DEVS 8

typedef struct tw_verbs_region {
    uintptr_t start, end;                /* [start, end) */
    void *mr[TW_VERBS_RCACHE_DEVS];      /* per device (struct ibv_mr *), owned */
    uint32_t lkey[TW_VERBS_RCACHE_DEVS]; /* per device */
    uint32_t rkey[TW_VERBS_RCACHE_DEVS];
    unsigned refs; /* guarded by the cache lock */
    bool dead;     /* deregistered; guarded by the cache lock */
} tw_verbs_region_t;

typedef void (*tw_verbs_rcache_release_fn_t)(void *arg, tw_verbs_region_t *r);

typedef struct tw_verbs_rcache {
    tw_mutex_t lock;
    tw_verbs_region_t **v; /* live regions sorted by start; guarded by lock */
    size_t n, cap;
    tw_verbs_rcache_release_fn_t release;
    void *arg;
} tw_verbs_rcache_t;

tw_status_t tw_verbs_rcache_init(tw_verbs_rcache_t *rc, tw_verbs_rcache_release_fn_t release,
                                 void *arg);
/** Release every region still registered (the caller stopped all operations). */
void tw_verbs_rcache_cleanup(tw_verbs_rcache_t *rc);

/** Add @p r (start, end, mr, keys filled; refs set to 1 here). TW_ERR_NOMEM. */
tw_status_t tw_verbs_rcache_insert(tw_verbs_rcache_t *rc, tw_verbs_region_t *r);

/** A live region that holds all of [addr, addr + len), with a reference
 * the caller drops with tw_verbs_rcache_put; NULL if none. */
tw_verbs_region_t *tw_verbs_rcache_lookup(tw_verbs_rcache_t *rc, const void *addr, size_t len);

/** Drop a reference; the last one releases the region. */
void tw_verbs_rcache_put(tw_verbs_rcache_t *rc, tw_verbs_region_t *r);

/** Deregister @p r: no lookup finds it from now on; it is released once
 * no operation uses it. TW_ERR_INVALID if it is not registered (twice, or
 * a stranger). */
tw_status_t tw_verbs_rcache_remove(tw_verbs_rcache_t *rc, tw_verbs_region_t *r);

/** Live regions (tests). */
size_t tw_verbs_rcache_count(tw_verbs_rcache_t *rc);

#endif /* TW_VERBS_RCACHE_H */
