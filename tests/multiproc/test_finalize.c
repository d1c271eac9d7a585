/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_finalize's outcomes (include/threadwire/threadwire.h, tw_finalize),
 * under `twrun -n 2`. Every case ends with the process back to the threads
 * and fds it had before tw_init (and no shared memory of the library
 * mapped), every operation completed exactly once on
 * its CQ, every CQ destroyed, and finalize within its bound.
 *
 *   outstanding[_tcp]  both ranks leave with a receive that never matches
 *                      (exact and any-source), an eager and a 4 MiB send the
 *                      peer never receives: the receives end CANCELED (the
 *                      exact one PEER_FAILED if the peer left first), the
 *                      eager send OK, the large one OK, CANCELED (its
 *                      receiver did not read it in 2 s) or PEER_FAILED (the
 *                      receiver left first); within 2 s + 8 s.
 *   peer_left[_tcp]    rank 1 finalizes at once; rank 0 then posts to it and
 *                      for it: each operation ends PEER_FAILED or CANCELED,
 *                      none hangs, and rank 0's finalize is bounded too.
 *   peer_left_manual   the same over tcp in manual mode: rank 0 has not read
 *                      rank 1's FIN when its sends are written (at once,
 *                      by the caller), and the second meets the reset:
 *                      still a departure, not a failure (no error line).
 *   posters[_manual]   eight threads post sends and receives to themselves
 *                      and to the peer in a loop, and wait on their CQs,
 *                      while the main thread finalizes: every post either
 *                      was accepted -- and completes, OK with the right
 *                      bytes, or CANCELED / PEER_FAILED -- or was refused
 *                      with TW_ERR_INVALID once finalize began; no crash,
 *                      no race (TSan), no leak (ASan).
 *   coll_unread[_tcp]  each rank broadcasts 1 MiB point to point
 *                      (TW_COLL_SLOTS=0) as the root, which the other never
 *                      reads -- as members whose collective failed send for a
 *                      round the others never enter: each finalize drops
 *                      what it holds and releases its sender, so neither
 *                      waits 2 s for the other to read (a warning: an
 *                      unexpected log line).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tw_mp.h"

enum { TAG_NEVER = 0x100, TAG_UNSEEN = 0x200, TAG_BARRIER = 0x900, TAG_POST = 0x1000 };
#define BIG_LEN  (4u << 20)
#define BOUND_S  10.0 /* 2 s for an unread rendezvous send, and room for a slow machine */
#define NPOSTERS 8

static int g_threads0, g_fds0;

static void *noop(void *arg)
{
    return arg;
}

/* The process before tw_init: sanitizer runtimes start a helper thread
 * with the first thread, so start and join one first. */
static void baseline(void)
{
    pthread_t th;

    TWT_EQ(pthread_create(&th, NULL, noop, NULL), 0);
    pthread_join(th, NULL);
    g_threads0 = twt_thread_count();
    g_fds0 = twt_fd_count();
}

/* Shared memory of the library still mapped by this process. */
static int shm_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;

    TW_MP_CHECK(f != NULL, "/proc/self/maps");
    while (fgets(line, sizeof(line), f) != NULL) {
        n += strstr(line, "/dev/shm/tw-") != NULL;
    }
    fclose(f);
    return n;
}

static void check_baseline(void)
{
    int threads = twt_thread_count_settled(g_threads0), fds = twt_fd_count();

    TW_MP_CHECK(threads == g_threads0 && fds == g_fds0,
                "after tw_finalize: %d threads and %d fds, before tw_init %d and %d", threads, fds,
                g_threads0, g_fds0);
    TW_MP_CHECK(shm_mapped() == 0, "after tw_finalize: %d shared-memory mappings left",
                shm_mapped());
}

static double finalize_timed(tw_context_t *ctx)
{
    double t0 = twt_now();

    TW_MP_CHECK(tw_finalize(ctx) == TW_OK, "tw_finalize");
    double took = twt_now() - t0;
    TW_MP_CHECK(took < BOUND_S, "tw_finalize took %.1f s (bound %.0f s)", took, BOUND_S);
    return took;
}

/* Take every completion left on @p cq after finalize: exactly @p want. */
static void drain(tw_cq_t *cq, int want, void (*check)(const tw_completion_t *c))
{
    tw_completion_t c[8];
    int got = 0;

    for (int n; (n = tw_cq_poll(cq, c, 8)) > 0;) {
        for (int k = 0; k < n; k++) {
            check(&c[k]);
        }
        got += n;
    }
    TW_MP_CHECK(got == want, "%d completions after finalize, want %d", got, want);
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy after finalize");
}

