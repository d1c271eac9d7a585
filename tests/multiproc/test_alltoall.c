/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * All-to-all between every thread of every rank, through the public API.
 *
 *   twrun -n N test_alltoall [-t THREADS] [-m MSGS] [--max-size BYTES] [--seed S]
 *                            [--max-stall S] [--stats[=json]] [--poll] [--gate FILE]
 *
 * (-n 1 works too: the rank sends to itself.) Every rank runs THREADS
 * workers (default 4), each with its own CQ. Worker s of rank r sends MSGS
 * (default 64, divided by TWTEST_SCALE) messages to every rank, itself
 * included, of 0 B .. --max-size (default 4 MiB): mostly small, about a
 * fifth above the 8 KiB eager limit, a few of several MiB and at least one
 * near the maximum per worker, so eager copies and the large-message
 * (rendezvous / single-copy) path both run. Every rank replays the same
 * seeded plan, so each receiver knows what it must get: for message
 * (r, s, d, seq) the size, the receiving thread and the class:
 *
 *   class 0 exact    tag (dst thread, s, 0, seq), tw_recv from rank r on
 *                    every tag bit, buffer sized for the message;
 *   class 1 channel  tag (dst thread, s, 1, 0): every message of one
 *                    (r, s) -> (d, dst thread) channel has the same tag, so
 *                    the k-th exact receive posted for the channel must get
 *                    its k-th message (non-overtaking, checked by length,
 *                    header and payload);
 *   class 2 masked   tw_recv from rank r ignoring the sequence bits;
 *   class 3 any      TW_ANY_SOURCE ignoring sender thread and sequence.
 *
 * About one exact/channel receive in 13 gets a buffer shorter than the
 * message: it must complete TW_ERR_TRUNCATED with the sent length and the
 * delivered prefix intact. Masked and any-source messages stay at or
 * below 64 KiB (their buffers cannot be sized for one message).
 *
 * Payload of (r, s, d, seq): an 8-byte header naming it, then bytes from a
 * seed derived from (seed, r, s, d, seq); a message of n bytes is the first
 * n bytes of that stream, so truncated prefixes verify too. Receivers check
 * every byte they got, the length, the tag and the source, that each
 * message arrives exactly once (a bitmap per sender thread) at the thread
 * it was meant for, and non-overtaking: channel receives by construction,
 * masked and any-source receives by their sequence numbers in post order,
 * per (sender rank, sender thread).
 *
 * Deadlock freedom with bounded windows: a worker never blocks; exact and
 * channel receives are posted per source in that source's send order (at
 * most KE outstanding each), so the receive for a large send is posted
 * once the earlier messages of that source, all already sent, are in;
 * masked receives (K2 per source) and any-source receives (K3) match any
 * message of their kind. At the end a barrier of 0-byte messages keeps
 * every rank alive until all ranks are done. --gate FILE: each worker
 * posts half its sends, then the rest once FILE exists (a test's fault,
 * such as a cut path, put in place meanwhile, so that traffic crosses it). Manual mode
 * (TW_PROGRESS_THREADS=0): every waiting thread calls tw_progress.
 * --poll: workers never wait in tw_cq_wait; they spin on tw_cq_poll (and
 * tw_progress in manual mode), as MPI codes spin on MPI_Test.
 *
 * Exit 0 only when every count matches.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "threadwire/threadwire.h"
#include "tw_mp.h"

#define MAX_THREADS 64
#define MAX_RANKS   256
#define WILD_MAX    (64u * 1024u)
#define EAGER_LIMIT (8u * 1024u) /* the default TW_EAGER_LIMIT, for the summary */
#define KE          4            /* exact + channel receives outstanding per source */
#define K2          2            /* masked receives outstanding per source */
#define K3          8            /* any-source receives outstanding */
#define SEND_WINDOW 16

enum { CLS_EXACT = 0, CLS_CHAN = 1, CLS_MASKED = 2, CLS_ANY = 3, NCLS = 4, CLS_BARRIER = 15 };
static const char *const cls_name[NCLS] = {"exact", "channel", "masked", "any-source"};

/* dst thread 63:56 | src thread 55:48 | class 47:44 | seq 31:0 */
#define TAG(dthr, sthr, cls, seq)                                                    \
    (((uint64_t)(dthr) << 56) | ((uint64_t)(sthr) << 48) | ((uint64_t)(cls) << 44) | \
     (uint64_t)(uint32_t)(seq))
