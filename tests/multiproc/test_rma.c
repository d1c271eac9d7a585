/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * One-sided operations between every thread of every rank.
 *
 *   twrun -n N test_rma [-t THREADS] [-i ITERS] [--seed S] [--no-refuse]
 *                       [--expect-direct] [--kill] [--max-stall S] [--stats[=json]]
 *
 * Every rank registers a window (one 256 KiB + 64 B slot per (rank,
 * thread) of the job) and a source region of 1 MiB whose byte i is a
 * function of (rank, i), and sends both packed keys and addresses to
 * every rank. Then THREADS workers (default 4) each run ITERS rounds
 * (default 24, divided by TWTEST_SCALE); in a round, worker t of rank r,
 * for every rank p (itself included):
 *   - puts a payload of a size drawn from (seed, r, t, p, round) -- 0 B
 *     to 256 KiB + 64, eager, zero-copy and rendezvous sizes -- into its
 *     slot of p's window, at an offset drawn likewise, in 1 to 4 puts;
 *   - flushes p, and once the flush completed (the puts' own completions
 *     may come before or after it) gets the same range back and checks
 *     every byte: a flush means the bytes are there;
 *   - gets a random range of p's source region and checks every byte.
 * Completions are counted per kind and must match what was posted.
 * At the end a barrier of tagged messages, after which each rank checks
 * its own window: every slot holds what its writer put in the last round.
 *
 * Also checked, by the main thread before the workers: arguments refused
 * (range outside the region, a key of another rank, a damaged key, too
 * small a buffer for tw_mr_pack); and, unless --no-refuse (verbs: an
 * RDMA access to a deregistered region fails the connection, by design),
 * a put and a get to a region its owner deregistered complete with
 * TW_ERR_INVALID while the connection goes on working.
 * --expect-direct: some operations must have gone by RDMA (the "rma"
 * counters' "direct", read from tw_stats_json).
 * --kill (2 ranks, manual progress, twrun --keep-going): rank 1 swaps
 * keys, says it stops, then serves nothing and exits without tw_finalize;
 * the puts, gets and flush rank 0 posted to it must all complete
 * TW_ERR_PEER_FAILED, and later posts to it return TW_ERR_PEER_FAILED.
 * Exit 0 only when every count and byte matches.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "threadwire/threadwire.h"
#include "tw_mp.h"

#define MAX_THREADS 16
#define MAX_RANKS   64
#define SLOT        (256u * 1024u + 64u)
#define SRC_LEN     (1u << 20)

#define TAG_KEYS    0x4b45590000000000ull
#define TAG_GONE    0x474f4e4500000000ull
#define TAG_BARRIER 0x4241520000000000ull
#define TAG_STOP    0x53544f5000000000ull

/* What a rank tells every other: its regions and their keys. */
typedef struct peer_keys {
    uint64_t win;
    uint64_t src;
    uint64_t gone; /* a region deregistered before use (--no-refuse: 0) */
    uint32_t win_len, src_len, gone_len;
    uint8_t win_key[TW_RKEY_MAX];
    uint8_t src_key[TW_RKEY_MAX];
    uint8_t gone_key[TW_RKEY_MAX];
} peer_keys_t;

static int g_rank, g_size;
static unsigned g_threads;
static uint32_t g_iters;
static uint64_t g_seed;
static tw_context_t *g_ctx;
static unsigned char *g_win, *g_src;
static size_t g_win_len;
static peer_keys_t g_keys[MAX_RANKS];

static uint64_t seed_of(int src, unsigned thr, int dst, uint32_t round)
{
    uint64_t st =
        g_seed ^ ((uint64_t)src << 48) ^ ((uint64_t)thr << 40) ^ ((uint64_t)dst << 24) ^ round;
    return twt_rand(&st);
}

/* The put of (src, thr) to dst in a round: length and offset in the slot. */
static void put_plan(int src, unsigned thr, int dst, uint32_t round, size_t *len, size_t *off)
{
    static const size_t edge[] = {0, 1, 8, 8192, 8193, 65536, SLOT};
    uint64_t st = seed_of(src, thr, dst, round) ^ 0x5050;
    uint64_t r = twt_rand(&st);

    if (round < TWT_ARRAY_SIZE(edge)) {
        *len = edge[(round + (uint32_t)dst) % TWT_ARRAY_SIZE(edge)];
    } else if (r % 4 == 0) {
        *len = 32768 + twt_rand(&st) % (SLOT - 32768); /* rendezvous sizes */
    } else {
        *len = twt_rand(&st) % 16384;
    }
    *off = *len == SLOT ? 0 : twt_rand(&st) % (SLOT - *len + 1);
}

static size_t slot_of(int src, unsigned thr)
{
    return ((size_t)src * g_threads + thr) * SLOT;
}

static unsigned char src_byte(int rank, size_t i)
{
    return (unsigned char)(rank * 37 + i * 131 + (i >> 9));
}

static void pump(tw_cq_t *cq, tw_completion_t *c, int *n)
{
    *n = tw_cq_wait(cq, c, 1, 100);
    TW_MP_CHECK(*n >= 0, "tw_cq_wait");
    if (*n > 0) {
        tw_mp_tick();
    }
}

/* Wait for exactly one completion and return it. */
static tw_completion_t wait_one(tw_cq_t *cq)
{
    tw_completion_t c;
    int n = 0;

    while (n == 0) {
        pump(cq, &c, &n);
    }
    return c;
}

#define TWT_MIN_SZ(a, b) ((a) < (b) ? (a) : (b))

/* A put's completion: its piece of @p out, to @p p, intact. */
static void check_put(const tw_completion_t *c, unsigned char *out, int p, size_t piece, size_t len)
{
    size_t at = (size_t)((unsigned char *)c->user - out);

    TW_MP_CHECK(c->op == TW_OP_PUT && c->status == TW_OK && c->peer == p && at <= len &&
                    c->length == TWT_MIN_SZ(piece, len - at),
                "put to %d: op %d, %s, length %zu at %zu", p, c->op, tw_strerror(c->status),
                c->length, at);
}

typedef struct worker {
    pthread_t th;
    unsigned idx;
    uint64_t puts, gets, flushes;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    tw_cq_t *cq;
    unsigned char *out = malloc(SLOT), *back = malloc(SLOT), *got = malloc(SRC_LEN);
    tw_completion_t c;

    TW_MP_CHECK(out != NULL && back != NULL && got != NULL, "malloc");
    TW_MP_CHECK(tw_cq_create(g_ctx, 16, &cq) == TW_OK, "tw_cq_create");
    for (uint32_t round = 0; round < g_iters; round++) {
        for (int k = 0; k < g_size; k++) {
            int p = (g_rank + k + (int)round) % g_size;
            size_t len, off;
            uint64_t raddr;
            put_plan(g_rank, w->idx, p, round, &len, &off);
            raddr = g_keys[p].win + slot_of(g_rank, w->idx) + off;
            twt_fill(out, len, seed_of(g_rank, w->idx, p, round));
            /* The range in 1 to 4 puts, then a flush: once the flush
             * completed, every byte must read back, whatever order the
             * puts' own completions come in. */
            unsigned nput = 1 + round % 4, puts_done = 0;
            size_t piece = (len + nput - 1) / nput;
            for (unsigned j = 0; j < nput; j++) {
                size_t at = TWT_MIN_SZ((size_t)j * piece, len);
                size_t n = TWT_MIN_SZ(piece, len - at);
                TW_MP_CHECK(TW_MP_POST(g_ctx, tw_put(g_ctx, p, out + at, n, raddr + at,
                                                     g_keys[p].win_key, cq, out + at)) == TW_OK,
                            "put to %d", p);
            }
            TW_MP_CHECK(TW_MP_POST(g_ctx, tw_flush(g_ctx, p, cq, back)) == TW_OK, "flush of %d", p);
            for (bool flushed = false; !flushed;) {
                c = wait_one(cq);
                if (c.op == TW_OP_FLUSH) {
                    TW_MP_CHECK(c.status == TW_OK && c.user == back && c.peer == p,
                                "flush of %d: %s", p, tw_strerror(c.status));
                    flushed = true;
                } else {
                    check_put(&c, out, p, piece, len);
                    puts_done++;
                }
            }
            memset(back, 0xee, len);
            TW_MP_CHECK(TW_MP_POST(g_ctx, tw_get(g_ctx, p, back, len, raddr, g_keys[p].win_key, cq,
                                                 got)) == TW_OK,
                        "get back from %d", p);
            for (bool gotten = false; !gotten;) {
                c = wait_one(cq);
                if (c.op == TW_OP_GET) {
                    TW_MP_CHECK(c.status == TW_OK && c.user == got && c.length == len,
                                "get back of %zu B from %d: %s", len, p, tw_strerror(c.status));
                    gotten = true;
                } else {
                    check_put(&c, out, p, piece, len);
                    puts_done++;
                }
            }
            TW_MP_CHECK(memcmp(back, out, len) == 0, "%zu bytes read back from rank %d differ", len,
                        p);
            while (puts_done < nput) {
                c = wait_one(cq);
                check_put(&c, out, p, piece, len);
                puts_done++;
            }
            w->puts += nput;
            w->flushes++;
            w->gets++;

            /* A range of p's source region. */
            uint64_t st = seed_of(g_rank, w->idx, p, round) ^ 0x6767;
            size_t glen = round % 5 == 0 ? SRC_LEN : twt_rand(&st) % (SRC_LEN / 4);
            size_t goff = twt_rand(&st) % (SRC_LEN - glen + 1);
            TW_MP_CHECK(TW_MP_POST(g_ctx, tw_get(g_ctx, p, got, glen, g_keys[p].src + goff,
                                                 g_keys[p].src_key, cq, NULL)) == TW_OK,
                        "get from %d", p);
            c = wait_one(cq);
            TW_MP_CHECK(c.op == TW_OP_GET && c.status == TW_OK && c.length == glen,
                        "get of %zu B from %d: %s", glen, p, tw_strerror(c.status));
            for (size_t i = 0; i < glen; i++) {
                TW_MP_CHECK(got[i] == src_byte(p, goff + i), "byte %zu of rank %d's source",
                            goff + i, p);
            }
            w->gets++;
        }
    }
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy");
    free(out);
    free(back);
    free(got);
    return NULL;
}

static void exchange_keys(const peer_keys_t *mine)
{
    tw_cq_t *cq;
    int want = 2 * (g_size - 1);

    g_keys[g_rank] = *mine;
    TW_MP_CHECK(tw_cq_create(g_ctx, (unsigned)want + 1, &cq) == TW_OK, "keys CQ");
    for (int r = 0; r < g_size; r++) {
        if (r != g_rank) {
            TW_MP_CHECK(tw_recv(g_ctx, r, TAG_KEYS, 0, &g_keys[r], sizeof(g_keys[r]), cq, NULL) ==
                            TW_OK,
                        "keys recv");
            TW_MP_CHECK(tw_send(g_ctx, r, TAG_KEYS, mine, sizeof(*mine), cq, NULL) == TW_OK,
                        "keys send");
        }
    }
    for (int got = 0; got < want; got++) {
        tw_completion_t c = wait_one(cq);
        TW_MP_CHECK(c.status == TW_OK && (c.op == TW_OP_SEND || c.length == sizeof(*mine)),
                    "keys with %d: %s, %zu bytes", c.peer, tw_strerror(c.status), c.length);
    }
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "keys CQ destroy");
}

