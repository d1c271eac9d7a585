/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The verbs async event thread's machinery, with pipes standing in for
 * devices' async fds (devices themselves are exercised in the VM):
 *   - every byte written to a watched pipe is read by its callback,
 *     on the async thread, exactly once;
 *   - after tw_va_remove returns, the callback never runs again;
 *   - a hung-up or closed source is dropped, not spun on;
 *   - adds and removes from several threads at once;
 *   - bad arguments are refused; destroy with sources still watched;
 *   - the event classification the transport acts on.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "core/tw_time.h"
#include "transports/verbs/tw_verbs_async.h"
#include "tw_test.h"

#define NSRC     6
#define NTHREADS 4

typedef struct src {
    int fds[2];
    _Atomic uint64_t bytes; /* read by the callback */
    _Atomic uint64_t calls;
    _Atomic int removed; /* set once tw_va_remove returned */
    _Atomic int late;    /* callbacks after that */
} src_t;

static pthread_t async_thread;
static _Atomic int wrong_thread;

static void on_ready(void *arg, int fd)
{
    src_t *s = arg;
    char buf[256];
    ssize_t n;

    if (atomic_load(&s->removed)) {
        atomic_fetch_add(&s->late, 1);
    }
    if (atomic_fetch_add(&s->calls, 1) == 0) {
        async_thread = pthread_self(); /* every callback: the same thread */
    } else if (!pthread_equal(async_thread, pthread_self())) {
        atomic_fetch_add(&wrong_thread, 1);
    }
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        atomic_fetch_add(&s->bytes, (uint64_t)n);
    }
}

static void src_open(src_t *s)
{
    memset(s, 0, sizeof(*s));
    TWT_EQ(pipe2(s->fds, O_NONBLOCK | O_CLOEXEC), 0);
}

static void wait_bytes(src_t *s, uint64_t want)
{
    uint64_t end = tw_time_ns() + 10ull * 1000000000ull;
    while (atomic_load(&s->bytes) < want) {
        TWT_CHECKF(tw_time_ns() < end, "callback read %llu of %llu bytes",
                   (unsigned long long)atomic_load(&s->bytes), (unsigned long long)want);
        usleep(100);
    }
    TWT_EQ(atomic_load(&s->bytes), want);
}

static void test_basic(void)
{
    static src_t s[NSRC];
    tw_va_t *va;

    TWT_EQ(tw_va_create(&va), TW_OK);
    for (int i = 0; i < NSRC; i++) {
        src_open(&s[i]);
        TWT_EQ(tw_va_add(va, s[i].fds[0], on_ready, &s[i]), TW_OK);
    }
    /* Bad arguments and a second add of one fd. */
    TWT_EQ(tw_va_add(va, s[0].fds[0], on_ready, &s[0]), TW_ERR_INVALID);
    TWT_EQ(tw_va_add(va, -1, on_ready, &s[0]), TW_ERR_INVALID);
    TWT_EQ(tw_va_add(va, s[0].fds[1], NULL, &s[0]), TW_ERR_INVALID);
    TWT_EQ(tw_va_remove(va, s[0].fds[1]), TW_ERR_INVALID);
    TWT_EQ(tw_va_create(NULL), TW_ERR_INVALID);

    uint64_t want[NSRC] = {0};
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < NSRC; i++) {
            char b[17];
            size_t n = 1 + (size_t)(round * 7 + i) % sizeof(b);
            memset(b, 'a' + i, sizeof(b));
            TWT_EQ(write(s[i].fds[1], b, n), (ssize_t)n);
            want[i] += n;
        }
    }
    for (int i = 0; i < NSRC; i++) {
        wait_bytes(&s[i], want[i]);
    }
    TWT_EQ(atomic_load(&wrong_thread), 0);
    TWT_CHECK(!pthread_equal(async_thread, pthread_self()));

    /* Removed: nothing more is read, however much is written. */
    TWT_EQ(tw_va_remove(va, s[0].fds[0]), TW_OK);
    atomic_store(&s[0].removed, 1);
    TWT_EQ(write(s[0].fds[1], "xyz", 3), 3);
    /* A hung-up source: its last bytes are read, then it is dropped
     * (the thread would spin on POLLHUP otherwise; s[2] still works). */
    TWT_EQ(write(s[1].fds[1], "bye", 3), 3);
    close(s[1].fds[1]);
    wait_bytes(&s[1], want[1] + 3);
    TWT_EQ(write(s[2].fds[1], "more", 4), 4);
    wait_bytes(&s[2], want[2] + 4);
    uint64_t calls1 = atomic_load(&s[1].calls);
    usleep(20000);
    TWT_CHECKF(atomic_load(&s[1].calls) <= calls1 + 1, "hung-up source polled %llu more times",
               (unsigned long long)(atomic_load(&s[1].calls) - calls1));
    TWT_EQ(atomic_load(&s[0].bytes), want[0]);
    TWT_EQ(atomic_load(&s[0].late), 0);

    TWT_EQ(tw_va_remove(va, s[1].fds[0]), TW_OK);
    close(s[1].fds[0]);
    close(s[0].fds[0]);
    close(s[0].fds[1]);
    /* Destroy with s[2..] still watched. */
    tw_va_destroy(va);
    tw_va_destroy(NULL);
    for (int i = 2; i < NSRC; i++) {
        close(s[i].fds[0]);
        close(s[i].fds[1]);
    }
}

/* Threads add, feed and remove sources of their own at once. */
static tw_va_t *shared_va;

