/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The tag-matching engine alone (src/msg/tw_match.c).
 *   1. Semantics, one thread: earliest-posted receive wins across exact and
 *      wildcard receives; earliest-arrived message wins across buckets;
 *      masks; TW_ANY_SOURCE; cleanup hands back posted receives.
 *   2. Concurrency: S sender threads deliver (each in its own order) while
 *      P threads post exact and wildcard receives. Every message is
 *      matched exactly once, no receive is left, and wildcard receives,
 *      in the engine's post order, get each sender's messages in order.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "msg/tw_match.h"
#include "tw_test.h"

static tw_match_recv_t *mk(int src, uint64_t tag, uint64_t ignore, void *user)
{
    tw_match_recv_t *r = calloc(1, sizeof(*r));
    TWT_CHECK(r != NULL);
    r->src = src;
    r->tag = tag;
    r->ignore = ignore;
    r->user = user;
    return r;
}

static int cancelled;
static void cancel_cb(tw_match_recv_t *r, void *arg)
{
    (void)arg;
    cancelled++;
    free(r);
}

static void semantics(unsigned nbuckets)
{
    tw_match_t m;
    tw_status_t st;
    tw_match_recv_t *r;
    tw_match_unexp_t *u;
    int a = 1, b = 2, c = 3;

    TWT_EQ(tw_match_init(&m, 3), TW_ERR_INVALID);
    TWT_EQ(tw_match_init(&m, nbuckets), TW_OK);

    /* receive first: wildcard posted before exact wins */
    TWT_CHECK(tw_match_post(&m, mk(TW_ANY_SOURCE, 5, 0, &a)) == NULL);
    TWT_CHECK(tw_match_post(&m, mk(2, 5, 0, &b)) == NULL);
    r = tw_match_arrive(&m, 2, 5, "x", 1, NULL, &st);
    TWT_CHECK(r != NULL && r->user == &a);
    free(r);
    r = tw_match_arrive(&m, 2, 5, "y", 1, NULL, &st);
    TWT_CHECK(r != NULL && r->user == &b);
    free(r);
    /* exact posted before wildcard wins */
    TWT_CHECK(tw_match_post(&m, mk(3, 6, 0, &a)) == NULL);
    TWT_CHECK(tw_match_post(&m, mk(3, 0, ~0ull, &b)) == NULL);
    r = tw_match_arrive(&m, 3, 6, NULL, 0, NULL, &st);
    TWT_CHECK(r != NULL && r->user == &a);
    free(r);
    /* the remaining wildcard takes anything from rank 3 */
    r = tw_match_arrive(&m, 4, 6, NULL, 0, NULL, &st); /* not rank 3: unexpected */
    TWT_CHECK(r == NULL && st == TW_OK);
    r = tw_match_arrive(&m, 3, 0xdead, "zz", 2, NULL, &st);
    TWT_CHECK(r != NULL && r->user == &b);
    free(r);
    /* messages first: earliest arrival wins across different buckets */
    TWT_CHECK(tw_match_arrive(&m, 7, 100, "m1", 2, NULL, &st) == NULL);
    TWT_CHECK(tw_match_arrive(&m, 8, 200, "m2", 2, NULL, &st) == NULL);
    TWT_CHECK(tw_match_arrive(&m, 7, 101, "m3", 2, NULL, &st) == NULL);
    r = mk(TW_ANY_SOURCE, 0, 0xfff, &c); /* masked wildcard */
    u = tw_match_post(&m, r);
    TWT_CHECK(u != NULL && u->src == 4 && u->tag == 6); /* the oldest of all */
    tw_match_unexp_free(u);
    u = tw_match_post(&m, r);
    TWT_CHECK(u != NULL && u->src == 7 && u->tag == 100 && memcmp(u->data, "m1", 2) == 0);
    tw_match_unexp_free(u);
    u = tw_match_post(&m, r); /* exact-equivalent check: mask on tag only */
    TWT_CHECK(u != NULL && u->src == 8 && u->tag == 200);
    tw_match_unexp_free(u);
    free(r);
    r = mk(7, 101, 0, &c);
    u = tw_match_post(&m, r);
    TWT_CHECK(u != NULL && u->len == 2 && memcmp(u->data, "m3", 2) == 0);
    tw_match_unexp_free(u);
    free(r);
    /* masks: ignore bits only */
    TWT_CHECK(tw_match_post(&m, mk(1, 0xf0, 0x0f, &a)) == NULL);
    TWT_CHECK(tw_match_arrive(&m, 1, 0xe0, NULL, 0, NULL, &st) == NULL); /* bit 4 differs */
    r = tw_match_arrive(&m, 1, 0xf7, NULL, 0, NULL, &st);
    TWT_CHECK(r != NULL && r->user == &a);
    free(r);
    /* cleanup: two posted receives, one unexpected message (1, 0xe0) */
    TWT_CHECK(tw_match_post(&m, mk(1, 1, 0, &a)) == NULL);
    TWT_CHECK(tw_match_post(&m, mk(TW_ANY_SOURCE, 1, 0, &a)) == NULL);
    cancelled = 0;
    tw_match_cleanup(&m, cancel_cb, NULL);
    TWT_EQ(cancelled, 2);
}