/* Arguments the library must refuse, before anything is posted. */
static void check_refusals(void)
{
    tw_cq_t *cq;
    uint8_t bad[TW_RKEY_MAX];
    unsigned char buf[64];
    int p = (g_rank + 1) % g_size;
    size_t len = 10;

    TW_MP_CHECK(tw_cq_create(g_ctx, 4, &cq) == TW_OK, "CQ");
    /* Out of the region: one byte past its end. */
    TW_MP_CHECK(tw_put(g_ctx, p, buf, 2, g_keys[p].win + g_win_len - 1, g_keys[p].win_key, cq,
                       NULL) == TW_ERR_INVALID,
                "put past the end");
    TW_MP_CHECK(tw_get(g_ctx, p, buf, 1, g_keys[p].win - 1, g_keys[p].win_key, cq, NULL) ==
                    TW_ERR_INVALID,
                "get before the start");
    TW_MP_CHECK(tw_put(g_ctx, p, buf, 0, 0, g_keys[p].win_key, cq, NULL) == TW_ERR_INVALID,
                "put to address 0");
    if (g_size > 1) {
        /* A key of rank g_rank's memory used for rank p. */
        TW_MP_CHECK(tw_put(g_ctx, p, buf, 1, g_keys[g_rank].win, g_keys[g_rank].win_key, cq,
                           NULL) == TW_ERR_INVALID,
                    "key of another rank");
    }
    memcpy(bad, g_keys[p].win_key, sizeof(bad));
    bad[0] ^= 0xff;
    TW_MP_CHECK(tw_put(g_ctx, p, buf, 1, g_keys[p].win, bad, cq, NULL) == TW_ERR_INVALID,
                "damaged key");
    memcpy(bad, g_keys[p].win_key, sizeof(bad));
    bad[4] = 99; /* version */
    TW_MP_CHECK(tw_get(g_ctx, p, buf, 1, g_keys[p].win, bad, cq, NULL) == TW_ERR_INVALID,
                "key of another version");
    TW_MP_CHECK(tw_put(g_ctx, p, buf, 1, g_keys[p].win, NULL, cq, NULL) == TW_ERR_INVALID,
                "NULL key");
    TW_MP_CHECK(tw_get(g_ctx, p, NULL, 1, g_keys[p].win, g_keys[p].win_key, cq, NULL) ==
                    TW_ERR_INVALID,
                "NULL destination");
    TW_MP_CHECK(tw_put(g_ctx, g_size, buf, 1, g_keys[p].win, g_keys[p].win_key, cq, NULL) ==
                    TW_ERR_INVALID,
                "rank out of range");
    TW_MP_CHECK(tw_flush(g_ctx, -1, cq, NULL) == TW_ERR_INVALID, "flush of rank -1");
    TW_MP_CHECK(tw_flush(g_ctx, p, NULL, NULL) == TW_ERR_INVALID, "flush with NULL CQ");
    TW_MP_CHECK(tw_mem_register(g_ctx, buf, 0, &(tw_mr_t *){NULL}) == TW_ERR_INVALID,
                "register 0 bytes");
    TW_MP_CHECK(tw_mem_register(g_ctx, NULL, 8, &(tw_mr_t *){NULL}) == TW_ERR_INVALID,
                "register NULL");
    TW_MP_CHECK(tw_mem_deregister(NULL) == TW_ERR_INVALID, "deregister NULL");
    TW_MP_CHECK(tw_mr_pack(NULL, bad, &len) == TW_ERR_INVALID, "pack NULL");
    TW_MP_CHECK(tw_cq_poll(cq, &(tw_completion_t){0}, 1) == 0, "a refused call completed");
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "CQ destroy");
}

