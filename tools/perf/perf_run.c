/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Running: the barrier between runs, a run's defaults and buffers, the
 * one-sided windows and their keys, one run on every thread, and the
 * error handler. Thread: main, except worker_main. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

size_t g_rma_slot;
static perf_rma_t *g_rma; /* per worker, with one-sided tests */
/* The start gate: a run's threads start together once all exist. */
static pthread_mutex_t g_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cond = PTHREAD_COND_INITIALIZER;
static bool g_gate_open; /* guarded by g_gate_lock */

/* The ranks meet: each sends a 0-byte message to its partner and waits for
 * the partner's. @p seq keeps consecutive barriers apart. */
tw_status_t perf_rank_barrier(perf_ep_t *ep, uint64_t seq)
{
    static char none;
    uint64_t want = ep->recvs[ROLE_B] + 1;
    tw_status_t st;

    ep->expect_tag[ROLE_B] = TAG_BARRIER | seq;
    ep->expect_len[ROLE_B] = 0;
    if ((st = perf_ep_recv(ep, ROLE_B, &none, 0)) != TW_OK ||
        (st = perf_ep_send(ep, &none, 0, TAG_BARRIER | seq)) != TW_OK ||
        (st = perf_ep_wait(ep, &ep->recvs[ROLE_B], want)) != TW_OK) {
        return st;
    }
    return perf_ep_wait(ep, &ep->sends_done, ep->sends_posted);
}

/* The size of a test without -s. */
size_t perf_default_size(perf_test_t test)
{
    return test == TEST_BW || test == TEST_PUT_BW || test == TEST_GET_BW || test == TEST_OVERLAP
               ? (size_t)1 << 20
               : 8;
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

/* @p r: test @p test at size @p size, with -n, -W and -w or their defaults. */
void perf_run_init(perf_run_t *r, perf_test_t test, size_t size)
{
    *r = (perf_run_t){.test = test, .size = size, .window = g_opts.window};
    r->iters = g_opts.iters_set ? g_opts.iters : default_iters(test, size, r->window);
    r->warmup = g_opts.warmup_set ? g_opts.warmup : r->iters / 10 > 1000 ? 1000 : r->iters / 10;
    if (!g_opts.warmup_set && r->warmup == 0) {
        r->warmup = 1;
    }
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
    if (g_size > 1) {
        if (g_side >= 0) { /* a bystander (--pair) plays neither */
            role[g_side] = true;
        }
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
int perf_rma_setup(void)
{
    size_t slot = 0;
    bool any = false;

    for (int t = 0; t < g_opts.ntests; t++) {
        if (test_is_rma(g_opts.tests[t])) {
            size_t hi = g_opts.size_set ? g_opts.size_max : perf_default_size(g_opts.tests[t]);
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
void perf_rma_deregister(void)
{
    for (int j = 0; g_rma != NULL && j < g_nworkers; j++) {
        tw_status_t st;

        if (g_rma[j].mr != NULL && (st = tw_mem_deregister(g_rma[j].mr)) != TW_OK) {
            fprintf(stderr, "tw_perf: rank %d: tw_mem_deregister: %s\n", g_rank, tw_strerror(st));
        }
        g_rma[j].mr = NULL;
    }
}

/* Free the windows, once tw_finalize released them. */
void perf_rma_cleanup(void)
{
    for (int j = 0; g_rma != NULL && j < g_nworkers; j++) {
        free(g_rma[j].win);
    }
    free(g_rma);
    g_rma = NULL;
}

/* What a responder's rank sends for pair i (tag TAG_KEYS | i): fixed size,
 * so the receive checks its length exactly. */
typedef struct perf_key_msg {
    uint64_t addr;
    uint64_t len;
    uint32_t rkey_len;
    uint32_t reserved;
    unsigned char rkey[TW_RKEY_MAX];
} perf_key_msg_t;

/* Before one-sided run @p r (and its barrier): each responder window is
 * cleared (put) or filled with the responder's patterns (get), then
 * registered -- afresh, after the writes: taking the registry's lock is
 * what orders them before the library's threads serve the operations
 * (every other path runs through the partner process, where a race
 * detector cannot follow) -- and each pair's initiator gets the packed key
 * and the address, over the barrier endpoint @p bar, tagged TAG_KEYS | i.
 * Thread: main, between runs. @return EXIT_OK or EXIT_FAIL (said why). */
int perf_rma_prepare(perf_ep_t *bar, const perf_run_t *r)
{
    if (!test_is_rma(r->test)) {
        return EXIT_OK;
    }
    perf_rma_deregister();
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
                perf_pattern_fill(p, r->size, perf_pattern_seed(j % g_opts.threads, ROLE_B, which));
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
    /* Pair i: worker i initiates; its responder is worker i of the other rank, or
     * of this rank (--split: worker T + i). */
    for (int i = 0; i < g_opts.threads; i++) {
        int resp = g_size == 1 && g_opts.split ? g_opts.threads + i : i;
        bool sender = g_size == 1 || g_side == ROLE_B, receiver = g_size == 1 || g_side == ROLE_A;
        perf_key_msg_t out = {0}, in = {0};
        uint64_t want = bar->recvs[ROLE_B] + 1;
        tw_status_t st = TW_OK;

        bar->expect_tag[ROLE_B] = TAG_KEYS | (uint64_t)i;
        bar->expect_len[ROLE_B] = sizeof(in);
        if (receiver) {
            st = perf_ep_recv(bar, ROLE_B, &in, sizeof(in));
        }
        if (st == TW_OK && sender) {
            out.addr = (uint64_t)(uintptr_t)g_rma[resp].win;
            out.len = 2 * g_rma_slot;
            out.rkey_len = (uint32_t)g_rma[resp].rkey_len;
            memcpy(out.rkey, g_rma[resp].rkey, g_rma[resp].rkey_len);
            st = perf_ep_send(bar, &out, sizeof(out), TAG_KEYS | (uint64_t)i);
        }
        if (st == TW_OK && receiver) {
            st = perf_ep_wait(bar, &bar->recvs[ROLE_B], want);
        }
        if (st == TW_OK) {
            st = perf_ep_wait(bar, &bar->sends_done, bar->sends_posted);
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
        w->status = perf_worker_run(w);
    }
    return NULL;
}

/* One test at one size on every thread; rank 0 prints its rows. */
int perf_run_one(perf_worker_t *ws, const perf_run_t *r)
{
    perf_result_t *res = calloc((size_t)g_opts.threads, sizeof(*res));
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
                sends = w->role[role] && (role == ROLE_A || test_is_pingpong(r->test));
                recvs = w->role[role] && (role == ROLE_B || test_is_pingpong(r->test));
            }
            for (int which = 0; sends && which < 2; which++) {
                w->sbuf[role][which] = alloc_buf(r->size);
                if (w->sbuf[role][which] != NULL) {
                    perf_pattern_fill(w->sbuf[role][which], r->size,
                                      perf_pattern_seed(i, role, which));
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
    if (rc == EXIT_OK && g_side == ROLE_A) {
        rc = perf_report_run(ws, r, res);
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

void perf_on_error(tw_context_t *ctx, int peer, tw_status_t err, const char *what, void *arg)
{
    (void)ctx;
    (void)arg;
    fprintf(stderr, "tw_perf: rank %d: peer %d: %s: %s\n", g_rank, peer,
            what != NULL ? what : "error", tw_strerror(err));
    atomic_store_explicit(&g_abort, true, memory_order_relaxed);
}

/* Destroy a CQ of a finalized context: drain it, then retry while the last
 * completions are handed over. */
void perf_cq_close(tw_cq_t *cq)
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