/* ---- concurrency --------------------------------------------------------- */

#define SENDERS 4
#define POSTERS 4

typedef struct result {
    atomic_int matched; /* times matched: must end 1 */
    int src;            /* what it got */
    uint64_t seq;
    tw_match_recv_t *recv; /* kept to read its post sequence */
} result_t;

static tw_match_t g_m;
static uint64_t g_per_sender;
static atomic_int g_msg_hits[SENDERS][1 << 16];

#define CLS_BIT (1ull << 40)

static void record(tw_match_recv_t *r, int src, uint64_t tag, const void *data, size_t len)
{
    result_t *res = r->user;
    uint64_t seq = tag & 0xffffffffull, payload;
    TWT_EQ(len, 8);
    memcpy(&payload, data, 8);
    TWT_EQ(payload, seq * 31 + (uint64_t)src);
    res->src = src;
    res->seq = seq;
    atomic_fetch_add(&res->matched, 1);
    atomic_fetch_add(&g_msg_hits[src][seq], 1);
}

static void *sender(void *arg)
{
    int src = (int)(intptr_t)arg;
    for (uint64_t i = 0; i < g_per_sender; i++) {
        uint64_t tag = (i & 1 ? CLS_BIT : 0) | i, payload = i * 31 + (uint64_t)src;
        tw_status_t st;
        tw_match_recv_t *r = tw_match_arrive(&g_m, src, tag, &payload, 8, NULL, &st);
        TWT_EQ(st, TW_OK);
        if (r != NULL) {
            record(r, src, tag, &payload, 8);
        }
        if (i % 64 == 0) {
            sched_yield();
        }
    }
    return NULL;
}

typedef struct poster_arg {
    int id;
    result_t *res; /* this poster's receives */
    uint64_t nres;
} poster_arg_t;

static void *poster(void *arg)
{
    poster_arg_t *pa = arg;
    uint64_t k = 0;
    /* exact receives for even sequence numbers: poster p takes the
     * senders' even messages i with (i/2) % POSTERS == p; wildcard
     * receives (class bit set) for an equal share of odd messages */
    for (uint64_t i = 0; i < g_per_sender; i++) {
        for (int s = 0; s < SENDERS; s++) {
            if ((i / 2) % POSTERS != (uint64_t)pa->id) {
                continue;
            }
            tw_match_recv_t *r;
            if ((i & 1) == 0) {
                r = mk(s, i, 0, &pa->res[k]);
            } else {
                r = mk(TW_ANY_SOURCE, CLS_BIT, 0xffffffffull, &pa->res[k]);
            }
            pa->res[k].recv = r;
            tw_match_unexp_t *u = tw_match_post(&g_m, r);
            if (u != NULL) {
                record(r, u->src, u->tag, u->data, u->len);
                tw_match_unexp_free(u);
            }
            k++;
        }
    }
    TWT_EQ(k, pa->nres);
    return NULL;
}

