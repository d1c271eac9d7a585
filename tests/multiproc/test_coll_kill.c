/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * A member of a group dies in the middle of its collectives.
 *
 *   twrun -n N --keep-going test_coll_kill --coll barrier|bcast|allreduce
 *         [--size BYTES] [--victim R] [--also R2] [--delay-ms MS | --die-at N] DIR
 *
 * Every rank makes two groups: the world, and "rest" -- every rank but
 * the victims (--also: a second one, the rest of an emulated node). All
 * ranks then run the collective back to back on the world group, results
 * checked, until it fails; a victim's own thread SIGKILLs it --delay-ms
 * after the loop started, so it dies wherever it is, most often inside a
 * collective. --die-at N instead: every rank joins a barrier before
 * round N, and the victim dies 1 ms after it, never calling round N's
 * collective -- the others are inside it by then (a large bcast: the
 * root waits for the victim while the third member reads). A survivor
 * checks that:
 *   - the collective in flight completes TW_ERR_PEER_FAILED (no hang: a
 *     stall watchdog fails the rank after 20 s) within 1 s of its call
 *     (not of the last one that completed: filling and checking 32 MiB
 *     under TSan takes most of a second);
 *   - a collective that completed TW_OK has the right result, though a
 *     member whose own collective failed scribbles over its buffers at
 *     once (from the end: a reader of them that still runs meets it);
 *   - the next collective on the world group fails at once;
 *   - a nonblocking one fails at post or completes with the error;
 *   - the "rest" group goes on: a barrier and an allreduce over it,
 *     result checked;
 *   - tw_group_destroy and tw_finalize return TW_OK.
 * Each survivor then writes DIR/rankR.pass; the script checks those, the
 * victim's death, and that nothing is left in /dev/shm.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "threadwire/threadwire.h"
#include "tw_mp.h"

static const char *coll = "allreduce";
static uint64_t size = 8, victim = 1, also = UINT64_MAX, delay_ms = 200, die_at = UINT64_MAX;
/* twt_now() when one() last called the collective itself (its buffers
 * are filled by then: under a sanitizer that takes a while). */
static double called;

static bool is_victim(int r)
{
    return r == (int)victim || (also != UINT64_MAX && r == (int)also);
}

static void *killer(void *arg)
{
    (void)arg;
    usleep((useconds_t)(delay_ms * 1000));
    raise(SIGKILL);
    return NULL;
}

/* --die-at: the round's buffers are ready; everyone joins a barrier, the
 * victim dies 1 ms later. */
static void die_point(tw_group_t *g, uint64_t round)
{
    if (round != die_at) {
        return;
    }
    TW_MP_CHECK(tw_barrier(g) == TW_OK, "the barrier before round %llu", (unsigned long long)round);
    if (is_victim(tw_group_rank(g))) {
        usleep(1000);
        raise(SIGKILL);
    }
}

/* One collective on @p g; returns its status; checks a success. */
static tw_status_t one(tw_group_t *g, uint64_t round, unsigned char *buf, double *d, size_t n)
{
    int me = tw_group_rank(g), sz = tw_group_size(g);
    tw_status_t st;

    if (strcmp(coll, "barrier") == 0) {
        die_point(g, round);
        called = twt_now();
        return tw_barrier(g);
    }
    if (strcmp(coll, "bcast") == 0) {
        int root = (int)(round % (uint64_t)sz);
        for (size_t i = 0; i < size; i++) {
            buf[i] = me == root ? (unsigned char)(round + i) : 0;
        }
        die_point(g, round);
        called = twt_now();
        st = tw_bcast(g, buf, size, root);
        for (size_t i = 0; st == TW_OK && i < size; i++) {
            TW_MP_CHECK(buf[i] == (unsigned char)(round + i), "bcast round %llu byte %zu",
                        (unsigned long long)round, i);
        }
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        d[i] = (double)(me + 1 + (int)(i % 5));
    }
    die_point(g, round);
    called = twt_now();
    st = tw_allreduce(g, d, d, n, TW_DOUBLE, TW_SUM);
    for (size_t i = 0; st == TW_OK && i < n; i++) {
        double want = (double)sz * (sz + 1) / 2 + (double)sz * (double)(i % 5);
        TW_MP_CHECK(d[i] == want, "allreduce round %llu element %zu: %g, want %g",
                    (unsigned long long)round, i, d[i], want);
    }
    return st;
}

