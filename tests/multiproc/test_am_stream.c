/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Active messages streamed between every thread of every rank, with
 * tagged traffic alongside.
 *
 *   twrun -n N test_am_stream [-t THREADS] [-m MSGS] [-g TAGGED] [--seed S]
 *                             [--stall SECONDS] [--stats[=json]]
 *
 * Every rank registers one handler and runs THREADS workers (default 4),
 * each with its own CQ. Worker s of rank r sends MSGS (default 64, divided
 * by TWTEST_SCALE) active messages to every other rank d: 0 B .. 256 KiB,
 * mixed (eager copies up to 8 KiB, zero-copy above; a third above 32 KiB,
 * one of exactly 16 KiB and one of 256 KiB per stream), each with an
 * 8-byte user header naming (r, s, seq) and a payload drawn from a seed
 * of (seed, r, s, d, seq). Meanwhile it exchanges TAGGED (default 24)
 * tagged messages of 0 .. 64 KiB with worker s of every other rank
 * (receives posted a few at a time, so some arrive unexpected; those from
 * 32 KiB on take the transport's rendezvous path), and waits for its
 * completions in tw_cq_wait -- with progress threads, a waiting worker
 * polls the transports itself while the engine sleeps (tw_progress), which
 * is the path under test: frames for the AM handler must still reach it.
 *
 * The handler checks the header, the length and every payload byte, and
 * sets the message's bit in a bitmap per (source rank, source thread):
 * a second arrival fails at once. Once its workers are done, a rank waits
 * until every AM it expects has arrived, then a barrier of tagged 0-byte
 * messages keeps it alive until all ranks are done, and it checks that
 * exactly (ranks - 1) x THREADS x MSGS AMs arrived, every bit once.
 *
 * No timing assertions; a watchdog fails the rank with a diagnostic (what
 * each worker waits for, which AMs are missing, the library's counters)
 * when nothing at all happened for --stall seconds (default 60).
 * Exit 0 only when every count matches.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "threadwire/threadwire.h"
#include "tw_mp.h"

#define MAX_THREADS  64
#define MAX_RANKS    256
#define AM_ID        42
#define AM_HDR_LEN   8
#define AM_HDR_MAGIC 0xa7
#define AM_MAX       (256u * 1024u)
#define TAGGED_MAX   (64u * 1024u)
#define AM_WINDOW    8 /* AM sends outstanding per worker */
#define T_SWINDOW    4 /* tagged sends outstanding per worker */
#define T_RWINDOW    2 /* tagged receives outstanding per source */

/* tag: kind 63:56 | thread 55:48 | seq 31:0 */
#define TAG_DATA            0x5aull
#define TAG_BARRIER         0xbbull
#define TAG(kind, thr, seq) (((kind) << 56) | ((uint64_t)(thr) << 48) | (uint64_t)(uint32_t)(seq))

static int g_rank, g_size;
static unsigned g_threads;
static uint32_t g_msgs;   /* AMs per (source thread, destination rank) */
static uint32_t g_tagged; /* tagged messages per (thread, peer rank), each way */
static uint64_t g_seed;
static tw_context_t *g_ctx;

/* AM arrivals. [src rank * threads + src thread]: a bitmap of seqs and
 * a count; written by the handler (progress threads, or tw_progress
 * callers in manual mode), read by the main thread and the watchdog. */
typedef struct am_src {
    _Atomic(uint64_t) *bits;
    atomic_uint count;
} am_src_t;

static am_src_t *g_am;
static atomic_uint_fast64_t g_am_total;
static atomic_uint_fast64_t g_am_bytes;
static int g_handler_arg;

/* ---- the plan: sizes and payloads, identical on every rank ----------- */

static uint64_t mix(uint64_t domain, int src, unsigned thr, int dst, uint32_t seq)
{
    uint64_t st = g_seed ^ domain ^
                  ((((uint64_t)src << 44) ^ ((uint64_t)dst << 24) ^ ((uint64_t)thr << 16) ^
                    ((uint64_t)seq << 32 | seq)) *
                   0x9E3779B97F4A7C15ull);
    return twt_rand(&st);
}

static uint32_t am_size(int src, unsigned thr, int dst, uint32_t seq)
{
    uint64_t st = mix(0xa11ull << 52, src, thr, dst, seq);
    uint64_t r = twt_rand(&st) % 100, x = twt_rand(&st);

    switch (seq) { /* the edges, once per stream */
    case 0:
        return 0;
    case 1:
        return 16u * 1024u;
    case 2:
        return AM_MAX;
    case 3:
        return 8u * 1024u + 1u;
    default:
        break;
    }
    if (r < 8) {
        return 0;
    }
    if (r < 25) {
        return 1 + (uint32_t)(x % 64);
    }
    if (r < 40) {
        return 65 + (uint32_t)(x % (8192 - 64)); /* up to the eager limit */
    }
    if (r < 60) {
        return 8193 + (uint32_t)(x % (24u * 1024u)); /* zero-copy, up to 32 KiB */
    }
    if (r < 85) {
        return 32769 + (uint32_t)(x % (32u * 1024u));
    }
    return 65537 + (uint32_t)(x % (AM_MAX - 65536));
}

static uint64_t am_seed(int src, unsigned thr, int dst, uint32_t seq)
{
    return mix(0xa3ull << 52, src, thr, dst, seq);
}

static uint32_t tagged_size(int src, unsigned thr, int dst, uint32_t seq)
{
    uint64_t st = mix(0x7a9ull << 52, src, thr, dst, seq);
    uint64_t r = twt_rand(&st) % 100, x = twt_rand(&st);

    if (r < 30) {
        return (uint32_t)(x % 65);
    }
    if (r < 60) {
        return 65 + (uint32_t)(x % (8192 - 64));
    }
    return 8193 + (uint32_t)(x % (TAGGED_MAX - 8192)); /* half of them rendezvous over tcp */
}

static uint64_t tagged_seed(int src, unsigned thr, int dst, uint32_t seq)
{
    return mix(0x7a7ull << 52, src, thr, dst, seq);
}

/* Offset of the first byte of @p buf that differs from the stream of
 * @p seed (for the failure message). */
static size_t first_bad_byte(const unsigned char *buf, size_t len, uint64_t seed)
{
    unsigned char *want = malloc(len + 1);
    size_t i = 0;

    if (want == NULL) {
        return 0;
    }
    twt_fill(want, len, seed);
    while (i < len && buf[i] == want[i]) {
        i++;
    }
    free(want);
    return i;
}

static void am_hdr_pack(unsigned char *h, int src, unsigned thr, uint32_t seq)
{
    h[0] = AM_HDR_MAGIC;
    h[1] = (unsigned char)thr;
    h[2] = (unsigned char)(src & 0xff);
    h[3] = (unsigned char)(src >> 8);
    memcpy(h + 4, &seq, 4);
}

/* ---- the handler ------------------------------------------------------ */

static void am_handler(tw_context_t *ctx, int src, const void *hdr, size_t hdr_len,
                       const void *data, size_t len, void *arg)
{
    const unsigned char *h = hdr;
    uint32_t seq;
    unsigned thr;
    int hsrc;

    TW_MP_CHECK(ctx == g_ctx && arg == &g_handler_arg, "handler called with ctx %p arg %p",
                (void *)ctx, arg);
    TW_MP_CHECK(src >= 0 && src < g_size && src != g_rank, "AM from rank %d", src);
    TW_MP_CHECK(hdr_len == AM_HDR_LEN && h[0] == AM_HDR_MAGIC,
                "AM from rank %d: %zu-byte header starting %02x (want %d bytes, %02x)", src,
                hdr_len, hdr_len > 0 ? h[0] : 0, AM_HDR_LEN, AM_HDR_MAGIC);
    thr = h[1];
    hsrc = h[2] | h[3] << 8;
    memcpy(&seq, h + 4, 4);
    TW_MP_CHECK(hsrc == src && thr < g_threads && seq < g_msgs,
                "AM from rank %d names (rank %d, thread %u, seq %u)", src, hsrc, thr, seq);
    uint32_t want = am_size(src, thr, g_rank, seq);
    TW_MP_CHECK(len == want, "AM (rank %d, thread %u, seq %u): %zu bytes, sent %u", src, thr, seq,
                len, want);
    TW_MP_CHECK(len == 0 || data != NULL, "AM (rank %d, thread %u, seq %u): NULL data", src, thr,
                seq);
    uint64_t seed = am_seed(src, thr, g_rank, seq);
    if (len > 0 && !twt_verify(data, len, seed)) {
        TW_MP_FAIL("AM (rank %d, thread %u, seq %u, %zu bytes): payload corrupted from byte %zu",
                   src, thr, seq, len, first_bad_byte(data, len, seed));
    }
    am_src_t *as = &g_am[(size_t)src * g_threads + thr];
    uint64_t bit = 1ull << (seq % 64);
    uint64_t old = atomic_fetch_or_explicit(&as->bits[seq / 64], bit, memory_order_relaxed);
    TW_MP_CHECK((old & bit) == 0, "AM (rank %d, thread %u, seq %u) delivered twice", src, thr, seq);
    atomic_fetch_add_explicit(&as->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_am_bytes, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_am_total, 1, memory_order_release);
    tw_mp_tick();
}

/* ---- workers ---------------------------------------------------------- */

enum { REQ_AM, REQ_TSEND, REQ_TRECV };

typedef struct req {
    int kind;
    int peer;
    uint32_t seq;
    uint32_t len;
    unsigned char *buf;
} req_t;

/* Progress of a worker: written by it, read by the watchdog. */
typedef struct worker {
    unsigned id;
    pthread_t th;
    tw_cq_t *cq;
    uint64_t am_total, am_next;            /* AM sends: to post, posted */
    uint64_t t_total;                      /* tagged sends = tagged receives */
    uint64_t ts_next;                      /* tagged sends posted */
    uint32_t *tr_next;                     /* [rank]: tagged receives posted from it */
    atomic_uint_fast64_t am_done;          /* AM sends completed */
    atomic_uint_fast64_t ts_done, tr_done; /* tagged sends / receives completed */
    unsigned am_out, ts_out;
    unsigned *tr_out; /* [rank] */
} worker_t;

static worker_t *g_w;

static req_t *req_new(int kind, int peer, uint32_t seq, uint32_t len)
{
    req_t *q = malloc(sizeof(*q));

    TW_MP_CHECK(q != NULL, "no memory");
    *q = (req_t){.kind = kind, .peer = peer, .seq = seq, .len = len, .buf = malloc(len + 1)};
    TW_MP_CHECK(q->buf != NULL, "no memory for %u bytes", len);
    return q;
}

static void req_free(req_t *q)
{
    free(q->buf);
    free(q);
}

/* The k-th send of a worker goes to this rank (never itself). */
static int send_peer(const worker_t *w, uint64_t k, uint32_t *seq_p)
{
    uint64_t others = (uint64_t)g_size - 1;
    uint32_t seq = (uint32_t)(k / others);
    int d = (int)((k + g_rank + w->id + seq) % others);

    *seq_p = seq;
    return (g_rank + 1 + d) % g_size;
}

static void dump_state(void);

/* A post that failed for good (TW_ERR_AGAIN is retried): say what every
 * thread was waiting for, then fail. */
static void post_check(tw_status_t st, const char *what, int peer)
{
    if (st != TW_OK) {
        dump_state();
        TW_MP_FAIL("%s rank %d: %s", what, peer, tw_strerror(st));
    }
}

/* Post what the windows allow; true when anything was posted. */
static bool post_work(worker_t *w)
{
    bool did = false;
    tw_status_t st;

    while (w->am_out < AM_WINDOW && w->am_next < w->am_total) {
        uint32_t seq;
        int d = send_peer(w, w->am_next, &seq);
        uint32_t len = am_size(g_rank, w->id, d, seq);
        unsigned char hdr[AM_HDR_LEN];
        req_t *q = req_new(REQ_AM, d, seq, len);
        twt_fill(q->buf, len, am_seed(g_rank, w->id, d, seq));
        am_hdr_pack(hdr, g_rank, w->id, seq);
        st = tw_am_send(g_ctx, d, AM_ID, hdr, sizeof(hdr), q->buf, len, w->cq, q);
        if (st == TW_ERR_AGAIN) {
            req_free(q);
            break;
        }
        post_check(st, "tw_am_send to", d);
        w->am_next++;
        w->am_out++;
        did = true;
    }
    for (int r = 0; r < g_size; r++) {
        while (r != g_rank && w->tr_out[r] < T_RWINDOW && w->tr_next[r] < g_tagged) {
            uint32_t seq = w->tr_next[r];
            req_t *q = req_new(REQ_TRECV, r, seq, tagged_size(r, w->id, g_rank, seq));
            st = tw_recv(g_ctx, r, TAG(TAG_DATA, w->id, seq), 0, q->buf, q->len, w->cq, q);
            if (st == TW_ERR_AGAIN) {
                req_free(q);
                break;
            }
            post_check(st, "tw_recv from", r);
            w->tr_next[r]++;
            w->tr_out[r]++;
            did = true;
        }
    }
    while (w->ts_out < T_SWINDOW && w->ts_next < w->t_total) {
        uint32_t seq;
        int d = send_peer(w, w->ts_next, &seq);
        req_t *q = req_new(REQ_TSEND, d, seq, tagged_size(g_rank, w->id, d, seq));
        twt_fill(q->buf, q->len, tagged_seed(g_rank, w->id, d, seq));
        st = tw_send(g_ctx, d, TAG(TAG_DATA, w->id, seq), q->buf, q->len, w->cq, q);
        if (st == TW_ERR_AGAIN) {
            req_free(q);
            break;
        }
        post_check(st, "tw_send to", d);
        w->ts_next++;
        w->ts_out++;
        did = true;
    }
    return did;
}

static void complete(worker_t *w, const tw_completion_t *c)
{
    req_t *q = c->user;

    if (c->status != TW_OK) {
        dump_state(); /* e.g. TW_ERR_PEER_FAILED: the peer went silent (TW_TCP_TIMEOUT) */
    }
    switch (q->kind) {
    case REQ_AM:
        TW_MP_CHECK(c->op == TW_OP_AM_SEND && c->status == TW_OK && c->peer == q->peer,
                    "thread %u: AM send (seq %u, %u bytes) to rank %d completed as op %d for "
                    "rank %d: %s",
                    w->id, q->seq, q->len, q->peer, (int)c->op, c->peer, tw_strerror(c->status));
        w->am_out--;
        atomic_fetch_add_explicit(&w->am_done, 1, memory_order_relaxed);
        break;
    case REQ_TSEND:
        TW_MP_CHECK(c->op == TW_OP_SEND && c->status == TW_OK && c->peer == q->peer,
                    "thread %u: tagged send (seq %u) to rank %d completed as op %d for rank %d: %s",
                    w->id, q->seq, q->peer, (int)c->op, c->peer, tw_strerror(c->status));
        w->ts_out--;
        atomic_fetch_add_explicit(&w->ts_done, 1, memory_order_relaxed);
        break;
    default:
        TW_MP_CHECK(c->op == TW_OP_RECV && c->status == TW_OK && c->peer == q->peer &&
                        c->tag == TAG(TAG_DATA, w->id, q->seq) && c->length == q->len,
                    "thread %u: tagged receive (rank %d, seq %u, %u bytes) completed as op %d from "
                    "rank %d, tag %016llx, %zu bytes: %s",
                    w->id, q->peer, q->seq, q->len, (int)c->op, c->peer, (unsigned long long)c->tag,
                    c->length, tw_strerror(c->status));
        uint64_t seed = tagged_seed(q->peer, w->id, g_rank, q->seq);
        if (!twt_verify(q->buf, q->len, seed)) {
            TW_MP_FAIL("thread %u: tagged message (rank %d, seq %u, %u bytes) corrupted from byte "
                       "%zu",
                       w->id, q->peer, q->seq, q->len, first_bad_byte(q->buf, q->len, seed));
        }
        w->tr_out[q->peer]--;
        atomic_fetch_add_explicit(&w->tr_done, 1, memory_order_relaxed);
        break;
    }
    tw_mp_tick();
    req_free(q);
}

static bool worker_done(worker_t *w)
{
    return atomic_load_explicit(&w->am_done, memory_order_relaxed) == w->am_total &&
           atomic_load_explicit(&w->ts_done, memory_order_relaxed) == w->t_total &&
           atomic_load_explicit(&w->tr_done, memory_order_relaxed) == w->t_total;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    tw_completion_t comps[32];
    unsigned depth = AM_WINDOW + T_SWINDOW + (unsigned)g_size * T_RWINDOW + 8;
    tw_status_t st = tw_cq_create(g_ctx, depth, &w->cq);

    TW_MP_CHECK(st == TW_OK, "tw_cq_create: %s", tw_strerror(st));
    while (!worker_done(w)) {
        bool did = post_work(w);
        /* Waiting here is what lets this thread poll the transports (or,
         * in manual mode, drive them and run the handler). */
        int n = tw_cq_wait(w->cq, comps, 32, did ? 0 : 100);
        TW_MP_CHECK(n >= 0, "tw_cq_wait returned %d", n);
        for (int i = 0; i < n; i++) {
            complete(w, &comps[i]);
        }
    }
    TW_MP_CHECK(tw_cq_poll(w->cq, comps, 32) == 0, "thread %u: completion after the last one",
                w->id);
    st = tw_cq_destroy(w->cq);
    TW_MP_CHECK(st == TW_OK, "tw_cq_destroy: %s", tw_strerror(st));
    return NULL;
}

/* ---- end game ------------------------------------------------------------ */

static uint64_t am_expected(void)
{
    return (uint64_t)(g_size - 1) * g_threads * g_msgs;
}

/* Wait on an empty CQ (which polls, or drives progress in manual mode)
 * until every expected AM is in. */
static void drain(void)
{
    tw_cq_t *cq;
    tw_completion_t c;

    TW_MP_CHECK(tw_cq_create(g_ctx, 1, &cq) == TW_OK, "drain CQ");
    while (atomic_load_explicit(&g_am_total, memory_order_acquire) < am_expected()) {
        TW_MP_CHECK(tw_cq_wait(cq, &c, 1, 10) == 0, "completion on an empty CQ");
    }
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "drain CQ destroy");
}

/* ---- watchdog ------------------------------------------------------------ */

static void dump_state(void)
{
    fprintf(stderr, "rank %d: %llu of %llu AMs arrived\n", g_rank,
            (unsigned long long)atomic_load(&g_am_total), (unsigned long long)am_expected());
    for (unsigned i = 0; g_w != NULL && i < g_threads; i++) {
        worker_t *w = &g_w[i];
        fprintf(stderr,
                "  thread %u: AM sends %llu/%llu completed, tagged sends %llu/%llu, tagged "
                "receives %llu/%llu\n",
                i, (unsigned long long)atomic_load(&w->am_done), (unsigned long long)w->am_total,
                (unsigned long long)atomic_load(&w->ts_done), (unsigned long long)w->t_total,
                (unsigned long long)atomic_load(&w->tr_done), (unsigned long long)w->t_total);
    }
    for (int r = 0; r < g_size; r++) {
        for (unsigned s = 0; r != g_rank && s < g_threads; s++) {
            am_src_t *as = &g_am[(size_t)r * g_threads + s];
            unsigned n = atomic_load(&as->count), shown = 0;
            if (n == g_msgs) {
                continue;
            }
            fprintf(stderr, "  AMs from rank %d thread %u: %u of %u; missing seq", r, s, n, g_msgs);
            for (uint32_t q = 0; q < g_msgs && shown < 8; q++) {
                if (!(atomic_load(&as->bits[q / 64]) & (1ull << (q % 64)))) {
                    fprintf(stderr, " %u (%u B)", q, am_size(r, s, g_rank, q));
                    shown++;
                }
            }
            fprintf(stderr, "%s\n", n + shown < g_msgs ? " ..." : "");
        }
    }
    (void)tw_stats_print(g_ctx, stderr);
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    uint64_t tagged = 24;
    const tw_mp_opt_t mine[] = {
        {"tagged", 'g', TW_MP_ARG_U64, &tagged,
         "tagged messages per worker with each other rank (24, / TWTEST_SCALE)"}};
    tw_mp_opts_t o = {
        .threads = 4, .max_threads = MAX_THREADS, .messages = 64, .seed = 1, .stall_s = 60};

    tw_mp_parse(argc, argv, "test_am_stream",
                TW_MP_THREADS | TW_MP_MESSAGES | TW_MP_SEED | TW_MP_STALL | TW_MP_STATS, mine,
                TWT_ARRAY_SIZE(mine), &o);
    TWT_CHECKF(o.messages <= (1u << 20) && tagged <= (1u << 20), "at most %u messages", 1u << 20);
    g_threads = o.threads;
    g_seed = o.seed;
    g_msgs = (uint32_t)twt_scaled(o.messages, 4); /* seqs 0..3 are the size edges */
    g_tagged = (uint32_t)twt_scaled(tagged, tagged > 0 ? 2 : 0);

    g_ctx = tw_mp_init();
    g_rank = tw_mp_rank();
    g_size = tw_mp_size();
    TW_MP_CHECK(g_size <= MAX_RANKS, "at most %d ranks", MAX_RANKS);
    if (g_size < 2) {
        printf("am_stream: needs at least 2 ranks (twrun -n 2); skipped\n");
        TW_MP_CHECK(tw_finalize(g_ctx) == TW_OK, "tw_finalize");
        return TWT_SKIP;
    }

    g_am = calloc((size_t)g_size * g_threads, sizeof(am_src_t));
    TW_MP_CHECK(g_am != NULL, "no memory");
    for (size_t i = 0; i < (size_t)g_size * g_threads; i++) {
        g_am[i].bits = calloc((g_msgs + 63) / 64, sizeof(uint64_t));
        TW_MP_CHECK(g_am[i].bits != NULL, "no memory");
    }
    g_w = calloc(g_threads, sizeof(worker_t));
    TW_MP_CHECK(g_w != NULL, "no memory");
    for (unsigned i = 0; i < g_threads; i++) {
        worker_t *w = &g_w[i];
        w->id = i;
        w->am_total = (uint64_t)(g_size - 1) * g_msgs;
        w->t_total = (uint64_t)(g_size - 1) * g_tagged;
        w->tr_next = calloc((size_t)g_size, sizeof(uint32_t));
        w->tr_out = calloc((size_t)g_size, sizeof(unsigned));
        TW_MP_CHECK(w->tr_next != NULL && w->tr_out != NULL, "no memory");
    }
    tw_mp_phase("start barrier");
    tw_mp_watchdog_start(o.stall_s, dump_state);

    /* Every handler is in place before anyone sends an AM (one for an id
     * without a handler is dropped). */
    tw_status_t st = tw_am_register(g_ctx, AM_ID, am_handler, &g_handler_arg);
    TW_MP_CHECK(st == TW_OK, "tw_am_register: %s", tw_strerror(st));
    tw_mp_barrier(g_ctx, TAG(TAG_BARRIER, 0, 0));

    tw_mp_phase("workers running");
    double t0 = twt_now();
    for (unsigned i = 0; i < g_threads; i++) {
        TW_MP_CHECK(pthread_create(&g_w[i].th, NULL, worker_main, &g_w[i]) == 0, "pthread_create");
    }
    for (unsigned i = 0; i < g_threads; i++) {
        pthread_join(g_w[i].th, NULL);
    }
    tw_mp_phase("waiting for the last AMs");
    drain();
    double dt = twt_now() - t0;
    tw_mp_phase("end barrier");
    tw_mp_barrier(g_ctx, TAG(TAG_BARRIER, 0, 1));

    /* Exactly once: every (source, thread, seq) bit, and no more. */
    uint64_t total = atomic_load(&g_am_total);
    TW_MP_CHECK(total == am_expected(), "received %llu AMs, expected exactly %llu",
                (unsigned long long)total, (unsigned long long)am_expected());
    for (int r = 0; r < g_size; r++) {
        for (unsigned s = 0; s < g_threads; s++) {
            am_src_t *as = &g_am[(size_t)r * g_threads + s];
            unsigned want = r == g_rank ? 0 : g_msgs;
            TW_MP_CHECK(atomic_load(&as->count) == want,
                        "%u AMs from rank %d thread %u, expected %u", atomic_load(&as->count), r, s,
                        want);
            for (uint32_t q = 0; q < g_msgs; q++) {
                bool got = (atomic_load(&as->bits[q / 64]) >> (q % 64)) & 1;
                TW_MP_CHECK(got == (want > 0), "AM (rank %d, thread %u, seq %u) %s", r, s, q,
                            got ? "from ourselves" : "lost");
            }
        }
    }
    tw_mp_stats(g_ctx);
    tw_mp_phase("tw_finalize");
    st = tw_finalize(g_ctx);
    TW_MP_CHECK(st == TW_OK, "tw_finalize: %s", tw_strerror(st));
    tw_mp_watchdog_stop();

    const char *pt = getenv("TW_PROGRESS_THREADS");
    const char *tl = getenv("TW_TRANSPORTS");
    printf("am_stream rank %d of %d (%s, %s progress): %u threads x %u AMs x %d peers: received "
           "%llu AMs (%.1f MiB) intact exactly once, %u tagged each way per thread and peer; "
           "%.2f s\n",
           g_rank, g_size, tl != NULL ? tl : "default transports",
           pt != NULL && strcmp(pt, "0") == 0 ? "manual" : "thread", g_threads, g_msgs, g_size - 1,
           (unsigned long long)total, (double)atomic_load(&g_am_bytes) / (1 << 20), g_tagged, dt);
    for (unsigned i = 0; i < g_threads; i++) {
        free(g_w[i].tr_next);
        free(g_w[i].tr_out);
    }
    free(g_w);
    for (size_t i = 0; i < (size_t)g_size * g_threads; i++) {
        free(g_am[i].bits);
    }
    free(g_am);
    return 0;
}
