/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Completion queue basics: argument checks, depth accounting (reserve,
 * unreserve, TW_ERR_AGAIN), FIFO delivery of every field, destroy with
 * operations in flight, counters.
 */
#include <string.h>

#include "core/tw_stats.h"
#include "progress/tw_cq.h"
#include "tw_test.h"

static tw_completion_t mk(unsigned i)
{
    return (tw_completion_t){.user = (void *)(uintptr_t)(0x1000 + i),
                             .status = i % 2 ? TW_ERR_TRUNCATED : TW_OK,
                             .op = (tw_op_t)(i % 6),
                             .peer = (int)i * 3,
                             .tag = 0xabcdef0000ull + i,
                             .length = (size_t)i * 7};
}

static void check_same(const tw_completion_t *a, const tw_completion_t *b)
{
    TWT_CHECK(a->user == b->user);
    TWT_EQ(a->status, b->status);
    TWT_EQ(a->op, b->op);
    TWT_EQ(a->peer, b->peer);
    TWT_EQ(a->tag, b->tag);
    TWT_EQ(a->length, b->length);
}

static void test_invalid(void)
{
    tw_cq_params_t p = {.depth = 8};
    tw_cq_t *cq = (tw_cq_t *)(uintptr_t)0x1; /* must stay untouched */
    tw_completion_t c;

    p.depth = 0;
    TWT_EQ(tw_cq_open(&p, &cq), TW_ERR_INVALID);
    p.depth = TW_CQ_DEPTH_MAX + 1;
    TWT_EQ(tw_cq_open(&p, &cq), TW_ERR_INVALID);
    p.depth = 8;
    p.wait_mode = (tw_wait_mode_t)77;
    TWT_EQ(tw_cq_open(&p, &cq), TW_ERR_INVALID);
    p.wait_mode = TW_WAIT_BLOCK;
    TWT_EQ(tw_cq_open(NULL, &cq), TW_ERR_INVALID);
    TWT_EQ(tw_cq_open(&p, NULL), TW_ERR_INVALID);
    TWT_CHECK(cq == (tw_cq_t *)(uintptr_t)0x1);

    TWT_EQ(tw_cq_poll(NULL, &c, 1), -1);
    TWT_EQ(tw_cq_wait(NULL, &c, 1, 0), -1);
    TWT_EQ(tw_cq_fd(NULL), -1);
    TWT_EQ(tw_cq_destroy(NULL), TW_ERR_INVALID);

    TWT_EQ(tw_cq_open(&p, &cq), TW_OK);
    TWT_EQ(tw_cq_poll(cq, NULL, 1), -1);
    TWT_EQ(tw_cq_poll(cq, &c, -1), -1);
    TWT_EQ(tw_cq_poll(cq, &c, 0), 0);
    TWT_EQ(tw_cq_poll(cq, &c, 1), 0);
    TWT_EQ(tw_cq_wait(cq, NULL, 1, 0), -1);
    TWT_EQ(tw_cq_wait(cq, &c, 0, 0), -1);
    TWT_EQ(tw_cq_wait(cq, &c, -3, 0), -1);
    TWT_EQ(tw_cq_wait(cq, &c, 1, 0), 0);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
}