/* Operations on a region its owner deregistered: refused at the target,
 * completed with TW_ERR_INVALID; then the same peer serves a valid one. */
static void check_gone(void)
{
    tw_cq_t *cq;
    unsigned char buf[64];
    int p = (g_rank + 1) % g_size;
    tw_completion_t c;
    tw_status_t st;

    TW_MP_CHECK(tw_cq_create(g_ctx, 4, &cq) == TW_OK, "CQ");
    /* A busy path (a leader's full queue) may answer TW_ERR_AGAIN. */
    st = TW_MP_POST(
        g_ctx, tw_put(g_ctx, p, buf, sizeof(buf), g_keys[p].gone, g_keys[p].gone_key, cq, NULL));
    TW_MP_CHECK(st == TW_OK, "put to a deregistered region: %s", tw_strerror(st));
    c = wait_one(cq);
    TW_MP_CHECK(c.op == TW_OP_PUT && c.status == TW_ERR_INVALID,
                "put to a deregistered region: op %d, %s", c.op, tw_strerror(c.status));
    st = TW_MP_POST(g_ctx,
                    tw_get(g_ctx, p, buf, 16, g_keys[p].gone + 8, g_keys[p].gone_key, cq, NULL));
    TW_MP_CHECK(st == TW_OK, "get from a deregistered region: %s", tw_strerror(st));
    c = wait_one(cq);
    TW_MP_CHECK(c.op == TW_OP_GET && c.status == TW_ERR_INVALID,
                "get from a deregistered region: op %d, %s", c.op, tw_strerror(c.status));
    st = TW_MP_POST(g_ctx,
                    tw_get(g_ctx, p, buf, 16, g_keys[p].src + 16, g_keys[p].src_key, cq, NULL));
    TW_MP_CHECK(st == TW_OK, "get after a refusal: %s", tw_strerror(st));
    c = wait_one(cq);
    TW_MP_CHECK(c.status == TW_OK && c.length == 16, "get after a refusal: %s",
                tw_strerror(c.status));
    for (size_t i = 0; i < 16; i++) {
        TW_MP_CHECK(buf[i] == src_byte(p, 16 + i), "byte %zu after a refusal", i);
    }
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "CQ destroy");
}