int main(int argc, char **argv)
{
    static const tw_mp_opt_t mine[] = {
        {"size", 's', TW_MP_ARG_SIZE, &size, "bytes moved by bcast/allreduce (8)"},
        {"victim", 'v', TW_MP_ARG_U64, &victim, "the rank that dies (1)"},
        {"also", 'a', TW_MP_ARG_U64, &also, "a second rank that dies at the same time (none)"},
        {"delay-ms", 'd', TW_MP_ARG_U64, &delay_ms, "when it dies, after the loop starts (200)"},
        {"die-at", 'r', TW_MP_ARG_U64, &die_at, "it dies 1 ms into this round, absent (no)"},
    };
    tw_mp_opts_t o = {.threads = 1, .seed = 1, .stall_s = 20};
    char path[512];

    /* --coll takes a word (tw_mp's options take numbers): taken out
     * before the common parser sees the rest. */
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--coll") == 0 || strcmp(argv[i], "-c") == 0) {
            coll = argv[i + 1];
            memmove(&argv[i], &argv[i + 2], (size_t)(argc - i - 1) * sizeof(*argv));
            argc -= 2;
            break;
        }
    }
    tw_mp_parse(argc, argv, "test_coll_kill", TW_MP_STALL, mine, TWT_ARRAY_SIZE(mine), &o);
    if (optind >= argc) {
        fprintf(stderr, "test_coll_kill: the state directory is missing\n");
        return 2;
    }
    const char *dir = argv[optind];
    tw_context_t *ctx = tw_mp_init();
    int me = tw_rank(ctx), n = tw_size(ctx);
    TW_MP_CHECK(n >= 2 && (int)victim < n && (also == UINT64_MAX || (int)also < n),
                "needs 2 ranks and the victims among them");
    tw_mp_watchdog_start(o.stall_s, NULL);

    tw_group_t *world = tw_group_world(ctx), *rest = NULL;
    int *ranks = malloc((size_t)n * sizeof(int)), nr = 0;
    for (int r = 0; r < n; r++) {
        if (!is_victim(r)) {
            ranks[nr++] = r;
        }
    }
    if (!is_victim(me)) {
        TW_MP_CHECK(tw_group_create(ctx, ranks, nr, 7, &rest) == TW_OK, "creating the rest");
    }
    size_t ndbl = size / sizeof(double) > 0 ? size / sizeof(double) : 1;
    unsigned char *buf = malloc(size > 0 ? size : 1);
    double *d = malloc(ndbl * sizeof(double));
    /* Everyone is here: start the clock and the loop. */
    TW_MP_CHECK(tw_barrier(world) == TW_OK, "first barrier");
    if (is_victim(me) && die_at == UINT64_MAX) {
        pthread_t t;
        pthread_create(&t, NULL, killer, NULL);
    }
    tw_mp_phase("collectives until the victim dies");
    tw_status_t st = TW_OK;
    uint64_t round;
    for (round = 0; st == TW_OK; round++) {
        st = one(world, round, buf, d, ndbl);
        if (st == TW_OK) {
            tw_mp_tick();
        }
    }
    /* The failed collective's buffers are the caller's again. */
    memset(buf + size / 2, 0xee, size - size / 2);
    memset(buf, 0xee, size / 2);
    memset(d + ndbl / 2, 0xee, (ndbl - ndbl / 2) * sizeof(double));
    memset(d, 0xee, ndbl / 2 * sizeof(double));
    double late = twt_now() - called;
    if (is_victim(me) && st == TW_ERR_PEER_FAILED && also != UINT64_MAX) {
        /* The other victim died first and this one saw it: its own
         * killer is due (the two leave the first barrier apart). */
        for (;;) {
            pause();
        }
    }
    TW_MP_CHECK(!is_victim(me), "a victim survived");
    TW_MP_CHECK(st == TW_ERR_PEER_FAILED, "round %llu ended %s, want TW_ERR_PEER_FAILED",
                (unsigned long long)round, tw_strerror(st));
    TW_MP_CHECK(late < 1.0, "the failure took %.3f s after the collective was called", late);
    /* Later collectives fail at once. */
    TW_MP_CHECK(one(world, round, buf, d, ndbl) == TW_ERR_PEER_FAILED, "a later %s", coll);
    double t0 = called;
    TW_MP_CHECK(tw_barrier(world) == TW_ERR_PEER_FAILED, "a later barrier");
    tw_cq_t *cq;
    TW_MP_CHECK(tw_cq_create(ctx, 4, &cq) == TW_OK, "cq");
    st = tw_ibarrier(world, cq, NULL);
    if (st == TW_OK) {
        tw_completion_t c;
        TW_MP_CHECK(tw_cq_wait(cq, &c, 1, 5000) == 1, "the failed ibarrier never completed");
        st = c.status;
    }
    TW_MP_CHECK(st == TW_ERR_PEER_FAILED, "a later ibarrier: %s", tw_strerror(st));
    TW_MP_CHECK(twt_now() - t0 < 0.5, "later collectives took %.3f s to fail", twt_now() - t0);
    /* The group without the victim goes on. */
    tw_mp_phase("the rest group");
    TW_MP_CHECK(tw_barrier(rest) == TW_OK, "barrier over the survivors");
    int64_t one_each = 1, sum = 0;
    TW_MP_CHECK(tw_allreduce(rest, &one_each, &sum, 1, TW_INT64, TW_SUM) == TW_OK,
                "allreduce over the survivors");
    TW_MP_CHECK(sum == nr, "allreduce over the survivors: %lld, want %d", (long long)sum, nr);
    TW_MP_CHECK(tw_group_destroy(rest) == TW_OK, "destroying the rest");
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "cq destroy");
    tw_mp_watchdog_stop();
    printf("rank %d: %s failed with the victim after %llu rounds, %.3f s after its call\n", me,
           coll, (unsigned long long)round, late);
    TW_MP_CHECK(tw_finalize(ctx) == TW_OK, "finalize");
    snprintf(path, sizeof(path), "%s/rank%d.pass", dir, me);
    FILE *f = fopen(path, "w");
    TW_MP_CHECK(f != NULL, "writing %s", path);
    fclose(f);
    free(ranks);
    free(buf);
    free(d);
    return 0;
}
