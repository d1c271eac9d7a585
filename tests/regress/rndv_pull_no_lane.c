/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Regression (fixed in 9ea7f76): a rendezvous pull handed to the engine
 * from a thread without a submission lane failed, and its sender heard
 * nothing until the peer failed or closed.
 *
 * A large receive posted after its message was announced, by a thread that
 * is not the transport's engine, while that thread cannot get a submission
 * lane to the engine (tw_pe_test_submit_fail: as if the lane could not be
 * allocated). The pull must run all the same -- the thread runs it itself,
 * as the engine's owner (tw_pe_hand_over) -- so the receive gets the
 * message intact and its sender's send completes.
 *
 *   twrun -n 2 regress_rndv_pull_no_lane   (TW_TRANSPORTS=shm or tcp, progress threads)
 *
 * Rank 0 sends NMSG messages of LEN bytes (rendezvous: above the eager
 * limit), then a small one; rank 1 receives the small one first, so the
 * large ones are all announced and unexpected by then, and posts their
 * receives one at a time, each with one submission failure armed, which
 * must be used up. Every byte is checked; every operation completes once.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "progress/tw_pe.h"
#include "threadwire/threadwire.h"
#include "tw_test.h"

#define NMSG     8
#define LEN      (256u * 1024u)
#define TAG_SENT 1000u

static unsigned char buf[LEN];

static unsigned char pattern(unsigned k, size_t i)
{
    return (unsigned char)(k * 131u + i * 7u + (i >> 9));
}

static void wait_one(tw_cq_t *cq, tw_status_t want, const char *what)
{
    tw_completion_t c;

    TWT_CHECKF(tw_cq_wait(cq, &c, 1, 30000) == 1, "%s: no completion in 30 s", what);
    TWT_CHECKF(c.status == want, "%s: %s", what, tw_strerror(c.status));
}

int main(void)
{
    tw_context_t *ctx;
    tw_cq_t *cq;
    uint64_t note = 0;

    TWT_EQ(tw_init(NULL, &ctx), TW_OK);
    TWT_EQ(tw_size(ctx), 2);
    TWT_EQ(tw_cq_create(ctx, 64, &cq), TW_OK);
    if (tw_rank(ctx) == 0) {
        static unsigned char out[NMSG][LEN];
        for (unsigned k = 0; k < NMSG; k++) {
            for (size_t i = 0; i < LEN; i++) {
                out[k][i] = pattern(k, i);
            }
            TWT_EQ(tw_send(ctx, 1, k, out[k], LEN, cq, NULL), TW_OK);
        }
        TWT_EQ(tw_send(ctx, 1, TAG_SENT, &note, sizeof(note), cq, NULL), TW_OK);
        for (unsigned k = 0; k <= NMSG; k++) {
            wait_one(cq, TW_OK, "a send");
        }
        printf("rank 0: %u large sends completed\n", NMSG);
    } else {
        TWT_EQ(tw_recv(ctx, 0, TAG_SENT, 0, &note, sizeof(note), cq, NULL), TW_OK);
        wait_one(cq, TW_OK, "the note");
        for (unsigned k = 0; k < NMSG; k++) {
            memset(buf, 0, LEN);
            (void)tw_pe_test_submit_fail(1);
            TWT_EQ(tw_recv(ctx, 0, k, 0, buf, LEN, cq, NULL), TW_OK);
            TWT_EQ(tw_pe_test_submit_fail(0), 0u); /* the failure was met */
            wait_one(cq, TW_OK, "a large receive");
            for (size_t i = 0; i < LEN; i++) {
                TWT_CHECKF(buf[i] == pattern(k, i), "message %u byte %zu", k, i);
            }
        }
        printf("rank 1: %u large receives pulled without a submission lane, intact\n", NMSG);
    }
    TWT_EQ(tw_finalize(ctx), TW_OK);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    return 0;
}
