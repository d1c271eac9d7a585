/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_perf: point-to-point benchmarks over the public API, after UCX's
 * ucx_perftest.
 *
 *   twrun -n 2 tw_perf [-x lat|bw|rate] [-s SIZE|MIN:MAX] [-t THREADS] ...
 *   tw_perf ...                      (a job of one: rank 0 is its own partner)
 *
 * Roles. Rank 0 plays the initiator (A) and rank 1 the responder (B). In a
 * job of one process every thread plays both, through the self transport;
 * with --split, thread i is the initiator and thread T + i its responder,
 * which runs the two-process code path inside one process.
 * Thread i of one rank pairs with thread i of the other: its messages carry
 * tag i (A to B) or tag i | TAG_REPLY (B to A), and every receive is exact
 * (source and tag), so the pairs never see each other's traffic. Each
 * thread owns one CQ.
 *
 *   lat   A: post the pong receive, send a ping; B: wait for the ping, post
 *         the next ping receive, send the pong. A times each round trip and
 *         reports half of it.
 *   bw    A: post the ack receive, send WINDOW messages; B: wait for all of
 *   rate  them, post the next window's receives, send a 0-byte ack. A times
 *         each window; bandwidth and rate come from the whole measured run.
 *
 * One-sided tests. Every responder thread has a window of two slots of the
 * largest SIZE. Before each one-sided run (and its barrier) B's main thread
 * writes the window (below), registers it (tw_mem_register; afresh each
 * run, so that the registry's lock orders those writes before the
 * library's threads serve the run's operations) and sends its packed key
 * (tw_mr_pack) and address to the initiator's rank, tagged TAG_KEYS | i.
 * Only responders register: nobody addresses an initiator's memory.
 * During a run B only waits for A's 0-byte "done" message (posted first;
 * no idle timeout, as no completion comes until the end): its progress
 * thread serves the emulated operations, and in manual mode (-p 0) that
 * wait -- tw_cq_wait, or tw_cq_poll and tw_progress with -m spin -- drives
 * progress itself.
 *   put_lat  A: tw_put SIZE bytes into B's window, wait for the put's
 *            completion, next. A put completes when its bytes are in place
 *            at B, so this is a round trip (the RDMA write's
 *            acknowledgement, or the emulation's reply): reported whole,
 *            per put, not halved. ucx_perftest's ucp_put_lat ping-pongs
 *            puts instead (each side polls its memory for the last byte)
 *            and reports half the round trip; our puts promise no order of
 *            bytes and wake nobody, so a put_lat compares with twice a
 *            ucp_put_lat.
 *   get_lat  the same with tw_get from B's window (as ucp_get with -O 1).
 *   put_bw   A: WINDOW puts, then one tw_flush; wait for the flush and every
 *            put. A times each window; bandwidth and rate come from the
 *            whole measured run. tw_flush waits for the puts to B of every
 *            thread, so with -t > 1 a flush may also wait for other pairs'.
 *   get_bw   A: WINDOW gets, wait for all of them (a flush orders puts only).
 * Puts of the last iteration go to the window's second slot, the others to
 * the first: B clears both before the run and checks both after it (the
 * first iteration's pattern, which the middle iterations repeat, and the
 * last's). Before a get run B fills the slots with its patterns, and A
 * checks what it read after the first and the last iteration. Every RMA
 * completion is checked for status, op, length and peer.
 *
 * Receives are posted before their message is sent (only the first message
 * of a run may find its partner thread not started yet), so the measured
 * traffic does not take the unexpected-message path. Sends of the first and of the last
 * iteration come from two buffers filled with patterns seeded by (thread,
 * direction, first/last); the middle iterations reuse the first buffer.
 * Receivers check the payload after the first and the last iteration, and
 * every completion is checked: status TW_OK, exact length, tag and source.
 *
 * Between runs (one per test and size) the ranks meet in a barrier of
 * 0-byte messages tagged TAG_BARRIER | sequence, from the main thread on a
 * CQ of its own. Waits give up after --timeout seconds without a completion.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <threadwire/threadwire.h>

#define PERF_MAX_THREADS 256
#define PERF_MAX_WINDOW  65536
#define PERF_MAX_SIZE    ((size_t)1 << 30)
#define PERF_MAX_TESTS   7   /* each test once */
#define PERF_WAIT_MS     100 /* one tw_cq_wait slice: abort/timeout checks between */
#define PERF_POLL_MAX    32

/* Tag layout: bits 0..31 thread index, bit 32 direction, bit 62 window
 * keys, bit 63 barrier. */
#define TAG_REPLY   (UINT64_C(1) << 32)
#define TAG_KEYS    (UINT64_C(1) << 62)
#define TAG_BARRIER (UINT64_C(1) << 63)

typedef enum perf_test {
    TEST_LAT,
    TEST_BW,
    TEST_RATE,
    TEST_PUT_LAT,
    TEST_PUT_BW,
    TEST_GET_LAT,
    TEST_GET_BW
} perf_test_t;

static const char *const test_names[] = {"lat",    "bw",      "rate",  "put_lat",
                                         "put_bw", "get_lat", "get_bw"};

enum { ROLE_A, ROLE_B }; /* initiator, responder */
/* completion user values */
enum { USER_SEND = 1, USER_RECV_A, USER_RECV_B, USER_PUT, USER_GET, USER_FLUSH };
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

typedef struct perf_opts {
    perf_test_t tests[PERF_MAX_TESTS];
    int ntests;
    size_t size_min, size_max;
    bool size_set;
    uint64_t iters, warmup;
    bool iters_set, warmup_set;
    unsigned window;
    int threads;
    const char *transports;
    int progress_threads;
    tw_wait_mode_t wait_mode;
    bool split;
    bool csv;
    bool stats; /* tw_stats_print on stderr at the end */
    double timeout_s;
} perf_opts_t;

/* One measurement: a test at one size. */
typedef struct perf_run {
    perf_test_t test;
    size_t size;
    uint64_t iters, warmup;
    unsigned window;
} perf_run_t;

/* What one thread (or the aggregate) measured. Latencies in microseconds. */
typedef struct perf_result {
    double lat_med, lat_avg, lat_min, lat_max;
    double mbps, mmps;
} perf_result_t;

/* A CQ and the bookkeeping of what was posted on it. Thread: its owner. */
typedef struct perf_ep {
    tw_cq_t *cq;
    int thread;     /* -1: the main thread's barrier endpoint */
    bool responder; /* --split: the responder half of a pair */
    const perf_run_t *run;
    uint64_t iter;
    uint64_t sends_posted, sends_done;
    uint64_t recvs[2]; /* receives completed, per role */
    uint64_t expect_tag[2];
    size_t expect_len[2];
    uint64_t puts_posted, puts_done, gets_posted, gets_done, flushes_posted, flushes_done;
    bool no_timeout; /* a one-sided responder: no completion until "done" */
    uint64_t last_event_ns;
    unsigned idle;
} perf_ep_t;

/* One-sided state of a worker, kept across runs. The responder's own
 * window (registered), or the initiator's view of its partner's. Written
 * by the main thread between runs, read by the worker during one. */
typedef struct perf_rma {
    unsigned char *win; /* responder: two slots of g_rma_slot bytes */
    tw_mr_t *mr;
    uint64_t raddr; /* initiator: the partner's window, its key */
    size_t rkey_len;
    unsigned char rkey[TW_RKEY_MAX];
} perf_rma_t;

/* What a responder's rank sends for pair i (tag TAG_KEYS | i): fixed size,
 * so the receive checks its length exactly. */
typedef struct perf_key_msg {
    uint64_t addr;
    uint64_t len;
    uint32_t rkey_len;
    uint32_t reserved;
    unsigned char rkey[TW_RKEY_MAX];
} perf_key_msg_t;

typedef struct perf_worker {
    int id;
    pthread_t th;
    perf_ep_t ep;
    perf_rma_t *rma; /* NULL without one-sided tests */
    bool role[2];
    unsigned char *sbuf[2][2]; /* [role][first/last iteration pattern] */
    unsigned char *rbuf[2];    /* [role] */
    double *samples;           /* ns per message (lat: half round trip) */
    uint64_t elapsed_ns;       /* measured part of the run */
    tw_status_t status;
} perf_worker_t;

static perf_opts_t g_opts;
static tw_context_t *g_ctx;
static int g_rank, g_size, g_partner;
static int g_nworkers;    /* threads per process: --threads, twice that with --split */
static perf_rma_t *g_rma; /* per worker, with one-sided tests */
static size_t g_rma_slot; /* bytes per window slot: the largest one-sided SIZE */
static atomic_bool g_abort;
/* The start gate: a run's threads start together once all exist. */
static pthread_mutex_t g_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cond = PTHREAD_COND_INITIALIZER;
static bool g_gate_open; /* guarded by g_gate_lock */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool test_is_rma(perf_test_t t)
{
    return t == TEST_PUT_LAT || t == TEST_PUT_BW || t == TEST_GET_LAT || t == TEST_GET_BW;
}

static bool test_is_put(perf_test_t t)
{
    return t == TEST_PUT_LAT || t == TEST_PUT_BW;
}

/* One operation at a time (window 1) rather than windows of them. */
static bool test_is_lat(perf_test_t t)
{
    return t == TEST_LAT || t == TEST_PUT_LAT || t == TEST_GET_LAT;
}

/* ---- payload patterns -------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return x;
}

/* Seed of the payload thread @p thread sends in role @p role, in the first
 * (which = 0) or the last (which = 1) iteration of a run. */
static uint64_t pattern_seed(int thread, int role, int which)
{
    return mix64((uint64_t)thread << 8 | (uint64_t)role << 4 | (uint64_t)which | UINT64_C(1) << 40);
}

static uint64_t pattern_next(uint64_t *x)
{
    *x = *x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return *x ^ *x >> 29;
}

static void pattern_fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed, v;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        v = pattern_next(&x);
        memcpy(p + i, &v, 8);
    }
    v = pattern_next(&x);
    memcpy(p + i, &v, n - i);
}

