/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The stall watchdog (TW_STALL_WARN, src/msg/tw_stall.h), under
 * `twrun -n 2`, each case with TW_STALL_WARN=1s:
 *
 *   recv     rank 1 posts a receive that rank 0 does not send until rank 1
 *            has seen it listed as stalled by tw_stats_print: exactly one
 *            warning line on rank 1 (the stalls counter is 1), none on 0.
 *   stopped  rank 0 SIGSTOPs rank 1, then sends it 1 MiB (rendezvous): the
 *            send is listed and warned of once; then SIGCONT, and the
 *            message arrives whole (checksum).
 *   pull_tcp rank 1 receives 64 MiB over tcp (rendezvous) and SIGSTOPs
 *            the sender as its pull begins (tcp counts a pull's bytes when
 *            it asks for them): the pulling receive is listed and warned of
 *            once; then SIGCONT, and the message arrives whole (checksum).
 *            The stopped sender warns of nothing: its first tick after the
 *            stop is late, so its peers' silence meanwhile does not count.
 *   bad_value  TW_STALL_WARN=30 (30 us) is refused by tw_init.
 *   coll     rank 0 waits in a barrier that rank 1 enters only once rank 0
 *            counted the stall: one line, on the node's collective segment
 *            (shm) or for a collective receive (tcp).
 *   icoll    the same with tw_ibarrier on rank 0 (engine 0 drives it, the
 *            caller polls its CQ): one line, on the slot set.
 *   slow     rank 1's receive for the last message waits 3 s while rank 0
 *            streams other messages to it every 100 ms: slow, not stalled,
 *            so no line on either rank.
 * _manual and _tcp variants run the same with TW_PROGRESS_THREADS=0 (the
 * tick runs inside tw_progress) and over TCP.
 *
 * The ranks that must stay quiet toward a peer wait for its go-ahead with
 * an active message and a flag, never with a posted receive (which would
 * stall in turn).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/tw_log.h"
#include "tw_mp.h"

enum { TAG_PID = 1, TAG_BIG = 2, TAG_DATA = 3, TAG_LAST = 4, TAG_END = 90 };
#define AM_GO    7
#define BIG_LEN  (1u << 20)
#define PULL_LEN (64u << 20)
#define WAIT_S   30.0

static tw_context_t *g_ctx;
static tw_cq_t *g_cq;
static atomic_int g_go;

static void on_go(tw_context_t *ctx, int src, const void *hdr, size_t hdr_len, const void *data,
                  size_t len, void *arg)
{
    (void)ctx, (void)src, (void)hdr, (void)hdr_len, (void)data, (void)len, (void)arg;
    atomic_fetch_add_explicit(&g_go, 1, memory_order_release);
}

/* Tell @p peer to go on: an active message, no completion awaited past
 * the CQ entry. */
static void send_go(int peer)
{
    tw_completion_t c;

    TW_MP_CHECK(TW_MP_POST(g_ctx, tw_am_send(g_ctx, peer, AM_GO, NULL, 0, NULL, 0, g_cq, NULL)) ==
                    TW_OK,
                "go to rank %d", peer);
    TW_MP_CHECK(tw_cq_wait(g_cq, &c, 1, 30000) == 1 && c.status == TW_OK, "go completion");
}

/* Wait for the go-ahead without posting anything. */
static void wait_go(int want)
{
    double end = twt_now() + WAIT_S;

    while (atomic_load_explicit(&g_go, memory_order_acquire) < want) {
        TW_MP_CHECK(twt_now() < end, "no go-ahead from the peer in %.0f s", WAIT_S);
        tw_progress(g_ctx);
        usleep(1000);
    }
}

/* tw_stats_print's text. The caller frees it. */
static char *stats_text(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    TW_MP_CHECK(f != NULL, "open_memstream");
    TW_MP_CHECK(tw_stats_print(g_ctx, f) == TW_OK, "tw_stats_print");
    fclose(f);
    return buf;
}

/* Counter @p key (" name=") of the first line holding @p section
 * ("msg:", "tl:tcp:") in tw_stats_print's text. */
static uint64_t stat_value(const char *section, const char *key)
{
    char *text = stats_text();
    const char *at = strstr(text, section);
    const char *v = at != NULL ? strstr(at, key) : NULL;
    uint64_t n;

    TW_MP_CHECK(v != NULL, "no%s after '%s' in the statistics:\n%s", key, section, text);
    n = strtoull(v + strlen(key), NULL, 10);
    free(text);
    return n;
}

static uint64_t stalls_counted(void)
{
    return stat_value("msg:", " stalls=");
}

