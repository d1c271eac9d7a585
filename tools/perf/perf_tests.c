/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* The tests: payload patterns, an endpoint's posting, completion checks,
 * progress and waits, and the kernels each worker runs (perf.h says what
 * each one times and checks). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

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
uint64_t perf_pattern_seed(int thread, int role, int which)
{
    return mix64((uint64_t)thread << 8 | (uint64_t)role << 4 | (uint64_t)which | UINT64_C(1) << 40);
}

static uint64_t pattern_next(uint64_t *x)
{
    *x = *x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return *x ^ *x >> 29;
}

/* Fill @p p with @p n bytes of the pattern that @p seed starts. */
void perf_pattern_fill(unsigned char *p, size_t n, uint64_t seed)
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

/* The thread's own work: about @p ns nanoseconds of arithmetic the
 * compiler cannot drop, no syscall (the loop count is calibrated once,
 * over 2 ms). Thread: any. */
void perf_compute_ns(uint64_t ns)
{
    static _Atomic uint64_t per_ms; /* iterations per millisecond; 0: not yet */
    static _Atomic uint64_t sink;
    uint64_t k = atomic_load_explicit(&per_ms, memory_order_relaxed);
    uint64_t x = ns, iters;

    if (k == 0) {
        uint64_t t0 = now_ns(), n = 0;
        while (now_ns() - t0 < 2000000) {
            for (int i = 0; i < 1000; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
            }
            n += 1000;
        }
        k = n / 2 > 0 ? n / 2 : 1;
        atomic_store_explicit(&per_ms, k, memory_order_relaxed);
    }
    iters = k * ns / 1000000;
    for (uint64_t i = 0; i < iters; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    }
    atomic_store_explicit(&sink, x, memory_order_relaxed);
}

/* Take what completed, or wait a little for it. TW_ERR_TIMEOUT after
 * --timeout seconds without a completion; TW_ERR_CANCELED (quietly) when
 * another thread failed. */