/* --kill, rank 0: everything posted to the rank that dies fails. */
static void check_kill(void)
{
    enum { K = 6 };
    tw_cq_t *cq;
    static unsigned char buf[2 * K][SLOT];
    int want = 2 * K + 1, failed = 0, done = 0, by_op[TW_OP_FLUSH + 1] = {0};
    double deadline = twt_now() + 60;

    TW_MP_CHECK(tw_cq_create(g_ctx, (unsigned)want, &cq) == TW_OK, "CQ");
    /* Rank 1 stops progressing once it has sent this. */
    char stop;
    TW_MP_CHECK(tw_recv(g_ctx, 1, TAG_STOP, 0, &stop, 1, cq, NULL) == TW_OK, "recv stop");
    tw_completion_t sc = wait_one(cq);
    TW_MP_CHECK(sc.status == TW_OK, "stop from rank 1: %s", tw_strerror(sc.status));
    for (int j = 0; j < K; j++) {
        size_t len = j % 2 == 0 ? 100 : SLOT;
        TW_MP_CHECK(TW_MP_POST(g_ctx, tw_put(g_ctx, 1, buf[j], len, g_keys[1].win,
                                             g_keys[1].win_key, cq, NULL)) == TW_OK,
                    "put");
        TW_MP_CHECK(TW_MP_POST(g_ctx, tw_get(g_ctx, 1, buf[K + j], len, g_keys[1].src,
                                             g_keys[1].src_key, cq, NULL)) == TW_OK,
                    "get");
    }
    TW_MP_CHECK(TW_MP_POST(g_ctx, tw_flush(g_ctx, 1, cq, NULL)) == TW_OK, "flush");
    while (done < want) {
        tw_completion_t c;
        int n = tw_cq_wait(cq, &c, 1, 100);
        TW_MP_CHECK(n >= 0 && twt_now() < deadline,
                    "%d of %d operations completed so far: %d of %d puts, %d of %d gets, %d flush",
                    done, want, by_op[TW_OP_PUT], K, by_op[TW_OP_GET], K, by_op[TW_OP_FLUSH]);
        if (n == 1) {
            TW_MP_CHECK(c.status == TW_ERR_PEER_FAILED && c.peer == 1, "op %d to the dead rank: %s",
                        c.op, tw_strerror(c.status));
            failed += c.status != TW_OK;
            done++;
            by_op[c.op]++;
        }
    }
    TW_MP_CHECK(tw_put(g_ctx, 1, buf[0], 8, g_keys[1].win, g_keys[1].win_key, cq, NULL) ==
                    TW_ERR_PEER_FAILED,
                "put after the failure");
    TW_MP_CHECK(tw_flush(g_ctx, 1, cq, NULL) == TW_ERR_PEER_FAILED, "flush after the failure");
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "CQ destroy");
    printf("rma rank 0: %d operations to the rank that died, %d completed TW_ERR_PEER_FAILED\n",
           want, failed);
}

