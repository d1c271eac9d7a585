/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_send_inject through the public API, in a job of one or two:
 *
 *   twrun -n 2 test_api_inject        (any TW_TRANSPORTS, reliability, progress mode)
 *   test_api_inject                   (a job of one: rank 0 sends to itself)
 *
 * Each of THREADS sending threads of rank 0 sends MSGS messages to the
 * last rank, on one tag per thread: most with tw_send_inject, every fifth
 * with tw_send (its completion checked), sizes 0 .. TW_INJECT_MAX. The
 * source buffer is overwritten right after each inject returns, so a
 * transport that kept a pointer instead of copying delivers the wrong
 * bytes. The receiving rank posts one exact receive per message of each
 * thread, in order, so the k-th receive must get the k-th message
 * (non-overtaking across the two send calls): its length, its header
 * (thread, sequence number) and every byte are checked. Then rank 0 checks
 * the refusals (too long, rank outside the job, NULL buffer, NULL context)
 * and that no completion ever came for an inject.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "threadwire/threadwire.h"
#include "tw_test.h"

#define THREADS  2
#define MSGS     2000
#define TAG_DONE (1ull << 40)

static tw_context_t *g_ctx;
static int g_rank, g_size, g_dst;
static uint64_t g_msgs;

/* Message k of thread t: 16 header bytes (t, k), then seeded bytes. */
static size_t msg_len(uint64_t k)
{
    return k % 7 == 0 ? 0 : (size_t)(16 + (k * 131) % (TW_INJECT_MAX - 15));
}

static void msg_fill(unsigned char *p, size_t len, uint64_t t, uint64_t k)
{
    if (len >= 16) {
        memcpy(p, &t, 8);
        memcpy(p + 8, &k, 8);
        twt_fill(p + 16, len - 16, t << 32 | k);
    }
}

/* Drive progress in manual mode; a no-op with progress threads. */
static int wait_some(tw_cq_t *cq, tw_completion_t *c, int max)
{
    int n;
    double t0 = twt_now();
    while ((n = tw_cq_poll(cq, c, max)) == 0) {
        tw_progress(g_ctx);
        TWT_CHECKF(twt_now() - t0 < 30, "rank %d: no completion for 30 s", g_rank);
    }
    TWT_CHECK(n > 0);
    return n;
}

static void *sender(void *arg)
{
    uint64_t t = (uint64_t)(uintptr_t)arg, sends = 0, done = 0;
    unsigned char buf[TW_INJECT_MAX], keep[TW_INJECT_MAX];
    tw_completion_t c[16];
    tw_cq_t *cq;

    TWT_CHECK(tw_cq_create(g_ctx, 64, &cq) == TW_OK);
    for (uint64_t k = 0; k < g_msgs; k++) {
        size_t len = msg_len(k);
        bool inject = k % 5 != 0;
        tw_status_t st;
        msg_fill(inject ? buf : keep, len, t, k);
        do {
            st = inject ? tw_send_inject(g_ctx, g_dst, t, buf, len)
                        : tw_send(g_ctx, g_dst, t, keep, len, cq, (void *)(uintptr_t)(k + 1));
            if (st == TW_ERR_AGAIN) {
                tw_progress(g_ctx);
                done += (uint64_t)tw_cq_poll(cq, c, 16);
            }
        } while (st == TW_ERR_AGAIN);
        TWT_CHECKF(st == TW_OK, "thread %llu message %llu: %s", (unsigned long long)t,
                   (unsigned long long)k, tw_strerror(st));
        if (inject) {
            memset(buf, 0xa5, sizeof(buf)); /* copied: reusing it changes nothing */
        } else {
            sends++;
            while (done < sends) { /* keep is reused: wait for its completion */
                int n = wait_some(cq, c, 16);
                for (int i = 0; i < n; i++) {
                    TWT_CHECK(c[i].op == TW_OP_SEND && c[i].status == TW_OK &&
                              c[i].user == (void *)(uintptr_t)(k + 1) && c[i].peer == g_dst);
                }
                done += (uint64_t)n;
            }
        }
    }
    TWT_EQ(tw_cq_poll(cq, c, 16), 0); /* nothing for the injects */
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    return NULL;
}