/* ---- outstanding ------------------------------------------------------ */

static unsigned char *g_big;

static void check_outstanding(const tw_completion_t *c)
{
    if (c->op == TW_OP_RECV) {
        /* The exact one ends PEER_FAILED if the peer's leaving is seen first. */
        TW_MP_CHECK(c->status == TW_ERR_CANCELED ||
                        (c->peer != TW_ANY_SOURCE && c->status == TW_ERR_PEER_FAILED),
                    "a receive ended %d, not CANCELED", c->status);
    } else if (c->user == g_big) {
        /* Over tcp the receiver's departure closes the connection first. */
        TW_MP_CHECK(c->status == TW_OK || c->status == TW_ERR_CANCELED ||
                        c->status == TW_ERR_PEER_FAILED,
                    "the unread 4 MiB send ended %d", c->status);
    } else {
        TW_MP_CHECK(c->status == TW_OK, "the eager send ended %d", c->status);
    }
}

static void run_outstanding(void)
{
    uint64_t r1, r2, small = 42;
    tw_cq_t *cq;

    baseline();
    g_big = calloc(1, BIG_LEN);
    TW_MP_CHECK(g_big != NULL, "malloc");
    tw_context_t *ctx = tw_mp_init();
    int peer = 1 - tw_mp_rank();
    TW_MP_CHECK(tw_cq_create(ctx, 16, &cq) == TW_OK, "cq");
    tw_mp_barrier(ctx, TAG_BARRIER);
    TW_MP_CHECK(tw_recv(ctx, peer, TAG_NEVER, 0, &r1, sizeof(r1), cq, &r1) == TW_OK, "recv");
    TW_MP_CHECK(tw_recv(ctx, TW_ANY_SOURCE, TAG_NEVER + 1, 0, &r2, sizeof(r2), cq, &r2) == TW_OK,
                "any-source recv");
    TW_MP_CHECK(tw_send(ctx, peer, TAG_UNSEEN, &small, sizeof(small), cq, &small) == TW_OK,
                "eager send");
    TW_MP_CHECK(tw_send(ctx, peer, TAG_UNSEEN + 1, g_big, BIG_LEN, cq, g_big) == TW_OK,
                "large send");
    tw_mp_barrier(ctx, TAG_BARRIER + 1);
    /* The check after finalize can see a mapping: here there is one. */
    TW_MP_CHECK(strcmp(getenv("TW_TRANSPORTS"), "shm") != 0 || shm_mapped() > 0,
                "no shared memory mapped over shm");
    double took = finalize_timed(ctx);
    drain(cq, 4, check_outstanding);
    free(g_big);
    check_baseline();
    printf("rank %d: finalize with 4 operations outstanding took %.2f s\n", tw_mp_rank(), took);
}

/* ---- peer_left -------------------------------------------------------- */

static void check_left(const tw_completion_t *c)
{
    TW_MP_CHECK(c->status == TW_ERR_PEER_FAILED || c->status == TW_ERR_CANCELED ||
                    (c->op == TW_OP_SEND && c->status == TW_OK),
                "an operation with the departed peer ended %d (op %d)", c->status, (int)c->op);
}

static void run_peer_left(void)
{
    uint64_t r1, small = 7;
    tw_cq_t *cq;
    int posted = 0;

    baseline();
    g_big = calloc(1, BIG_LEN);
    TW_MP_CHECK(g_big != NULL, "malloc");
    tw_context_t *ctx = tw_mp_init();
    TW_MP_CHECK(tw_cq_create(ctx, 16, &cq) == TW_OK, "cq");
    tw_mp_barrier(ctx, TAG_BARRIER);
    if (tw_mp_rank() == 1) {
        finalize_timed(ctx);
        drain(cq, 0, check_left);
        free(g_big);
        check_baseline();
        return;
    }
    usleep(300000); /* rank 1 is gone, or going */
    /* Each post is accepted (it completes later) or refused at once with
     * PEER_FAILED, once the departure is known. */
    tw_status_t st = tw_recv(ctx, 1, TAG_NEVER, 0, &r1, sizeof(r1), cq, &r1);
    TW_MP_CHECK(st == TW_OK || st == TW_ERR_PEER_FAILED, "recv: %d", st);
    posted += st == TW_OK;
    st = tw_send(ctx, 1, TAG_UNSEEN, &small, sizeof(small), cq, &small);
    TW_MP_CHECK(st == TW_OK || st == TW_ERR_PEER_FAILED, "eager send: %d", st);
    posted += st == TW_OK;
    usleep(1000); /* not a burst: each goes out alone (peer_left_manual: the reset) */
    st = tw_send(ctx, 1, TAG_UNSEEN + 1, g_big, BIG_LEN, cq, g_big);
    TW_MP_CHECK(st == TW_OK || st == TW_ERR_PEER_FAILED, "large send: %d", st);
    posted += st == TW_OK;
    double took = finalize_timed(ctx);
    drain(cq, posted, check_left);
    free(g_big);
    check_baseline();
    printf("rank 0: %d operations posted to a departed peer; finalize took %.2f s\n", posted, took);
}

