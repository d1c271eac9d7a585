/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * CQ stress: P producers each reserve-then-push N completions carrying
 * (producer, sequence, check) in (peer, tag, length); C consumers take
 * them. Every item must arrive exactly once (a bitmap per producer, set
 * with fetch_or: a bit already set is a duplicate, a bit never set is a
 * loss), intact, and each consumer must see any one producer's items in
 * increasing order. A small depth keeps the TW_ERR_AGAIN path busy.
 *
 * Shapes (argv[1]):
 *   4x4          4 producers x 3*10^5, 4 polling consumers, depth 64
 *   1x1          1 producer x 4*10^6, 1 polling consumer, depth 256
 *   2x2block     consumers sleep in tw_cq_wait (block): lost wake-ups
 *                would stall a consumer (a 10 s silence fails the test)
 *   2x2adaptive  the same in adaptive mode
 * Counts are divided by TWTEST_SCALE (sanitizer builds).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "core/tw_atomic.h"
#include "core/tw_stats.h"
#include "progress/tw_cq.h"
#include "tw_test.h"

#define POISON_PEER 0x7fff

typedef struct {
    unsigned producers, consumers;
    uint64_t per_producer;
    unsigned depth;
    bool wait;
    tw_wait_mode_t mode;
} shape_t;

typedef struct {
    shape_t s;
    tw_cq_t *cq;
    atomic_uint_fast64_t **seen; /* [producer][word] */
    uint64_t **payload;          /* [producer][seq]: written before the push,
                                  * read after the poll (plain memory: the CQ
                                  * must order it; TSan checks) */
    atomic_ullong consumed;
    atomic_int go;
} stress_t;

typedef struct {
    stress_t *st;
    unsigned id;
    uint64_t taken;
} thread_arg_t;

static uint64_t item_check(unsigned p, uint64_t seq)
{
    return (seq * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)p << 56) ^ 0x3c3c3c3cull;
}

/* The test's own waits: spin, yield a little, then sleep -- long yield
 * phases starve the very thread we wait for (CFS keeps yielders first). */
static void backoff(unsigned *n)
{
    ++*n;
    if (*n > 64) {
        usleep(20);
    } else if (*n > 8) {
        sched_yield();
    } else {
        tw_cpu_relax();
    }
}

static void *producer(void *p)
{
    thread_arg_t *a = p;
    stress_t *st = a->st;

    while (atomic_load_explicit(&st->go, memory_order_acquire) == 0) {
        sched_yield();
    }
    for (uint64_t seq = 0; seq < st->s.per_producer; seq++) {
        tw_completion_t c = {.user = st,
                             .status = TW_OK,
                             .op = TW_OP_SEND,
                             .peer = (int)a->id,
                             .tag = seq,
                             .length = (size_t)item_check(a->id, seq)};
        unsigned n = 0;
        while (tw_cq_reserve(st->cq) == TW_ERR_AGAIN) {
            backoff(&n);
        }
        st->payload[a->id][seq] = ~item_check(a->id, seq);
        tw_cq_push(st->cq, &c);
    }
    return NULL;
}

static void push_poison(tw_cq_t *cq)
{
    tw_completion_t c = {.peer = POISON_PEER};
    unsigned n = 0;

    while (tw_cq_reserve(cq) == TW_ERR_AGAIN) {
        backoff(&n);
    }
    tw_cq_push(cq, &c);
}