/* @return n when @p p holds what pattern_fill wrote, else the first bad offset. */
static size_t pattern_check(const unsigned char *p, size_t n, uint64_t seed)
{
    unsigned char want[8];
    uint64_t x = seed, v;

    for (size_t i = 0; i < n; i += 8) {
        size_t k = n - i < 8 ? n - i : 8;

        v = pattern_next(&x);
        memcpy(want, &v, 8);
        if (memcmp(p + i, want, k) != 0) {
            for (size_t j = 0; j < k; j++) {
                if (p[i + j] != want[j]) {
                    return i + j;
                }
            }
        }
    }
    return n;
}

/* ---- endpoint: posting, completions, waiting --------------------------- */

static void ep_where(const perf_ep_t *ep, char *buf, size_t len)
{
    if (ep->thread < 0) {
        snprintf(buf, len, "rank %d barrier", g_rank);
    } else if (ep->run != NULL) {
        snprintf(buf, len, "rank %d thread %d%s (%s, %zu B, iteration %" PRIu64 " of %" PRIu64 ")",
                 g_rank, ep->thread, ep->responder ? " responder" : "", test_names[ep->run->test],
                 ep->run->size, ep->iter + 1, ep->run->warmup + ep->run->iters);
    } else {
        snprintf(buf, len, "rank %d thread %d", g_rank, ep->thread);
    }
}

