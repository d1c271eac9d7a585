/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_demo: many threads of one process exchange messages through
 * threadwire at once, and the program prints what happened.
 *
 *   tw_demo [-t THREADS] [-n MSGS_PER_THREAD] [-s MAX_SIZE] [-m thread|manual]
 *
 * Thread i streams MSGS messages (sizes 1..MAX_SIZE bytes) to thread
 * (i+1) % THREADS, with tags (destination, sequence), keeping a window of
 * receives posted ahead. Each receiver checks that every message arrives,
 * with the right length and an intact payload checksum.
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "threadwire/threadwire.h"

#define WINDOW 16

typedef struct worker {
    int id;
    pthread_t th;
    uint64_t sent_bytes, recv_msgs, bad;
} worker_t;

static tw_context_t *ctx;
static int nthreads = 4;
static uint64_t nmsgs = 100000;
static size_t max_size = 4096;
static bool manual;
static atomic_int finished;
/* posted[d]: receives thread d has posted. A sender stays at most SLACK
 * messages ahead of its receiver, as a well-behaved application does, so
 * unexpected messages do not pile up. */
#define SLACK 64
static _Atomic uint64_t posted[256];

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static size_t msg_size(int src, uint64_t seq)
{
    return 1 + mix((uint64_t)src << 40 | seq) % max_size;
}

/* Payload of message (src, seq): 64-bit words from a seeded generator. */
static void fill(unsigned char *p, size_t n, int src, uint64_t seq)
{
    uint64_t x = mix((uint64_t)src << 48 ^ seq);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        memcpy(p + i, &x, 8);
    }
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    memcpy(p + i, &x, n - i);
}

/* True when @p p holds exactly what fill(p, n, src, seq) writes. */
static bool intact(const unsigned char *p, size_t n, int src, uint64_t seq)
{
    uint64_t x = mix((uint64_t)src << 48 ^ seq);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        if (memcmp(p + i, &x, 8) != 0) {
            return false;
        }
    }
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return memcmp(p + i, &x, n - i) == 0;
}