static tw_status_t ep_progress(perf_ep_t *ep)
{
    tw_completion_t c[PERF_POLL_MAX];
    bool spin = g_opts.wait_mode == TW_WAIT_SPIN || g_opts.loop != PERF_LOOP_WAIT;
    int n;

    if (spin) {
        n = tw_cq_poll(ep->cq, c, PERF_POLL_MAX);
        if (n == 0 && g_manual) {
            (void)tw_progress(g_ctx); /* manual mode: nobody else drives it */
        }
        if (n == 0 && g_opts.loop == PERF_LOOP_COMPUTE) {
            perf_compute_ns((uint64_t)g_opts.compute_us * 1000);
        }
    } else {
        n = tw_cq_wait(ep->cq, c, PERF_POLL_MAX, PERF_WAIT_MS);
    }
    if (n < 0) {
        return ep_fail(ep, TW_ERR_INVALID, "%s failed", spin ? "tw_cq_poll" : "tw_cq_wait");
    }
    if (n > 0) {
        ep->last_event_ns = coarse_ns();
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
        if (!ep->no_timeout && (double)(coarse_ns() - ep->last_event_ns) > g_opts.timeout_s * 1e9) {
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
tw_status_t perf_ep_wait(perf_ep_t *ep, const uint64_t *counter, uint64_t target)
{
    ep->last_event_ns = coarse_ns();
    while (*counter < target) {
        tw_status_t st = ep_progress(ep);
        if (st != TW_OK) {
            return st;
        }
    }
    return TW_OK;
}

/* Post a send to, or a receive (of role @p role's tag) from, the partner;
 * while the CQ is full, take completions and retry. */
tw_status_t perf_ep_send(perf_ep_t *ep, const void *buf, size_t len, uint64_t tag)
{
    bool inject = g_opts.inject && len <= TW_INJECT_MAX;

    ep->last_event_ns = coarse_ns();
    for (;;) {
        tw_status_t st =
            inject ? tw_send_inject(g_ctx, g_partner, tag, buf, len)
                   : tw_send(g_ctx, g_partner, tag, buf, len, ep->cq, (void *)(uintptr_t)USER_SEND);
        if (st == TW_OK) {
            ep->sends_posted++;
            ep->sends_done += inject; /* copied: no completion comes */
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

tw_status_t perf_ep_recv(perf_ep_t *ep, int role, void *buf, size_t len)
{
    ep->last_event_ns = coarse_ns();
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

    ep->last_event_ns = coarse_ns();
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
    size_t bad = pattern_check(w->rbuf[role], n, perf_pattern_seed(w->id, 1 - role, which));

    if (bad != n) {
        return ep_fail(&w->ep, TW_ERR_PROTOCOL, "payload mismatch at byte %zu of %zu", bad, n);
    }
    return TW_OK;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The median of @p n values (sorts them). */
static double median_u64(uint64_t *v, uint64_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    return (double)v[n / 2];
}

/* overlap, at the end of its first phase: the round trip alone is the
 * median of the @p n samples (full round trips) in w->samples; the second
 * phase computes that long between its send and its wait. */
static void overlap_calibrated(perf_worker_t *w, uint64_t n)
{
    uint64_t *v = malloc(n * sizeof(*v));

    if (v == NULL) {
        w->comm_ns = w->samples[0];
        return;
    }
    for (uint64_t i = 0; i < n; i++) {
        v[i] = (uint64_t)w->samples[i];
    }
    w->comm_ns = median_u64(v, n);
    free(v);
}

/* lat: a ping-pong, half the round trip per sample. overlap: the same
 * ping-pong r->iters times alone (its median: w->comm_ns), then r->iters
 * times with that long a computation between A's send and its wait; a
 * sample is the whole round trip with it (w->compute_ns: what the
 * computation took on average). B answers the same way in both. */
static tw_status_t run_lat(perf_worker_t *w)
{
    perf_ep_t *ep = &w->ep;
    const perf_run_t *r = ep->run;
    bool overlap = r->test == TEST_OVERLAP;
    uint64_t cal = overlap ? r->iters : 0; /* first phase: alone */
    uint64_t total = r->warmup + cal + r->iters, tag = (uint64_t)w->id;
    uint64_t *busy = overlap ? calloc(r->iters, sizeof(*busy)) : NULL; /* compute times */
    tw_status_t st = overlap && busy == NULL ? TW_ERR_NOMEM : TW_OK;

    ep->expect_tag[ROLE_A] = tag | TAG_REPLY;
    ep->expect_tag[ROLE_B] = tag;
    ep->expect_len[ROLE_A] = ep->expect_len[ROLE_B] = r->size;
    if (w->role[ROLE_B]) {
        st = perf_ep_recv(ep, ROLE_B, w->rbuf[ROLE_B], r->size);
    }
    for (uint64_t k = 0; k < total && st == TW_OK; k++) {
        int which = k + 1 == total;
        bool check = k == 0 || k + 1 == total;
        uint64_t t0 = 0;

        ep->iter = k;
        if (w->role[ROLE_A]) {
            if ((st = perf_ep_recv(ep, ROLE_A, w->rbuf[ROLE_A], r->size)) != TW_OK) {
                break;
            }
            t0 = now_ns();
            if ((st = perf_ep_send(ep, w->sbuf[ROLE_A][which], r->size, tag)) != TW_OK) {
                break;
            }
            if (overlap && k >= r->warmup + cal) {
                uint64_t c0 = now_ns();
                perf_compute_ns((uint64_t)w->comm_ns);
                busy[k - r->warmup - cal] = now_ns() - c0;
            }
        }
        if (w->role[ROLE_B]) {
            if ((st = perf_ep_wait(ep, &ep->recvs[ROLE_B], k + 1)) != TW_OK) {
                break;
            }
            if (check && (st = worker_verify(w, ROLE_B, which)) != TW_OK) {
                break;
            }
            if (k + 1 < total &&
                (st = perf_ep_recv(ep, ROLE_B, w->rbuf[ROLE_B], r->size)) != TW_OK) {
                break;
            }
            if ((st = perf_ep_send(ep, w->sbuf[ROLE_B][which], r->size, tag | TAG_REPLY)) !=
                TW_OK) {
                break;
            }
        }
        if (w->role[ROLE_A]) {
            if ((st = perf_ep_wait(ep, &ep->recvs[ROLE_A], k + 1)) != TW_OK) {
                break;
            }
            uint64_t rtt = now_ns() - t0;
            if (k >= r->warmup + cal) {
                w->samples[k - r->warmup - cal] = overlap ? (double)rtt : (double)rtt / 2;
                w->elapsed_ns += rtt;
            } else if (k >= r->warmup) {
                w->samples[k - r->warmup] = (double)rtt;
                if (k + 1 == r->warmup + cal) {
                    overlap_calibrated(w, cal);
                }
            }
            if (check) {
                st = worker_verify(w, ROLE_A, which);
            }
        }
    }
    if (st == TW_OK) {
        st = perf_ep_wait(ep, &ep->sends_done, ep->sends_posted);
    }
    if (busy != NULL) {
        w->compute_ns = r->iters > 0 ? median_u64(busy, r->iters) : 0;
        free(busy);
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
        st = perf_ep_recv(ep, ROLE_B, w->rbuf[ROLE_B], r->size);
    }
    for (uint64_t k = 0; k < total && st == TW_OK; k++) {
        int which = k + 1 == total;
        uint64_t t0 = 0;

        ep->iter = k;
        if (w->role[ROLE_A]) {
            if ((st = perf_ep_recv(ep, ROLE_A, &ack, 0)) != TW_OK) {
                break;
            }
            t0 = now_ns();
            if (k == r->warmup) {
                t_start = t0;
            }
            for (unsigned j = 0; j < wnd && st == TW_OK; j++) {
                st = perf_ep_send(ep, w->sbuf[ROLE_A][which], r->size, tag);
            }
            if (st != TW_OK) {
                break;
            }
        }
        if (w->role[ROLE_B]) {
            if ((st = perf_ep_wait(ep, &ep->recvs[ROLE_B], (k + 1) * wnd)) != TW_OK) {
                break;
            }
            if ((k == 0 || k + 1 == total) && (st = worker_verify(w, ROLE_B, which)) != TW_OK) {
                break;
            }
            for (unsigned j = 0; k + 1 < total && j < wnd && st == TW_OK; j++) {
                st = perf_ep_recv(ep, ROLE_B, w->rbuf[ROLE_B], r->size);
            }
            if (st != TW_OK || (st = perf_ep_send(ep, &ack, 0, tag | TAG_REPLY)) != TW_OK) {
                break;
            }
        }
        if (w->role[ROLE_A]) {
            if ((st = perf_ep_wait(ep, &ep->recvs[ROLE_A], k + 1)) != TW_OK) {
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
        st = perf_ep_wait(ep, &ep->sends_done, ep->sends_posted);
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
    return w->role[ROLE_B] ? perf_ep_recv(ep, ROLE_B, &none, 0) : TW_OK;
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
        st = perf_ep_send(ep, &none, 0, (uint64_t)w->id);
    }
    if (st == TW_OK && w->role[ROLE_B]) {
        ep->no_timeout = true;
        st = perf_ep_wait(ep, &ep->recvs[ROLE_B], 1);
        ep->no_timeout = false;
        /* A run of one iteration puts the last pattern only. */
        for (int which = r->warmup + r->iters > 1 ? 0 : 1;
             st == TW_OK && test_is_put(r->test) && which < 2; which++) {
            size_t bad = pattern_check(w->rma->win + (size_t)which * g_rma_slot, r->size,
                                       perf_pattern_seed(w->id, ROLE_A, which));
            if (bad != r->size) {
                st = ep_fail(ep, TW_ERR_PROTOCOL,
                             "window slot %d: put payload mismatch at byte %zu of %zu", which, bad,
                             r->size);
            }
        }
    }
    if (st == TW_OK) {
        st = perf_ep_wait(ep, &ep->sends_done, ep->sends_posted);
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
                st = perf_ep_wait(ep, &ep->puts_done, k + 1);
            }
        } else {
            st = ep_rma(ep, w->rma, USER_GET, w->rbuf[ROLE_A], raddr);
            if (st == TW_OK) {
                st = perf_ep_wait(ep, &ep->gets_done, k + 1);
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

/* put_bw, get_bw: windows of operations; a put window ends in a flush.
 * tw_flush waits for the puts to B of every thread, so with -t > 1 a flush
 * may also wait for other pairs'. */
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
                (st = perf_ep_wait(ep, &ep->flushes_done, k + 1)) == TW_OK) {
                st = perf_ep_wait(ep, &ep->puts_done, (k + 1) * wnd);
            }
        } else if (st == TW_OK) {
            st = perf_ep_wait(ep, &ep->gets_done, (k + 1) * wnd);
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

/* Run the worker's test (w->ep.run). Thread: the worker. */
tw_status_t perf_worker_run(perf_worker_t *w)
{
    switch (w->ep.run->test) {
    case TEST_LAT:
    case TEST_OVERLAP:
        return run_lat(w);
    case TEST_BW:
    case TEST_RATE:
        return run_stream(w);
    case TEST_PUT_LAT:
    case TEST_GET_LAT:
        return run_rma_lat(w);
    case TEST_PUT_BW:
    case TEST_GET_BW:
        return run_rma_bw(w);
    }
    return TW_ERR_INVALID;
}