/* ---- coll_unread ------------------------------------------------------ */

static void run_coll_unread(void)
{
    enum { LEN = 1 << 20 };

    baseline();
    unsigned char *buf = malloc(LEN);
    TW_MP_CHECK(buf != NULL, "malloc");
    memset(buf, 0x5c, LEN);
    tw_context_t *ctx = tw_mp_init();
    tw_mp_barrier(ctx, TAG_BARRIER);
    /* A root only sends (a staged copy): it returns at once. */
    TW_MP_CHECK(tw_bcast(tw_group_world(ctx), buf, LEN, tw_mp_rank()) == TW_OK, "the bcast's root");
    /* After the announcement, on the same path: the peer holds it unread. */
    tw_mp_barrier(ctx, TAG_BARRIER + 1);
    double took = finalize_timed(ctx);
    free(buf);
    check_baseline();
    printf("rank %d: finalize with a collective message unread took %.2f s\n", tw_mp_rank(), took);
}

/* ---- posters ---------------------------------------------------------- */

typedef struct poster {
    pthread_t th;
    tw_context_t *ctx;
    int id;
    tw_cq_t *cq;
    uint64_t accepted, completed, refused_at;
} poster_t;

static atomic_int g_finalizing;

static void poster_take(poster_t *p, int timeout_ms)
{
    tw_completion_t c[16];
    int n = tw_cq_wait(p->cq, c, 16, timeout_ms);

    for (int k = 0; k < n; k++) {
        TW_MP_CHECK(c[k].status == TW_OK || c[k].status == TW_ERR_CANCELED ||
                        c[k].status == TW_ERR_PEER_FAILED,
                    "poster %d: status %d", p->id, c[k].status);
        uint64_t *buf = c[k].user; /* each operation's own, freed here */
        if (c[k].op == TW_OP_RECV && c[k].status == TW_OK) {
            TW_MP_CHECK(*buf == (c[k].tag ^ 0x5a5a5a5aull), "poster %d: bad payload", p->id);
        }
        free(buf);
        p->completed++;
    }
}

/* Post pairs (a receive, then a send that matches one) to itself and to
 * the peer until a post is refused; then take every completion. */
static void *poster_run(void *arg)
{
    poster_t *p = arg;
    int me = tw_mp_rank(), peer = 1 - me;

    for (uint64_t seq = 0;; seq++) {
        int dst = (seq & 1) ? peer : me;
        uint64_t tag = TAG_POST + ((uint64_t)p->id << 32) + (seq << 1);
        uint64_t *r = malloc(sizeof(*r)), *s = malloc(sizeof(*s));
        tw_status_t st;

        TW_MP_CHECK(r != NULL && s != NULL, "malloc");
        while (p->accepted - p->completed >= 64) {
            poster_take(p, 100);
        }
        /* The peer's thread p->id sends us the same tags from its side. */
        st = tw_recv(p->ctx, dst, tag, 0, r, sizeof(*r), p->cq, r);
        if (st != TW_OK) {
            free(r);
            free(s);
        }
        if (st == TW_ERR_AGAIN) {
            poster_take(p, 10);
            continue;
        }
        if (st == TW_ERR_PEER_FAILED && dst == peer) {
            continue; /* the peer finalized first */
        }
        if (st != TW_OK) {
            TW_MP_CHECK(st == TW_ERR_INVALID && atomic_load(&g_finalizing),
                        "poster %d: recv refused with %d before finalize", p->id, st);
            p->refused_at = seq;
            break;
        }
        p->accepted++;
        *s = tag ^ 0x5a5a5a5aull;
        do {
            st = tw_send(p->ctx, dst, tag, s, sizeof(*s), p->cq, s);
        } while (st == TW_ERR_AGAIN && (poster_take(p, 10), true));
        if (st == TW_OK) {
            p->accepted++;
        } else {
            free(s);
            TW_MP_CHECK((st == TW_ERR_INVALID && atomic_load(&g_finalizing)) ||
                            st == TW_ERR_PEER_FAILED,
                        "poster %d: send refused with %d", p->id, st);
        }
        if ((seq & 7) == 7) {
            poster_take(p, 0);
        }
    }
    /* Everything accepted completes: finalize cancels what never matched. */
    double end = twt_now() + 30;
    while (p->completed < p->accepted) {
        TW_MP_CHECK(twt_now() < end, "poster %d: %llu of %llu completions after 30 s", p->id,
                    (unsigned long long)p->completed, (unsigned long long)p->accepted);
        poster_take(p, 100);
    }
    return NULL;
}

