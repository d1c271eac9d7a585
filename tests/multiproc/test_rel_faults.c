/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The reliability layer when the only path dies, when a peer stops, and
 * when a receiver stops polling (test matrix rows B9, C2, E2). A program
 * of cases, each setting the environment it needs (TW_RELIABLE=1 and the
 * variables named below) before its first tw_init:
 *
 *   twrun -n 2 test_rel_faults CASE     (--list names them)
 *
 *   nopath_tcp, nopath_shm   nopath over that transport
 *   sigstop                  sigstop over tcp
 *   stall_shm, stall_tcp     stall; stall_tcp_cold: tcp, first dialed
 *                            during the stall
 *
 *   nopath   (B9) TW_FAULT=kill=D on every rank: both lose their only path
 *            D after it opened. Rank 0 streams checksummed 32 KiB messages
 *            (window 8) until then. The injector reports a killed path
 *            down at once and rel has no other, so the peer fails within
 *            1 s of D (bound asserted on both ranks, counted from just
 *            before tw_init, i.e. from no later than the path opened).
 *            The matrix asks for 20 cut points; CI runs 5 iterations of
 *            init / stream / fail / finalize in one process, D = 500, 400,
 *            ..., 100 ms (set with setenv before each tw_init; both ranks
 *            derive it from the iteration number). The error handler can
 *            only be installed once tw_init returned, so a tw_init slower
 *            than D fails the test; the ranks meet (signals, pids swapped
 *            in a fault-free first context) before each tw_init so that
 *            neither waits there for the other. TWTEST_REPEAT=20 runs the
 *            matrix's count. A last, fault-free context swaps the
 *            results: every send rank 0 saw complete TW_OK must have
 *            arrived at rank 1 (which got a prefix of the stream, each
 *            message once and intact).
 *   sigstop  (C2) TW_TRANSPORTS=tcp, TW_TCP_TIMEOUT=60s (TCP's own silence
 *            check must not act first), TW_REL_KEEPALIVE=300ms,
 *            TW_REL_MISSES=3: after 200 messages rank 0 sends rank 1
 *            SIGSTOP. Rank 1's kernel still acks TCP, so only rel's
 *            keepalive can tell: rank 0 must fail rank 1 within the
 *            keepalive bound (900 ms) + 10 %; rank 1 was heard just before
 *            the stop, so a little below the bound is possible: asserted
 *            in [bound - keepalive, 1.1 bound + 50 ms] = [600, 1040] ms.
 *            Then SIGCONT: rank 1 finds rank 0 failed (its bound passed
 *            long ago) and tries to send a few messages before or as it
 *            does; at rank 0 nothing more is delivered (rel's "delivered"
 *            stays, a receive for them stays pending until finalize
 *            cancels it) and rel counts what came as "stale". One
 *            stop/cont per run in CI; the matrix's 10 are TWTEST_REPEAT=10.
 *   stall    (E2) TW_PROGRESS_THREADS=0, TW_REL_QUEUE=64, keepalive and
 *            path timeout far away: rank 1 neither posts nor progresses
 *            for TWTEST_STALL_S (default 5) seconds while rank 0 keeps
 *            sending 8 KiB (eager) and 64 KiB (zero-copy) messages. Rank 0
 *            must be refused with TW_ERR_AGAIN, accept at most 64 + 8
 *            sends, and its RSS must grow by at most 64 x 64 KiB + 16 MiB.
 *            Then rank 1 takes everything: each message once and intact,
 *            and no error handler runs anywhere.
 *
 * Every mode checks that each operation posted completes exactly once,
 * with TW_OK or TW_ERR_PEER_FAILED, that the error handler ran once
 * (nopath, sigstop: with TW_ERR_PEER_FAILED for the other rank) or never
 * (stall), and that the log holds no warning and one error per failed
 * peer. Counters are read from rel directly (the test links
 * threadwire_internal).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "core/tw_config.h"
#include "core/tw_log.h"
#include "reliability/tw_rel.h"
#include "runtime/tw_context_int.h"
#include "threadwire/threadwire.h"
#include "tw_mp.h"

#define LEN        (32u * 1024u)
#define WINDOW     8
#define INJECT_AT  200
#define MAX_TAGS   (1u << 20)
#define MAX_ITERS  64
#define TAG_PID    (1ull << 50)
#define TAG_LATE   (1ull << 51)
#define TAG_COUNT  (1ull << 52)
#define TAG_DONE   (1ull << 53)
#define TAG_REPORT (1ull << 54)
#define NLATE      4

/* ---- what both ranks share ---------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the same clock as twt_now */
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rel_stat(tw_context_t *ctx, unsigned id)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, __func__);
    TWT_CHECK(impl != NULL && tw_stack_stats(impl, "rel") != NULL);
    return tw_stats_read(tw_stack_stats(impl, "rel"), id);
}

static unsigned env_uint(const char *name, unsigned dflt, unsigned max)
{
    const char *s = getenv(name);
    unsigned long v = s != NULL ? strtoul(s, NULL, 10) : dflt;
    TWT_CHECKF(v >= 1 && v <= max, "%s=%s: want 1..%u", name, s, max);
    return (unsigned)v;
}

/* After the last expected completion: nothing else turns up. */
static void check_cq_empty(tw_cq_t *cq)
{
    tw_completion_t c;
    int n = tw_cq_wait(cq, &c, 1, 50);
    TWT_CHECKF(n == 0, "an unexpected completion (op %d, tag %#llx, status %s)", c.op,
               (unsigned long long)c.tag, tw_strerror(c.status));
}

static tw_status_t send_wait(tw_context_t *ctx, tw_cq_t *cq, int dst, uint64_t tag, const void *buf,
                             size_t len)
{
    tw_completion_t c;
    tw_status_t st;

    while ((st = tw_send(ctx, dst, tag, buf, len, cq, NULL)) == TW_ERR_AGAIN) {
        tw_progress(ctx);
    }
    if (st != TW_OK) {
        return st;
    }
    TWT_CHECKF(tw_cq_wait(cq, &c, 1, 30000) == 1, "a send of tag %#llx did not complete",
               (unsigned long long)tag);
    TWT_EQ(c.op, TW_OP_SEND);
    return c.status;
}