/* Report a failure once, stop the other threads, return @p st. */
__attribute__((format(printf, 3, 4))) static tw_status_t ep_fail(perf_ep_t *ep, tw_status_t st,
                                                                 const char *fmt, ...)
{
    char where[160], msg[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ep_where(ep, where, sizeof(where));
    fprintf(stderr, "tw_perf: %s: %s\n", where, msg);
    atomic_store_explicit(&g_abort, true, memory_order_relaxed);
    return st;
}

/* The counter of one-sided operations of kind @p kind (USER_PUT, USER_GET,
 * USER_FLUSH) posted, or completed. */
static uint64_t *ep_rma_count(perf_ep_t *ep, int kind, bool done)
{
    switch (kind) {
    case USER_PUT:
        return done ? &ep->puts_done : &ep->puts_posted;
    case USER_GET:
        return done ? &ep->gets_done : &ep->gets_posted;
    default:
        return done ? &ep->flushes_done : &ep->flushes_posted;
    }
}

static tw_status_t ep_complete(perf_ep_t *ep, const tw_completion_t *c)
{
    uintptr_t kind = (uintptr_t)c->user;

    if (kind == USER_SEND) {
        if (c->status != TW_OK || c->op != TW_OP_SEND) {
            return ep_fail(ep, c->status != TW_OK ? c->status : TW_ERR_PROTOCOL,
                           "send completed with %s (op %d)", tw_strerror(c->status), (int)c->op);
        }
        ep->sends_done++;
        return TW_OK;
    }
    if (kind == USER_RECV_A || kind == USER_RECV_B) {
        int role = kind == USER_RECV_A ? ROLE_A : ROLE_B;

        if (c->status != TW_OK) {
            return ep_fail(ep, c->status, "receive completed with %s (length %zu, expected %zu)",
                           tw_strerror(c->status), c->length, ep->expect_len[role]);
        }
        if (c->op != TW_OP_RECV || c->length != ep->expect_len[role] ||
            c->tag != ep->expect_tag[role] || c->peer != g_partner) {
            return ep_fail(ep, TW_ERR_PROTOCOL,
                           "receive completed with tag 0x%" PRIx64 ", %zu B from rank %d; "
                           "expected tag 0x%" PRIx64 ", %zu B from rank %d",
                           c->tag, c->length, c->peer, ep->expect_tag[role], ep->expect_len[role],
                           g_partner);
        }
        ep->recvs[role]++;
        return TW_OK;
    }
    if (kind == USER_PUT || kind == USER_GET || kind == USER_FLUSH) {
        static const char *const names[] = {"put", "get", "flush"};
        const char *name = names[kind - USER_PUT];
        tw_op_t op = kind == USER_PUT ? TW_OP_PUT : kind == USER_GET ? TW_OP_GET : TW_OP_FLUSH;
        size_t len = kind == USER_FLUSH ? 0 : ep->run->size;

        if (c->status != TW_OK) {
            return ep_fail(ep, c->status, "%s completed with %s", name, tw_strerror(c->status));
        }
        if (c->op != op || c->length != len || c->peer != g_partner) {
            return ep_fail(ep, TW_ERR_PROTOCOL,
                           "%s completed as op %d, %zu B, rank %d; expected op %d, %zu B, "
                           "rank %d",
                           name, (int)c->op, c->length, c->peer, (int)op, len, g_partner);
        }
        (*ep_rma_count(ep, kind, true))++;
        return TW_OK;
    }
    return ep_fail(ep, TW_ERR_PROTOCOL, "completion with unknown user value %p", c->user);
}

/* Take what completed, or wait a little for it. TW_ERR_TIMEOUT after
 * --timeout seconds without a completion; TW_ERR_CANCELED (quietly) when
 * another thread failed. */
static tw_status_t ep_progress(perf_ep_t *ep)
{
    tw_completion_t c[PERF_POLL_MAX];
    bool spin = g_opts.wait_mode == TW_WAIT_SPIN;
    int n;

    if (spin) {
        n = tw_cq_poll(ep->cq, c, PERF_POLL_MAX);
        if (n == 0) {
            (void)tw_progress(g_ctx); /* required in manual mode, a no-op otherwise */
        }
    } else {
        n = tw_cq_wait(ep->cq, c, PERF_POLL_MAX, PERF_WAIT_MS);
    }
    if (n < 0) {
        return ep_fail(ep, TW_ERR_INVALID, "%s failed", spin ? "tw_cq_poll" : "tw_cq_wait");
    }
    if (n > 0) {
        ep->last_event_ns = now_ns();
        for (int i = 0; i < n; i++) {
            tw_status_t st = ep_complete(ep, &c[i]);
            if (st != TW_OK) {
                return st;
            }
        }
        return TW_OK;
    }
    if (!spin || (++ep->idle & 1023) == 0) {
        if (atomic_load_explicit(&g_abort, memory_order_relaxed)) {
            return TW_ERR_CANCELED;
        }
        if (!ep->no_timeout && (double)(now_ns() - ep->last_event_ns) > g_opts.timeout_s * 1e9) {
            return ep_fail(ep, TW_ERR_TIMEOUT,
                           "no completion for %g s (sends: %" PRIu64 " of %" PRIu64
                           " done; received: %" PRIu64 " replies, %" PRIu64
                           " requests; puts %" PRIu64 " of %" PRIu64 ", gets %" PRIu64
                           " of %" PRIu64 ", flushes %" PRIu64 " of %" PRIu64 " done)",
                           g_opts.timeout_s, ep->sends_done, ep->sends_posted, ep->recvs[0],
                           ep->recvs[1], ep->puts_done, ep->puts_posted, ep->gets_done,
                           ep->gets_posted, ep->flushes_done, ep->flushes_posted);
        }
    }
    return TW_OK;
}

/* Wait until *counter reaches target. */
static tw_status_t ep_wait(perf_ep_t *ep, const uint64_t *counter, uint64_t target)
{
    ep->last_event_ns = now_ns();
    while (*counter < target) {
        tw_status_t st = ep_progress(ep);
        if (st != TW_OK) {
            return st;
        }
    }
    return TW_OK;
}

static tw_status_t ep_send(perf_ep_t *ep, const void *buf, size_t len, uint64_t tag)
{
    ep->last_event_ns = now_ns();
    for (;;) {
        tw_status_t st =
            tw_send(g_ctx, g_partner, tag, buf, len, ep->cq, (void *)(uintptr_t)USER_SEND);
        if (st == TW_OK) {
            ep->sends_posted++;
            return TW_OK;
        }
        if (st != TW_ERR_AGAIN) {
            return ep_fail(ep, st, "tw_send(to rank %d, tag 0x%" PRIx64 ", %zu B): %s", g_partner,
                           tag, len, tw_strerror(st));
        }
        st = ep_progress(ep); /* CQ full: make room */
        if (st != TW_OK) {
            return st;
        }
    }
}

static tw_status_t ep_recv(perf_ep_t *ep, int role, void *buf, size_t len)
{
    ep->last_event_ns = now_ns();
    for (;;) {
        tw_status_t st = tw_recv(g_ctx, g_partner, ep->expect_tag[role], 0, buf, len, ep->cq,
                                 (void *)(uintptr_t)(role == ROLE_A ? USER_RECV_A : USER_RECV_B));
        if (st == TW_OK) {
            return TW_OK;
        }
        if (st != TW_ERR_AGAIN) {
            return ep_fail(ep, st, "tw_recv(from rank %d, tag 0x%" PRIx64 ", %zu B): %s", g_partner,
                           ep->expect_tag[role], len, tw_strerror(st));
        }
        st = ep_progress(ep);
        if (st != TW_OK) {
            return st;
        }
    }
}

/* Post a put (from @p buf) or a get (into @p buf) of the run's size at the
 * partner's @p raddr, or a flush; retry while the CQ is full. */
static tw_status_t ep_rma(perf_ep_t *ep, const perf_rma_t *rma, int kind, void *buf, uint64_t raddr)
{
    size_t len = ep->run->size;
    void *user = (void *)(uintptr_t)kind;

    ep->last_event_ns = now_ns();
    for (;;) {
        tw_status_t st;

        if (kind == USER_PUT) {
            st = tw_put(g_ctx, g_partner, buf, len, raddr, rma->rkey, ep->cq, user);
        } else if (kind == USER_GET) {
            st = tw_get(g_ctx, g_partner, buf, len, raddr, rma->rkey, ep->cq, user);
        } else {
            st = tw_flush(g_ctx, g_partner, ep->cq, user);
        }
        if (st == TW_OK) {
            (*ep_rma_count(ep, kind, false))++;
            return TW_OK;
        }
        if (st != TW_ERR_AGAIN) {
            return ep_fail(ep, st, "%s(rank %d, 0x%" PRIx64 ", %zu B): %s",
                           kind == USER_PUT   ? "tw_put"
                           : kind == USER_GET ? "tw_get"
                                              : "tw_flush",
                           g_partner, raddr, kind == USER_FLUSH ? 0 : len, tw_strerror(st));
        }
        st = ep_progress(ep); /* CQ full: make room */
        if (st != TW_OK) {
            return st;
        }
    }
}

/* ---- the tests --------------------------------------------------------- */

/* Check what role @p role received in iteration pattern @p which (sent by
 * the other role). */
static tw_status_t worker_verify(perf_worker_t *w, int role, int which)
{
    size_t n = w->ep.run->size;
    size_t bad = pattern_check(w->rbuf[role], n, pattern_seed(w->id, 1 - role, which));

    if (bad != n) {
        return ep_fail(&w->ep, TW_ERR_PROTOCOL, "payload mismatch at byte %zu of %zu", bad, n);
    }
    return TW_OK;
}

static tw_status_t run_lat(perf_worker_t *w)
{
    perf_ep_t *ep = &w->ep;
    const perf_run_t *r = ep->run;
    uint64_t total = r->warmup + r->iters, tag = (uint64_t)w->id;
    tw_status_t st = TW_OK;

    ep->expect_tag[ROLE_A] = tag | TAG_REPLY;
    ep->expect_tag[ROLE_B] = tag;
    ep->expect_len[ROLE_A] = ep->expect_len[ROLE_B] = r->size;
    if (w->role[ROLE_B]) {
        st = ep_recv(ep, ROLE_B, w->rbuf[ROLE_B], r->size);
    }
    for (uint64_t k = 0; k < total && st == TW_OK; k++) {
        int which = k + 1 == total;
        bool check = k == 0 || k + 1 == total;
        uint64_t t0 = 0;

        ep->iter = k;
        if (w->role[ROLE_A]) {
            if ((st = ep_recv(ep, ROLE_A, w->rbuf[ROLE_A], r->size)) != TW_OK) {
                break;
            }
            t0 = now_ns();
            if ((st = ep_send(ep, w->sbuf[ROLE_A][which], r->size, tag)) != TW_OK) {
                break;
            }
        }
        if (w->role[ROLE_B]) {
            if ((st = ep_wait(ep, &ep->recvs[ROLE_B], k + 1)) != TW_OK) {
                break;
            }
            if (check && (st = worker_verify(w, ROLE_B, which)) != TW_OK) {
                break;
            }
            if (k + 1 < total && (st = ep_recv(ep, ROLE_B, w->rbuf[ROLE_B], r->size)) != TW_OK) {
                break;
            }
            if ((st = ep_send(ep, w->sbuf[ROLE_B][which], r->size, tag | TAG_REPLY)) != TW_OK) {
                break;
            }
        }
        if (w->role[ROLE_A]) {
            if ((st = ep_wait(ep, &ep->recvs[ROLE_A], k + 1)) != TW_OK) {
                break;
            }
            uint64_t rtt = now_ns() - t0;
            if (k >= r->warmup) {
                w->samples[k - r->warmup] = (double)rtt / 2;
                w->elapsed_ns += rtt;
            }
            if (check) {
                st = worker_verify(w, ROLE_A, which);
            }
        }
    }
    if (st == TW_OK) {
        st = ep_wait(ep, &ep->sends_done, ep->sends_posted);
    }
    return st;
}

/* bw and rate: windows of sends, each acknowledged by a 0-byte reply. */
static tw_status_t run_stream(perf_worker_t *w)
{
    perf_ep_t *ep = &w->ep;
    const perf_run_t *r = ep->run;
    uint64_t total = r->warmup + r->iters, tag = (uint64_t)w->id, t_start = 0;
    unsigned wnd = r->window;
    static char ack; /* 0-byte messages: never read or written */
    tw_status_t st = TW_OK;

    ep->expect_tag[ROLE_A] = tag | TAG_REPLY;
    ep->expect_tag[ROLE_B] = tag;
    ep->expect_len[ROLE_A] = 0;
    ep->expect_len[ROLE_B] = r->size;
    for (unsigned j = 0; w->role[ROLE_B] && j < wnd && st == TW_OK; j++) {
        st = ep_recv(ep, ROLE_B, w->rbuf[ROLE_B], r->size);
    }
    for (uint64_t k = 0; k < total && st == TW_OK; k++) {
        int which = k + 1 == total;
        uint64_t t0 = 0;

        ep->iter = k;
        if (w->role[ROLE_A]) {
            if ((st = ep_recv(ep, ROLE_A, &ack, 0)) != TW_OK) {
                break;
            }
            t0 = now_ns();
            if (k == r->warmup) {
                t_start = t0;
            }
            for (unsigned j = 0; j < wnd && st == TW_OK; j++) {
                st = ep_send(ep, w->sbuf[ROLE_A][which], r->size, tag);
            }
            if (st != TW_OK) {
                break;
            }
        }
        if (w->role[ROLE_B]) {
            if ((st = ep_wait(ep, &ep->recvs[ROLE_B], (k + 1) * wnd)) != TW_OK) {
                break;
            }
            if ((k == 0 || k + 1 == total) && (st = worker_verify(w, ROLE_B, which)) != TW_OK) {
                break;
            }
            for (unsigned j = 0; k + 1 < total && j < wnd && st == TW_OK; j++) {
                st = ep_recv(ep, ROLE_B, w->rbuf[ROLE_B], r->size);
            }
            if (st != TW_OK || (st = ep_send(ep, &ack, 0, tag | TAG_REPLY)) != TW_OK) {
                break;
            }
        }
        if (w->role[ROLE_A]) {
            if ((st = ep_wait(ep, &ep->recvs[ROLE_A], k + 1)) != TW_OK) {
                break;
            }
            uint64_t t1 = now_ns();
            if (k >= r->warmup) {
                w->samples[k - r->warmup] = (double)(t1 - t0) / wnd;
                w->elapsed_ns = t1 - t_start;
            }
        }
    }
    if (st == TW_OK) {
        st = ep_wait(ep, &ep->sends_done, ep->sends_posted);
    }
    return st;
}

/* The start of a one-sided run: B posts the receive of A's "done". */
static tw_status_t rma_begin(perf_worker_t *w)
{
    static char none; /* 0-byte messages: never read or written */
    perf_ep_t *ep = &w->ep;

    ep->expect_tag[ROLE_B] = (uint64_t)w->id;
    ep->expect_len[ROLE_B] = 0;
    return w->role[ROLE_B] ? ep_recv(ep, ROLE_B, &none, 0) : TW_OK;
}

/* The end of a one-sided run: A, whose operations all completed, says
 * "done"; B waits for it -- serving A's operations meanwhile -- and checks
 * what A put into its window. */
static tw_status_t rma_end(perf_worker_t *w)
{
    static char none;
    perf_ep_t *ep = &w->ep;
    const perf_run_t *r = ep->run;
    tw_status_t st = TW_OK;

    if (w->role[ROLE_A]) {
        st = ep_send(ep, &none, 0, (uint64_t)w->id);
    }
    if (st == TW_OK && w->role[ROLE_B]) {
        ep->no_timeout = true;
        st = ep_wait(ep, &ep->recvs[ROLE_B], 1);
        ep->no_timeout = false;
        /* A run of one iteration puts the last pattern only. */
        for (int which = r->warmup + r->iters > 1 ? 0 : 1;
             st == TW_OK && test_is_put(r->test) && which < 2; which++) {
            size_t bad = pattern_check(w->rma->win + (size_t)which * g_rma_slot, r->size,
                                       pattern_seed(w->id, ROLE_A, which));
            if (bad != r->size) {
                st = ep_fail(ep, TW_ERR_PROTOCOL,
                             "window slot %d: put payload mismatch at byte %zu of %zu", which, bad,
                             r->size);
            }
        }
    }
    if (st == TW_OK) {
        st = ep_wait(ep, &ep->sends_done, ep->sends_posted);
    }
    return st;
}

/* put_lat, get_lat: one operation at a time, each timed to its completion. */
static tw_status_t run_rma_lat(perf_worker_t *w)
{
    perf_ep_t *ep = &w->ep;
    const perf_run_t *r = ep->run;
    bool put = test_is_put(r->test);
    uint64_t total = r->warmup + r->iters;
    tw_status_t st = rma_begin(w);

    for (uint64_t k = 0; w->role[ROLE_A] && k < total && st == TW_OK; k++) {
        int which = k + 1 == total;
        uint64_t raddr = w->rma->raddr + (uint64_t)which * g_rma_slot, t0, t;

        ep->iter = k;
        t0 = now_ns();
        if (put) {
            st = ep_rma(ep, w->rma, USER_PUT, w->sbuf[ROLE_A][which], raddr);
            if (st == TW_OK) {
                st = ep_wait(ep, &ep->puts_done, k + 1);
            }
        } else {
            st = ep_rma(ep, w->rma, USER_GET, w->rbuf[ROLE_A], raddr);
            if (st == TW_OK) {
                st = ep_wait(ep, &ep->gets_done, k + 1);
            }
        }
        if (st != TW_OK) {
            break;
        }
        t = now_ns() - t0;
        if (k >= r->warmup) {
            w->samples[k - r->warmup] = (double)t;
            w->elapsed_ns += t;
        }
        if (!put && (k == 0 || k + 1 == total)) {
            st = worker_verify(w, ROLE_A, which);
        }
    }
    return st == TW_OK ? rma_end(w) : st;
}

/* put_bw, get_bw: windows of operations; a put window ends in a flush. */
static tw_status_t run_rma_bw(perf_worker_t *w)
{
    perf_ep_t *ep = &w->ep;
    const perf_run_t *r = ep->run;
    bool put = test_is_put(r->test);
    uint64_t total = r->warmup + r->iters, t_start = 0;
    unsigned wnd = r->window;
    tw_status_t st = rma_begin(w);

    for (uint64_t k = 0; w->role[ROLE_A] && k < total && st == TW_OK; k++) {
        int which = k + 1 == total;
        uint64_t raddr = w->rma->raddr + (uint64_t)which * g_rma_slot, t0, t1;

        ep->iter = k;
        t0 = now_ns();
        if (k == r->warmup) {
            t_start = t0;
        }
        for (unsigned j = 0; j < wnd && st == TW_OK; j++) {
            st = put ? ep_rma(ep, w->rma, USER_PUT, w->sbuf[ROLE_A][which], raddr)
                     : ep_rma(ep, w->rma, USER_GET, w->rbuf[ROLE_A], raddr);
        }
        if (st == TW_OK && put) {
            /* The flush completes once the window's puts did; their own
             * completions may reach the CQ before or after it. */
            if ((st = ep_rma(ep, w->rma, USER_FLUSH, NULL, 0)) == TW_OK &&
                (st = ep_wait(ep, &ep->flushes_done, k + 1)) == TW_OK) {
                st = ep_wait(ep, &ep->puts_done, (k + 1) * wnd);
            }
        } else if (st == TW_OK) {
            st = ep_wait(ep, &ep->gets_done, (k + 1) * wnd);
        }
        if (st != TW_OK) {
            break;
        }
        t1 = now_ns();
        if (k >= r->warmup) {
            w->samples[k - r->warmup] = (double)(t1 - t0) / wnd;
            w->elapsed_ns = t1 - t_start;
        }
        if (!put && (k == 0 || k + 1 == total)) {
            st = worker_verify(w, ROLE_A, which);
        }
    }
    return st == TW_OK ? rma_end(w) : st;
}

static void *worker_main(void *arg)
{
    perf_worker_t *w = arg;

    pthread_mutex_lock(&g_gate_lock);
    while (!g_gate_open) {
        pthread_cond_wait(&g_gate_cond, &g_gate_lock);
    }
    pthread_mutex_unlock(&g_gate_lock);
    if (atomic_load_explicit(&g_abort, memory_order_relaxed)) {
        w->status = TW_ERR_CANCELED;
    } else {
        switch (w->ep.run->test) {
        case TEST_LAT:
            w->status = run_lat(w);
            break;
        case TEST_BW:
        case TEST_RATE:
            w->status = run_stream(w);
            break;
        case TEST_PUT_LAT:
        case TEST_GET_LAT:
            w->status = run_rma_lat(w);
            break;
        case TEST_PUT_BW:
        case TEST_GET_BW:
            w->status = run_rma_bw(w);
            break;
        }
    }
    return NULL;
}

/* ---- statistics -------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static perf_result_t worker_result(perf_worker_t *w, const perf_run_t *r)
{
    perf_result_t res;
    /* lat: a message each way per iteration; put_lat, get_lat: one
     * operation; the others: a window of them. */
    uint64_t msgs = r->test == TEST_LAT    ? 2 * r->iters
                    : test_is_lat(r->test) ? r->iters
                                           : r->iters * r->window;
    double sum = 0, secs = (double)w->elapsed_ns * 1e-9;

    res.lat_min = res.lat_max = w->samples[0];
    for (uint64_t i = 0; i < r->iters; i++) {
        sum += w->samples[i];
        res.lat_min = w->samples[i] < res.lat_min ? w->samples[i] : res.lat_min;
        res.lat_max = w->samples[i] > res.lat_max ? w->samples[i] : res.lat_max;
    }
    res.lat_avg = sum / (double)r->iters / 1e3;
    res.lat_min /= 1e3;
    res.lat_max /= 1e3;
    res.lat_med = median_of(w->samples, r->iters) / 1e3;
    if (secs <= 0) {
        secs = 1e-9;
    }
    res.mbps = (double)msgs * (double)r->size / secs / 1e6;
    res.mmps = (double)msgs / secs / 1e6;
    return res;
}

