/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
#include "progress/tw_pool.h"

#include <ck_stack.h>
#include <stdatomic.h>

#include "core/tw_compiler.h"
#include "core/tw_mem.h"

#if !defined(CK_F_STACK_POP_MPMC)
#error "tw_pool needs ck_stack_pop_mpmc (a double-width CAS)"
#endif

/* Each object is preceded by its stack link. */
typedef struct tw_pool_hdr {
    ck_stack_entry_t link;
    void *pad; /* keeps the object 16-byte aligned */
} tw_pool_hdr_t;

struct tw_pool {
    ck_stack_t free TW_ALIGNED(16);
    size_t obj_size;
    atomic_size_t allocated; /* objects ever allocated */
    char tsan_token;         /* TSan: a put happens-before the next get */
};

tw_status_t tw_pool_create(size_t obj_size, tw_pool_t **pool_p)
{
    tw_pool_t *pool = tw_malloc_aligned(TW_CACHELINE, sizeof(*pool));

    if (pool == NULL) {
        return TW_ERR_NOMEM;
    }
    ck_stack_init(&pool->free);
    /* ck keeps its ABA generation counter in a char pointer and bumps it
     * with pointer arithmetic; from NULL that is undefined behaviour (UBSan
     * reports it). Start it at a real address: only its changes matter. */
    pool->free.generation = &pool->tsan_token;
    pool->obj_size = obj_size;
    atomic_init(&pool->allocated, 0);
    *pool_p = pool;
    return TW_OK;
}

void *tw_pool_get(tw_pool_t *pool)
{
    ck_stack_entry_t *e = ck_stack_pop_mpmc(&pool->free);
    tw_pool_hdr_t *h;

    if (e != NULL) {
        TW_TSAN_ACQUIRE(&pool->tsan_token);
        h = (tw_pool_hdr_t *)e;
    } else {
        h = tw_malloc(sizeof(*h) + pool->obj_size);
        if (h == NULL) {
            return NULL;
        }
        atomic_fetch_add_explicit(&pool->allocated, 1, memory_order_relaxed);
    }
    return h + 1;
}

void tw_pool_put(tw_pool_t *pool, void *obj)
{
    tw_pool_hdr_t *h = (tw_pool_hdr_t *)obj - 1;

    TW_TSAN_RELEASE(&pool->tsan_token);
    ck_stack_push_mpmc(&pool->free, &h->link);
}

void tw_pool_destroy(tw_pool_t *pool)
{
    size_t freed = 0;

    for (ck_stack_entry_t *e; (e = ck_stack_pop_mpmc(&pool->free)) != NULL; freed++) {
        tw_free(e, sizeof(tw_pool_hdr_t) + pool->obj_size);
    }
    tw_assert(freed == atomic_load_explicit(&pool->allocated, memory_order_relaxed));
    tw_free_aligned(pool, TW_CACHELINE, sizeof(*pool));
}
