/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Lock-free statistics counters. A tw_stats_t is a named group of counters
 * (one per transport, per progress thread, per CQ, ...). Each counter has
 * TW_STATS_SLOTS cache-line-separated slots; a thread adds to the slot of
 * its tw_thread_index(), which it owns alone (no locked instruction), so
 * threads do not share cache lines; threads past the first
 * TW_STATS_SLOTS - 1 share the last slot atomically. Reads sum the slots.
 * High-water marks are a separate kind kept with an atomic max.
 */
#ifndef TW_STATS_H
#define TW_STATS_H

#include <stdint.h>
#include <stdio.h>

#ifndef __cplusplus /* C++ benchmarks read counters; they never add */
#include <stdatomic.h>

#include "core/tw_atomic.h"
#include "core/tw_compiler.h"
#endif

#define TW_STATS_SLOTS 16

typedef enum tw_stat_kind {
    TW_STAT_COUNTER, /* summed over slots */
    TW_STAT_HWM      /* maximum ever recorded */
} tw_stat_kind_t;

typedef struct tw_stat_desc {
    const char *name; /* "msgs_sent" */
    tw_stat_kind_t kind;
} tw_stat_desc_t;

typedef struct tw_stats tw_stats_t;

#ifndef __cplusplus
/* The first member of struct tw_stats (tw_stats.c): what tw_stats_add
 * reads, here so that the add is inline on the message path. */
typedef struct tw_stats_hot {
    atomic_uint_fast64_t *values; /* [TW_STATS_SLOTS][stride], cache-line aligned */
    const tw_stat_desc_t *descs;
    unsigned count;
    unsigned stride; /* counters per slot row, rounded up to whole lines */
} tw_stats_hot_t;

/* @p descs must outlive the group (static tables). NULL on allocation
 * failure. @p name is copied. */
tw_stats_t *tw_stats_create(const char *name, const tw_stat_desc_t *descs, unsigned count);
void tw_stats_destroy(tw_stats_t *s);
/* Thread: any. Relaxed; no ordering with other memory. */
static inline void tw_stats_add(tw_stats_t *s, unsigned id, uint64_t v)
{
    const tw_stats_hot_t *h = (const tw_stats_hot_t *)(void *)s; /* its first member */
    unsigned idx = tw_thread_index();
    atomic_uint_fast64_t *a;

    tw_assert(id < h->count && h->descs[id].kind == TW_STAT_COUNTER);
    if (TW_UNLIKELY(id >= h->count)) {
        return;
    }
    if (TW_LIKELY(idx < TW_STATS_SLOTS - 1)) {
        /* This thread's own slot: nobody else writes it. */
        a = &h->values[(size_t)idx * h->stride + id];
        atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + v,
                              memory_order_relaxed);
        return;
    }
    a = &h->values[(size_t)(TW_STATS_SLOTS - 1) * h->stride + id];
    atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}
static inline void tw_stats_inc(tw_stats_t *s, unsigned id)
{
    tw_stats_add(s, id, 1);
}
#endif
/* For TW_STAT_HWM counters. Thread: any. */
void tw_stats_hwm(tw_stats_t *s, unsigned id, uint64_t v);
uint64_t tw_stats_read(const tw_stats_t *s, unsigned id);
/** Counters a component keeps itself -- e.g. fields bumped under a lock it
 * holds anyway, cheaper than an atomic add per event -- join the sum:
 * every read of a counter adds @p fn(@p arg, id). @p fn runs on the
 * reader's thread; set it before anyone reads. */
void tw_stats_set_source(tw_stats_t *s, uint64_t (*fn)(void *arg, unsigned id), void *arg);
const char *tw_stats_name(const tw_stats_t *s);
/* "name: a=1 b=2 ..." on one line; zero counters are printed too. */
void tw_stats_print_group(const tw_stats_t *s, FILE *out);
/* The same counters as a JSON object: {"a":1,"b":2,...}. */
void tw_stats_json_group(const tw_stats_t *s, FILE *out);
/* @p str as a JSON string, quoted and escaped (NULL: ""). */
void tw_stats_json_string(const char *str, FILE *out);

#endif /* TW_STATS_H */
