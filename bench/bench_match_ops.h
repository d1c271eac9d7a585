/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* C side of bench_match.cc: the matching engine uses C11 atomics, which
 * C++ cannot include, so the benchmark drives it through these calls. */
#ifndef BENCH_MATCH_OPS_H
#define BENCH_MATCH_OPS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bm_match bm_match_t;

bm_match_t *bm_match_create(unsigned buckets);
void bm_match_destroy(bm_match_t *b);
/* Queue @p n receives / messages that the measured step never matches. */
void bm_match_fill_posted(bm_match_t *b, uint64_t n);
void bm_match_fill_unexpected(bm_match_t *b, uint64_t n, unsigned sources);
/* Measured steps: one match each. */
void bm_match_step_posted(bm_match_t *b);     /* post exact receive, then arrival */
void bm_match_step_unexpected(bm_match_t *b); /* arrival, then exact receive */
void bm_match_step_wildcard(bm_match_t *b);   /* arrival, then TW_ANY_SOURCE receive */

#ifdef __cplusplus
}
#endif

#endif