static void *run(void *arg)
{
    worker_t *w = arg;
    int dst = (w->id + 1) % nthreads, src = (w->id + nthreads - 1) % nthreads;
    unsigned char *sbuf[WINDOW], *rbuf[WINDOW];
    bool sbusy[WINDOW] = {false}, rbusy[WINDOW] = {false};
    uint64_t next_send = 0, next_post = 0, done_sends = 0, rseq[WINDOW];
    tw_cq_t *cq;
    tw_completion_t c[32];

    if (tw_cq_create(ctx, 2 * WINDOW + 4, &cq) != TW_OK) {
        w->bad++;
        return NULL;
    }
    for (int i = 0; i < WINDOW; i++) {
        sbuf[i] = malloc(max_size);
        rbuf[i] = malloc(max_size);
    }
    while (done_sends < nmsgs || w->recv_msgs < nmsgs) {
        for (int i = 0; i < WINDOW && next_post < nmsgs; i++) {
            if (!rbusy[i] && tw_recv(ctx, tw_rank(ctx), (uint64_t)w->id << 32 | next_post, 0,
                                     rbuf[i], max_size, cq, (void *)(uintptr_t)(i + 1)) == TW_OK) {
                rbusy[i] = true;
                rseq[i] = next_post++;
                atomic_store_explicit(&posted[w->id], next_post, memory_order_release);
            }
        }
        for (int i = 0; i < WINDOW && next_send < nmsgs; i++) {
            size_t n = msg_size(w->id, next_send);
            if (sbusy[i]) {
                continue;
            }
            if (next_send >= atomic_load_explicit(&posted[dst], memory_order_acquire) + SLACK) {
                break; /* the receiver is behind: let it catch up */
            }
            fill(sbuf[i], n, w->id, next_send);
            if (tw_send(ctx, tw_rank(ctx), (uint64_t)dst << 32 | next_send, sbuf[i], n, cq,
                        (void *)(uintptr_t) - (i + 1)) == TW_OK) {
                sbusy[i] = true;
                next_send++;
                w->sent_bytes += n;
            }
        }
        if (manual) {
            tw_progress(ctx);
        }
        int got = tw_cq_wait(cq, c, 32, 1);
        for (int k = 0; k < got; k++) {
            intptr_t slot = (intptr_t)c[k].user;
            if (c[k].status != TW_OK) {
                w->bad++;
            }
            if (slot < 0) {
                sbusy[-slot - 1] = false;
                done_sends++;
                continue;
            }
            uint64_t seq = c[k].tag & 0xffffffffull;
            size_t n = msg_size(src, seq);
            if (seq != rseq[slot - 1] || c[k].length != n || !intact(rbuf[slot - 1], n, src, seq)) {
                w->bad++;
            }
            rbusy[slot - 1] = false;
            w->recv_msgs++;
        }
    }
    atomic_fetch_add(&finished, 1);
    while (manual && atomic_load(&finished) < nthreads) {
        tw_progress(ctx);
    }
    while (tw_cq_destroy(cq) == TW_ERR_AGAIN) {
        tw_cq_poll(cq, c, 32);
    }
    for (int i = 0; i < WINDOW; i++) {
        free(sbuf[i]);
        free(rbuf[i]);
    }
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    tw_config_t cfg;
    worker_t *w;
    uint64_t bytes = 0, msgs = 0, bad = 0;
    int opt;

    while ((opt = getopt(argc, argv, "t:n:s:m:h")) != -1) {
        switch (opt) {
        case 't':
            nthreads = atoi(optarg);
            break;
        case 'n':
            nmsgs = strtoull(optarg, NULL, 10);
            break;
        case 's':
            max_size = strtoull(optarg, NULL, 10);
            break;
        case 'm':
            manual = strcmp(optarg, "manual") == 0;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [-t threads] [-n msgs/thread] [-s max bytes] "
                    "[-m thread|manual]\n",
                    argv[0]);
            return opt == 'h' ? 0 : 2;
        }
    }
    if (nthreads < 1 || nthreads > 256 || nmsgs < 1 || max_size < 1) {
        fprintf(stderr, "tw_demo: bad arguments\n");
        return 2;
    }
    tw_config_init(&cfg);
    cfg.progress_threads = manual ? 0 : -1;
    tw_status_t st = tw_init(&cfg, &ctx);
    if (st != TW_OK) {
        fprintf(stderr, "tw_demo: tw_init failed: %s\n", tw_strerror(st));
        return 1;
    }
    w = calloc((size_t)nthreads, sizeof(*w));
    double t0 = now();
    for (int i = 0; i < nthreads; i++) {
        w[i].id = i;
        pthread_create(&w[i].th, NULL, run, &w[i]);
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(w[i].th, NULL);
        bytes += w[i].sent_bytes;
        msgs += w[i].recv_msgs;
        bad += w[i].bad;
    }
    double dt = now() - t0;
    printf("threadwire demo: rank %d of %d, %d threads, %s progress\n", tw_rank(ctx), tw_size(ctx),
           nthreads, manual ? "manual" : "thread");
    tw_stats_print(ctx, stdout);
    tw_finalize(ctx);
    printf("\n  messages delivered : %" PRIu64 " of %" PRIu64 "\n", msgs,
           (uint64_t)nthreads * nmsgs);
    printf("  bytes moved        : %.1f MB\n", (double)bytes / 1e6);
    printf("  time               : %.3f s\n", dt);
    printf("  message rate       : %.2f M msgs/s\n", (double)msgs / dt / 1e6);
    printf("  bandwidth          : %.2f GB/s\n", (double)bytes / dt / 1e9);
    printf("  checksums / order  : %s\n", bad == 0 ? "all intact" : "ERRORS");
    free(w);
    return bad == 0 && msgs == (uint64_t)nthreads * nmsgs ? 0 : 1;
}