/* Sums of bandwidth and rate; median of the thread medians. */
static perf_result_t aggregate(const perf_result_t *res, int n)
{
    perf_result_t a = res[0];
    double *med = malloc((size_t)n * sizeof(*med));
    double sum_avg = 0;

    a.mbps = a.mmps = 0;
    for (int i = 0; i < n; i++) {
        a.mbps += res[i].mbps;
        a.mmps += res[i].mmps;
        sum_avg += res[i].lat_avg;
        a.lat_min = res[i].lat_min < a.lat_min ? res[i].lat_min : a.lat_min;
        a.lat_max = res[i].lat_max > a.lat_max ? res[i].lat_max : a.lat_max;
        if (med != NULL) {
            med[i] = res[i].lat_med;
        }
    }
    a.lat_avg = sum_avg / n;
    if (med != NULL) {
        a.lat_med = median_of(med, (size_t)n);
        free(med);
    }
    return a;
}

/* ---- output ------------------------------------------------------------ */

static void print_header(void)
{
    if (g_opts.csv) {
        printf("test,size,threads,thread,iterations,warmup,window,lat_median_us,lat_avg_us,"
               "lat_min_us,lat_max_us,bw_MBps,rate_Mmsgps\n");
        return;
    }
    printf("%-7s %9s %7s %6s %9s %6s %10s %10s %10s %10s %11s %9s\n", "test", "size", "threads",
           "thread", "iters", "window", "median(us)", "avg(us)", "min(us)", "max(us)", "bw(MB/s)",
           "Mmsg/s");
}