static void test_depth_and_order(void)
{
    tw_stats_t *st = tw_stats_create("cq", tw_cq_stat_descs, TW_CQ_STAT_COUNT);
    int owner_tag;
    tw_cq_params_t p = {.depth = 4, .owner = &owner_tag, .stats = st};
    tw_completion_t out[8], c;
    tw_cq_t *cq;

    TWT_CHECK(st != NULL);
    TWT_EQ(tw_cq_open(&p, &cq), TW_OK);
    TWT_CHECK(tw_cq_owner(cq) == &owner_tag);

    for (int i = 0; i < 4; i++) {
        TWT_EQ(tw_cq_reserve(cq), TW_OK);
    }
    TWT_EQ(tw_cq_reserve(cq), TW_ERR_AGAIN); /* beyond depth */
    TWT_EQ(tw_cq_reserve(cq), TW_ERR_AGAIN);
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_AGAIN), 2);
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_DEPTH_HWM), 4);
    TWT_EQ(tw_cq_inflight(cq), 4);
    TWT_EQ(tw_cq_destroy(cq), TW_ERR_AGAIN); /* operations in flight */

    tw_cq_unreserve(cq); /* a post that failed */
    TWT_EQ(tw_cq_inflight(cq), 3);
    TWT_EQ(tw_cq_reserve(cq), TW_OK); /* the space came back */
    TWT_EQ(tw_cq_reserve(cq), TW_ERR_AGAIN);

    for (unsigned i = 0; i < 4; i++) {
        c = mk(i);
        tw_cq_push(cq, &c);
    }
    TWT_EQ(tw_cq_inflight(cq), 0);
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_PUSHED), 4);
    /* Pushed but not polled still holds the space. */
    TWT_EQ(tw_cq_reserve(cq), TW_ERR_AGAIN);

    TWT_EQ(tw_cq_poll(cq, out, 1), 1);
    c = mk(0);
    check_same(&out[0], &c);
    TWT_EQ(tw_cq_poll(cq, out, 8), 3);
    for (unsigned i = 0; i < 3; i++) {
        c = mk(i + 1);
        check_same(&out[i], &c);
    }
    TWT_EQ(tw_cq_poll(cq, out, 8), 0);

    /* Wrap the ring many times at full depth. */
    for (unsigned round = 0; round < 5000; round++) {
        for (unsigned i = 0; i < 4; i++) {
            TWT_EQ(tw_cq_reserve(cq), TW_OK);
        }
        for (unsigned i = 0; i < 4; i++) {
            c = mk(round * 4 + i);
            tw_cq_push(cq, &c);
        }
        TWT_EQ(tw_cq_poll(cq, out, 8), 4);
        for (unsigned i = 0; i < 4; i++) {
            c = mk(round * 4 + i);
            check_same(&out[i], &c);
        }
    }
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_PUSHED), 4 + 5000 * 4);
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_DEPTH_HWM), 4);
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_WAKEUPS), 0); /* nobody ever slept */

    /* Queued completions nobody polled are discarded by destroy. */
    TWT_EQ(tw_cq_reserve(cq), TW_OK);
    c = mk(99);
    tw_cq_push(cq, &c);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    tw_stats_destroy(st);
}

/* A power-of-two depth fills its ring completely without a poll. */
static void test_full_pow2(void)
{
    tw_cq_params_t p = {.depth = 256};
    tw_completion_t out[64], c;
    tw_cq_t *cq;
    unsigned got = 0;

    TWT_EQ(tw_cq_open(&p, &cq), TW_OK);
    for (unsigned i = 0; i < 256; i++) {
        TWT_EQ(tw_cq_reserve(cq), TW_OK);
        c = mk(i);
        tw_cq_push(cq, &c);
    }
    TWT_EQ(tw_cq_reserve(cq), TW_ERR_AGAIN);
    for (int n; (n = tw_cq_poll(cq, out, 64)) > 0;) {
        for (int i = 0; i < n; i++) {
            c = mk(got + (unsigned)i);
            check_same(&out[i], &c);
        }
        got += (unsigned)n;
    }
    TWT_EQ(got, 256);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);

    /* Depth 1 and the maximal accepted range edge cases open fine. */
    p.depth = 1;
    TWT_EQ(tw_cq_open(&p, &cq), TW_OK);
    TWT_EQ(tw_cq_reserve(cq), TW_OK);
    TWT_EQ(tw_cq_reserve(cq), TW_ERR_AGAIN);
    c = mk(1);
    tw_cq_push(cq, &c);
    TWT_EQ(tw_cq_poll(cq, out, 4), 1);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
}

int main(void)
{
    test_invalid();
    test_depth_and_order();
    test_full_pow2();
    printf("ok\n");
    return 0;
}