/* Poll tw_stats_print until it lists a stall that contains @p what. */
static void wait_listed(const char *what)
{
    double end = twt_now() + WAIT_S;

    for (;;) {
        char *text = stats_text();
        const char *at = strstr(text, "stalled: ");
        bool found = at != NULL && strstr(at, what) != NULL;
        TW_MP_CHECK(found || twt_now() < end, "no stall listed with '%s' after %.0f s:\n%s", what,
                    WAIT_S, text);
        free(text);
        if (found) {
            return;
        }
        tw_progress(g_ctx);
        usleep(10000);
    }
}

static tw_completion_t wait_one(void)
{
    tw_completion_t c;

    TW_MP_CHECK(tw_cq_wait(g_cq, &c, 1, (int)(WAIT_S * 1000)) == 1, "no completion in %.0f s",
                WAIT_S);
    return c;
}

static void run_recv(void)
{
    uint64_t v = 0;

    if (tw_mp_rank() == 1) {
        TW_MP_CHECK(tw_recv(g_ctx, 0, 0x7e57, 0, &v, sizeof(v), g_cq, NULL) == TW_OK, "recv");
        wait_listed("receive from rank 0 tag 0x7e57, 8 bytes");
        send_go(0);
        tw_completion_t c = wait_one();
        TW_MP_CHECK(c.status == TW_OK && v == 0xfeedull, "status %d value %llx", c.status,
                    (unsigned long long)v);
    } else {
        wait_go(1);
        v = 0xfeedull;
        TW_MP_CHECK(tw_send(g_ctx, 1, 0x7e57, &v, sizeof(v), g_cq, NULL) == TW_OK, "send");
        TW_MP_CHECK(wait_one().status == TW_OK, "send completion");
    }
}

static uint64_t checksum(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}

static void fill_checked(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (unsigned char)(i * 131u + 7u);
    }
    uint64_t sum = checksum(p, n - sizeof(sum));
    memcpy(p + n - sizeof(sum), &sum, sizeof(sum));
}

static bool checked(const unsigned char *p, size_t n)
{
    uint64_t want;

    memcpy(&want, p + n - sizeof(want), sizeof(want));
    return checksum(p, n - sizeof(want)) == want;
}

/* Rank @p stopped, which the other will SIGSTOP, sends its pid; the
 * other returns it. */
static int64_t exchange_pid(int stopped)
{
    int64_t pid = getpid();
    int peer = 1 - tw_mp_rank();

    if (tw_mp_rank() == stopped) {
        TW_MP_CHECK(tw_send(g_ctx, peer, TAG_PID, &pid, sizeof(pid), g_cq, NULL) == TW_OK, "pid");
    } else {
        TW_MP_CHECK(tw_recv(g_ctx, peer, TAG_PID, 0, &pid, sizeof(pid), g_cq, NULL) == TW_OK,
                    "pid");
    }
    TW_MP_CHECK(wait_one().status == TW_OK, "pid exchange");
    return pid;
}

static void run_stopped(void)
{
    unsigned char *big = malloc(BIG_LEN);
    int64_t pid = exchange_pid(1);

    TW_MP_CHECK(big != NULL, "malloc");
    if (tw_mp_rank() == 1) {
        wait_go(1); /* rank 0 stops us meanwhile */
        TW_MP_CHECK(tw_recv(g_ctx, 0, TAG_BIG, 0, big, BIG_LEN, g_cq, NULL) == TW_OK, "recv");
        tw_completion_t c = wait_one();
        TW_MP_CHECK(c.status == TW_OK && c.length == BIG_LEN, "big: status %d length %zu", c.status,
                    c.length);
        TW_MP_CHECK(checked(big, BIG_LEN), "big: bad checksum");
    } else {
        fill_checked(big, BIG_LEN);
        TW_MP_CHECK(kill((pid_t)pid, SIGSTOP) == 0, "SIGSTOP rank 1 (pid %lld)", (long long)pid);
        TW_MP_CHECK(tw_send(g_ctx, 1, TAG_BIG, big, BIG_LEN, g_cq, NULL) == TW_OK, "big send");
        wait_listed("send to rank 1 tag 0x2, 1048576 bytes");
        TW_MP_CHECK(kill((pid_t)pid, SIGCONT) == 0, "SIGCONT rank 1");
        send_go(1);
        TW_MP_CHECK(wait_one().status == TW_OK, "big send completion");
    }
    free(big);
}