#define TAG_DTHR(t)   ((unsigned)((t) >> 56))
#define TAG_STHR(t)   ((unsigned)(((t) >> 48) & 0xff))
#define TAG_CLS(t)    ((unsigned)(((t) >> 44) & 0xf))
#define TAG_SEQ(t)    ((uint32_t)(t))
#define MASK_SEQ      0xffffffffull
#define MASK_STHR_SEQ ((0xffull << 48) | MASK_SEQ)
#define BARRIER_TAG   TAG(0xff, 0xff, CLS_BARRIER, 0)

/* The plan of one message, identical on every rank. */
typedef struct plan {
    uint32_t size;
    uint32_t buflen; /* exact/channel receive buffer: size, or less (truncation) */
    uint8_t dthr;
    uint8_t cls;
} plan_t;

static int g_rank, g_size;
static unsigned g_threads;
static uint32_t g_msgs; /* per (sender thread, destination rank) */
static uint32_t g_max_size, g_wild_max;
static uint64_t g_seed;
static double g_max_stall; /* s without a completion in a thread: a failure */
static const char *g_gate; /* --gate: the second half of the sends waits for it */
static atomic_bool g_gate_open;
static bool g_poll;    /* --poll: workers spin on tw_cq_poll alone */
static bool g_manual;  /* TW_PROGRESS_THREADS=0 */
static plan_t *g_plan; /* [src rank][src thread][dst rank][seq] */
static tw_context_t *g_ctx;

static plan_t *plan_of(int r, unsigned s, int d, uint32_t seq)
{
    return &g_plan[(((size_t)r * g_threads + s) * (size_t)g_size + (size_t)d) * g_msgs + seq];
}

/* Sizes: 40 % up to 64 B, 25 % to 1 KiB, 13 % to 8 KiB, 16 % to 64 KiB,
 * 4.5 % to 512 KiB, 1.2 % to max - 64 KiB, 0.3 % within 64 KiB of max. */
static uint32_t pick_size(uint64_t *rng, uint32_t max)
{
    uint64_t r = twt_rand(rng) % 1000, x = twt_rand(rng), v;

    if (r < 400) {
        v = x % 65;
    } else if (r < 650) {
        v = 65 + x % 960;
    } else if (r < 780) {
        v = 1025 + x % 7168;
    } else if (r < 940) {
        v = 8193 + x % (56u * 1024);
    } else if (r < 985) {
        v = 65u * 1024 + x % (448u * 1024);
    } else if (r < 997) {
        v = 512u * 1024 + x % (max > 576u * 1024 ? max - 576u * 1024 : 1);
    } else {
        v = max > 65536 ? max - x % 65536 : max;
    }
    if (v > max) { /* small maxima: fold into range, keep some above eager */
        v = max > EAGER_LIMIT + 1 ? EAGER_LIMIT + 1 + x % (max - EAGER_LIMIT) : x % (max + 1ull);
    }
    return (uint32_t)v;
}

static void build_plan(void)
{
    size_t n = (size_t)g_size * g_threads * (size_t)g_size * g_msgs;

    g_plan = calloc(n, sizeof(plan_t));
    TW_MP_CHECK(g_plan != NULL, "plan of %zu messages", n);
    for (int r = 0; r < g_size; r++) {
        for (unsigned s = 0; s < g_threads; s++) {
            uint64_t rng = g_seed ^ ((uint64_t)r << 40) ^ ((uint64_t)s << 20) ^ 0xa11a11ull;
            for (int d = 0; d < g_size; d++) {
                for (uint32_t i = 0; i < g_msgs; i++) {
                    plan_t *p = plan_of(r, s, d, i);
                    uint64_t c = twt_rand(&rng) % 100;
                    p->cls = c < 55 ? CLS_EXACT : c < 70 ? CLS_CHAN : c < 85 ? CLS_MASKED : CLS_ANY;
                    p->dthr = (uint8_t)(twt_rand(&rng) % g_threads);
                    p->size = pick_size(&rng, p->cls >= CLS_MASKED ? g_wild_max : g_max_size);
                    bool trunc = twt_rand(&rng) % 13 == 0;
                    if (d == (r + (int)s) % g_size && i == 0) {
                        /* at least one near-maximum message per worker */
                        p->cls = s % 2 ? CLS_CHAN : CLS_EXACT;
                        p->size = g_max_size - (uint32_t)(twt_rand(&rng) % 4096 % (g_max_size + 1));
                        trunc = (s / 2) % 2 == 1;
                    }
                    p->buflen = p->size;
                    if (trunc && p->cls <= CLS_CHAN && p->size > 0) {
                        p->buflen = p->size - 1 - p->size / 3;
                    }
                }
            }
        }
    }
}