static void print_row(const perf_run_t *r, const char *thread, const perf_result_t *res)
{
    unsigned wnd = test_is_lat(r->test) ? 1 : r->window;

    if (g_opts.csv) {
        printf("%s,%zu,%d,%s,%" PRIu64 ",%" PRIu64 ",%u,%.3f,%.3f,%.3f,%.3f,%.2f,%.4f\n",
               test_names[r->test], r->size, g_opts.threads, thread, r->iters, r->warmup, wnd,
               res->lat_med, res->lat_avg, res->lat_min, res->lat_max, res->mbps, res->mmps);
        return;
    }
    printf("%-7s %9zu %7d %6s %9" PRIu64 " %6u %10.3f %10.3f %10.3f %10.3f %11.2f %9.4f\n",
           test_names[r->test], r->size, g_opts.threads, thread, r->iters, wnd, res->lat_med,
           res->lat_avg, res->lat_min, res->lat_max, res->mbps, res->mmps);
}

/* ---- running ----------------------------------------------------------- */

/* The ranks meet: each sends a 0-byte message to its partner and waits for
 * the partner's. @p seq keeps consecutive barriers apart. */
static tw_status_t rank_barrier(perf_ep_t *ep, uint64_t seq)
{
    static char none;
    uint64_t want = ep->recvs[ROLE_B] + 1;
    tw_status_t st;

    ep->expect_tag[ROLE_B] = TAG_BARRIER | seq;
    ep->expect_len[ROLE_B] = 0;
    if ((st = ep_recv(ep, ROLE_B, &none, 0)) != TW_OK ||
        (st = ep_send(ep, &none, 0, TAG_BARRIER | seq)) != TW_OK ||
        (st = ep_wait(ep, &ep->recvs[ROLE_B], want)) != TW_OK) {
        return st;
    }
    return ep_wait(ep, &ep->sends_done, ep->sends_posted);
}

/* The size of a test without -s. */
static size_t default_size(perf_test_t test)
{
    return test == TEST_BW || test == TEST_PUT_BW || test == TEST_GET_BW ? (size_t)1 << 20 : 8;
}

static uint64_t default_iters(perf_test_t test, size_t size, unsigned window)
{
    uint64_t bytes = size > 64 ? size : 64, n;

    /* About 256 MiB ping-ponged or 512 MiB streamed, small messages capped
     * by count: a fraction of a second per size on a node, about a second
     * where threads outnumber the cores and waits sleep (70 us round trips). */
    if (test_is_lat(test)) {
        n = (UINT64_C(256) << 20) / bytes;
        return n < 20 ? 20 : n > 10000 ? 10000 : n;
    }
    n = (UINT64_C(512) << 20) / (bytes * window);
    return n < 10 ? 10 : n > 5000 ? 5000 : n;
}

static void *alloc_buf(size_t size)
{
    void *p = NULL;

    if (posix_memalign(&p, 4096, size > 0 ? size : 1) != 0) {
        return NULL;
    }
    memset(p, 0, size > 0 ? size : 1);
    return p;
}

static void worker_free(perf_worker_t *w)
{
    for (int r = 0; r < 2; r++) {
        free(w->sbuf[r][0]);
        free(w->sbuf[r][1]);
        free(w->rbuf[r]);
    }
    free(w->samples);
}

/* The roles of worker @p j (0 .. g_nworkers - 1). */
static void worker_roles(int j, bool role[2])
{
    role[ROLE_A] = role[ROLE_B] = false;
    if (g_size == 2) {
        role[g_rank == 0 ? ROLE_A : ROLE_B] = true;
    } else if (g_opts.split) {
        role[j < g_opts.threads ? ROLE_A : ROLE_B] = true;
    } else {
        role[ROLE_A] = role[ROLE_B] = true;
    }
}

/* ---- one-sided windows --------------------------------------------------- */

/* Allocate the responders' windows (two slots of the largest one-sided
 * size each). Thread: main, before the first run.
 * @return EXIT_OK or EXIT_FAIL (said why). */
static int rma_setup(void)
{
    size_t slot = 0;
    bool any = false;

    for (int t = 0; t < g_opts.ntests; t++) {
        if (test_is_rma(g_opts.tests[t])) {
            size_t hi = g_opts.size_set ? g_opts.size_max : default_size(g_opts.tests[t]);
            slot = hi > slot ? hi : slot;
            any = true;
        }
    }
    if (!any) {
        return EXIT_OK;
    }
    g_rma_slot = (slot + 63) & ~(size_t)63;
    g_rma_slot = g_rma_slot > 0 ? g_rma_slot : 64; /* a 0-byte run still needs a region */
    if ((g_rma = calloc((size_t)g_nworkers, sizeof(*g_rma))) == NULL) {
        fprintf(stderr, "tw_perf: out of memory\n");
        return EXIT_FAIL;
    }
    for (int j = 0; j < g_nworkers; j++) {
        bool role[2];

        worker_roles(j, role);
        if (role[ROLE_B] && (g_rma[j].win = alloc_buf(2 * g_rma_slot)) == NULL) {
            fprintf(stderr, "tw_perf: out of memory for a %zu B window\n", 2 * g_rma_slot);
            return EXIT_FAIL;
        }
    }
    return EXIT_OK;
}

/* Deregister the windows: between runs, before tw_finalize once no peer
 * uses them, or after it (which released them) to free the handles. */
static void rma_deregister(void)
{
    for (int j = 0; g_rma != NULL && j < g_nworkers; j++) {
        tw_status_t st;

        if (g_rma[j].mr != NULL && (st = tw_mem_deregister(g_rma[j].mr)) != TW_OK) {
            fprintf(stderr, "tw_perf: rank %d: tw_mem_deregister: %s\n", g_rank, tw_strerror(st));
        }
        g_rma[j].mr = NULL;
    }
}

/* Before one-sided run @p r (and its barrier): each responder window is
 * cleared (put) or filled with the responder's patterns (get), then
 * registered -- afresh, after the writes: taking the registry's lock is
 * what orders them before the library's threads serve the operations
 * (every other path runs through the partner process, where a race
 * detector cannot follow) -- and each pair's initiator gets the packed key
 * and the address, over the barrier endpoint @p bar, tagged TAG_KEYS | i.
 * Thread: main, between runs. @return EXIT_OK or EXIT_FAIL (said why). */
static int rma_prepare(perf_ep_t *bar, const perf_run_t *r)
{
    if (!test_is_rma(r->test)) {
        return EXIT_OK;
    }
    rma_deregister();
    for (int j = 0; j < g_nworkers; j++) {
        perf_rma_t *m = &g_rma[j];
        tw_status_t st;

        if (m->win == NULL) {
            continue; /* an initiator: nobody addresses its memory */
        }
        for (int which = 0; which < 2; which++) {
            unsigned char *p = m->win + (size_t)which * g_rma_slot;
            if (test_is_put(r->test)) {
                memset(p, 0, r->size);
            } else {
                pattern_fill(p, r->size, pattern_seed(j % g_opts.threads, ROLE_B, which));
            }
        }
        if ((st = tw_mem_register(g_ctx, m->win, 2 * g_rma_slot, &m->mr)) != TW_OK) {
            fprintf(stderr, "tw_perf: rank %d: tw_mem_register(%zu B): %s\n", g_rank,
                    2 * g_rma_slot, tw_strerror(st));
            return EXIT_FAIL;
        }
        m->rkey_len = sizeof(m->rkey);
        if ((st = tw_mr_pack(m->mr, m->rkey, &m->rkey_len)) != TW_OK) {
            fprintf(stderr, "tw_perf: rank %d: tw_mr_pack: %s (%zu B)\n", g_rank, tw_strerror(st),
                    m->rkey_len);
            return EXIT_FAIL;
        }
    }
    /* Pair i: worker i initiates; its responder is worker i of rank 1, or
     * of this rank (--split: worker T + i). */
    for (int i = 0; i < g_opts.threads; i++) {
        int resp = g_size == 1 && g_opts.split ? g_opts.threads + i : i;
        bool sender = g_size == 1 || g_rank == 1, receiver = g_size == 1 || g_rank == 0;
        perf_key_msg_t out = {0}, in = {0};
        uint64_t want = bar->recvs[ROLE_B] + 1;
        tw_status_t st = TW_OK;

        bar->expect_tag[ROLE_B] = TAG_KEYS | (uint64_t)i;
        bar->expect_len[ROLE_B] = sizeof(in);
        if (receiver) {
            st = ep_recv(bar, ROLE_B, &in, sizeof(in));
        }
        if (st == TW_OK && sender) {
            out.addr = (uint64_t)(uintptr_t)g_rma[resp].win;
            out.len = 2 * g_rma_slot;
            out.rkey_len = (uint32_t)g_rma[resp].rkey_len;
            memcpy(out.rkey, g_rma[resp].rkey, g_rma[resp].rkey_len);
            st = ep_send(bar, &out, sizeof(out), TAG_KEYS | (uint64_t)i);
        }
        if (st == TW_OK && receiver) {
            st = ep_wait(bar, &bar->recvs[ROLE_B], want);
        }
        if (st == TW_OK) {
            st = ep_wait(bar, &bar->sends_done, bar->sends_posted);
        }
        if (st != TW_OK) {
            return EXIT_FAIL;
        }
        if (receiver) {
            if (in.rkey_len == 0 || in.rkey_len > TW_RKEY_MAX || in.len < 2 * g_rma_slot) {
                fprintf(stderr,
                        "tw_perf: rank %d: pair %d: bad window key (%" PRIu32 " B key, %" PRIu64
                        " B window)\n",
                        g_rank, i, in.rkey_len, in.len);
                return EXIT_FAIL;
            }
            g_rma[i].raddr = in.addr;
            g_rma[i].rkey_len = in.rkey_len;
            memcpy(g_rma[i].rkey, in.rkey, in.rkey_len);
        }
    }
    return EXIT_OK;
}

