/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * 10^3 init/finalize cycles, alternating progress-thread and manual mode,
 * each with a little traffic and an operation left outstanding: after each
 * finalize the process has exactly the threads and fds it had before
 * (LeakSanitizer checks the bytes in the Asan build).
 *   test_api_cycles [CYCLES]
 */
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "threadwire/threadwire.h"
#include "tw_test.h"

static void *noop(void *arg)
{
    return arg;
}

int main(int argc, char **argv)
{
    int cycles = argc > 1 ? atoi(argv[1]) : 1000;
    int threads0, fds0;
    pthread_t th;

    /* Sanitizer runtimes start a helper thread with the first thread:
     * start and join one first so the baseline includes it. */
    TWT_EQ(pthread_create(&th, NULL, noop, NULL), 0);
    pthread_join(th, NULL);
    threads0 = twt_thread_count();
    fds0 = twt_fd_count();
    char sbuf[64] = "hello", rbuf[64];

    TWT_CHECK(threads0 >= 1 && fds0 >= 0);
    for (int i = 0; i < cycles; i++) {
        tw_config_t cfg;
        tw_context_t *ctx;
        tw_cq_t *cq;
        tw_completion_t c[4];
        int got = 0;

        tw_config_init(&cfg);
        cfg.progress_threads = (i % 2) ? 0 : -1;
        cfg.wait_mode = (tw_wait_mode_t)(i % 3);
        TWT_EQ(tw_init(&cfg, &ctx), TW_OK);
        if (i % 2 == 0) {
            TWT_CHECK(twt_thread_count() > threads0); /* the progress thread runs */
        }
        TWT_EQ(tw_cq_create(ctx, 8, &cq), TW_OK);
        if (i % 5 == 0) {
            TWT_CHECK(tw_cq_fd(cq) >= 0);
        }
        TWT_EQ(tw_recv(ctx, 0, 7, 0, rbuf, sizeof(rbuf), cq, rbuf), TW_OK);
        TWT_EQ(tw_send(ctx, 0, 7, sbuf, 6, cq, sbuf), TW_OK);
        while (got < 2) {
            int n = tw_cq_wait(cq, c, 4, 5000);
            TWT_CHECK(n > 0);
            got += n;
        }
        TWT_CHECK(memcmp(rbuf, "hello", 6) == 0);
        /* left behind: a receive never matched, an unexpected message */
        TWT_EQ(tw_recv(ctx, 0, 8, 0, rbuf, sizeof(rbuf), cq, rbuf), TW_OK);
        TWT_EQ(tw_send(ctx, 0, 9, sbuf, 6, cq, sbuf), TW_OK);
        TWT_EQ(tw_finalize(ctx), TW_OK);
        got = 0;
        for (int n; (n = tw_cq_poll(cq, c, 4)) > 0;) {
            for (int k = 0; k < n; k++) {
                if (c[k].op == TW_OP_RECV) {
                    TWT_EQ(c[k].status, TW_ERR_CANCELED);
                } else {
                    TWT_EQ(c[k].status, TW_OK);
                }
            }
            got += n;
        }
        TWT_EQ(got, 2);
        TWT_EQ(tw_cq_destroy(cq), TW_OK);
        /* A joined thread can linger in /proc for a moment after its
         * join returns (the kernel reaps it just after waking the joiner). */
        for (double t0 = twt_now(); twt_thread_count() != threads0 && twt_now() - t0 < 2;) {
            sched_yield();
        }
        TWT_EQ(twt_thread_count_settled(threads0), threads0);
        TWT_EQ(twt_fd_count(), fds0);
    }
    printf("%d init/finalize cycles: %d threads and %d fds before and after\n", cycles, threads0,
           fds0);
    return 0;
}