static uint64_t msg_header(int r, unsigned s, int d, uint32_t seq)
{
    return (0xa5ull << 56) | ((uint64_t)(r & 0xfff) << 44) | ((uint64_t)(d & 0xfff) << 32) |
           ((uint64_t)(s & 0xff) << 24) | (seq & 0xffffff);
}

static uint64_t msg_seed(int r, unsigned s, int d, uint32_t seq)
{
    uint64_t st = g_seed ^ ((uint64_t)r << 48) ^ ((uint64_t)d << 32) ^ ((uint64_t)s << 24) ^ seq;
    return twt_rand(&st);
}

static void fill_msg(unsigned char *buf, uint32_t size, int r, unsigned s, int d, uint32_t seq)
{
    uint64_t h = msg_header(r, s, d, seq);
    memcpy(buf, &h, size < 8 ? size : 8);
    if (size > 8) {
        twt_fill(buf + 8, size - 8, msg_seed(r, s, d, seq));
    }
}

/* The first @p n bytes are those of message (r, s, d, seq). On a header
 * mismatch, *other_p gets the header found (0 if too short to tell). */
static bool verify_msg(const unsigned char *buf, size_t n, int r, unsigned s, int d, uint32_t seq,
                       uint64_t *other_p)
{
    uint64_t h = msg_header(r, s, d, seq), got = 0;
    memcpy(&got, buf, n < 8 ? n : 8);
    if (memcmp(&got, &h, n < 8 ? n : 8) != 0) {
        *other_p = n >= 8 ? got : 0;
        return false;
    }
    *other_p = 0;
    return n <= 8 || twt_verify(buf + 8, n - 8, msg_seed(r, s, d, seq));
}

/* ---- per worker ----------------------------------------------------- */

typedef struct src_state {
    uint32_t *exact; /* seqs of this source's exact/channel messages to us, send order */
    uint32_t nexact, exact_next, exact_out;
    uint32_t nmasked, masked_posted, masked_out;
    uint32_t *masked_res; /* seq got by the k-th masked receive (post order) */
    uint8_t *got;         /* [seq] */
} src_state_t;

typedef struct rreq {
    uint8_t cls;
    int src; /* rank, or TW_ANY_SOURCE */
    unsigned sthr;
    uint32_t seq;      /* exact/channel: the expected message */
    uint32_t post_idx; /* masked: per source; any: per worker */
    size_t buflen;
    unsigned char *buf;
} rreq_t;

typedef struct sreq {
    int dst;
    uint32_t seq;
    unsigned char *buf;
} sreq_t;

typedef struct worker {
    unsigned id;
    pthread_t th;
    tw_cq_t *cq;
    src_state_t *srcs; /* [r * threads + s] */
    uint32_t nany, any_posted, any_out;
    uint64_t *any_res64; /* (r * threads + s) << 32 | seq, per post index */
    uint64_t expect, received, truncated, large, by_cls[NCLS];
    uint64_t send_total, send_next, sent, bytes_sent, bytes_recv;
    uint32_t send_out;
    bool gated; /* stopped at --gate once */
} worker_t;

static worker_t *g_w;

static void plan_receives(worker_t *w)
{
    size_t nsrc = (size_t)g_size * g_threads;

    w->srcs = calloc(nsrc, sizeof(src_state_t));
    TW_MP_CHECK(w->srcs != NULL, "no memory");
    for (int r = 0; r < g_size; r++) {
        for (unsigned s = 0; s < g_threads; s++) {
            src_state_t *ss = &w->srcs[(size_t)r * g_threads + s];
            ss->exact = calloc(g_msgs, sizeof(uint32_t));
            ss->masked_res = calloc(g_msgs, sizeof(uint32_t));
            ss->got = calloc(g_msgs, 1);
            TW_MP_CHECK(ss->exact && ss->masked_res && ss->got, "no memory");
            for (uint32_t i = 0; i < g_msgs; i++) {
                const plan_t *p = plan_of(r, s, g_rank, i);
                if (p->dthr != w->id) {
                    continue;
                }
                w->expect++;
                if (p->cls <= CLS_CHAN) {
                    ss->exact[ss->nexact++] = i;
                } else if (p->cls == CLS_MASKED) {
                    ss->nmasked++;
                } else {
                    w->nany++;
                }
            }
        }
    }
    w->any_res64 = calloc(w->nany + 1, sizeof(uint64_t));
    TW_MP_CHECK(w->any_res64 != NULL, "no memory");
    w->send_total = (uint64_t)g_size * g_msgs;
}

