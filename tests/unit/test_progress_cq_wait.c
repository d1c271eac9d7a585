/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_cq_wait: timeouts in every mode, a producer waking a sleeping waiter
 * (block and adaptive), the waiter count returning to 0, no wake-up
 * syscall when nobody sleeps, manual mode driving progress_fn, and
 * batches (tw_cq_batch_begin/end): 32 pushes wake a sleeper once, at the
 * end, and a CQ destroyed inside its own batch is let go first.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "core/tw_stats.h"
#include "progress/tw_cq.h"
#include "tw_test.h"

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static tw_cq_t *open_cq(tw_wait_mode_t mode, uint64_t spin_ns, tw_stats_t *st)
{
    tw_cq_params_t p = {.depth = 16, .wait_mode = mode, .spin_ns = spin_ns, .stats = st};
    tw_cq_t *cq;

    TWT_EQ(tw_cq_open(&p, &cq), TW_OK);
    return cq;
}

static void push_one(tw_cq_t *cq, uint64_t tag)
{
    tw_completion_t c = {.user = cq, .status = TW_OK, .op = TW_OP_RECV, .tag = tag};

    TWT_EQ(tw_cq_reserve(cq), TW_OK);
    tw_cq_push(cq, &c);
}

static void test_timeout(tw_wait_mode_t mode)
{
    tw_cq_t *cq = open_cq(mode, 2000000, NULL);
    tw_completion_t out[4];
    double t0 = twt_now();

    TWT_EQ(tw_cq_wait(cq, out, 4, 60), 0);
    TWT_CHECKF(twt_now() - t0 >= 0.060, "mode %d returned after %.4f s", (int)mode, twt_now() - t0);
    TWT_EQ(tw_cq_waiters(cq), 0);
    t0 = twt_now();
    TWT_EQ(tw_cq_wait(cq, out, 4, 0), 0); /* 0 = just poll */
    TWT_CHECK(twt_now() - t0 < 0.5);

    /* Something already queued returns at once with it. */
    push_one(cq, 5);
    TWT_EQ(tw_cq_wait(cq, out, 4, -1), 1);
    TWT_EQ(out[0].tag, 5);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
}

typedef struct {
    tw_cq_t *cq;
    int timeout_ms;
    int result;
    uint64_t tag;
    double elapsed;
} waiter_arg_t;

static void *waiter(void *p)
{
    waiter_arg_t *a = p;
    tw_completion_t out[2];
    double t0 = twt_now();

    a->result = tw_cq_wait(a->cq, out, 2, a->timeout_ms);
    a->elapsed = twt_now() - t0;
    if (a->result > 0) {
        a->tag = out[0].tag;
    }
    return NULL;
}

/* A lost wake-up leaves the waiter asleep: fail instead of hanging. */
static void join_within(pthread_t th, int seconds)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += seconds;
    TWT_CHECKF(pthread_timedjoin_np(th, NULL, &ts) == 0, "waiter still asleep after %d s", seconds);
}

/* A waiter announced and asleep is woken by one push. */
static void test_wakeup(tw_wait_mode_t mode, int timeout_ms)
{
    tw_stats_t *st = tw_stats_create("cq", tw_cq_stat_descs, TW_CQ_STAT_COUNT);
    tw_cq_t *cq = open_cq(mode, 200000 /* 0.2 ms, then sleep */, st);
    waiter_arg_t a = {.cq = cq, .timeout_ms = timeout_ms};
    pthread_t th;
    double t0 = twt_now();

    TWT_EQ(pthread_create(&th, NULL, waiter, &a), 0);
    while (tw_cq_waiters(cq) == 0) {
        TWT_CHECK(twt_now() - t0 < 10.0);
        sleep_ms(1);
    }
    sleep_ms(30); /* let it reach futex_wait */
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_WAKEUPS), 0);
    push_one(cq, 42);
    join_within(th, 10);
    TWT_EQ(a.result, 1);
    TWT_EQ(a.tag, 42);
    TWT_CHECKF(a.elapsed < 5.0, "waiter slept %.3f s", a.elapsed);
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_WAKEUPS), 1);
    TWT_EQ(tw_cq_waiters(cq), 0);

    /* With nobody asleep, pushes pay no wake-up. */
    for (unsigned i = 0; i < 1000; i++) {
        tw_completion_t out[1];
        push_one(cq, i);
        TWT_EQ(tw_cq_poll(cq, out, 1), 1);
    }
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_WAKEUPS), 1);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    tw_stats_destroy(st);
}

/* Spin mode: a later push ends the wait without any wake-up syscall. */
static void test_spin_wait(void)
{
    tw_stats_t *st = tw_stats_create("cq", tw_cq_stat_descs, TW_CQ_STAT_COUNT);
    tw_cq_t *cq = open_cq(TW_WAIT_SPIN, 0, st);
    waiter_arg_t a = {.cq = cq, .timeout_ms = 10000};
    pthread_t th;

    TWT_EQ(pthread_create(&th, NULL, waiter, &a), 0);
    sleep_ms(30);
    push_one(cq, 7);
    join_within(th, 10);
    TWT_EQ(a.result, 1);
    TWT_EQ(a.tag, 7);
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_WAKEUPS), 0);
    TWT_EQ(tw_cq_waiters(cq), 0);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    tw_stats_destroy(st);
}