static void recv_wait(tw_context_t *ctx, tw_cq_t *cq, int src, uint64_t tag, void *buf, size_t len)
{
    tw_completion_t c;

    TWT_EQ(tw_recv(ctx, src, tag, 0, buf, len, cq, NULL), TW_OK);
    TWT_CHECKF(tw_cq_wait(cq, &c, 1, 30000) == 1, "nothing came with tag %#llx",
               (unsigned long long)tag);
    TWT_EQ(c.op, TW_OP_RECV);
    TWT_EQ(c.status, TW_OK);
    TWT_EQ(c.length, len);
}

/* ---- rank 0: stream until the peer fails ---------------------------------- */

typedef struct stream {
    unsigned posted;  /* sends accepted (tags 0 .. posted - 1) */
    unsigned ok;      /* completed TW_OK */
    unsigned failed;  /* completed TW_ERR_PEER_FAILED */
    unsigned refused; /* tw_send said TW_ERR_PEER_FAILED */
    unsigned ok_end;  /* 1 + the highest tag completed TW_OK */
    double t_err;     /* the first failure seen (completion or refusal) */
} stream_t;

static unsigned char completed[MAX_TAGS]; /* rank 0: per send tag */

static void stream_complete(stream_t *s, const tw_completion_t *c, unsigned *free_slots,
                            unsigned *nfree)
{
    unsigned tag = (unsigned)c->tag, slot = (unsigned)(uintptr_t)c->user;

    TWT_EQ(c->op, TW_OP_SEND);
    TWT_CHECKF(tag < s->posted && !completed[tag], "send %u completed twice or was never posted",
               tag);
    TWT_CHECK(slot < WINDOW);
    completed[tag] = 1;
    free_slots[(*nfree)++] = slot;
    if (c->status == TW_OK) {
        s->ok++;
        s->ok_end = tag + 1 > s->ok_end ? tag + 1 : s->ok_end;
        return;
    }
    TWT_CHECKF(c->status == TW_ERR_PEER_FAILED, "send %u completed with %s", tag,
               tw_strerror(c->status));
    if (s->failed++ == 0) {
        s->t_err = twt_now();
    }
}

/* Stream 32 KiB messages to rank 1 (window 8) until it fails; call
 * @p inject before message @p inject_at. Every send completes once. */
static void stream(tw_context_t *ctx, tw_cq_t *cq, unsigned inject_at, void (*inject)(void *),
                   void *arg, int wait_ms, stream_t *s)
{
    static unsigned char bufs[WINDOW][LEN];
    unsigned free_slots[WINDOW], nfree = WINDOW;
    tw_completion_t c;

    memset(completed, 0, sizeof(completed));
    *s = (stream_t){0};
    for (unsigned i = 0; i < WINDOW; i++) {
        free_slots[i] = i;
    }
    for (unsigned i = 0; s->failed == 0 && s->refused == 0; i++) {
        while (nfree == 0) {
            TWT_CHECKF(tw_cq_wait(cq, &c, 1, wait_ms) == 1,
                       "rank 0: no completion for %d ms: the failure was not detected", wait_ms);
            stream_complete(s, &c, free_slots, &nfree);
        }
        if (s->failed > 0) {
            break;
        }
        TWT_CHECKF(i < MAX_TAGS, "rank 0: %u messages and rank 1 still alive", i);
        if (i == inject_at && inject != NULL) {
            inject(arg);
        }
        unsigned slot = free_slots[--nfree];
        twt_fill(bufs[slot], LEN, i);
        tw_status_t st = tw_send(ctx, 1, i, bufs[slot], LEN, cq, (void *)(uintptr_t)slot);
        if (st == TW_ERR_PEER_FAILED) {
            s->refused++;
            s->t_err = twt_now();
            break;
        }
        TWT_CHECKF(st == TW_OK, "rank 0: send %u: %s", i, tw_strerror(st));
        s->posted++;
    }
    /* Every operation completes, with OK or PEER_FAILED, once. */
    while (s->ok + s->failed < s->posted) {
        TWT_CHECKF(tw_cq_wait(cq, &c, 1, 5000) == 1,
                   "rank 0: %u of %u sends never completed after the failure",
                   s->posted - s->ok - s->failed, s->posted);
        stream_complete(s, &c, free_slots, &nfree);
    }
    check_cq_empty(cq);
    TWT_EQ(tw_send(ctx, 1, 0, bufs[0], 8, cq, NULL), TW_ERR_PEER_FAILED);
}

/* ---- rank 1: receive until the peer fails ---------------------------------- */

typedef struct sink {
    unsigned got;          /* messages intact, each once: tags 0 .. got - 1 */
    unsigned posted;       /* receives posted */
    unsigned failed;       /* receives completed TW_ERR_PEER_FAILED */
    unsigned late_posted;  /* sigstop: late sends tw_send accepted */
    unsigned late_refused; /* ... it refused (TW_ERR_PEER_FAILED) */
    unsigned late_ok;      /* ... completed TW_OK (eager: copied at once) */
    unsigned late_failed;  /* ... completed TW_ERR_PEER_FAILED */
    double t_err;
} sink_t;

static unsigned char seen[MAX_TAGS]; /* rank 1: per message tag */
static _Atomic uint64_t cont_ns;     /* rank 1: when SIGCONT resumed us */

/* Late sends (sigstop): two eager, two zero-copy, to a rank that failed us
 * while we were stopped. */
static void send_late(tw_context_t *ctx, tw_cq_t *cq, sink_t *k, unsigned *outstanding)
{
    static unsigned char late[NLATE][LEN];

    for (unsigned j = 0; j < NLATE; j++) {
        size_t len = j < 2 ? 1024 : LEN;
        twt_fill(late[j], len, TAG_LATE + j);
        tw_status_t st = tw_send(ctx, 0, TAG_LATE + j, late[j], len, cq, NULL);
        if (st == TW_OK) {
            k->late_posted++;
            (*outstanding)++;
        } else {
            TWT_CHECKF(st == TW_ERR_PEER_FAILED, "rank 1: late send: %s", tw_strerror(st));
            k->late_refused++;
        }
    }
}