static rreq_t *rreq_new(uint8_t cls, int src, unsigned sthr, size_t buflen)
{
    rreq_t *q = malloc(sizeof(*q));
    TW_MP_CHECK(q != NULL, "no memory");
    *q = (rreq_t){.cls = cls, .src = src, .sthr = sthr, .buflen = buflen};
    q->buf = malloc(buflen + 1); /* never NULL, also for 0 bytes */
    TW_MP_CHECK(q->buf != NULL, "no memory for %zu bytes", buflen);
    return q;
}

static void rreq_free(rreq_t *q)
{
    free(q->buf);
    free(q);
}

/* Post what the windows allow; true when anything was posted. */
static bool post_receives(worker_t *w)
{
    bool did = false;
    tw_status_t st;

    for (int r = 0; r < g_size; r++) {
        for (unsigned s = 0; s < g_threads; s++) {
            src_state_t *ss = &w->srcs[(size_t)r * g_threads + s];
            while (ss->exact_out < KE && ss->exact_next < ss->nexact) {
                uint32_t seq = ss->exact[ss->exact_next];
                const plan_t *p = plan_of(r, s, g_rank, seq);
                rreq_t *q = rreq_new(p->cls, r, s, p->buflen);
                q->seq = seq;
                st = tw_recv(g_ctx, r, TAG(w->id, s, p->cls, p->cls == CLS_EXACT ? seq : 0), 0,
                             q->buf, q->buflen, w->cq, q);
                if (st == TW_ERR_AGAIN) {
                    rreq_free(q);
                    return did;
                }
                TW_MP_CHECK(st == TW_OK, "tw_recv exact: %s", tw_strerror(st));
                ss->exact_next++;
                ss->exact_out++;
                did = true;
            }
            while (ss->masked_out < K2 && ss->masked_posted < ss->nmasked) {
                rreq_t *q = rreq_new(CLS_MASKED, r, s, g_wild_max);
                q->post_idx = ss->masked_posted;
                st = tw_recv(g_ctx, r, TAG(w->id, s, CLS_MASKED, 0), MASK_SEQ, q->buf, q->buflen,
                             w->cq, q);
                if (st == TW_ERR_AGAIN) {
                    rreq_free(q);
                    return did;
                }
                TW_MP_CHECK(st == TW_OK, "tw_recv masked: %s", tw_strerror(st));
                ss->masked_posted++;
                ss->masked_out++;
                did = true;
            }
        }
    }
    while (w->any_out < K3 && w->any_posted < w->nany) {
        rreq_t *q = rreq_new(CLS_ANY, TW_ANY_SOURCE, 0, g_wild_max);
        q->post_idx = w->any_posted;
        st = tw_recv(g_ctx, TW_ANY_SOURCE, TAG(w->id, 0, CLS_ANY, 0), MASK_STHR_SEQ, q->buf,
                     q->buflen, w->cq, q);
        if (st == TW_ERR_AGAIN) {
            rreq_free(q);
            return did;
        }
        TW_MP_CHECK(st == TW_OK, "tw_recv any-source: %s", tw_strerror(st));
        w->any_posted++;
        w->any_out++;
        did = true;
    }
    return did;
}

/* Send order: seq by seq, destinations rotated so ranks are hit evenly. */
/* --gate: true once the file exists (looked for at most every 10 ms). */
static bool gate_open(void)
{
    static _Atomic double next_look;

    if (g_gate == NULL || atomic_load_explicit(&g_gate_open, memory_order_relaxed)) {
        return true;
    }
    double now = twt_now();
    if (now < atomic_load_explicit(&next_look, memory_order_relaxed)) {
        return false;
    }
    atomic_store_explicit(&next_look, now + 0.01, memory_order_relaxed);
    if (access(g_gate, F_OK) != 0) {
        return false;
    }
    atomic_store_explicit(&g_gate_open, true, memory_order_relaxed);
    return true;
}