/* ---- manual mode -------------------------------------------------------- */

typedef struct {
    tw_cq_t *cq;
    atomic_uint calls;
    unsigned push_at; /* push a completion on this call; 0 = never */
    int ret;
} manual_arg_t;

static int manual_progress(void *p)
{
    manual_arg_t *m = p;
    unsigned n = atomic_fetch_add_explicit(&m->calls, 1, memory_order_relaxed) + 1;

    if (n == m->push_at) {
        push_one(m->cq, 77);
        return 1;
    }
    return m->ret;
}

static void test_manual(void)
{
    manual_arg_t m = {.push_at = 100, .ret = 0};
    tw_cq_params_t p = {.depth = 4,
                        .wait_mode = TW_WAIT_BLOCK, /* ignored: manual never sleeps */
                        .progress_fn = manual_progress,
                        .progress_arg = &m};
    tw_completion_t out[4];
    tw_cq_t *cq;
    double t0;

    atomic_init(&m.calls, 0);
    TWT_EQ(tw_cq_open(&p, &cq), TW_OK);
    m.cq = cq;

    TWT_EQ(tw_cq_wait(cq, out, 4, 10000), 1);
    TWT_EQ(out[0].tag, 77);
    TWT_EQ(atomic_load(&m.calls), 100);
    TWT_EQ(tw_cq_waiters(cq), 0);

    /* timeout 0: one progress call, one poll. */
    TWT_EQ(tw_cq_wait(cq, out, 4, 0), 0);
    TWT_EQ(atomic_load(&m.calls), 101);

    /* A negative return counts as no work; the wait still times out. */
    m.ret = -1;
    t0 = twt_now();
    TWT_EQ(tw_cq_wait(cq, out, 4, 40), 0);
    TWT_CHECK(twt_now() - t0 >= 0.040);
    TWT_CHECK(atomic_load(&m.calls) > 102);
    TWT_EQ(tw_cq_waiters(cq), 0);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
}

/* A batch of pushes to a sleeper's CQ wakes it once, when the batch ends. */
static void test_batch(void)
{
    tw_stats_t *st = tw_stats_create("cq", tw_cq_stat_descs, TW_CQ_STAT_COUNT);
    tw_cq_t *cq = open_cq(TW_WAIT_BLOCK, 0, st);
    tw_cq_t *other = open_cq(TW_WAIT_BLOCK, 0, NULL);
    waiter_arg_t a = {.cq = cq, .timeout_ms = -1};
    pthread_t th;
    double t0 = twt_now();

    TWT_EQ(pthread_create(&th, NULL, waiter, &a), 0);
    while (tw_cq_waiters(cq) == 0) {
        TWT_CHECK(twt_now() - t0 < 10.0);
        sleep_ms(1);
    }
    sleep_ms(30); /* let it reach futex_wait */
    tw_cq_batch_begin();
    tw_cq_batch_begin(); /* nested: the outer end flushes */
    for (unsigned i = 0; i < 8; i++) {
        push_one(cq, 100 + i);
        push_one(other, i);
    }
    tw_cq_batch_end();
    sleep_ms(30);
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_WAKEUPS), 0); /* held */
    TWT_EQ(tw_cq_waiters(cq), 1);
    tw_cq_batch_end();
    join_within(th, 10);
    TWT_EQ(a.result, 2); /* it asked for at most 2 */
    TWT_EQ(a.tag, 100);
    TWT_EQ(tw_stats_read(st, TW_CQ_STAT_WAKEUPS), 1);

    /* Destroying a CQ the batch holds lets it go first (no hang). */
    tw_completion_t out[16];
    TWT_EQ(tw_cq_poll(cq, out, 16), 6);
    TWT_EQ(tw_cq_poll(other, out, 16), 8);
    tw_cq_batch_begin();
    push_one(other, 99);
    TWT_EQ(tw_cq_poll(other, out, 16), 1);
    TWT_EQ(tw_cq_destroy(other), TW_OK);
    tw_cq_batch_end();
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    tw_stats_destroy(st);
}

int main(void)
{
    test_timeout(TW_WAIT_SPIN);
    test_timeout(TW_WAIT_BLOCK);
    test_timeout(TW_WAIT_ADAPTIVE);
    test_wakeup(TW_WAIT_BLOCK, -1);
    test_wakeup(TW_WAIT_BLOCK, 20000);
    test_wakeup(TW_WAIT_ADAPTIVE, -1);
    test_wakeup(TW_WAIT_ADAPTIVE, 20000);
    test_spin_wait();
    test_manual();
    test_batch();
    printf("ok\n");
    return 0;
}