/* Keep WINDOW receives posted for tags 0, 1, ...; an intact arrival posts
 * the next. After the failure, receives still match what arrived before
 * it (the unexpected queue) and the rest complete TW_ERR_PEER_FAILED, so
 * this ends with the whole prefix of the stream that arrived. */
static void sink(tw_context_t *ctx, tw_cq_t *cq, bool late, sink_t *k)
{
    static unsigned char bufs[WINDOW][LEN];
    unsigned next = 0, outstanding = 0, maxtag = 0;
    bool sent_late = false;
    double last = twt_now();
    tw_completion_t c;

    memset(seen, 0, sizeof(seen));
    *k = (sink_t){0};
    for (unsigned i = 0; i < WINDOW; i++, next++) {
        TWT_EQ(tw_recv(ctx, 0, next, 0, bufs[i], LEN, cq, (void *)(uintptr_t)i), TW_OK);
        k->posted++;
        outstanding++;
    }
    while (outstanding > 0 || (late && !sent_late)) {
        if (late && !sent_late && atomic_load(&cont_ns) != 0) {
            send_late(ctx, cq, k, &outstanding);
            sent_late = true;
        }
        int n = tw_cq_wait(cq, &c, 1, 20);
        if (n == 0) {
            TWT_CHECKF(twt_now() - last < 60, "rank 1: no completion for 60 s (%u outstanding)",
                       outstanding);
            continue;
        }
        TWT_EQ(n, 1);
        last = twt_now();
        outstanding--;
        if (c.op == TW_OP_SEND) {
            TWT_CHECKF(late && c.tag >= TAG_LATE && c.tag < TAG_LATE + NLATE,
                       "rank 1: a send completion it did not post");
            if (c.status == TW_OK) {
                /* Only an eager send completes before the target acks. */
                TWT_CHECKF(c.tag < TAG_LATE + 2,
                           "rank 1: a zero-copy send to the failed rank 0 completed TW_OK");
                k->late_ok++;
            } else {
                TWT_CHECKF(c.status == TW_ERR_PEER_FAILED, "rank 1: late send completed with %s",
                           tw_strerror(c.status));
                k->late_failed++;
            }
            continue;
        }
        TWT_EQ(c.op, TW_OP_RECV);
        if (c.status != TW_OK) {
            TWT_CHECKF(c.status == TW_ERR_PEER_FAILED, "rank 1: receive completed with %s",
                       tw_strerror(c.status));
            if (k->failed++ == 0) {
                k->t_err = twt_now();
            }
            continue;
        }
        unsigned i = (unsigned)(uintptr_t)c.user, tag = (unsigned)c.tag;
        TWT_CHECKF(i < WINDOW && tag < MAX_TAGS && !seen[tag],
                   "rank 1: message %u arrived twice (or a stray completion)", tag);
        seen[tag] = 1;
        TWT_EQ(c.length, (size_t)LEN);
        TWT_CHECKF(twt_verify(bufs[i], LEN, tag), "rank 1: message %u corrupted", tag);
        k->got++;
        maxtag = tag + 1 > maxtag ? tag + 1 : maxtag;
        TWT_CHECKF(next < MAX_TAGS, "rank 1: %u messages and rank 0 still alive", next);
        TWT_EQ(tw_recv(ctx, 0, next++, 0, bufs[i], LEN, cq, (void *)(uintptr_t)i), TW_OK);
        k->posted++;
        outstanding++;
    }
    TWT_CHECKF(k->failed > 0, "rank 1 never saw rank 0 fail");
    /* In order and exactly once: what arrived is a prefix of the stream. */
    TWT_CHECKF(maxtag == k->got, "rank 1: %u messages arrived but the highest tag is %u: a gap",
               k->got, maxtag == 0 ? 0 : maxtag - 1);
    TWT_EQ(k->posted, k->got + k->failed);
    check_cq_empty(cq);
}

/* ---- nopath (B9) ---------------------------------------------------------- */

static atomic_int met; /* meetings the peer came to (real-time signals queue) */

static void on_meet(int sig)
{
    (void)sig;
    atomic_fetch_add(&met, 1);
}

/* Meet @p peer for the @p n-th time, outside the library. */
static void meet(pid_t peer, int n)
{
    double t0 = twt_now();

    TWT_EQ(sigqueue(peer, SIGRTMIN, (union sigval){.sival_int = n}), 0);
    while (atomic_load(&met) < n) {
        TWT_CHECKF(twt_now() - t0 < 30, "the other rank (pid %d) did not come to meeting %d",
                   (int)peer, n);
        usleep(200);
    }
}