static void run_posters(void)
{
    poster_t *p = calloc(NPOSTERS, sizeof(*p));

    TW_MP_CHECK(p != NULL, "calloc");
    baseline();
    tw_context_t *ctx = tw_mp_init();
    tw_mp_barrier(ctx, TAG_BARRIER);
    for (int i = 0; i < NPOSTERS; i++) {
        p[i].ctx = ctx;
        p[i].id = i;
        TW_MP_CHECK(tw_cq_create(ctx, 256, &p[i].cq) == TW_OK, "cq");
        TW_MP_CHECK(pthread_create(&p[i].th, NULL, poster_run, &p[i]) == 0, "pthread_create");
    }
    usleep(300000);
    atomic_store(&g_finalizing, 1);
    double took = finalize_timed(ctx);
    uint64_t accepted = 0;
    for (int i = 0; i < NPOSTERS; i++) {
        pthread_join(p[i].th, NULL);
        TW_MP_CHECK(p[i].accepted == p[i].completed, "poster %d", i);
        TW_MP_CHECK(tw_cq_destroy(p[i].cq) == TW_OK, "tw_cq_destroy");
        accepted += p[i].accepted;
    }
    free(p);
    check_baseline();
    printf("rank %d: %llu operations accepted by %d posting threads, each completed once; "
           "finalize took %.2f s\n",
           tw_mp_rank(), (unsigned long long)accepted, NPOSTERS, took);
}

static void with_env(const char *transports, bool manual)
{
    TWT_EQ(setenv("TW_TRANSPORTS", transports, 1), 0);
    if (manual) {
        TWT_EQ(setenv("TW_PROGRESS_THREADS", "0", 1), 0);
    }
}

#define CASE(name, fn, transports, manual) \
    static void case_##name(void)          \
    {                                      \
        with_env(transports, manual);      \
        fn();                              \
    }

CASE(outstanding, run_outstanding, "shm", false)
CASE(outstanding_tcp, run_outstanding, "tcp", false)
CASE(peer_left, run_peer_left, "shm", false)
CASE(peer_left_tcp, run_peer_left, "tcp", false)
CASE(peer_left_manual, run_peer_left, "tcp", true)
CASE(posters, run_posters, "shm", false)
CASE(posters_manual, run_posters, "tcp", true)

static void case_coll_unread(void)
{
    TWT_EQ(setenv("TW_COLL_SLOTS", "0", 1), 0);
    with_env("shm", false);
    run_coll_unread();
}

static void case_coll_unread_tcp(void)
{
    TWT_EQ(setenv("TW_COLL_SLOTS", "0", 1), 0);
    with_env("tcp", false);
    run_coll_unread();
}

int main(int argc, char **argv)
{
    static const twt_case_t cases[] = {{"outstanding", case_outstanding},
                                       {"outstanding_tcp", case_outstanding_tcp},
                                       {"peer_left", case_peer_left},
                                       {"peer_left_tcp", case_peer_left_tcp},
                                       {"peer_left_manual", case_peer_left_manual},
                                       {"posters", case_posters},
                                       {"posters_manual", case_posters_manual},
                                       {"coll_unread", case_coll_unread},
                                       {"coll_unread_tcp", case_coll_unread_tcp}};

    setvbuf(stdout, NULL, _IOLBF, 0);
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
