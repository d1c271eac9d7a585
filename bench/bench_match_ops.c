/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
#include "bench_match_ops.h"

#include <stdlib.h>

#include "msg/tw_match.h"

struct bm_match {
    tw_match_t m;
    tw_match_recv_t exact;
    tw_match_recv_t wild;
};

static void bm_cancel(tw_match_recv_t *r, void *arg)
{
    (void)arg;
    free(r);
}

bm_match_t *bm_match_create(unsigned buckets)
{
    bm_match_t *b = calloc(1, sizeof(*b));
    if (b == NULL || tw_match_init(&b->m, buckets) != TW_OK) {
        abort();
    }
    b->exact = (tw_match_recv_t){.src = 1, .tag = 7};
    b->wild = (tw_match_recv_t){.src = TW_ANY_SOURCE, .tag = 7};
    return b;
}

void bm_match_destroy(bm_match_t *b)
{
    tw_match_cleanup(&b->m, bm_cancel, NULL);
    free(b);
}

void bm_match_fill_posted(bm_match_t *b, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        tw_match_recv_t *r = calloc(1, sizeof(*r));
        r->src = 1;
        r->tag = 1000000 + i;
        if (tw_match_post(&b->m, r) != NULL) {
            abort();
        }
    }
}

void bm_match_fill_unexpected(bm_match_t *b, uint64_t n, unsigned sources)
{
    tw_status_t st;
    for (uint64_t i = 0; i < n; i++) {
        if (tw_match_arrive(&b->m, (int)(i % sources), 1000000 + i, NULL, 0, NULL, &st) != NULL) {
            abort();
        }
    }
}

void bm_match_step_posted(bm_match_t *b)
{
    tw_status_t st;
    tw_match_post(&b->m, &b->exact);
    if (tw_match_arrive(&b->m, 1, 7, NULL, 0, NULL, &st) != &b->exact) {
        abort();
    }
}

void bm_match_step_unexpected(bm_match_t *b)
{
    tw_status_t st;
    tw_match_arrive(&b->m, 1, 7, "12345678", 8, NULL, &st);
    tw_match_unexp_t *u = tw_match_post(&b->m, &b->exact);
    if (u == NULL) {
        abort();
    }
    tw_match_unexp_free(u);
}

void bm_match_step_wildcard(bm_match_t *b)
{
    tw_status_t st;
    tw_match_arrive(&b->m, 3, 7, "12345678", 8, NULL, &st);
    tw_match_unexp_t *u = tw_match_post(&b->m, &b->wild);
    if (u == NULL) {
        abort();
    }
    tw_match_unexp_free(u);
}