static unsigned run_nopath(void)
{
    unsigned iters = env_uint("TWTEST_REPEAT", 5, MAX_ITERS);
    unsigned got[MAX_ITERS], ok_end[MAX_ITERS];
    const char *tl = getenv("TW_TRANSPORTS");
    tw_context_t *ctx;
    tw_cq_t *cq;
    int rank = -1;

    TWT_CHECKF(getenv("TW_REL_PATH_TIMEOUT") == NULL,
               "the 1 s bound assumes TW_REL_PATH_TIMEOUT is unset");
    /* A context without faults first, to swap pids: a tw_init waits
     * for the other rank (its start, up to a second under TSan; its
     * finalize, which can take seconds too), and that must not eat into a
     * cut point. So the ranks meet (signals) before every tw_init. */
    TWT_CHECK(signal(SIGRTMIN, on_meet) != SIG_ERR);
    double t_w = twt_now();
    TWT_EQ(tw_init(NULL, &ctx), TW_OK);
    TWT_EQ(tw_cq_create(ctx, 64, &cq), TW_OK);
    double t_wf = twt_now();
    rank = tw_rank(ctx);
    pid_t me = getpid(), peer = 0;
    if (rank == 0) {
        TWT_EQ(send_wait(ctx, cq, 1, TAG_PID, &me, sizeof(me)), TW_OK);
        recv_wait(ctx, cq, 1, TAG_PID, &peer, sizeof(peer));
    } else {
        recv_wait(ctx, cq, 0, TAG_PID, &peer, sizeof(peer));
        TWT_EQ(send_wait(ctx, cq, 0, TAG_PID, &me, sizeof(me)), TW_OK);
    }
    double t_wq = twt_now();
    TWT_EQ(tw_finalize(ctx), TW_OK);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    printf("rank %d: warm-up context: tw_init %.0f ms, tw_finalize %.0f ms\n", rank,
           (t_wf - t_w) * 1000, (twt_now() - t_wq) * 1000);
    for (unsigned it = 0; it < iters; it++) {
        unsigned kill_ms = 500 - 100 * (it % 5);
        char spec[64];
        stream_t s;
        sink_t k;

        snprintf(spec, sizeof(spec), "kill=%ums", kill_ms);
        TWT_EQ(setenv("TW_FAULT", spec, 1), 0);
        meet(peer, it + 1);
        double t_init = twt_now(); /* the path opens after this */
        TWT_EQ(tw_init(NULL, &ctx), TW_OK);
        double init_s = twt_now() - t_init;
        tw_mp_attach(ctx);
        rank = tw_rank(ctx);
        TWT_EQ(tw_size(ctx), 2);
        TWT_CHECKF(init_s * 1000 < kill_ms,
                   "rank %d, iteration %u: tw_init took %.0f ms, past the kill at %u ms: the "
                   "handler could not be in place",
                   rank, it, init_s * 1000, kill_ms);
        TWT_EQ(tw_cq_create(ctx, 64, &cq), TW_OK);
        double t_kill = t_init + kill_ms * 1e-3, t_err;
        if (rank == 0) {
            stream(ctx, cq, UINT32_MAX, NULL, NULL, 3000, &s);
            ok_end[it] = s.ok_end;
            t_err = s.t_err;
        } else {
            sink(ctx, cq, false, &k);
            got[it] = k.got;
            t_err = k.t_err;
        }
        double t_handler = tw_mp_errors_expect_once(1 - tw_rank(ctx), TW_ERR_PEER_FAILED).t;
        double d_err = t_err - t_kill, d_handler = t_handler - t_kill;
        if (rank == 0) {
            printf("rank 0: iteration %u (TW_TRANSPORTS=%s, %s, tw_init %.0f ms): %u sends (%u "
                   "ok, %u failed, %u refused); failure seen %.1f ms after the kill, handler "
                   "%.1f ms\n",
                   it, tl != NULL ? tl : "", spec, init_s * 1000, s.posted, s.ok, s.failed,
                   s.refused, d_err * 1000, d_handler * 1000);
        } else {
            /* Its first failed receive can trail the handler: receives
             * posted before the failure may all have matched, and what
             * arrived unexpected is taken first. */
            printf("rank 1: iteration %u (%s): %u messages intact, each once, %u receives "
                   "failed; handler %.1f ms after the kill, first failed receive %.1f ms\n",
                   it, spec, k.got, k.failed, d_handler * 1000, d_err * 1000);
        }
        /* Not before the kill; within 1 s of it. (This caught a live peer
         * failed early as "silent for 18446744073709 ms": the keepalive's
         * now - last_rx wrapped when an arrival on another thread was
         * newer than the pass's clock.) */
        TW_MP_CHECK(d_err >= 0 && d_handler >= 0,
                    "iteration %u: the peer was failed %.1f ms before its path was killed "
                    "(the rel log line above says why)",
                    it, -1000 * (d_err < d_handler ? d_err : d_handler));
        TW_MP_CHECK(d_err < 1.0 && d_handler < 1.0,
                    "failure seen %.3f s (handler %.3f s) after the kill: bound 1 s", d_err,
                    d_handler);
        TWT_EQ(tw_finalize(ctx), TW_OK);
        TWT_EQ(tw_cq_destroy(cq), TW_OK);
        TWT_EQ(tw_mp_errors_count(), 1);
    }

    /* A context without faults: rank 1 reports what arrived. */
    TWT_EQ(unsetenv("TW_FAULT"), 0);
    TWT_EQ(tw_init(NULL, &ctx), TW_OK);
    tw_mp_attach(ctx);
    TWT_EQ(tw_cq_create(ctx, 64, &cq), TW_OK);
    if (tw_rank(ctx) == 0) {
        recv_wait(ctx, cq, 1, TAG_REPORT, got, iters * sizeof(got[0]));
        for (unsigned it = 0; it < iters; it++) {
            TWT_CHECKF(ok_end[it] <= got[it],
                       "iteration %u: rank 0 saw send %u complete TW_OK but rank 1 got only %u "
                       "messages",
                       it, ok_end[it] - 1, got[it]);
        }
        printf("rank 0: every send that completed TW_OK arrived (%u iterations)\n", iters);
    } else {
        TWT_EQ(send_wait(ctx, cq, 0, TAG_REPORT, got, iters * sizeof(got[0])), TW_OK);
    }
    TWT_EQ(tw_finalize(ctx), TW_OK);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    TWT_EQ(tw_mp_errors_count(), 0);
    return iters;
}

/* ---- sigstop (C2) --------------------------------------------------------- */

static atomic_int usr1_got;
static atomic_int usr1_value;

static void on_usr1(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)uc;
    atomic_store(&usr1_value, si->si_value.sival_int);
    atomic_store(&usr1_got, 1);
}

static void on_cont(int sig)
{
    uint64_t zero = 0;

    (void)sig;
    atomic_compare_exchange_strong(&cont_ns, &zero, now_ns());
}

static void do_sigstop(void *arg)
{
    pid_t victim = *(pid_t *)arg;
    TWT_EQ(kill(victim, SIGSTOP), 0);
}

/* Rel's keepalive period and bound (period x misses), from its table and
 * the environment, as rel reads them. */
static double keepalive_bound_s(double *period_p)
{
    tw_rel_cfg_t cfg;

    tw_cfg_set_defaults(&tw_rel_cfg_table, &cfg);
    TWT_EQ(tw_cfg_apply_env(&tw_rel_cfg_table, &cfg), TW_OK);
    *period_p = (double)cfg.keepalive_ns * 1e-9;
    return *period_p * cfg.misses;
}