/* The "direct" counter of the rma group, from tw_stats_json. */
static unsigned long long direct_ops(void)
{
    char *text = NULL, *at;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    unsigned long long n = 0;

    TW_MP_CHECK(f != NULL, "open_memstream");
    TW_MP_CHECK(tw_stats_json(g_ctx, f) == TW_OK, "tw_stats_json");
    fclose(f);
    at = strstr(text, "\"rma\":{");
    TW_MP_CHECK(at != NULL, "no rma counters in:\n%s", text);
    at = strstr(at, "\"direct\":");
    TW_MP_CHECK(at != NULL, "no direct counter in:\n%s", text);
    n = strtoull(at + strlen("\"direct\":"), NULL, 10);
    free(text);
    return n;
}

int main(int argc, char **argv)
{
    uint64_t iters = 24;
    bool no_refuse = false, expect_direct = false, kill = false;
    const tw_mp_opt_t own[] = {
        {"iters", 'i', TW_MP_ARG_U64, &iters, "rounds per worker (24, / TWTEST_SCALE)"},
        {"no-refuse", 0, TW_MP_ARG_FLAG, &no_refuse,
         "skip the operations on a deregistered region (verbs)"},
        {"expect-direct", 0, TW_MP_ARG_FLAG, &expect_direct, "some operations must go by RDMA"},
        {"kill", 0, TW_MP_ARG_FLAG, &kill, "2 ranks: rank 1 dies with operations posted to it"}};
    tw_mp_opts_t o = {.threads = 4, .max_threads = MAX_THREADS, .seed = 7, .stall_s = 60};
    worker_t w[MAX_THREADS];
    tw_mr_t *win_mr, *src_mr, *gone_mr = NULL;
    peer_keys_t mine = {0};
    unsigned char *gone = NULL;
    size_t klen;

    tw_mp_parse(argc, argv, "test_rma", TW_MP_THREADS | TW_MP_SEED | TW_MP_STALL | TW_MP_STATS, own,
                TWT_ARRAY_SIZE(own), &o);
    TWT_CHECKF(iters >= 1, "--iters: at least 1");
    bool refuse = !no_refuse && !kill;
    g_threads = o.threads;
    g_seed = o.seed;
    g_iters = (uint32_t)twt_scaled(iters, 8);

    g_ctx = tw_mp_init();
    g_rank = tw_mp_rank();
    g_size = tw_mp_size();
    TW_MP_CHECK(g_size <= MAX_RANKS, "at most %d ranks", MAX_RANKS);
    tw_mp_watchdog_start(o.stall_s, NULL);

    g_win_len = (size_t)g_size * g_threads * SLOT;
    g_win = calloc(1, g_win_len);
    g_src = malloc(SRC_LEN);
    TW_MP_CHECK(g_win != NULL && g_src != NULL, "malloc");
    for (size_t i = 0; i < SRC_LEN; i++) {
        g_src[i] = src_byte(g_rank, i);
    }
    TW_MP_CHECK(tw_mem_register(g_ctx, g_win, g_win_len, &win_mr) == TW_OK, "register window");
    TW_MP_CHECK(tw_mem_register(g_ctx, g_src, SRC_LEN, &src_mr) == TW_OK, "register source");
    klen = 0;
    TW_MP_CHECK(tw_mr_pack(win_mr, NULL, &klen) == TW_OK && klen >= 48 && klen <= TW_RKEY_MAX,
                "key length %zu", klen);
    size_t small = klen - 1;
    TW_MP_CHECK(tw_mr_pack(win_mr, mine.win_key, &small) == TW_ERR_TRUNCATED && small == klen,
                "pack into too small a buffer");
    klen = sizeof(mine.win_key);
    TW_MP_CHECK(tw_mr_pack(win_mr, mine.win_key, &klen) == TW_OK, "pack window");
    mine.win_len = (uint32_t)klen;
    klen = sizeof(mine.src_key);
    TW_MP_CHECK(tw_mr_pack(src_mr, mine.src_key, &klen) == TW_OK, "pack source");
    mine.src_len = (uint32_t)klen;
    mine.win = (uint64_t)(uintptr_t)g_win;
    mine.src = (uint64_t)(uintptr_t)g_src;
    if (refuse) {
        gone = malloc(4096);
        TW_MP_CHECK(gone != NULL, "malloc");
        TW_MP_CHECK(tw_mem_register(g_ctx, gone, 4096, &gone_mr) == TW_OK, "register");
        klen = sizeof(mine.gone_key);
        TW_MP_CHECK(tw_mr_pack(gone_mr, mine.gone_key, &klen) == TW_OK, "pack");
        mine.gone = (uint64_t)(uintptr_t)gone;
        mine.gone_len = (uint32_t)klen;
    }
    exchange_keys(&mine);
    if (kill) {
        TW_MP_CHECK(g_size == 2, "--kill needs 2 ranks");
        if (g_rank == 1) {
            /* An eager send completes at once: after it, this rank drives
             * no progress (manual mode) and so serves nothing. */
            char stop = 's';
            tw_cq_t *cq;
            TW_MP_CHECK(tw_cq_create(g_ctx, 1, &cq) == TW_OK, "CQ");
            TW_MP_CHECK(tw_send(g_ctx, 0, TAG_STOP, &stop, 1, cq, NULL) == TW_OK, "stop");
            usleep(300 * 1000);
            _exit(0);
        }
        check_kill();
        TW_MP_CHECK(tw_mem_deregister(win_mr) == TW_OK, "deregister window");
        TW_MP_CHECK(tw_mem_deregister(src_mr) == TW_OK, "deregister source");
        TW_MP_CHECK(tw_finalize(g_ctx) == TW_OK, "tw_finalize");
        tw_mp_watchdog_stop();
        free(g_win);
        free(g_src);
        return 0;
    }
    if (refuse) {
        TW_MP_CHECK(tw_mem_deregister(gone_mr) == TW_OK, "deregister");
        tw_mp_barrier(g_ctx, TAG_GONE);
        check_gone();
    }
    check_refusals();

    for (unsigned i = 0; i < g_threads; i++) {
        w[i] = (worker_t){.idx = i};
        TW_MP_CHECK(pthread_create(&w[i].th, NULL, worker_main, &w[i]) == 0, "pthread_create");
    }
    uint64_t puts = 0, gets = 0, flushes = 0;
    for (unsigned i = 0; i < g_threads; i++) {
        TW_MP_CHECK(pthread_join(w[i].th, NULL) == 0, "pthread_join");
        puts += w[i].puts;
        gets += w[i].gets;
        flushes += w[i].flushes;
    }
    uint64_t want = (uint64_t)g_threads * g_iters * (uint64_t)g_size, want_puts = 0;
    for (uint32_t round = 0; round < g_iters; round++) {
        want_puts += (uint64_t)g_threads * (uint64_t)g_size * (1 + round % 4);
    }
    TW_MP_CHECK(puts == want_puts && flushes == want && gets == 2 * want,
                "%llu puts, %llu flushes, %llu gets; expected %llu, %llu, %llu",
                (unsigned long long)puts, (unsigned long long)flushes, (unsigned long long)gets,
                (unsigned long long)want_puts, (unsigned long long)want,
                (unsigned long long)2 * want);
    tw_mp_barrier(g_ctx, TAG_BARRIER);

    /* Every slot holds its writer's last put. */
    for (int r = 0; r < g_size; r++) {
        for (unsigned t = 0; t < g_threads; t++) {
            size_t len, off;
            put_plan(r, t, g_rank, g_iters - 1, &len, &off);
            TW_MP_CHECK(
                twt_verify(g_win + slot_of(r, t) + off, len, seed_of(r, t, g_rank, g_iters - 1)),
                "slot of rank %d thread %u: %zu bytes at %zu differ", r, t, len, off);
        }
    }
    unsigned long long direct = direct_ops();
    if (expect_direct) {
        TW_MP_CHECK(direct > 0, "no operation went by RDMA");
    }
    tw_mp_stats(g_ctx);
    /* The last barrier: nobody deregisters while a peer still reads. */
    tw_mp_barrier(g_ctx, TAG_BARRIER + 1);
    TW_MP_CHECK(tw_mem_deregister(win_mr) == TW_OK, "deregister window");
    TW_MP_CHECK(tw_mem_deregister(src_mr) == TW_OK, "deregister source");
    TW_MP_CHECK(tw_finalize(g_ctx) == TW_OK, "tw_finalize");
    tw_mp_watchdog_stop();
    printf("rma rank %d of %d: %u threads x %u rounds x %d ranks: %llu puts, %llu flushes, "
           "%llu gets, every byte checked (%llu by RDMA)\n",
           g_rank, g_size, g_threads, g_iters, g_size, (unsigned long long)puts,
           (unsigned long long)flushes, (unsigned long long)gets, direct);
    free(g_win);
    free(g_src);
    free(gone);
    return 0;
}