static void *churn(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    src_t s;

    for (int i = 0; i < 100; i++) {
        src_open(&s);
        TWT_EQ(tw_va_add(shared_va, s.fds[0], on_ready, &s), TW_OK);
        TWT_EQ(write(s.fds[1], &id, sizeof(id)), (ssize_t)sizeof(id));
        wait_bytes(&s, sizeof(id));
        TWT_EQ(tw_va_remove(shared_va, s.fds[0]), TW_OK);
        atomic_store(&s.removed, 1);
        TWT_EQ(write(s.fds[1], &id, sizeof(id)), (ssize_t)sizeof(id));
        /* Two more command round trips: had a callback been pending for
         * the removed source, it would have run by now. */
        int probe[2];
        TWT_EQ(pipe2(probe, O_CLOEXEC), 0);
        TWT_EQ(tw_va_add(shared_va, probe[0], on_ready, &s), TW_OK);
        TWT_EQ(tw_va_remove(shared_va, probe[0]), TW_OK);
        close(probe[0]);
        close(probe[1]);
        TWT_EQ(atomic_load(&s.late), 0);
        TWT_EQ(atomic_load(&s.bytes), sizeof(id));
        close(s.fds[0]);
        close(s.fds[1]);
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t th[NTHREADS];

    TWT_EQ(tw_va_create(&shared_va), TW_OK);
    for (uintptr_t t = 0; t < NTHREADS; t++) {
        TWT_EQ(pthread_create(&th[t], NULL, churn, (void *)t), 0);
    }
    for (int t = 0; t < NTHREADS; t++) {
        TWT_EQ(pthread_join(th[t], NULL), 0);
    }
    tw_va_destroy(shared_va);
    /* Start and stop, many times. */
    for (int i = 0; i < 50; i++) {
        tw_va_t *va;
        TWT_EQ(tw_va_create(&va), TW_OK);
        tw_va_destroy(va);
    }
}

static void test_classify(void)
{
    TWT_EQ(tw_va_classify(IBV_EVENT_PORT_ERR), TW_VA_PORT_DOWN);
    TWT_EQ(tw_va_classify(IBV_EVENT_PORT_ACTIVE), TW_VA_PORT_UP);
    TWT_EQ(tw_va_classify(IBV_EVENT_DEVICE_FATAL), TW_VA_DEVICE_FATAL);
    TWT_EQ(tw_va_classify(IBV_EVENT_QP_FATAL), TW_VA_QP_FATAL);
    TWT_EQ(tw_va_classify(IBV_EVENT_QP_REQ_ERR), TW_VA_QP_FATAL);
    TWT_EQ(tw_va_classify(IBV_EVENT_QP_ACCESS_ERR), TW_VA_QP_FATAL);
    TWT_EQ(tw_va_classify(IBV_EVENT_SRQ_LIMIT_REACHED), TW_VA_SRQ_LIMIT);
    TWT_EQ(tw_va_classify(IBV_EVENT_SRQ_ERR), TW_VA_SRQ_FATAL);
    TWT_EQ(tw_va_classify(IBV_EVENT_CQ_ERR), TW_VA_CQ_FATAL);
    TWT_EQ(tw_va_classify(IBV_EVENT_COMM_EST), TW_VA_IGNORE);
    TWT_EQ(tw_va_classify(IBV_EVENT_LID_CHANGE), TW_VA_IGNORE);
    TWT_CHECK(strcmp(tw_va_action_name(TW_VA_PORT_DOWN), "port down") == 0);
    TWT_CHECK(strcmp(tw_va_action_name(TW_VA_PORT_UP), "port up") == 0);
    /* How the peers an action cuts off fail: a port down is for now (it
     * may come back: PORT_ACTIVE fails nobody and restores the port),
     * anything dead is for good, the rest fails nobody. */
    TWT_EQ(tw_va_peer_status(tw_va_classify(IBV_EVENT_PORT_ERR)), TW_ERR_TRANSPORT);
    TWT_EQ(tw_va_peer_status(tw_va_classify(IBV_EVENT_PORT_ACTIVE)), TW_OK);
    TWT_EQ(tw_va_peer_status(tw_va_classify(IBV_EVENT_DEVICE_FATAL)), TW_ERR_PEER_FAILED);
    TWT_EQ(tw_va_peer_status(tw_va_classify(IBV_EVENT_QP_FATAL)), TW_ERR_PEER_FAILED);
    TWT_EQ(tw_va_peer_status(tw_va_classify(IBV_EVENT_QP_ACCESS_ERR)), TW_ERR_PEER_FAILED);
    TWT_EQ(tw_va_peer_status(tw_va_classify(IBV_EVENT_SRQ_ERR)), TW_ERR_PEER_FAILED);
    TWT_EQ(tw_va_peer_status(tw_va_classify(IBV_EVENT_CQ_ERR)), TW_ERR_PEER_FAILED);
    TWT_EQ(tw_va_peer_status(tw_va_classify(IBV_EVENT_SRQ_LIMIT_REACHED)), TW_OK);
    TWT_EQ(tw_va_peer_status(tw_va_classify(IBV_EVENT_LID_CHANGE)), TW_OK);
    TWT_EQ(tw_va_peer_status((tw_va_action_t)99), TW_OK);
    TWT_CHECK(strcmp(tw_va_action_name((tw_va_action_t)99), "?") == 0);
}

int main(void)
{
    test_classify();
    test_basic();
    test_threads();
    printf("verbs async thread: all cases passed\n");
    return 0;
}