static bool post_sends(worker_t *w)
{
    bool did = false;

    while (w->send_out < SEND_WINDOW && w->send_next < w->send_total) {
        if (w->send_next >= w->send_total / 2 && !gate_open()) {
            w->gated = true;
            break;
        }
        uint32_t seq = (uint32_t)(w->send_next / (uint64_t)g_size);
        int d = (int)((w->send_next + (uint64_t)g_rank + w->id + seq) % (uint64_t)g_size);
        const plan_t *p = plan_of(g_rank, w->id, d, seq);
        sreq_t *q = malloc(sizeof(*q));
        TW_MP_CHECK(q != NULL, "no memory");
        *q = (sreq_t){.dst = d, .seq = seq, .buf = malloc(p->size + 1)};
        TW_MP_CHECK(q->buf != NULL, "no memory for %u bytes", p->size);
        fill_msg(q->buf, p->size, g_rank, w->id, d, seq);
        tw_status_t st =
            tw_send(g_ctx, d, TAG(p->dthr, w->id, p->cls, p->cls == CLS_CHAN ? 0 : seq), q->buf,
                    p->size, w->cq, q);
        if (st == TW_ERR_AGAIN) {
            free(q->buf);
            free(q);
            break;
        }
        TW_MP_CHECK(st == TW_OK, "tw_send to rank %d: %s", d, tw_strerror(st));
        w->send_next++;
        w->send_out++;
        w->bytes_sent += p->size;
        did = true;
    }
    return did;
}

static void describe_header(uint64_t h, char *out, size_t len)
{
    if (h >> 56 != 0xa5) {
        snprintf(out, len, "garbage header %016llx", (unsigned long long)h);
        return;
    }
    snprintf(out, len, "message (rank %u, thread %u, to rank %u, seq %u)",
             (unsigned)((h >> 44) & 0xfff), (unsigned)((h >> 24) & 0xff),
             (unsigned)((h >> 32) & 0xfff), (unsigned)(h & 0xffffff));
}

static void check_recv(worker_t *w, const tw_completion_t *c)
{
    rreq_t *q = c->user;
    const char *kind = cls_name[q->cls];

    TW_MP_CHECK(c->status == TW_OK || c->status == TW_ERR_TRUNCATED, "%s receive: %s", kind,
                tw_strerror(c->status));
    int r = c->peer;
    unsigned sthr = TAG_STHR(c->tag);
    TW_MP_CHECK(r >= 0 && r < g_size, "%s receive: source %d", kind, r);
    TW_MP_CHECK(TAG_DTHR(c->tag) == w->id && TAG_CLS(c->tag) == q->cls && sthr < g_threads,
                "%s receive matched tag %016llx", kind, (unsigned long long)c->tag);
    if (q->cls != CLS_ANY) {
        TW_MP_CHECK(r == q->src && sthr == q->sthr,
                    "%s receive for (rank %d, thread %u) matched (rank %d, thread %u)", kind,
                    q->src, q->sthr, r, sthr);
    }
    uint32_t seq;
    if (q->cls == CLS_EXACT) {
        TW_MP_CHECK(c->tag == TAG(w->id, q->sthr, CLS_EXACT, q->seq), "exact tag %016llx",
                    (unsigned long long)c->tag);
        seq = q->seq;
    } else if (q->cls == CLS_CHAN) {
        TW_MP_CHECK(c->tag == TAG(w->id, q->sthr, CLS_CHAN, 0), "channel tag %016llx",
                    (unsigned long long)c->tag);
        seq = q->seq; /* what the channel must deliver now */
    } else {
        seq = TAG_SEQ(c->tag);
        TW_MP_CHECK(seq < g_msgs, "%s receive: seq %u", kind, seq);
    }
    const plan_t *p = plan_of(r, sthr, g_rank, seq);
    size_t n = p->size < q->buflen ? p->size : q->buflen;
    uint64_t other;
    if (!verify_msg(q->buf, n, r, sthr, g_rank, seq, &other)) {
        char what[128] = "payload corrupted";
        if (other != 0) {
            describe_header(other, what, sizeof(what));
        }
        TW_MP_FAIL("thread %u, %s receive for (rank %d, thread %u, seq %u, %u bytes) got %s%s",
                   w->id, kind, r, sthr, seq, p->size, what,
                   q->cls == CLS_CHAN && other != 0 ? ": overtaking on the channel" : "");
    }
    TW_MP_CHECK(p->dthr == w->id && p->cls == q->cls,
                "(rank %d, thread %u, seq %u) was meant for thread %u class %u", r, sthr, seq,
                p->dthr, p->cls);
    TW_MP_CHECK(c->length == p->size, "%s (rank %d, thread %u, seq %u): length %zu, sent %u%s",
                kind, r, sthr, seq, c->length, p->size,
                q->cls == CLS_CHAN ? " (overtaking on the channel?)" : "");
    if (p->size > q->buflen) {
        TW_MP_CHECK(c->status == TW_ERR_TRUNCATED, "%u bytes into %zu: %s", p->size, q->buflen,
                    tw_strerror(c->status));
        w->truncated++;
    } else {
        TW_MP_CHECK(c->status == TW_OK, "%u bytes into %zu: %s", p->size, q->buflen,
                    tw_strerror(c->status));
    }
    src_state_t *ss = &w->srcs[(size_t)r * g_threads + sthr];
    TW_MP_CHECK(!ss->got[seq], "duplicate (rank %d, thread %u, seq %u) at thread %u", r, sthr, seq,
                w->id);
    ss->got[seq] = 1;
    switch (q->cls) {
    case CLS_EXACT:
    case CLS_CHAN:
        ss->exact_out--;
        break;
    case CLS_MASKED:
        ss->masked_res[q->post_idx] = seq;
        ss->masked_out--;
        break;
    default:
        w->any_res64[q->post_idx] = ((uint64_t)r * g_threads + sthr) << 32 | seq;
        w->any_out--;
        break;
    }
    w->received++;
    w->by_cls[q->cls]++;
    w->large += p->size > EAGER_LIMIT;
    w->bytes_recv += n;
    rreq_free(q);
}