/* When rank 0 sent SIGSTOP. */
static double stop_time;

static void do_sigstop_timed(void *arg)
{
    do_sigstop(arg);
    stop_time = twt_now();
}

static void sigstop_rank0(tw_context_t *ctx, tw_cq_t *cq, double bound, double period, unsigned it)
{
    static unsigned char late[LEN];
    pid_t victim = 0, me = getpid();
    tw_completion_t c;
    stream_t s;

    TWT_EQ(send_wait(ctx, cq, 1, TAG_PID, &me, sizeof(me)), TW_OK);
    recv_wait(ctx, cq, 1, TAG_PID, &victim, sizeof(victim));
    TWT_CHECK(victim > 0);
    atomic_store(&usr1_got, 0);

    stop_time = 0;
    stream(ctx, cq, INJECT_AT, do_sigstop_timed, &victim, 5000, &s);
    TWT_CHECKF(stop_time > 0,
               "rank 1 failed after %u messages, before the SIGSTOP (%u ok, %u failed): see "
               "the log",
               s.posted, s.ok, s.failed);
    double t_handler = tw_mp_errors_expect_once(1 - tw_rank(ctx), TW_ERR_PEER_FAILED).t;
    double took = t_handler - stop_time, took_err = s.t_err - stop_time;
    printf("rank 0: iteration %u: rank 1 stopped after %d messages; failed after %.1f ms "
           "(handler; first failed send %.1f ms); keepalive bound %.0f ms; %u sends ok, %u "
           "failed, %u refused\n",
           it, INJECT_AT, took * 1000, took_err * 1000, bound * 1000, s.ok, s.failed, s.refused);
    TWT_CHECKF(took >= bound - period && took <= 1.1 * bound + 0.05,
               "a stopped peer failed after %.3f s: want [%.3f, %.3f]", took, bound - period,
               1.1 * bound + 0.05);
    TWT_CHECKF(took_err <= 1.1 * bound + 0.05, "the first send failed %.3f s after the stop",
               took_err);

    /* Rank 1 resumes: whatever it still sends must not be delivered. */
    uint64_t stale0 = rel_stat(ctx, TW_REL_STAT_STALE);
    uint64_t delivered0 = rel_stat(ctx, TW_REL_STAT_DELIVERED);
    TWT_EQ(tw_recv(ctx, TW_ANY_SOURCE, TAG_LATE, NLATE - 1, late, sizeof(late), cq, NULL), TW_OK);
    double t_cont = twt_now();
    TWT_EQ(kill(victim, SIGCONT), 0);
    while (!atomic_load(&usr1_got)) {
        TWT_CHECKF(twt_now() - t_cont < 10, "rank 1 did not report within 10 s of SIGCONT");
        usleep(5000);
    }
    int late_posted = atomic_load(&usr1_value);
    /* What rank 1 sent goes out before it reported; give it time to land. */
    for (int i = 0; i < 100 && late_posted > 0 && rel_stat(ctx, TW_REL_STAT_STALE) == stale0; i++) {
        usleep(10000);
    }
    usleep(100000);
    uint64_t stale = rel_stat(ctx, TW_REL_STAT_STALE) - stale0;
    uint64_t delivered = rel_stat(ctx, TW_REL_STAT_DELIVERED) - delivered0;
    printf("rank 0: after SIGCONT rank 1 had %d late sends accepted; %llu frames from it "
           "discarded as stale, %llu messages delivered\n",
           late_posted, (unsigned long long)stale, (unsigned long long)delivered);
    TWT_CHECKF(delivered == 0, "%llu messages from the failed rank were delivered",
               (unsigned long long)delivered);
    TWT_CHECKF(late_posted == 0 || stale > 0,
               "rank 1 sent %d messages after it resumed, but none was counted stale", late_posted);
    TWT_CHECKF(tw_cq_poll(cq, &c, 1) == 0, "a completion after the failure (tag %#llx, %s)",
               (unsigned long long)c.tag, tw_strerror(c.status));
    TWT_EQ(tw_mp_errors_count(), 1);
}

static void sigstop_rank1(tw_context_t *ctx, tw_cq_t *cq, double bound, unsigned it)
{
    pid_t me = getpid(), observer = 0;
    sink_t k;

    atomic_store(&cont_ns, 0);
    recv_wait(ctx, cq, 0, TAG_PID, &observer, sizeof(observer));
    TWT_EQ(send_wait(ctx, cq, 0, TAG_PID, &me, sizeof(me)), TW_OK);
    TWT_CHECK(observer > 0);
    sink(ctx, cq, true, &k);
    double t_handler = tw_mp_errors_expect_once(1 - tw_rank(ctx), TW_ERR_PEER_FAILED).t;
    TWT_CHECKF(atomic_load(&cont_ns) != 0, "rank 1 saw rank 0 fail but was never stopped");
    double after = t_handler - (double)atomic_load(&cont_ns) * 1e-9;
    printf("rank 1: iteration %u: %u messages intact, each once; resumed, found rank 0 failed "
           "%.1f ms later; late sends: %u refused, %u accepted (%u completed ok, %u failed)\n",
           it, k.got, after * 1000, k.late_refused, k.late_posted, k.late_ok, k.late_failed);
    TWT_CHECKF(after <= 1.1 * bound + 0.3, "after SIGCONT rank 1 took %.3f s to fail rank 0",
               after);
    TWT_EQ(k.late_posted + k.late_refused, NLATE);
    TWT_EQ(k.late_ok + k.late_failed, k.late_posted);
    TWT_EQ(tw_send(ctx, 0, 1, &me, sizeof(me), cq, NULL), TW_ERR_PEER_FAILED);
    TWT_EQ(sigqueue(observer, SIGUSR1, (union sigval){.sival_int = (int)k.late_posted}), 0);
}