static void run_pull(void)
{
    unsigned char *big = malloc(PULL_LEN);
    int64_t pid = exchange_pid(0);

    TW_MP_CHECK(big != NULL, "malloc");
    if (tw_mp_rank() == 0) {
        fill_checked(big, PULL_LEN); /* slow under sanitizers: before rank 1 posts */
        send_go(1);
        wait_go(1); /* its receive is posted */
        TW_MP_CHECK(tw_send(g_ctx, 1, TAG_BIG, big, PULL_LEN, g_cq, NULL) == TW_OK, "big send");
        TW_MP_CHECK(wait_one().status == TW_OK, "big send completion"); /* stopped meanwhile */
        /* Not into the closing barrier, whose receive the watchdog would
         * see wait while rank 1 checks 64 MiB (over 1 s under TSan and
         * load): a go-ahead, which posts nothing. */
        wait_go(2);
    } else {
        wait_go(1); /* its data is ready */
        TW_MP_CHECK(tw_recv(g_ctx, 0, TAG_BIG, 0, big, PULL_LEN, g_cq, NULL) == TW_OK, "recv");
        uint64_t rx0 = stat_value("tl:tcp:", " rx_bytes=");
        double end = twt_now() + WAIT_S;
        send_go(0);
        while (stat_value("tl:tcp:", " rx_bytes=") < rx0 + PULL_LEN) { /* the pull has begun */
            TW_MP_CHECK(twt_now() < end, "the pull did not begin in %.0f s", WAIT_S);
        }
        TW_MP_CHECK(kill((pid_t)pid, SIGSTOP) == 0, "SIGSTOP rank 0 (pid %lld)", (long long)pid);
        wait_listed("receive (pulling) from rank 0 tag 0x2, 67108864 bytes");
        TW_MP_CHECK(kill((pid_t)pid, SIGCONT) == 0, "SIGCONT rank 0");
        tw_completion_t c = wait_one();
        TW_MP_CHECK(c.status == TW_OK && c.length == PULL_LEN, "big: status %d length %zu",
                    c.status, c.length);
        TW_MP_CHECK(checked(big, PULL_LEN), "big: bad checksum");
        send_go(0);
    }
    free(big);
}

static void run_slow(void)
{
    enum { N = 30 };
    uint64_t v = 0, last = 0;

    if (tw_mp_rank() == 1) {
        TW_MP_CHECK(tw_recv(g_ctx, 0, TAG_LAST, 0, &last, sizeof(last), g_cq, &last) == TW_OK,
                    "recv last");
        for (uint64_t i = 0; i < N; i++) {
            TW_MP_CHECK(tw_recv(g_ctx, 0, TAG_DATA, 0, &v, sizeof(v), g_cq, &v) == TW_OK, "recv");
            tw_completion_t c = wait_one();
            TW_MP_CHECK(c.user == &v && c.status == TW_OK && v == i, "message %llu: got %llu",
                        (unsigned long long)i, (unsigned long long)v);
        }
        tw_completion_t c = wait_one();
        TW_MP_CHECK(c.user == &last && c.status == TW_OK && last == N, "last: %llu",
                    (unsigned long long)last);
    } else {
        for (uint64_t i = 0; i <= N; i++) {
            usleep(100000);
            TW_MP_CHECK(tw_send(g_ctx, 1, i < N ? TAG_DATA : TAG_LAST, &i, sizeof(i), g_cq, NULL) ==
                            TW_OK,
                        "send %llu", (unsigned long long)i);
            TW_MP_CHECK(wait_one().status == TW_OK, "send completion");
        }
    }
}

/* A barrier that one rank enters late: rank 0's thread waits in it until
 * rank 0 has counted the stall, then rank 1 comes. Over shm the wait is
 * on the node's collective segment; over tcp, a collective receive. */
static void *barrier_thread(void *arg)
{
    tw_group_t *world = tw_group_world(g_ctx);

    TW_MP_CHECK(world != NULL && tw_barrier(world) == TW_OK, "late barrier");
    return arg;
}

/* Rank 0 until it has counted a stall, polling @p cq if it is given;
 * then rank 1 enters the barrier. Rank 0 returns then, rank 1 after it. */
static void late_barrier(tw_cq_t *cq)
{
    double end = twt_now() + WAIT_S;
    tw_completion_t c;

    if (tw_mp_rank() == 1) {
        wait_go(1);
        TW_MP_CHECK(tw_barrier(tw_group_world(g_ctx)) == TW_OK, "barrier");
        return;
    }
    while (stalls_counted() == 0) {
        TW_MP_CHECK(cq == NULL || tw_cq_poll(cq, &c, 1) == 0, "the ibarrier ended alone");
        TW_MP_CHECK(twt_now() < end, "no stall counted in %.0f s", WAIT_S);
        usleep(10000);
    }
    send_go(1);
}

static void run_coll(void)
{
    pthread_t th;

    if (tw_mp_rank() == 0) {
        TW_MP_CHECK(pthread_create(&th, NULL, barrier_thread, NULL) == 0, "pthread_create");
    }
    late_barrier(NULL);
    if (tw_mp_rank() == 0) {
        pthread_join(th, NULL);
    }
}

