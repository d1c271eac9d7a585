/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* C side of bench_rel.cc: two ranks in one thread over the fake transport
 * (tests/common/tw_fake_tl.h, no hooks: an in-memory wire),
 * with the reliability layer between sender and wire (reliable) or not,
 * so the difference is the layer's own CPU cost per message. */
#ifndef BENCH_REL_OPS_H
#define BENCH_REL_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bm_rel bm_rel_t;

bm_rel_t *bm_rel_create(bool reliable);
void bm_rel_destroy(bm_rel_t *b);
/* Rank 0 sends one message of @p len payload bytes (and a 32-byte upper
 * header, as msg's) to rank 1, which receives it; every 32 messages both
 * ranks run a progress pass (acks, timers), as a manual-mode loop would.
 * False on any failure. */
bool bm_rel_stream_step(bm_rel_t *b, size_t len);
/* One message 0 -> 1, then one back. */
bool bm_rel_pingpong_step(bm_rel_t *b, size_t len);
/* Messages received, and those with a wrong index or payload. */
uint64_t bm_rel_received(const bm_rel_t *b);
uint64_t bm_rel_bad(const bm_rel_t *b);

#ifdef __cplusplus
}
#endif

#endif