static void *consumer(void *p)
{
    thread_arg_t *a = p;
    stress_t *st = a->st;
    uint64_t total = (uint64_t)st->s.producers * st->s.per_producer;
    int64_t *last = calloc(st->s.producers, sizeof(*last));
    tw_completion_t out[16];
    unsigned idle = 0;

    TWT_CHECK(last != NULL);
    for (unsigned i = 0; i < st->s.producers; i++) {
        last[i] = -1;
    }
    while (atomic_load_explicit(&st->go, memory_order_acquire) == 0) {
        sched_yield();
    }
    for (;;) {
        int n;

        if (st->s.wait) {
            n = tw_cq_wait(st->cq, out, 16, 10000);
            TWT_CHECKF(n > 0, "consumer %u: no completion for 10 s (%llu of %llu taken)", a->id,
                       (unsigned long long)atomic_load(&st->consumed), (unsigned long long)total);
        } else {
            if (atomic_load_explicit(&st->consumed, memory_order_relaxed) >= total) {
                break;
            }
            n = tw_cq_poll(st->cq, out, 16);
            TWT_CHECK(n >= 0);
            if (n == 0) {
                backoff(&idle);
                continue;
            }
            idle = 0;
        }
        int poisons = 0;
        for (int i = 0; i < n; i++) {
            const tw_completion_t *c = &out[i];
            if (c->peer == POISON_PEER) {
                poisons++;
                continue;
            }
            TWT_CHECK(c->peer >= 0 && (unsigned)c->peer < st->s.producers);
            unsigned pid = (unsigned)c->peer;
            uint64_t seq = c->tag;
            TWT_CHECK(seq < st->s.per_producer);
            TWT_CHECK(c->user == st && c->status == TW_OK && c->op == TW_OP_SEND);
            TWT_EQ(c->length, (size_t)item_check(pid, seq));
            TWT_EQ(st->payload[pid][seq], ~item_check(pid, seq));
            TWT_CHECKF((int64_t)seq > last[pid], "consumer %u: producer %u seq %llu after %lld",
                       a->id, pid, (unsigned long long)seq, (long long)last[pid]);
            last[pid] = (int64_t)seq;
            uint_fast64_t bit = (uint_fast64_t)1 << (seq % 64);
            uint_fast64_t old =
                atomic_fetch_or_explicit(&st->seen[pid][seq / 64], bit, memory_order_relaxed);
            TWT_CHECKF((old & bit) == 0, "producer %u seq %llu delivered twice", pid,
                       (unsigned long long)seq);
            a->taken++;
        }
        atomic_fetch_add_explicit(&st->consumed, (unsigned long long)(n - poisons),
                                  memory_order_relaxed);
        if (poisons > 0) {
            /* One poison each: hand any extra back to the others. */
            for (int i = 1; i < poisons; i++) {
                push_poison(st->cq);
            }
            break;
        }
    }
    free(last);
    return NULL;
}