/* One test at one size on every thread; rank 0 prints its rows. */
static int run_one(perf_worker_t *ws, const perf_run_t *r)
{
    perf_result_t *res = calloc((size_t)g_opts.threads, sizeof(*res)), all;
    int started = 0, rc = EXIT_OK;

    if (res == NULL) {
        fprintf(stderr, "tw_perf: out of memory\n");
        return EXIT_FAIL;
    }
    for (int j = 0; j < g_nworkers; j++) {
        perf_worker_t *w = &ws[j];
        tw_cq_t *cq = w->ep.cq;
        int i = j % g_opts.threads;

        memset(w, 0, sizeof(*w));
        w->id = i;
        worker_roles(j, w->role);
        w->rma = g_rma != NULL ? &g_rma[j] : NULL;
        w->ep = (perf_ep_t){.cq = cq, .thread = i, .responder = !w->role[ROLE_A], .run = r};
        w->samples = calloc(r->iters, sizeof(double));
        for (int role = 0; role < 2; role++) {
            /* bw/rate: the replies are 0-byte acks, nothing to allocate;
             * one-sided: A puts from sbuf or gets into rbuf, B has its window */
            bool sends, recvs;
            if (test_is_rma(r->test)) {
                sends = role == ROLE_A && w->role[role] && test_is_put(r->test);
                recvs = role == ROLE_A && w->role[role] && !test_is_put(r->test);
            } else {
                sends = w->role[role] && (role == ROLE_A || r->test == TEST_LAT);
                recvs = w->role[role] && (role == ROLE_B || r->test == TEST_LAT);
            }
            for (int which = 0; sends && which < 2; which++) {
                w->sbuf[role][which] = alloc_buf(r->size);
                if (w->sbuf[role][which] != NULL) {
                    pattern_fill(w->sbuf[role][which], r->size, pattern_seed(i, role, which));
                } else {
                    rc = EXIT_FAIL;
                }
            }
            if (recvs && (w->rbuf[role] = alloc_buf(r->size)) == NULL) {
                rc = EXIT_FAIL;
            }
        }
        if (w->samples == NULL) {
            rc = EXIT_FAIL;
        }
    }
    if (rc != EXIT_OK) {
        fprintf(stderr, "tw_perf: out of memory for %d threads of %zu B buffers\n", g_nworkers,
                r->size);
        goto out;
    }
    pthread_mutex_lock(&g_gate_lock);
    g_gate_open = false;
    pthread_mutex_unlock(&g_gate_lock);
    for (; started < g_nworkers; started++) {
        if (pthread_create(&ws[started].th, NULL, worker_main, &ws[started]) != 0) {
            fprintf(stderr, "tw_perf: rank %d: cannot start thread %d\n", g_rank, started);
            atomic_store_explicit(&g_abort, true, memory_order_relaxed);
            rc = EXIT_FAIL;
            break;
        }
    }
    pthread_mutex_lock(&g_gate_lock);
    g_gate_open = true;
    pthread_cond_broadcast(&g_gate_cond);
    pthread_mutex_unlock(&g_gate_lock);
    for (int i = 0; i < started; i++) {
        pthread_join(ws[i].th, NULL);
        if (ws[i].status != TW_OK) {
            rc = EXIT_FAIL;
        }
    }
    if (rc == EXIT_OK && g_rank == 0) {
        for (int i = 0; i < g_opts.threads; i++) {
            res[i] = worker_result(&ws[i], r);
        }
        all = aggregate(res, g_opts.threads);
        for (int i = 0; g_opts.threads > 1 && i < g_opts.threads; i++) {
            char id[16];
            snprintf(id, sizeof(id), "%d", i);
            print_row(r, id, &res[i]);
        }
        print_row(r, "all", &all);
        fflush(stdout);
    }
out:
    for (int i = 0; i < g_nworkers; i++) {
        worker_free(&ws[i]);
        ws[i].samples = NULL;
        memset(ws[i].sbuf, 0, sizeof(ws[i].sbuf));
        memset(ws[i].rbuf, 0, sizeof(ws[i].rbuf));
    }
    free(res);
    return rc;
}

static void on_error(tw_context_t *ctx, int peer, tw_status_t err, const char *what, void *arg)
{
    (void)ctx;
    (void)arg;
    fprintf(stderr, "tw_perf: rank %d: peer %d: %s: %s\n", g_rank, peer,
            what != NULL ? what : "error", tw_strerror(err));
    atomic_store_explicit(&g_abort, true, memory_order_relaxed);
}

/* Destroy a CQ of a finalized context: drain it, then retry while the last
 * completions are handed over. */
static void cq_close(tw_cq_t *cq)
{
    tw_completion_t c[PERF_POLL_MAX];
    tw_status_t st = TW_ERR_AGAIN;

    for (int tries = 0; cq != NULL && tries < 1000 && st == TW_ERR_AGAIN; tries++) {
        while (tw_cq_poll(cq, c, PERF_POLL_MAX) > 0) {
        }
        st = tw_cq_destroy(cq);
    }
    if (cq != NULL && st != TW_OK) {
        fprintf(stderr, "tw_perf: rank %d: tw_cq_destroy: %s\n", g_rank, tw_strerror(st));
    }
}

