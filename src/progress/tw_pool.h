/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Fixed-size object pools for hot paths (receive requests): get and put
 * are lock-free (ck_stack, ABA-safe with a generation counter) and make no
 * allocation once the pool has grown to the peak in use. Objects are
 * allocated on demand and freed only by tw_pool_destroy, so a popped node
 * is always valid memory. Thread: get/put any; destroy when none is out.
 */
#ifndef TW_POOL_H
#define TW_POOL_H

#include <stddef.h>

#include "threadwire/threadwire.h"

typedef struct tw_pool tw_pool_t;

tw_status_t tw_pool_create(size_t obj_size, tw_pool_t **pool_p);
/** An object of obj_size bytes (contents undefined), or NULL (no memory). */
void *tw_pool_get(tw_pool_t *pool);
void tw_pool_put(tw_pool_t *pool, void *obj);
/** Frees every object; all must have been put back. */
void tw_pool_destroy(tw_pool_t *pool);

#endif /* TW_POOL_H */
