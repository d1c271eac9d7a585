/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_cq_fd under epoll: readable after a push, quiet after draining,
 * readable again after the next push; an fd asked for with completions
 * already queued starts readable; racing first calls share one fd; a
 * producer/consumer pair driven only by epoll never misses a completion;
 * destroy closes the fd.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "progress/tw_cq.h"
#include "tw_test.h"

static tw_cq_t *open_cq(unsigned depth)
{
    tw_cq_params_t p = {.depth = depth, .wait_mode = TW_WAIT_BLOCK};
    tw_cq_t *cq;

    TWT_EQ(tw_cq_open(&p, &cq), TW_OK);
    return cq;
}

static void push_one(tw_cq_t *cq, uint64_t tag)
{
    tw_completion_t c = {.status = TW_OK, .op = TW_OP_SEND, .tag = tag};

    TWT_EQ(tw_cq_reserve(cq), TW_OK);
    tw_cq_push(cq, &c);
}

static int ep_for(int fd)
{
    struct epoll_event ev = {.events = EPOLLIN};
    int ep = epoll_create1(EPOLL_CLOEXEC);

    TWT_CHECK(ep >= 0);
    TWT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
    return ep;
}

static int readable(int ep, int timeout_ms)
{
    struct epoll_event ev;
    return epoll_wait(ep, &ev, 1, timeout_ms);
}

static void test_levels(void)
{
    int fd0 = twt_fd_count();
    tw_cq_t *cq = open_cq(8);
    tw_completion_t out[8];
    int fd, ep;

    fd = tw_cq_fd(cq);
    TWT_CHECK(fd >= 0);
    TWT_EQ(tw_cq_fd(cq), fd);
    ep = ep_for(fd);

    TWT_EQ(readable(ep, 0), 0);
    push_one(cq, 1);
    TWT_EQ(readable(ep, 0), 1);
    TWT_EQ(readable(ep, 0), 1); /* level: stays readable until drained */
    TWT_EQ(tw_cq_poll(cq, out, 8), 1);
    TWT_EQ(tw_cq_poll(cq, out, 8), 0);
    TWT_EQ(readable(ep, 0), 0);

    push_one(cq, 2);
    TWT_EQ(readable(ep, 0), 1);
    push_one(cq, 3);
    /* Taking only part leaves entries: the fd must stay readable. */
    TWT_EQ(tw_cq_poll(cq, out, 1), 1);
    TWT_EQ(readable(ep, 0), 1);
    TWT_EQ(tw_cq_poll(cq, out, 1), 1);
    TWT_EQ(tw_cq_poll(cq, out, 1), 0);
    TWT_EQ(readable(ep, 0), 0);
    push_one(cq, 4);
    TWT_EQ(readable(ep, 0), 1);
    TWT_EQ(tw_cq_poll(cq, out, 8), 1);
    TWT_EQ(readable(ep, 0), 0); /* the poll that found it empty drained it */

    close(ep);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    TWT_EQ(twt_fd_count(), fd0);
}

/* Completions queued before anyone asked for the fd. */
static void test_late_fd(void)
{
    tw_cq_t *cq = open_cq(8);
    tw_completion_t out[8];
    int ep;

    push_one(cq, 1);
    ep = ep_for(tw_cq_fd(cq));
    TWT_EQ(readable(ep, 0), 1);
    TWT_EQ(tw_cq_poll(cq, out, 8), 1);
    TWT_EQ(tw_cq_poll(cq, out, 8), 0);
    TWT_EQ(readable(ep, 0), 0);
    close(ep);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
}

/* ---- first calls racing ------------------------------------------------- */

#define RACERS 4

typedef struct {
    tw_cq_t *cq;
    atomic_int *go;
    int fd;
} racer_arg_t;

static void *racer(void *p)
{
    racer_arg_t *a = p;

    while (atomic_load_explicit(a->go, memory_order_acquire) == 0) {
        sched_yield();
    }
    a->fd = tw_cq_fd(a->cq);
    return NULL;
}

static void test_race(void)
{
    for (int round = 0; round < 20; round++) {
        int fd0 = twt_fd_count();
        tw_cq_t *cq = open_cq(4);
        pthread_t th[RACERS];
        racer_arg_t a[RACERS];
        atomic_int go = 0;

        for (int i = 0; i < RACERS; i++) {
            a[i] = (racer_arg_t){.cq = cq, .go = &go, .fd = -2};
            TWT_EQ(pthread_create(&th[i], NULL, racer, &a[i]), 0);
        }
        atomic_store_explicit(&go, 1, memory_order_release);
        for (int i = 0; i < RACERS; i++) {
            pthread_join(th[i], NULL);
            TWT_CHECK(a[i].fd >= 0);
            TWT_EQ(a[i].fd, a[0].fd);
        }
        TWT_EQ(twt_fd_count(), fd0 + 1); /* the losers closed theirs */
        TWT_EQ(tw_cq_destroy(cq), TW_OK);
        TWT_EQ(twt_fd_count(), fd0);
    }
}

/* ---- a consumer that only ever wakes from epoll --------------------------- */

typedef struct {
    tw_cq_t *cq;
    uint64_t count;
} prod_arg_t;

static void *producer(void *p)
{
    prod_arg_t *a = p;
    uint64_t rng = 7;

    for (uint64_t i = 0; i < a->count; i++) {
        while (tw_cq_reserve(a->cq) != TW_OK) {
            sched_yield();
        }
        tw_completion_t c = {.tag = i};
        tw_cq_push(a->cq, &c);
        if (twt_rand(&rng) % 16 == 0) {
            usleep(20); /* let the consumer go back to sleep sometimes */
        }
    }
    return NULL;
}

static void test_epoll_driven(void)
{
    tw_cq_t *cq = open_cq(32);
    prod_arg_t a = {.cq = cq, .count = twt_scaled(100000, 5000)};
    uint64_t next = 0;
    tw_completion_t out[16];
    pthread_t th;
    int ep = ep_for(tw_cq_fd(cq));

    TWT_EQ(pthread_create(&th, NULL, producer, &a), 0);
    while (next < a.count) {
        /* A lost readiness edge would leave us here with work queued. */
        TWT_CHECKF(readable(ep, 10000) == 1, "no readiness with %llu of %llu done",
                   (unsigned long long)next, (unsigned long long)a.count);
        for (int n; (n = tw_cq_poll(cq, out, 16)) > 0;) {
            for (int i = 0; i < n; i++) {
                TWT_EQ(out[i].tag, next);
                next++;
            }
        }
    }
    pthread_join(th, NULL);
    TWT_EQ(tw_cq_poll(cq, out, 16), 0);
    TWT_EQ(readable(ep, 0), 0);
    close(ep);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
}

int main(void)
{
    test_levels();
    test_late_fd();
    test_race();
    test_epoll_driven();
    printf("ok\n");
    return 0;
}
