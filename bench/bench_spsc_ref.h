/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Peer reference for bench_cq: a plain C11 single-producer single-consumer
 * ring of 40-byte records (the size of tw_completion_t), the fastest thing a
 * CQ could be between one producer and one consumer thread.
 */
#ifndef TWB_SPSC_REF_H
#define TWB_SPSC_REF_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct twb_rec40 {
    uint64_t w[5];
} twb_rec40_t;

typedef struct twb_spsc twb_spsc_t;

/* @p slots: power of two. NULL on allocation failure. */
twb_spsc_t *twb_spsc_create(unsigned slots);
void twb_spsc_destroy(twb_spsc_t *q);
/* Thread: the producer. False when full. */
bool twb_spsc_push(twb_spsc_t *q, const twb_rec40_t *rec);
/* Thread: the consumer. Up to @p max records; returns how many. */
int twb_spsc_pop(twb_spsc_t *q, twb_rec40_t *out, int max);

#ifdef __cplusplus
}
#endif

#endif /* TWB_SPSC_REF_H */