static void check_completion(worker_t *w, const tw_completion_t *c)
{
    if (c->op == TW_OP_RECV) {
        check_recv(w, c);
        return;
    }
    TW_MP_CHECK(c->op == TW_OP_SEND, "completion of op %d", (int)c->op);
    sreq_t *q = c->user;
    TW_MP_CHECK(c->status == TW_OK, "send of seq %u to rank %d: %s", q->seq, q->dst,
                tw_strerror(c->status));
    TW_MP_CHECK(c->peer == q->dst, "send to rank %d completed for peer %d", q->dst, c->peer);
    free(q->buf);
    free(q);
    w->send_out--;
    w->sent++;
}

static void dump_state(const worker_t *w)
{
    fprintf(stderr,
            "rank %d thread %u stalled: received %llu/%llu, sends completed %llu/%llu "
            "(%u outstanding), any-source %u/%u posted (%u outstanding)\n",
            g_rank, w->id, (unsigned long long)w->received, (unsigned long long)w->expect,
            (unsigned long long)w->sent, (unsigned long long)w->send_total, w->send_out,
            w->any_posted, w->nany, w->any_out);
    for (size_t i = 0; i < (size_t)g_size * g_threads; i++) {
        const src_state_t *ss = &w->srcs[i];
        if (ss->exact_out > 0 || ss->masked_out > 0) {
            fprintf(stderr,
                    "  from rank %zu thread %zu: exact %u/%u posted (%u waiting), masked %u/%u "
                    "(%u waiting)\n",
                    i / g_threads, i % g_threads, ss->exact_next, ss->nexact, ss->exact_out,
                    ss->masked_posted, ss->nmasked, ss->masked_out);
        }
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    tw_completion_t comps[32];
    unsigned depth = (unsigned)((size_t)g_size * g_threads * (KE + K2) + K3 + SEND_WINDOW + 8);
    double last = twt_now();

    TW_MP_CHECK(tw_cq_create(g_ctx, depth, &w->cq) == TW_OK, "tw_cq_create");
    while (w->received < w->expect || w->sent < w->send_total) {
        bool did = post_receives(w);
        did |= post_sends(w);
        int n;
        if (g_poll) {
            /* Spinning on tw_cq_poll alone, as a code spins on MPI_Test:
             * with progress threads nothing else drives the transports. */
            n = tw_cq_poll(w->cq, comps, 32);
            if (n == 0 && g_manual) {
                tw_progress(g_ctx);
            }
        } else {
            tw_progress(g_ctx); /* manual mode needs it; a no-op with progress threads */
            n = did ? tw_cq_poll(w->cq, comps, 32) : tw_cq_wait(w->cq, comps, 32, 100);
        }
        TW_MP_CHECK(n >= 0, "tw_cq_poll/wait returned %d", n);
        for (int i = 0; i < n; i++) {
            check_completion(w, &comps[i]);
        }
        if (n > 0) {
            last = twt_now();
            tw_mp_tick();
        } else if (w->gated && !gate_open()) {
            last = twt_now(); /* waiting for the gate is no stall */
        } else if (twt_now() - last > g_max_stall) {
            dump_state(w);
            TW_MP_FAIL("thread %u: no completion for %.1f s", w->id, g_max_stall);
        }
    }
    TW_MP_CHECK(tw_cq_poll(w->cq, comps, 32) == 0, "completion after the last one");
    tw_status_t st = tw_cq_destroy(w->cq);
    TW_MP_CHECK(st == TW_OK, "tw_cq_destroy: %s", tw_strerror(st));
    return NULL;
}

/* Everything arrived exactly once; masked and any-source receives got
 * each sender's messages in send order. */
static void verify_worker(const worker_t *w)
{
    for (int r = 0; r < g_size; r++) {
        for (unsigned s = 0; s < g_threads; s++) {
            const src_state_t *ss = &w->srcs[(size_t)r * g_threads + s];
            for (uint32_t i = 0; i < g_msgs; i++) {
                bool mine = plan_of(r, s, g_rank, i)->dthr == w->id;
                TW_MP_CHECK(ss->got[i] == mine, "(rank %d, thread %u, seq %u) %s at thread %u", r,
                            s, i, mine ? "lost" : "delivered to the wrong thread", w->id);
            }
            for (uint32_t k = 1; k < ss->nmasked; k++) {
                TW_MP_CHECK(ss->masked_res[k] > ss->masked_res[k - 1],
                            "masked receives from (rank %d, thread %u): seq %u after %u", r, s,
                            ss->masked_res[k], ss->masked_res[k - 1]);
            }
        }
    }
    size_t nsrc = (size_t)g_size * g_threads;
    int64_t *last = malloc(nsrc * sizeof(int64_t));
    TW_MP_CHECK(last != NULL, "no memory");
    for (size_t i = 0; i < nsrc; i++) {
        last[i] = -1;
    }
    for (uint32_t k = 0; k < w->nany; k++) {
        size_t src = (size_t)(w->any_res64[k] >> 32);
        int64_t seq = (int64_t)(w->any_res64[k] & 0xffffffffu);
        TW_MP_CHECK(seq > last[src],
                    "any-source receives: (rank %zu, thread %zu) seq %lld after %lld",
                    src / g_threads, src % g_threads, (long long)seq, (long long)last[src]);
        last[src] = seq;
    }
    free(last);
}

int main(int argc, char **argv)
{
    tw_mp_opts_t o = {.threads = 4,
                      .max_threads = MAX_THREADS,
                      .messages = 64,
                      .max_size = 4u << 20,
                      .seed = 1,
                      .stall_s = 30};

    bool poll = false;
    const char *gate = NULL;
    const tw_mp_opt_t extra[] = {
        {"poll", 0, TW_MP_ARG_FLAG, &poll,
         "workers wait on tw_cq_poll alone, never tw_cq_wait (tw_progress too in manual mode)"},
        {"gate", 0, TW_MP_ARG_STR, &gate,
         "each worker posts half its sends, the rest once FILE exists"},
    };
    const char *pt = getenv("TW_PROGRESS_THREADS");

    tw_mp_parse(argc, argv, "test_alltoall",
                TW_MP_THREADS | TW_MP_MESSAGES | TW_MP_MAX_SIZE | TW_MP_SEED | TW_MP_STALL |
                    TW_MP_STATS,
                extra, TWT_ARRAY_SIZE(extra), &o);
    g_poll = poll;
    g_gate = gate;
    g_manual = pt != NULL && strcmp(pt, "0") == 0;
    TWT_CHECKF(o.messages <= (1u << 24), "at most %u messages", 1u << 24);
    g_threads = o.threads;
    g_msgs = (uint32_t)twt_scaled(o.messages, 2);
    g_max_size = (uint32_t)o.max_size;
    g_seed = o.seed;
    g_max_stall = o.stall_s;
    g_wild_max = g_max_size < WILD_MAX ? g_max_size : WILD_MAX;

    double t_init = twt_now();
    g_ctx = tw_mp_init();
    t_init = twt_now() - t_init;
    g_rank = tw_mp_rank();
    g_size = tw_mp_size();
    TW_MP_CHECK(g_size <= MAX_RANKS, "at most %d ranks", MAX_RANKS);
    /* A hang outside the workers' own stall checks (a barrier, tw_finalize)
     * fails too; later than theirs, which say more. */
    tw_mp_watchdog_start(2 * g_max_stall + 5, NULL);
    build_plan();

    g_w = calloc(g_threads, sizeof(worker_t));
    TW_MP_CHECK(g_w != NULL, "no memory");
    for (unsigned i = 0; i < g_threads; i++) {
        g_w[i].id = i;
        plan_receives(&g_w[i]);
    }
    double t0 = twt_now();
    for (unsigned i = 0; i < g_threads; i++) {
        TW_MP_CHECK(pthread_create(&g_w[i].th, NULL, worker_main, &g_w[i]) == 0, "pthread_create");
    }
    for (unsigned i = 0; i < g_threads; i++) {
        pthread_join(g_w[i].th, NULL);
    }
    double dt = twt_now() - t0;
    tw_mp_phase("end barrier");
    tw_mp_barrier(g_ctx, BARRIER_TAG);

    uint64_t expect = 0, recv = 0, trunc = 0, large = 0, sent = 0, bsent = 0, brecv = 0;
    uint64_t by_cls[NCLS] = {0};
    for (unsigned i = 0; i < g_threads; i++) {
        const worker_t *w = &g_w[i];
        verify_worker(w);
        expect += w->expect;
        recv += w->received;
        trunc += w->truncated;
        large += w->large;
        sent += w->sent;
        bsent += w->bytes_sent;
        brecv += w->bytes_recv;
        for (int k = 0; k < NCLS; k++) {
            by_cls[k] += w->by_cls[k];
        }
    }
    /* every rank sends the same number of messages to each rank */
    TW_MP_CHECK(expect == (uint64_t)g_size * g_threads * g_msgs, "expected %llu messages",
                (unsigned long long)expect);
    TW_MP_CHECK(recv == expect, "received %llu of %llu", (unsigned long long)recv,
                (unsigned long long)expect);
    TW_MP_CHECK(sent == (uint64_t)g_threads * g_size * g_msgs, "sent %llu",
                (unsigned long long)sent);
    tw_mp_stats(g_ctx);
    tw_mp_phase("tw_finalize");
    tw_status_t st = tw_finalize(g_ctx);
    tw_mp_watchdog_stop();
    TW_MP_CHECK(st == TW_OK, "tw_finalize: %s", tw_strerror(st));

    printf("alltoall rank %d of %d (%s progress%s): %u threads x %u msgs x %d ranks: "
           "sent %llu (%.1f MiB), received %llu intact exactly once (exact %llu, channel "
           "%llu, masked %llu, any-source %llu; %llu > 8 KiB, %llu truncated as planned, "
           "%.1f MiB), in order; %.2f s (tw_init %.0f ms)\n",
           g_rank, g_size, g_manual ? "manual" : "thread", g_poll ? ", poll loop" : "", g_threads,
           g_msgs, g_size, (unsigned long long)sent, (double)bsent / (1 << 20),
           (unsigned long long)recv, (unsigned long long)by_cls[CLS_EXACT],
           (unsigned long long)by_cls[CLS_CHAN], (unsigned long long)by_cls[CLS_MASKED],
           (unsigned long long)by_cls[CLS_ANY], (unsigned long long)large,
           (unsigned long long)trunc, (double)brecv / (1 << 20), dt, t_init * 1e3);
    for (unsigned i = 0; i < g_threads; i++) {
        for (size_t k = 0; k < (size_t)g_size * g_threads; k++) {
            free(g_w[i].srcs[k].exact);
            free(g_w[i].srcs[k].masked_res);
            free(g_w[i].srcs[k].got);
        }
        free(g_w[i].srcs);
        free(g_w[i].any_res64);
    }
    free(g_w);
    free(g_plan);
    return 0;
}