static void *receiver(void *arg)
{
    uint64_t t = (uint64_t)(uintptr_t)arg;
    unsigned char buf[TW_INJECT_MAX], want[TW_INJECT_MAX];
    tw_completion_t c;
    tw_cq_t *cq;

    TWT_CHECK(tw_cq_create(g_ctx, 4, &cq) == TW_OK);
    for (uint64_t k = 0; k < g_msgs; k++) {
        size_t len = msg_len(k);
        TWT_CHECK(tw_recv(g_ctx, 0, t, 0, buf, sizeof(buf), cq, NULL) == TW_OK);
        TWT_EQ(wait_some(cq, &c, 1), 1);
        TWT_CHECKF(c.status == TW_OK && c.op == TW_OP_RECV && c.peer == 0 && c.tag == t,
                   "thread %llu receive %llu: %s", (unsigned long long)t, (unsigned long long)k,
                   tw_strerror(c.status));
        TWT_CHECKF(c.length == len, "thread %llu receive %llu: %zu bytes, want %zu",
                   (unsigned long long)t, (unsigned long long)k, c.length, len);
        msg_fill(want, len, t, k);
        TWT_CHECKF(memcmp(buf, want, len) == 0, "thread %llu receive %llu: wrong bytes",
                   (unsigned long long)t, (unsigned long long)k);
    }
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    return NULL;
}

/* Rank 0: the refusals, each with its error line. */
static void refusals(void)
{
    unsigned char b[TW_INJECT_MAX + 1] = {0};

    TWT_EQ(tw_send_inject(g_ctx, g_dst, 1, b, TW_INJECT_MAX + 1), TW_ERR_INVALID);
    TWT_EQ(tw_send_inject(g_ctx, g_size, 1, b, 8), TW_ERR_INVALID);
    TWT_EQ(tw_send_inject(g_ctx, -1, 1, b, 8), TW_ERR_INVALID);
    TWT_EQ(tw_send_inject(g_ctx, g_dst, 1, NULL, 8), TW_ERR_INVALID);
    TWT_EQ(tw_send_inject(NULL, g_dst, 1, b, 8), TW_ERR_INVALID);
}

int main(void)
{
    pthread_t th[THREADS];
    tw_completion_t c;
    tw_cq_t *cq;

    TWT_CHECK(tw_init(NULL, &g_ctx) == TW_OK);
    g_rank = tw_rank(g_ctx);
    g_size = tw_size(g_ctx);
    g_dst = g_size - 1;
    g_msgs = twt_scaled(MSGS, 100);
    TWT_CHECK(tw_cq_create(g_ctx, 4, &cq) == TW_OK);
    if (g_rank == g_dst) {
        TWT_CHECK(tw_recv(g_ctx, 0, TAG_DONE, 0, NULL, 0, cq, NULL) == TW_OK);
    }
    for (int i = 0; i < THREADS && g_rank == g_dst; i++) {
        TWT_EQ(pthread_create(&th[i], NULL, receiver, (void *)(uintptr_t)i), 0);
    }
    if (g_rank == 0) {
        pthread_t snd[THREADS];
        for (int i = 0; i < THREADS; i++) {
            TWT_EQ(pthread_create(&snd[i], NULL, sender, (void *)(uintptr_t)i), 0);
        }
        for (int i = 0; i < THREADS; i++) {
            TWT_EQ(pthread_join(snd[i], NULL), 0);
        }
        refusals();
        tw_status_t st;
        while ((st = tw_send_inject(g_ctx, g_dst, TAG_DONE, NULL, 0)) == TW_ERR_AGAIN) {
            tw_progress(g_ctx); /* reliability's window is full: retry */
        }
        TWT_EQ(st, TW_OK);
    }
    for (int i = 0; i < THREADS && g_rank == g_dst; i++) {
        TWT_EQ(pthread_join(th[i], NULL), 0);
    }
    if (g_rank == g_dst) {
        TWT_EQ(wait_some(cq, &c, 1), 1);
        TWT_CHECK(c.status == TW_OK && c.tag == TAG_DONE && c.length == 0);
        printf("inject: %d threads x %llu messages of 0..%d bytes from rank 0, in order, "
               "intact\n",
               THREADS, (unsigned long long)g_msgs, TW_INJECT_MAX);
    }
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    TWT_EQ(tw_finalize(g_ctx), TW_OK);
    return 0;
}