/* The same with a nonblocking barrier on rank 0, which engine 0 drives
 * while the caller only polls its CQ. */
static void run_icoll(void)
{
    if (tw_mp_rank() == 0) {
        TW_MP_CHECK(tw_ibarrier(tw_group_world(g_ctx), g_cq, NULL) == TW_OK, "ibarrier");
    }
    late_barrier(g_cq);
    if (tw_mp_rank() == 1) {
        return;
    }
    tw_completion_t c = wait_one();
    TW_MP_CHECK(c.status == TW_OK && c.op == TW_OP_COLL, "ibarrier: status %d op %d", c.status,
                c.op);
}

/* One case: the environment, a job, the scenario, then the counts. */
static void run(void (*scenario)(void), int warned_rank, const char *transports, bool manual)
{
    TWT_EQ(setenv("TW_TRANSPORTS", transports, 1), 0);
    TWT_EQ(setenv("TW_STALL_WARN", "1s", 1), 0);
    if (manual) {
        TWT_EQ(setenv("TW_PROGRESS_THREADS", "0", 1), 0);
    }
    uint64_t warns0 = tw_log_count(TW_LOG_WARN);
    g_ctx = tw_mp_init();
    TW_MP_CHECK(tw_mp_size() == 2, "run under twrun -n 2");
    TW_MP_CHECK(tw_cq_create(g_ctx, 16, &g_cq) == TW_OK, "cq");
    TW_MP_CHECK(tw_am_register(g_ctx, AM_GO, on_go, NULL) == TW_OK, "am register");
    tw_mp_barrier(g_ctx, TAG_END);
    scenario();
    uint64_t want = tw_mp_rank() == warned_rank ? 1 : 0;
    uint64_t counted = stalls_counted();
    uint64_t warns = tw_log_count(TW_LOG_WARN) - warns0;
    TW_MP_CHECK(counted == want && warns == want,
                "stalls counter %llu and %llu warning lines, want %llu of each",
                (unsigned long long)counted, (unsigned long long)warns, (unsigned long long)want);
    char *text = stats_text();
    TW_MP_CHECK(strstr(text, "stalled: none") != NULL, "a stall still listed:\n%s", text);
    free(text);
    tw_mp_barrier(g_ctx, TAG_END + 1);
    TW_MP_CHECK(tw_finalize(g_ctx) == TW_OK, "finalize");
    TW_MP_CHECK(tw_cq_destroy(g_cq) == TW_OK, "cq destroy");
}

/* A duration below 100 ms -- a bare number is microseconds -- is refused
 * with a line that says how to write it. */
static void case_bad_value(void)
{
    tw_context_t *ctx = NULL;
    uint64_t errors0 = tw_log_count(TW_LOG_ERROR);

    TWT_EQ(setenv("TW_STALL_WARN", "30", 1), 0);
    TWT_EQ(tw_init(NULL, &ctx), TW_ERR_INVALID);
    TWT_CHECK(ctx == NULL);
    TWT_EQ(tw_log_count(TW_LOG_ERROR) - errors0, 1);
}

#define CASE(name, scenario, warned, transports, manual) \
    static void case_##name(void)                        \
    {                                                    \
        run(scenario, warned, transports, manual);       \
    }

CASE(recv, run_recv, 1, "shm", false)
CASE(recv_manual, run_recv, 1, "shm", true)
CASE(recv_tcp, run_recv, 1, "tcp", false)
CASE(stopped, run_stopped, 0, "shm", false)
CASE(stopped_tcp, run_stopped, 0, "tcp", false)
CASE(coll, run_coll, 0, "shm", false)
CASE(coll_tcp, run_coll, 0, "tcp", false)
CASE(icoll, run_icoll, 0, "shm", false)
CASE(pull_tcp, run_pull, 1, "tcp", false)
CASE(slow, run_slow, -1, "shm", false)
CASE(slow_manual, run_slow, -1, "tcp", true)

int main(int argc, char **argv)
{
    static const twt_case_t cases[] = {{"recv", case_recv},
                                       {"recv_manual", case_recv_manual},
                                       {"recv_tcp", case_recv_tcp},
                                       {"stopped", case_stopped},
                                       {"stopped_tcp", case_stopped_tcp},
                                       {"pull_tcp", case_pull_tcp},
                                       {"coll", case_coll},
                                       {"coll_tcp", case_coll_tcp},
                                       {"icoll", case_icoll},
                                       {"slow", case_slow},
                                       {"slow_manual", case_slow_manual},
                                       {"bad_value", case_bad_value}};

    setvbuf(stdout, NULL, _IOLBF, 0);
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
