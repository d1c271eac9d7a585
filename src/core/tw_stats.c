/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Layout: values[slot * stride + id], with stride a whole number of cache
 * lines, so slot s of every counter lives on cache lines that no other slot
 * touches. tw_thread_index() is unique among a process's live threads, so a
 * thread whose index is below TW_STATS_SLOTS - 1 owns slot `index` alone
 * and adds with a relaxed load and store -- no locked instruction on the
 * message path (readers load the slots atomically; a sum may miss an add
 * in flight, never tear). Threads with larger indexes share the last slot,
 * with a relaxed fetch_add. High-water marks live in slot 0 only and are
 * raised with a CAS-max loop.
 */
#include "core/tw_stats.h"

#include <stdatomic.h>
#include <string.h>

#include "core/tw_atomic.h"
#include "core/tw_compiler.h"
#include "core/tw_mem.h"

#define TW_STATS_PER_LINE (TW_CACHELINE / sizeof(atomic_uint_fast64_t))

struct tw_stats {
    tw_stats_hot_t hot; /* first: what tw_stats_add reads (tw_stats.h) */
    char *name;
    size_t values_size;
    uint64_t (*source)(void *arg, unsigned id); /* counters kept elsewhere, or NULL */
    void *source_arg;
};

_Static_assert(sizeof(atomic_uint_fast64_t) == sizeof(uint64_t), "64-bit counters");
_Static_assert(TW_CACHELINE % sizeof(atomic_uint_fast64_t) == 0, "whole counters per line");

tw_stats_t *tw_stats_create(const char *name, const tw_stat_desc_t *descs, unsigned count)
{
    tw_stats_t *s;
    unsigned stride;

    if (name == NULL || (descs == NULL && count != 0)) {
        return NULL;
    }
    s = tw_calloc(1, sizeof(*s));
    if (s == NULL) {
        goto err;
    }
    s->name = tw_strdup(name);
    if (s->name == NULL) {
        goto err_free_s;
    }
    stride = (unsigned)((count + TW_STATS_PER_LINE - 1) / TW_STATS_PER_LINE * TW_STATS_PER_LINE);
    if (stride == 0) {
        stride = TW_STATS_PER_LINE;
    }
    s->values_size = (size_t)TW_STATS_SLOTS * stride * sizeof(*s->hot.values);
    s->hot.values = tw_malloc_aligned(TW_CACHELINE, s->values_size);
    if (s->hot.values == NULL) {
        goto err_free_name;
    }
    for (size_t i = 0; i < (size_t)TW_STATS_SLOTS * stride; i++) {
        atomic_init(&s->hot.values[i], 0);
    }
    s->hot.descs = descs;
    s->hot.count = count;
    s->hot.stride = stride;
    return s;

err_free_name:
    tw_free(s->name, strlen(s->name) + 1);
err_free_s:
    tw_free(s, sizeof(*s));
err:
    return NULL;
}

void tw_stats_destroy(tw_stats_t *s)
{
    if (s == NULL) {
        return;
    }
    tw_free_aligned(s->hot.values, TW_CACHELINE, s->values_size);
    tw_free(s->name, strlen(s->name) + 1);
    tw_free(s, sizeof(*s));
}

void tw_stats_hwm(tw_stats_t *s, unsigned id, uint64_t v)
{
    tw_assert(id < s->hot.count && s->hot.descs[id].kind == TW_STAT_HWM);
    if (TW_UNLIKELY(id >= s->hot.count)) {
        return;
    }
    atomic_uint_fast64_t *a = &s->hot.values[id];
    uint_fast64_t cur = atomic_load_explicit(a, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

uint64_t tw_stats_read(const tw_stats_t *s, unsigned id)
{
    uint64_t sum = 0;

    if (id >= s->hot.count) {
        return 0;
    }
    if (s->hot.descs[id].kind == TW_STAT_HWM) {
        return atomic_load_explicit(&s->hot.values[id], memory_order_relaxed);
    }
    for (unsigned slot = 0; slot < TW_STATS_SLOTS; slot++) {
        sum += atomic_load_explicit(&s->hot.values[(size_t)slot * s->hot.stride + id],
                                    memory_order_relaxed);
    }
    if (s->source != NULL) {
        sum += s->source(s->source_arg, id);
    }
    return sum;
}

void tw_stats_set_source(tw_stats_t *s, uint64_t (*fn)(void *arg, unsigned id), void *arg)
{
    s->source = fn;
    s->source_arg = arg;
}

const char *tw_stats_name(const tw_stats_t *s)
{
    return s->name;
}

void tw_stats_print_group(const tw_stats_t *s, FILE *out)
{
    fprintf(out, "%s:", s->name);
    for (unsigned i = 0; i < s->hot.count; i++) {
        fprintf(out, " %s=%llu", s->hot.descs[i].name, (unsigned long long)tw_stats_read(s, i));
    }
    fputc('\n', out);
}

void tw_stats_json_string(const char *str, FILE *out)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)(str != NULL ? str : ""); *p; p++) {
        if (*p == '"' || *p == '\\') {
            fprintf(out, "\\%c", *p);
        } else if (*p < 0x20 || *p >= 0x7f) { /* bytes past ASCII too: valid JSON from any input */
            fprintf(out, "\\u%04x", *p);
        } else {
            fputc(*p, out);
        }
    }
    fputc('"', out);
}

void tw_stats_json_group(const tw_stats_t *s, FILE *out)
{
    fputc('{', out);
    for (unsigned i = 0; i < s->hot.count; i++) {
        fputs(i > 0 ? "," : "", out);
        tw_stats_json_string(s->hot.descs[i].name, out);
        fprintf(out, ":%llu", (unsigned long long)tw_stats_read(s, i));
    }
    fputc('}', out);
}