static unsigned run_sigstop(void)
{
    unsigned iters = env_uint("TWTEST_REPEAT", 1, MAX_ITERS);
    double period, bound = keepalive_bound_s(&period);
    struct sigaction sa = {.sa_sigaction = on_usr1, .sa_flags = SA_SIGINFO};
    struct sigaction sc = {.sa_handler = on_cont};

    TWT_CHECKF(bound <= 2, "keepalive bound %.1f s: this test wants it short (300ms x 3)", bound);
    sigemptyset(&sa.sa_mask);
    sigemptyset(&sc.sa_mask);
    TWT_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
    TWT_EQ(sigaction(SIGCONT, &sc, NULL), 0);
    for (unsigned it = 0; it < iters; it++) {
        tw_context_t *ctx;
        tw_cq_t *cq;
        tw_completion_t c;
        int rank;

        TWT_EQ(tw_init(NULL, &ctx), TW_OK);
        tw_mp_attach(ctx);
        TWT_EQ(tw_size(ctx), 2);
        TWT_EQ(tw_cq_create(ctx, 64, &cq), TW_OK);
        rank = tw_rank(ctx);
        if (rank == 0) {
            sigstop_rank0(ctx, cq, bound, period, it);
        } else {
            sigstop_rank1(ctx, cq, bound, it);
        }
        TWT_EQ(tw_finalize(ctx), TW_OK);
        if (rank == 0) {
            /* The receive for rank 1's late messages never matched. */
            TWT_EQ(tw_cq_poll(cq, &c, 1), 1);
            TWT_CHECKF(c.op == TW_OP_RECV && c.status == TW_ERR_CANCELED,
                       "the receive for late messages completed with %s", tw_strerror(c.status));
        }
        TWT_EQ(tw_cq_poll(cq, &c, 1), 0);
        TWT_EQ(tw_cq_destroy(cq), TW_OK);
        TWT_EQ(tw_mp_errors_count(), 1);
    }
    return iters;
}

/* ---- stall (E2) ----------------------------------------------------------- */

#define SMALL     (8u * 1024u)
#define BIG       (64u * 1024u)
#define REL_QUEUE 64
#define SLACK     8
#define POOL      128
#define STREAM    (1ull << 40) /* tag of message i of stream s: s * STREAM + i */
#define PER       (MAX_TAGS / 2)

/* ASan's quarantine keeps freed blocks resident, and every refused send
 * allocates and frees its message: RSS says nothing about the library
 * there (Debug and TSan builds check it). */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_CHECKED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSS_CHECKED 0
#endif
#endif
#ifndef RSS_CHECKED
#define RSS_CHECKED 1
#endif