/* ---- options ----------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: tw_perf [options]               a job of one: rank 0 is its own partner\n"
        "       twrun -n 2 tw_perf [options]    rank 0 measures against rank 1\n"
        "\n"
        "Point-to-point benchmarks over threadwire's public API (after UCX's ucx_perftest).\n"
        "Thread i of one rank pairs with thread i of the other (tag i, exact receives);\n"
        "each thread has its own completion queue.\n"
        "\n"
        "Tests:\n"
        "  -x, --test LIST        one test or a comma-separated list of them (default lat):\n"
        "                           lat   ping-pong; half the round trip: median, average,\n"
        "                                 min, max of the per-iteration samples\n"
        "                           bw    streaming: a window of sends per iteration, the\n"
        "                                 receiver acks each window with a 0-byte message\n"
        "                           rate  as bw, for the message rate (M msgs/s)\n"
        "                         one-sided, into / out of a window the responder registered:\n"
        "                           put_lat  one tw_put at a time, timed to its completion:\n"
        "                                    the bytes are in place at the target then, so\n"
        "                                    this is a round trip, reported whole (UCX's\n"
        "                                    ucp_put_lat reports half of a put ping-pong)\n"
        "                           put_bw   a window of puts and one tw_flush per iteration\n"
        "                           get_lat  one tw_get at a time, timed to its completion\n"
        "                           get_bw   a window of gets per iteration\n"
        "                         The responder only waits for a final message (its progress\n"
        "                         thread, or in manual mode its wait, serves the operations).\n"
        "Sizes and counts:\n"
        "  -s, --size SIZE|MIN:MAX message size in bytes, or a sweep doubling from MIN to MAX\n"
        "                         (MAX included); suffixes k, m, g = 2^10, 2^20, 2^30\n"
        "                         (default 8 for the latency tests and rate, 1m for the\n"
        "                         bandwidth tests)\n"
        "  -n, --iters N          measured iterations per size (default: by test and size,\n"
        "                         latency 10000 for small messages down to 20, others 5000\n"
        "                         windows down to 10: about a second per size or less)\n"
        "  -W, --warmup N         unmeasured iterations first (default iters/10, 1..1000)\n"
        "  -w, --window W         sends, puts or gets in flight per bw, rate, put_bw or\n"
        "                         get_bw iteration (default 32)\n"
        "  -t, --threads T        threads per process, 1..%d (default 1)\n"
        "      --split            in a job of one, run each pair as two threads, initiator\n"
        "                         and responder, as two processes would (default: one\n"
        "                         thread plays both roles); no effect with 2 processes\n"
        "Library configuration (tw_config_t; TW_* environment variables override it):\n"
        "  -T, --transports LIST  tw_config_t.transports, e.g. self,shm (default: all usable)\n"
        "  -p, --progress-threads N\n"
        "                         -1 auto (default), 0 manual: the benchmark threads drive\n"
        "                         tw_progress while they wait, N: exactly N progress threads\n"
        "  -m, --wait-mode MODE   spin, block or adaptive (default adaptive): the library's\n"
        "                         wait mode; with spin tw_perf polls its CQs (tw_cq_poll),\n"
        "                         otherwise it waits in tw_cq_wait\n"
        "Output (rank 0; the other rank prints errors only):\n"
        "      --stats            each rank prints its tw_stats_print report on stderr at the end\n"
        "      --csv              CSV on stdout: a header line, then rows (tools/plot-perf.sh\n"
        "                         plots a sweep of them with gnuplot)\n"
        "      --timeout SEC      fail when a wait sees no completion for SEC seconds\n"
        "                         (default 10)\n"
        "  -h, --help             this text\n"
        "\n"
        "Each size gives one row per thread (with -t > 1) and a row 'all': bandwidth and rate\n"
        "summed over threads, latency median = the median of the thread medians. Columns:\n"
        "test, size (B), threads, thread, iterations (measured), window (1 for the latency\n"
        "tests), latency median/avg/min/max in us (lat: half round trip; put_lat, get_lat:\n"
        "one operation to its completion; the others: window time / window), bandwidth in\n"
        "MB/s (10^6 B/s), rate in M msgs (or operations)/s. The CSV also has the warm-up\n"
        "count. Payloads are checked on the first and the last iteration of each size (puts\n"
        "by the target, in its window after the run), and every completion for status,\n"
        "length, tag and source (one-sided: status, op, length and target).\n"
        "\n"
        "Exit status: 0 success; 1 an API error, a timeout, a lost or corrupted message, or a\n"
        "job of more than 2 processes; 2 a usage error.\n",
        PERF_MAX_THREADS);
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "tw_perf: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(tw_perf --help lists the options)\n");
    return EXIT_USAGE;
}

/* Unsigned decimal, nothing after it. */
static bool parse_u64(const char *s, uint64_t *v_p)
{
    char *end;
    unsigned long long v;

    if (s == NULL || *s < '0' || *s > '9') {
        return false;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') {
        return false;
    }
    *v_p = v;
    return true;
}

/* A size: decimal with an optional k, m or g (binary multiples). */
static bool parse_size(const char *s, size_t *v_p)
{
    char *end;
    unsigned long long v;
    unsigned shift = 0;

    if (*s < '0' || *s > '9') {
        return false;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0) {
        return false;
    }
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    default:
        return false;
    }
    if (*end != '\0' && end[1] != '\0' && !((end[1] == 'b' || end[1] == 'B') && end[2] == '\0')) {
        return false;
    }
    if (v > PERF_MAX_SIZE >> shift) {
        return false;
    }
    *v_p = (size_t)(v << shift);
    return true;
}

static int parse_tests(const char *arg)
{
    char buf[256], *save = NULL;

    if (strlen(arg) >= sizeof(buf)) {
        return usage_error("-x: list too long");
    }
    strcpy(buf, arg);
    g_opts.ntests = 0;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        int k = -1;
        for (int i = 0; i < (int)(sizeof(test_names) / sizeof(test_names[0])); i++) {
            if (strcmp(t, test_names[i]) == 0) {
                k = i;
            }
        }
        if (k < 0) {
            return usage_error("-x: unknown test '%s' (lat, bw, rate, put_lat, put_bw, get_lat "
                               "or get_bw)",
                               t);
        }
        bool dup = false;
        for (int i = 0; i < g_opts.ntests; i++) {
            dup = dup || g_opts.tests[i] == (perf_test_t)k;
        }
        if (!dup) { /* each test once: tests[] has room for every test */
            g_opts.tests[g_opts.ntests++] = (perf_test_t)k;
        }
    }
    if (g_opts.ntests == 0) {
        return usage_error("-x: no test named");
    }
    return EXIT_OK;
}

/* @return -1 to go on, or the exit status. */
static int parse_args(int argc, char **argv)
{
    enum { OPT_CSV = 256, OPT_PLOT, OPT_TIMEOUT, OPT_SPLIT, OPT_STATS };
    static const struct option longopts[] = {
        {"test", required_argument, NULL, 'x'},
        {"size", required_argument, NULL, 's'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup", required_argument, NULL, 'W'},
        {"window", required_argument, NULL, 'w'},
        {"threads", required_argument, NULL, 't'},
        {"transports", required_argument, NULL, 'T'},
        {"progress-threads", required_argument, NULL, 'p'},
        {"wait-mode", required_argument, NULL, 'm'},
        {"split", no_argument, NULL, OPT_SPLIT},
        {"csv", no_argument, NULL, OPT_CSV},
        {"stats", no_argument, NULL, OPT_STATS},
        {"plot", optional_argument, NULL, OPT_PLOT}, /* removed: says so */
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t v;
    int opt, rc;

    g_opts = (perf_opts_t){.tests = {TEST_LAT},
                           .ntests = 1,
                           .window = 32,
                           .threads = 1,
                           .progress_threads = -1,
                           .wait_mode = TW_WAIT_ADAPTIVE,
                           .timeout_s = 10};
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":x:s:n:W:w:t:T:p:m:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'x':
            if ((rc = parse_tests(optarg)) != EXIT_OK) {
                return rc;
            }
            break;
        case 's': {
            char *colon = strchr(optarg, ':');
            bool ok;
            if (colon != NULL) {
                *colon = '\0';
                ok =
                    parse_size(optarg, &g_opts.size_min) && parse_size(colon + 1, &g_opts.size_max);
                *colon = ':';
                if (ok && (g_opts.size_min == 0 || g_opts.size_min > g_opts.size_max)) {
                    return usage_error("-s %s: a sweep needs 1 <= MIN <= MAX", optarg);
                }
            } else {
                ok = parse_size(optarg, &g_opts.size_min);
                g_opts.size_max = g_opts.size_min;
            }
            if (!ok) {
                return usage_error("-s %s: not a size (e.g. 64, 4k, 1m, 1k:1m; at most 1g)",
                                   optarg);
            }
            g_opts.size_set = true;
            break;
        }
        case 'n':
            if (!parse_u64(optarg, &g_opts.iters) || g_opts.iters < 1 ||
                g_opts.iters > UINT64_C(1) << 32) {
                return usage_error("-n %s: iterations must be 1..2^32", optarg);
            }
            g_opts.iters_set = true;
            break;
        case 'W':
            if (!parse_u64(optarg, &g_opts.warmup) || g_opts.warmup > UINT64_C(1) << 32) {
                return usage_error("-W %s: warm-up iterations must be 0..2^32", optarg);
            }
            g_opts.warmup_set = true;
            break;
        case 'w':
            if (!parse_u64(optarg, &v) || v < 1 || v > PERF_MAX_WINDOW) {
                return usage_error("-w %s: window must be 1..%d", optarg, PERF_MAX_WINDOW);
            }
            g_opts.window = (unsigned)v;
            break;
        case 't':
            if (!parse_u64(optarg, &v) || v < 1 || v > PERF_MAX_THREADS) {
                return usage_error("-t %s: threads must be 1..%d", optarg, PERF_MAX_THREADS);
            }
            g_opts.threads = (int)v;
            break;
        case 'T':
            if (*optarg == '\0') {
                return usage_error("-T: empty transport list");
            }
            g_opts.transports = optarg;
            break;
        case 'p':
            if (strcmp(optarg, "-1") == 0) {
                g_opts.progress_threads = -1;
            } else if (parse_u64(optarg, &v) && v <= 1024) {
                g_opts.progress_threads = (int)v;
            } else {
                return usage_error("-p %s: progress threads must be -1 (auto), 0 (manual) or "
                                   "1..1024",
                                   optarg);
            }
            break;
        case 'm':
            if (strcmp(optarg, "spin") == 0) {
                g_opts.wait_mode = TW_WAIT_SPIN;
            } else if (strcmp(optarg, "block") == 0) {
                g_opts.wait_mode = TW_WAIT_BLOCK;
            } else if (strcmp(optarg, "adaptive") == 0) {
                g_opts.wait_mode = TW_WAIT_ADAPTIVE;
            } else {
                return usage_error("-m %s: wait mode must be spin, block or adaptive", optarg);
            }
            break;
        case OPT_SPLIT:
            g_opts.split = true;
            break;
        case OPT_CSV:
            g_opts.csv = true;
            break;
        case OPT_STATS:
            g_opts.stats = true;
            break;
        case OPT_PLOT:
            return usage_error("--plot was removed: plot --csv output with tools/plot-perf.sh "
                               "(tw_perf -s 8:1m --csv >run.csv; tools/plot-perf.sh run.csv)");
        case OPT_TIMEOUT: {
            char *end;
            errno = 0;
            g_opts.timeout_s = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !(g_opts.timeout_s > 0) ||
                g_opts.timeout_s > 86400) {
                return usage_error("--timeout %s: seconds must be > 0 (at most 86400)", optarg);
            }
            break;
        }
        case 'h':
            usage(stdout);
            return EXIT_OK;
        case ':':
            return usage_error("option %s needs a value", argv[optind - 1]);
        default:
            if (optopt != 0) {
                return usage_error("unknown option -%c", optopt);
            }
            return usage_error("unknown option %s", argv[optind - 1]);
        }
    }
    if (optind < argc) {
        return usage_error("unexpected argument '%s'", argv[optind]);
    }
    return -1;
}