static void concurrency(unsigned nbuckets)
{
    pthread_t st[SENDERS], pt[POSTERS];
    poster_arg_t pa[POSTERS];

    g_per_sender = twt_scaled(10000, 1000) & ~(uint64_t)(2 * POSTERS - 1);
    TWT_CHECK(g_per_sender < (1u << 16));
    memset(g_msg_hits, 0, sizeof(g_msg_hits));
    TWT_EQ(tw_match_init(&g_m, nbuckets), TW_OK);
    for (int p = 0; p < POSTERS; p++) {
        pa[p].id = p;
        pa[p].nres = g_per_sender / POSTERS * SENDERS;
        pa[p].res = calloc(pa[p].nres, sizeof(result_t));
        TWT_CHECK(pa[p].res != NULL);
        TWT_EQ(pthread_create(&pt[p], NULL, poster, &pa[p]), 0);
    }
    for (int s = 0; s < SENDERS; s++) {
        TWT_EQ(pthread_create(&st[s], NULL, sender, (void *)(intptr_t)s), 0);
    }
    for (int s = 0; s < SENDERS; s++) {
        pthread_join(st[s], NULL);
    }
    for (int p = 0; p < POSTERS; p++) {
        pthread_join(pt[p], NULL);
    }
    /* exactly once, both ways */
    for (int s = 0; s < SENDERS; s++) {
        for (uint64_t i = 0; i < g_per_sender; i++) {
            TWT_CHECKF(atomic_load(&g_msg_hits[s][i]) == 1, "message %d/%llu matched %d times", s,
                       (unsigned long long)i, atomic_load(&g_msg_hits[s][i]));
        }
    }
    /* wildcard receives sorted by post sequence get each sender in order */
    uint64_t nwild = 0;
    for (int p = 0; p < POSTERS; p++) {
        for (uint64_t k = 0; k < pa[p].nres; k++) {
            TWT_EQ(atomic_load(&pa[p].res[k].matched), 1);
            nwild += pa[p].res[k].recv->src == TW_ANY_SOURCE;
        }
    }
    result_t **w = calloc(nwild, sizeof(*w));
    uint64_t n = 0;
    for (int p = 0; p < POSTERS; p++) {
        for (uint64_t k = 0; k < pa[p].nres; k++) {
            if (pa[p].res[k].recv->src == TW_ANY_SOURCE) {
                w[n++] = &pa[p].res[k];
            }
        }
    }
    /* insertion into a table indexed by post sequence (dense enough) */
    uint64_t maxseq = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (w[i]->recv->seq > maxseq) {
            maxseq = w[i]->recv->seq;
        }
    }
    result_t **by_seq = calloc(maxseq + 1, sizeof(*by_seq));
    for (uint64_t i = 0; i < n; i++) {
        by_seq[w[i]->recv->seq] = w[i];
    }
    int64_t last[SENDERS];
    for (int s = 0; s < SENDERS; s++) {
        last[s] = -1;
    }
    for (uint64_t q = 0; q <= maxseq; q++) {
        result_t *r = by_seq[q];
        if (r == NULL) {
            continue;
        }
        TWT_CHECKF((int64_t)r->seq > last[r->src], "sender %d: seq %llu after %lld", r->src,
                   (unsigned long long)r->seq, (long long)last[r->src]);
        last[r->src] = (int64_t)r->seq;
    }
    cancelled = 0;
    tw_match_cleanup(&g_m, cancel_cb, NULL);
    TWT_EQ(cancelled, 0);
    for (int p = 0; p < POSTERS; p++) {
        for (uint64_t k = 0; k < pa[p].nres; k++) {
            free(pa[p].res[k].recv);
        }
        free(pa[p].res);
    }
    free(by_seq);
    free(w);
    printf("match concurrency (%u buckets): %d senders x %llu messages, %d posters, %llu "
           "wildcard receives in order\n",
           nbuckets, SENDERS, (unsigned long long)g_per_sender, POSTERS, (unsigned long long)nwild);
}

int main(void)
{
    semantics(64);
    semantics(1); /* everything collides in one bucket */
    concurrency(64);
    concurrency(1);
    printf("match: ok\n");
    return 0;
}