static size_t rss_bytes(void)
{
    unsigned long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    TWT_CHECK(f != NULL);
    TWT_EQ(fscanf(f, "%lu %lu", &size, &resident), 2);
    fclose(f);
    return resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* Stream 0 is 8 KiB messages (eager: copied, complete at once), stream 1
 * 64 KiB ones (zero-copy: complete once acknowledged). */
static size_t stall_len(unsigned s)
{
    return s == 0 ? SMALL : BIG;
}

/* Retransmissions of one fragment to a silent peer in @p secs: rel's
 * TW_REL_RTO, doubled per try up to TW_REL_RTO_MAX (its table, its env). */
static uint64_t rto_schedule(double secs)
{
    tw_rel_cfg_t cfg;
    uint64_t n = 0;

    tw_cfg_set_defaults(&tw_rel_cfg_table, &cfg);
    TWT_EQ(tw_cfg_apply_env(&tw_rel_cfg_table, &cfg), TW_OK);
    for (double t = 0, r = (double)cfg.rto_ns * 1e-9; t + r <= secs; n++) {
        t += r;
        r = r * 2 < (double)cfg.rto_max_ns * 1e-9 ? r * 2 : (double)cfg.rto_max_ns * 1e-9;
    }
    return n;
}

static void stall_sender(tw_context_t *ctx, tw_cq_t *cq, double stall_s)
{
    static unsigned char pool[POOL][BIG];
    static unsigned char small[SMALL];
    unsigned free_slots[POOL], nfree = POOL, n[2] = {0, 0};
    unsigned max_out = 0, outstanding = 0, done = 0;
    unsigned long again[2] = {0, 0};
    double t_first_again = 0;
    tw_completion_t cs[16];
    tw_status_t st;

    for (unsigned i = 0; i < POOL; i++) {
        free_slots[i] = i;
        memset(pool[i], 0xa5, BIG); /* resident before the baseline */
    }
    memset(small, 0xa5, sizeof(small));
    size_t rss0 = rss_bytes(), rss_max = rss0;
    double t0 = twt_now(), t_rss = t0;
    uint64_t again0 = rel_stat(ctx, TW_REL_STAT_AGAIN);
    uint64_t retx0 = rel_stat(ctx, TW_REL_STAT_RETRANSMITS);

    /* Rank 1 sleeps from now: try both streams in turn, all along. */
    for (unsigned s = 0; twt_now() - t0 < 0.9 * stall_s; s ^= 1) {
        int got = tw_cq_poll(cq, cs, (int)TWT_ARRAY_SIZE(cs));
        for (int j = 0; j < got; j++) {
            TWT_EQ(cs[j].op, TW_OP_SEND);
            TWT_CHECKF(cs[j].status == TW_OK, "send %#llx: %s", (unsigned long long)cs[j].tag,
                       tw_strerror(cs[j].status));
            if (cs[j].user != NULL) {
                free_slots[nfree++] = (unsigned)((uintptr_t)cs[j].user - 1);
            }
            outstanding--;
            done++;
        }
        size_t len = stall_len(s);
        unsigned slot = 0;
        void *buf = small;
        if (s == 1) {
            TWT_CHECKF(nfree > 0, "%u zero-copy sends outstanding to a stalled peer", POOL);
            slot = free_slots[nfree - 1];
            buf = pool[slot];
        }
        twt_fill(buf, len, s * STREAM + n[s]);
        st = tw_send(ctx, 1, s * STREAM + n[s], buf, len, cq,
                     s == 1 ? (void *)(uintptr_t)(slot + 1) : NULL);
        if (st == TW_OK) {
            nfree -= s;
            n[s]++;
            outstanding++;
            max_out = outstanding > max_out ? outstanding : max_out;
        } else {
            TWT_CHECKF(st == TW_ERR_AGAIN, "send %u of stream %u to a stalled peer: %s", n[s], s,
                       tw_strerror(st));
            if (again[0] + again[1] == 0) {
                t_first_again = twt_now() - t0;
            }
            again[s]++;
            tw_progress(ctx);
            usleep(250);
        }
        TWT_CHECKF(n[0] + n[1] <= REL_QUEUE + SLACK,
                   "%u sends accepted by a stalled peer (TW_REL_QUEUE %d)", n[0] + n[1], REL_QUEUE);
        if (twt_now() - t_rss > 0.01) {
            size_t r = rss_bytes();
            rss_max = r > rss_max ? r : rss_max;
            t_rss = twt_now();
        }
    }
    uint64_t rel_again = rel_stat(ctx, TW_REL_STAT_AGAIN) - again0;
    uint64_t retx = rel_stat(ctx, TW_REL_STAT_RETRANSMITS) - retx0;
    uint64_t limit = 2 * rto_schedule(0.9 * stall_s) + 2;
    double growth = (double)(rss_max - rss0) / (1024.0 * 1024.0);
    printf("rank 0: stalled receiver, %.1f s: %u sends accepted (%u of 8 KiB, %u of 64 KiB; at "
           "most %u outstanding), then TW_ERR_AGAIN %lu times (8 KiB %lu, 64 KiB %lu; first "
           "after %.3f s; rel counted %llu, retransmitted %llu, bound %llu); RSS grew %.2f MiB "
           "(bound %.0f MiB)\n",
           0.9 * stall_s, n[0] + n[1], n[0], n[1], max_out, again[0] + again[1], again[0], again[1],
           t_first_again, (unsigned long long)rel_again, (unsigned long long)retx,
           (unsigned long long)limit, growth, (REL_QUEUE * BIG + (16u << 20)) / 1048576.0);
    TWT_CHECKF(again[0] > 0 && again[1] > 0, "a stalled peer never refused a send (of one size)");
    TWT_EQ(rel_again, again[0] + again[1]);
    TWT_CHECKF(max_out <= REL_QUEUE + SLACK, "%u sends outstanding", max_out);
    /* A silent peer gets the oldest unacked fragment again, with backoff
     * (one retransmission timer per peer, as TCP): TW_REL_RTO doubled up
     * to TW_REL_RTO_MAX. Twice that schedule is the bound. Over tcp, which
     * queues whatever it is given while the socket is full, every
     * retransmission is memory. (This caught every unacked fragment
     * retransmitting on its own timer: ~1500 in 4.5 s, RSS +35 MiB.) */
    TWT_CHECKF(retx <= limit,
               "%llu retransmissions to a silent peer in %.1f s, bound %llu (the oldest unacked "
               "fragment only, with backoff)",
               (unsigned long long)retx, 0.9 * stall_s, (unsigned long long)limit);
    TWT_CHECKF(!RSS_CHECKED || rss_max - rss0 <= (size_t)REL_QUEUE * BIG + (16u << 20),
               "RSS grew by %.2f MiB over the stall", growth);
    if (!RSS_CHECKED) {
        printf("rank 0: RSS bound not checked under ASan (its quarantine)\n");
    }

    /* Rank 1 is back: the counts, then everything completes. */
    TWT_EQ(send_wait(ctx, cq, 1, TAG_COUNT, n, sizeof(n)), TW_OK);
    while (done < n[0] + n[1]) {
        int got = tw_cq_wait(cq, cs, (int)TWT_ARRAY_SIZE(cs), 30000);
        TWT_CHECKF(got > 0, "%u sends still outstanding 30 s after the stall", n[0] + n[1] - done);
        for (int j = 0; j < got; j++) {
            TWT_EQ(cs[j].op, TW_OP_SEND);
            TWT_CHECKF(cs[j].status == TW_OK, "send %#llx: %s", (unsigned long long)cs[j].tag,
                       tw_strerror(cs[j].status));
            done++;
        }
    }
    unsigned report[2] = {0, 0};
    recv_wait(ctx, cq, 1, TAG_DONE, report, sizeof(report));
    TWT_CHECK(report[0] == n[0] && report[1] == n[1]);
    check_cq_empty(cq);
}

static void stall_receiver(tw_context_t *ctx, tw_cq_t *cq, double stall_s)
{
    static unsigned char bufs[WINDOW][BIG];
    unsigned n[2] = {0, 0};
    tw_completion_t c;

    usleep((useconds_t)(stall_s * 1e6)); /* no posts, no progress */
    uint64_t delivered0 = rel_stat(ctx, TW_REL_STAT_DELIVERED);
    recv_wait(ctx, cq, 0, TAG_COUNT, n, sizeof(n));
    TWT_CHECK(n[0] < PER && n[1] < PER);
    memset(seen, 0, sizeof(seen));
    for (unsigned s = 0; s < 2; s++) {
        unsigned next = 0, got = 0, outstanding = 0;
        while (got < n[s]) {
            for (; outstanding < WINDOW && next < n[s]; next++, outstanding++) {
                unsigned slot = next % WINDOW;
                TWT_EQ(tw_recv(ctx, 0, s * STREAM + next, 0, bufs[slot], BIG, cq,
                               (void *)(uintptr_t)slot),
                       TW_OK);
            }
            TWT_CHECKF(tw_cq_wait(cq, &c, 1, 30000) == 1, "rank 1: message %u of stream %u lost",
                       got, s);
            TWT_EQ(c.op, TW_OP_RECV);
            TWT_CHECKF(c.status == TW_OK, "rank 1: receive: %s", tw_strerror(c.status));
            unsigned i = (unsigned)(c.tag - s * STREAM), slot = (unsigned)(uintptr_t)c.user;
            TWT_CHECKF(c.tag >= s * STREAM && i < n[s] && !seen[s * PER + i] && slot == i % WINDOW,
                       "rank 1: message %#llx arrived twice", (unsigned long long)c.tag);
            seen[s * PER + i] = 1;
            TWT_EQ(c.length, stall_len(s));
            TWT_CHECKF(twt_verify(bufs[slot], c.length, c.tag), "rank 1: message %#llx corrupted",
                       (unsigned long long)c.tag);
            got++;
            outstanding--;
        }
    }
    /* Nothing more was handed up than rank 0 sent (the counts included). */
    TWT_EQ(rel_stat(ctx, TW_REL_STAT_DELIVERED) - delivered0, (uint64_t)n[0] + n[1] + 1);
    printf("rank 1: after a %.1f s stall, %u messages intact, each once (rel dropped %llu "
           "duplicates)\n",
           stall_s, n[0] + n[1], (unsigned long long)rel_stat(ctx, TW_REL_STAT_DUPLICATES));
    TWT_EQ(send_wait(ctx, cq, 0, TAG_DONE, n, sizeof(n)), TW_OK);
    check_cq_empty(cq);
}

static unsigned run_stall(bool cold)
{
    double stall_s = env_uint("TWTEST_STALL_S", 5, 600);
    tw_context_t *ctx;
    tw_cq_t *cq;
    int hello = 0;

    TWT_EQ(tw_init(NULL, &ctx), TW_OK);
    tw_mp_attach(ctx);
    TWT_EQ(tw_size(ctx), 2);
    TWT_EQ(tw_cq_create(ctx, 1024, &cq), TW_OK);
    /* TCP connects on the first frame; a manual-mode peer gets
     * TW_TCP_TIMEOUT to answer the handshake (the case stall_tcp_cold
     * dials it during the stall). Otherwise open the
     * connection with a round trip before the stall.
     * Rank 1 drives progress 20 ms more (its answer must leave) and
     * stops; rank 0 starts 200 ms after the answer came, so nothing it
     * sends meets a polling receiver. */
    if (!cold) {
        if (tw_rank(ctx) == 0) {
            TWT_EQ(send_wait(ctx, cq, 1, TAG_PID, &hello, sizeof(hello)), TW_OK);
            recv_wait(ctx, cq, 1, TAG_PID, &hello, sizeof(hello));
            usleep(200000);
        } else {
            recv_wait(ctx, cq, 0, TAG_PID, &hello, sizeof(hello));
            TWT_EQ(send_wait(ctx, cq, 0, TAG_PID, &hello, sizeof(hello)), TW_OK);
            for (double t = twt_now(); twt_now() - t < 0.02;) {
                tw_progress(ctx);
            }
        }
    }
    if (tw_rank(ctx) == 0) {
        stall_sender(ctx, cq, stall_s);
    } else {
        stall_receiver(ctx, cq, stall_s);
    }
    TWT_EQ(tw_mp_errors_count(), 0);
    TWT_EQ(tw_finalize(ctx), TW_OK);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    TWT_EQ(tw_mp_errors_count(), 0);
    return 0;
}

/* ---- cases: each sets the environment it runs in ----------------------- */

static uint64_t warns0, errors0;

/* Set @p env ("NAME=value" strings) before the case's first tw_init. */
static void case_env(const char *const *env, size_t n)
{
    TWT_CHECKF(getenv("TW_FAULT") == NULL, "the test sets TW_FAULT itself");
    for (size_t i = 0; i < n; i++) {
        char name[64];
        const char *eq = strchr(env[i], '=');
        TWT_CHECK(eq != NULL && (size_t)(eq - env[i]) < sizeof(name));
        snprintf(name, sizeof(name), "%.*s", (int)(eq - env[i]), env[i]);
        TWT_EQ(setenv(name, eq + 1, 1), 0);
    }
    warns0 = tw_log_count(TW_LOG_WARN);
    errors0 = tw_log_count(TW_LOG_ERROR);
}

/* The log says what happened and nothing else: one error line per failed
 * peer (rel's "rank N failed"), no warning. */
static void check_log(unsigned failures)
{
    uint64_t warns = tw_log_count(TW_LOG_WARN) - warns0;
    uint64_t errors = tw_log_count(TW_LOG_ERROR) - errors0;

    TWT_CHECKF(warns == 0 && errors == failures,
               "the log has %llu warnings and %llu errors; expected none and %u (one per "
               "failed peer): see above",
               (unsigned long long)warns, (unsigned long long)errors, failures);
}

#define CASE(name, run, ...)                                             \
    static void case_##name(void)                                        \
    {                                                                    \
        static const char *const env[] = {"TW_RELIABLE=1", __VA_ARGS__}; \
        case_env(env, TWT_ARRAY_SIZE(env));                              \
        check_log(run);                                                  \
    }

CASE(nopath_tcp, run_nopath(), "TW_TRANSPORTS=tcp")
CASE(nopath_shm, run_nopath(), "TW_TRANSPORTS=shm")
/* TCP's own silence check must not act first: only rel's keepalive. */
CASE(sigstop, run_sigstop(), "TW_TRANSPORTS=tcp", "TW_TCP_TIMEOUT=60s", "TW_REL_KEEPALIVE=300ms",
     "TW_REL_MISSES=3")
/* Manual progress, a short rel queue, keepalive and path timeout far off;
 * _cold: the tcp connection is first dialed during the stall. */
#define STALL_ENV \
    "TW_PROGRESS_THREADS=0", "TW_REL_KEEPALIVE=10s", "TW_REL_QUEUE=64", "TW_REL_PATH_TIMEOUT=20s"
CASE(stall_shm, run_stall(false), STALL_ENV, "TW_TRANSPORTS=shm")
CASE(stall_tcp, run_stall(false), STALL_ENV, "TW_TRANSPORTS=tcp")
CASE(stall_tcp_cold, run_stall(true), STALL_ENV, "TW_TRANSPORTS=tcp")

int main(int argc, char **argv)
{
    static const twt_case_t cases[] = {
        {"nopath_tcp", case_nopath_tcp}, {"nopath_shm", case_nopath_shm},
        {"sigstop", case_sigstop},       {"stall_shm", case_stall_shm},
        {"stall_tcp", case_stall_tcp},   {"stall_tcp_cold", case_stall_tcp_cold}};

    setvbuf(stdout, NULL, _IOLBF, 0);
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