/* ---- main -------------------------------------------------------------- */

/* The environment variables that override tw_perf's library options. */
static const struct {
    const char *name, *option;
} env_knobs[] = {{"TW_TRANSPORTS", "-T"}, {"TW_PROGRESS_THREADS", "-p"}, {"TW_WAIT_MODE", "-m"}};

static const char *wait_name(tw_wait_mode_t m)
{
    return m == TW_WAIT_SPIN ? "spin" : m == TW_WAIT_BLOCK ? "block" : "adaptive";
}

int main(int argc, char **argv)
{
    perf_ep_t bar = {.thread = -1};
    perf_worker_t *ws = NULL;
    int rc;
    uint64_t seq = 0;
    tw_config_t cfg;
    tw_status_t st;

    if ((rc = parse_args(argc, argv)) >= 0) {
        return rc;
    }
    tw_config_init(&cfg);
    cfg.transports = g_opts.transports;
    cfg.progress_threads = g_opts.progress_threads;
    cfg.wait_mode = g_opts.wait_mode;
    if ((st = tw_init(&cfg, &g_ctx)) != TW_OK) {
        const char *size = getenv("TW_SIZE");
        fprintf(stderr, "tw_perf: tw_init failed: %s\n", tw_strerror(st));
        if (st == TW_ERR_UNSUPPORTED && size != NULL && strcmp(size, "1") != 0) {
            fprintf(stderr,
                    "tw_perf: a job of %s processes needs a transport between processes, which "
                    "this threadwire build may lack (the log line above says why); tw_perf "
                    "alone runs a job of one\n",
                    size);
        }
        return EXIT_FAIL;
    }
    g_rank = tw_rank(g_ctx);
    g_size = tw_size(g_ctx);
    rc = EXIT_FAIL;
    if (g_size < 1 || g_size > 2) {
        fprintf(stderr, "tw_perf: needs a job of 1 or 2 processes, this one has %d\n", g_size);
        goto out_finalize;
    }
    g_partner = g_size == 2 ? 1 - g_rank : g_rank;
    if ((st = tw_set_error_handler(g_ctx, on_error, NULL)) != TW_OK) {
        fprintf(stderr, "tw_perf: tw_set_error_handler: %s\n", tw_strerror(st));
        goto out_finalize;
    }
    g_nworkers = g_opts.threads * (g_opts.split && g_size == 1 ? 2 : 1);
    ws = calloc((size_t)g_nworkers, sizeof(*ws));
    if (ws == NULL) {
        fprintf(stderr, "tw_perf: out of memory\n");
        goto out_finalize;
    }
    if ((st = tw_cq_create(g_ctx, 16, &bar.cq)) != TW_OK) {
        fprintf(stderr, "tw_perf: tw_cq_create: %s\n", tw_strerror(st));
        goto out_finalize;
    }
    /* Outstanding per thread: a window of sends (and the previous one's
     * completions not yet polled), a window of receives, acks. */
    for (int i = 0; i < g_nworkers; i++) {
        if ((st = tw_cq_create(g_ctx, 4 * g_opts.window + 16, &ws[i].ep.cq)) != TW_OK) {
            fprintf(stderr, "tw_perf: tw_cq_create(depth %u): %s\n", 4 * g_opts.window + 16,
                    tw_strerror(st));
            goto out_finalize;
        }
    }
    if (rma_setup() != EXIT_OK) {
        goto out_finalize;
    }
    if (g_rank == 0 && !g_opts.csv) {
        const char *pairs = g_size > 1     ? "rank 0 <-> rank 1"
                            : g_opts.split ? "initiator thread <-> responder thread"
                                           : "each thread its own partner";
        printf("# tw_perf: %d process%s (%s), %d pair%s of threads; transports %s, progress "
               "threads %d%s, wait %s\n",
               g_size, g_size > 1 ? "es" : "", pairs, g_opts.threads, g_opts.threads > 1 ? "s" : "",
               g_opts.transports != NULL ? g_opts.transports : "all usable",
               g_opts.progress_threads,
               g_opts.progress_threads < 0    ? " (auto)"
               : g_opts.progress_threads == 0 ? " (manual)"
                                              : "",
               wait_name(g_opts.wait_mode));
        for (size_t i = 0; i < sizeof(env_knobs) / sizeof(env_knobs[0]); i++) {
            const char *v = getenv(env_knobs[i].name);
            if (v != NULL) {
                printf("# note: %s=%s in the environment overrides %s\n", env_knobs[i].name, v,
                       env_knobs[i].option);
            }
        }
    }
    if (g_rank == 0) {
        print_header();
        fflush(stdout);
    }
    for (int t = 0; t < g_opts.ntests; t++) {
        perf_test_t test = g_opts.tests[t];
        size_t lo = g_opts.size_set ? g_opts.size_min : default_size(test);
        size_t hi = g_opts.size_set ? g_opts.size_max : lo;

        for (size_t size = lo;; size = size * 2 > hi ? hi : size * 2) {
            perf_run_t r = {.test = test, .size = size, .window = g_opts.window};

            r.iters = g_opts.iters_set ? g_opts.iters : default_iters(test, size, r.window);
            r.warmup = g_opts.warmup_set     ? g_opts.warmup
                       : r.iters / 10 > 1000 ? 1000
                                             : r.iters / 10;
            if (!g_opts.warmup_set && r.warmup == 0) {
                r.warmup = 1;
            }
            if (rma_prepare(&bar, &r) != EXIT_OK) {
                goto out_finalize;
            }
            if ((st = rank_barrier(&bar, seq++)) != TW_OK) {
                goto out_finalize;
            }
            if (run_one(ws, &r) != EXIT_OK) {
                goto out_finalize;
            }
            if (size == hi) {
                break;
            }
        }
    }
    /* Neither rank leaves while the other still needs it. */
    if ((st = rank_barrier(&bar, seq++)) != TW_OK) {
        goto out_finalize;
    }
    rma_deregister();
    rc = EXIT_OK;
    if (g_opts.stats) {
        /* One write per rank, so the ranks' reports do not interleave. */
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        if (mem != NULL) {
            (void)tw_stats_print(g_ctx, mem);
            fclose(mem);
            fwrite(text, 1, len, stderr);
            free(text);
        } else {
            fprintf(stderr, "tw_perf: --stats: cannot buffer the report: %s\n", strerror(errno));
        }
    }
out_finalize:
    if ((st = tw_finalize(g_ctx)) != TW_OK) {
        fprintf(stderr, "tw_perf: tw_finalize: %s\n", tw_strerror(st));
        rc = EXIT_FAIL;
    }
    rma_deregister(); /* after a failure: the handles tw_finalize left */
    cq_close(bar.cq);
    for (int i = 0; ws != NULL && i < g_nworkers; i++) {
        cq_close(ws[i].ep.cq);
    }
    for (int j = 0; g_rma != NULL && j < g_nworkers; j++) {
        free(g_rma[j].win);
    }
    free(g_rma);
    free(ws);
    return rc;
}