static void run(const shape_t *s)
{
    tw_stats_t *stats = tw_stats_create("cq", tw_cq_stat_descs, TW_CQ_STAT_COUNT);
    tw_cq_params_t p = {.depth = s->depth, .wait_mode = s->mode, .spin_ns = 20000, .stats = stats};
    pthread_t pth[8], cth[8];
    thread_arg_t pa[8], ca[8];
    uint64_t words = (s->per_producer + 63) / 64, taken = 0;
    stress_t st = {.s = *s};
    double t0;

    TWT_CHECK(s->producers <= 8 && s->consumers <= 8);
    TWT_EQ(tw_cq_open(&p, &st.cq), TW_OK);
    st.seen = calloc(s->producers, sizeof(*st.seen));
    st.payload = calloc(s->producers, sizeof(*st.payload));
    TWT_CHECK(st.seen != NULL && st.payload != NULL);
    for (unsigned i = 0; i < s->producers; i++) {
        st.seen[i] = calloc(words, sizeof(**st.seen));
        st.payload[i] = calloc(s->per_producer, sizeof(**st.payload));
        TWT_CHECK(st.seen[i] != NULL && st.payload[i] != NULL);
    }
    atomic_init(&st.consumed, 0);
    atomic_init(&st.go, 0);

    for (unsigned i = 0; i < s->consumers; i++) {
        ca[i] = (thread_arg_t){.st = &st, .id = i};
        TWT_EQ(pthread_create(&cth[i], NULL, consumer, &ca[i]), 0);
    }
    for (unsigned i = 0; i < s->producers; i++) {
        pa[i] = (thread_arg_t){.st = &st, .id = i};
        TWT_EQ(pthread_create(&pth[i], NULL, producer, &pa[i]), 0);
    }
    t0 = twt_now();
    atomic_store_explicit(&st.go, 1, memory_order_release);
    for (unsigned i = 0; i < s->producers; i++) {
        pthread_join(pth[i], NULL);
    }
    if (s->wait) {
        /* Sleeping consumers leave on a poison completion each. */
        for (unsigned i = 0; i < s->consumers; i++) {
            push_poison(st.cq);
        }
    }
    for (unsigned i = 0; i < s->consumers; i++) {
        pthread_join(cth[i], NULL);
        taken += ca[i].taken;
    }
    double dt = twt_now() - t0;

    TWT_EQ(taken, (uint64_t)s->producers * s->per_producer);
    for (unsigned pr = 0; pr < s->producers; pr++) {
        for (uint64_t seq = 0; seq < s->per_producer; seq++) {
            uint_fast64_t w = atomic_load_explicit(&st.seen[pr][seq / 64], memory_order_relaxed);
            TWT_CHECKF(w & ((uint_fast64_t)1 << (seq % 64)), "producer %u seq %llu lost", pr,
                       (unsigned long long)seq);
        }
        free(st.seen[pr]);
        free(st.payload[pr]);
    }
    free(st.seen);
    free(st.payload);
    TWT_EQ(tw_cq_inflight(st.cq), 0);
    TWT_EQ(tw_cq_waiters(st.cq), 0);
    tw_completion_t rest[4];
    TWT_EQ(tw_cq_poll(st.cq, rest, 4), 0);
    /* Poisons (wait shapes) may be pushed more than once: handed back. */
    if (s->wait) {
        TWT_CHECK(tw_stats_read(stats, TW_CQ_STAT_PUSHED) >=
                  (uint64_t)s->producers * s->per_producer + s->consumers);
    } else {
        TWT_EQ(tw_stats_read(stats, TW_CQ_STAT_PUSHED), (uint64_t)s->producers * s->per_producer);
    }
    TWT_CHECK(tw_stats_read(stats, TW_CQ_STAT_DEPTH_HWM) <= s->depth);
    printf("%ux%u depth %u: %llu items in %.2f s (%.2f M/s), again %llu, wakeups %llu, hwm %llu\n",
           s->producers, s->consumers, s->depth, (unsigned long long)taken, dt,
           (double)taken / dt / 1e6, (unsigned long long)tw_stats_read(stats, TW_CQ_STAT_AGAIN),
           (unsigned long long)tw_stats_read(stats, TW_CQ_STAT_WAKEUPS),
           (unsigned long long)tw_stats_read(stats, TW_CQ_STAT_DEPTH_HWM));
    TWT_EQ(tw_cq_destroy(st.cq), TW_OK);
    tw_stats_destroy(stats);
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "4x4";
    shape_t s;

    if (strcmp(c, "4x4") == 0) {
        s = (shape_t){4, 4, twt_scaled(300000, 10000), 64, false, TW_WAIT_SPIN};
    } else if (strcmp(c, "1x1") == 0) {
        s = (shape_t){1, 1, twt_scaled(4000000, 100000), 256, false, TW_WAIT_SPIN};
    } else if (strcmp(c, "2x2block") == 0) {
        s = (shape_t){2, 2, twt_scaled(300000, 10000), 64, true, TW_WAIT_BLOCK};
    } else if (strcmp(c, "2x2adaptive") == 0) {
        s = (shape_t){2, 2, twt_scaled(300000, 10000), 64, true, TW_WAIT_ADAPTIVE};
    } else {
        fprintf(stderr, "usage: %s 4x4|1x1|2x2block|2x2adaptive\n", argv[0]);
        return 1;
    }
    run(&s);
    return 0;
}
