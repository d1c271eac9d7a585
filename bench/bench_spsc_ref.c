/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The SPSC reference ring: head and tail on their own cache lines, each
 * side caching the other's index so it reads the shared line only when
 * its cached view says full (producer) or empty (consumer).
 */
#include "bench_spsc_ref.h"

#include <stdatomic.h>
#include <stdlib.h>

struct twb_spsc {
    _Alignas(64) atomic_uint tail; /* written by the producer */
    unsigned head_cache;           /* producer's view of head */
    _Alignas(64) atomic_uint head; /* written by the consumer */
    unsigned tail_cache;           /* consumer's view of tail */
    _Alignas(64) unsigned mask;
    twb_rec40_t *slots;
};

twb_spsc_t *twb_spsc_create(unsigned slots)
{
    twb_spsc_t *q = aligned_alloc(64, sizeof(*q));

    if (q == NULL) {
        return NULL;
    }
    q->slots = aligned_alloc(64, (size_t)slots * sizeof(twb_rec40_t));
    if (q->slots == NULL) {
        free(q);
        return NULL;
    }
    atomic_init(&q->tail, 0);
    atomic_init(&q->head, 0);
    q->head_cache = 0;
    q->tail_cache = 0;
    q->mask = slots - 1;
    return q;
}

void twb_spsc_destroy(twb_spsc_t *q)
{
    free(q->slots);
    free(q);
}

bool twb_spsc_push(twb_spsc_t *q, const twb_rec40_t *rec)
{
    unsigned t = atomic_load_explicit(&q->tail, memory_order_relaxed);

    if (t - q->head_cache > q->mask) {
        q->head_cache = atomic_load_explicit(&q->head, memory_order_acquire);
        if (t - q->head_cache > q->mask) {
            return false;
        }
    }
    q->slots[t & q->mask] = *rec;
    atomic_store_explicit(&q->tail, t + 1, memory_order_release);
    return true;
}

int twb_spsc_pop(twb_spsc_t *q, twb_rec40_t *out, int max)
{
    unsigned h = atomic_load_explicit(&q->head, memory_order_relaxed);
    int n = 0;

    if (q->tail_cache == h) {
        q->tail_cache = atomic_load_explicit(&q->tail, memory_order_acquire);
    }
    while (n < max && h != q->tail_cache) {
        out[n++] = q->slots[h & q->mask];
        h++;
    }
    if (n > 0) {
        atomic_store_explicit(&q->head, h, memory_order_release);
    }
    return n;
}
