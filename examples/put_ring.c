/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * One-sided puts around a ring of processes, from every thread at once:
 * the pattern "put, flush, then tell the target with a message".
 *
 * Every process registers a window of one slot per thread and sends its
 * address and packed key to the process before it in the ring. Then, each
 * round, thread t of rank r
 *   1. puts a block into slot t of rank r + 1's window (tw_put),
 *   2. waits for tw_flush: the block is in place at the target,
 *   3. tells the target with a 0-byte message (tag: round and thread),
 *   4. meanwhile, as a target, waits for the message of rank r - 1's
 *      thread t, checks slot t of its own window (every byte: the block
 *      is seeded by source, thread and round), and acknowledges it, so
 *      that the source may overwrite the slot in the next round;
 *   5. waits for its own target's acknowledgement.
 * A put wakes nobody at the target: the message after the flush is what
 * makes the data safe to read there.
 *
 *   twrun -n 2 put_ring [-t THREADS (4)] [-b BYTES (64k)] [-r ROUNDS (200)]
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <threadwire/threadwire.h>

#define MAX_THREADS        64
#define TAG_KEY            (UINT64_C(1) << 62)
#define TAG_ACK            (UINT64_C(1) << 61)
#define TAG(round, thread) ((uint64_t)(round) << 8 | (uint64_t)(thread))

static struct {
    int threads, rounds;
    size_t bytes;
} opt = {.threads = 4, .rounds = 200, .bytes = 65536};

static tw_context_t *ctx;
static int rank, size, next, prev;
static unsigned char *window; /* threads x bytes, registered */
static struct {
    uint64_t addr;
    unsigned char key[TW_RKEY_MAX];
} target; /* next's window: its address, its packed key */
static _Atomic int errors;

/* The threads wait behind this lock until all of them, in every process,
 * have started: a thread that failed to start would leave its partners in
 * the ring waiting for its puts and acknowledgements forever. */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static bool start_ok; /* written by main under start_lock */

typedef struct worker {
    int t;
    pthread_t th;
    tw_cq_t *cq;
    unsigned char *block;
} worker_t;

static unsigned char pattern(int src, int t, int round, size_t i)
{
    uint64_t x =
        (uint64_t)src * 0x9e3779b97f4a7c15u ^ (uint64_t)t << 40 ^ (uint64_t)round << 20 ^ i;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9u;
    return (unsigned char)(x >> 56);
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Post @p call again while the ring to the peer is full. */
#define POST(call)                               \
    ({                                           \
        tw_status_t st_;                         \
        while ((st_ = (call)) == TW_ERR_AGAIN) { \
            tw_progress(ctx);                    \
        }                                        \
        st_;                                     \
    })

/* Wait for the completion of @p op; a receive that completes meanwhile
 * is counted in *@p recvs. @return the first failed status, or TW_OK. */
static tw_status_t wait_for(tw_cq_t *cq, tw_op_t op, int *recvs)
{
    tw_completion_t c;

    for (;;) {
        if (tw_cq_wait(cq, &c, 1, 1000) != 1) {
            continue;
        }
        if (c.status != TW_OK) {
            return c.status;
        }
        if (c.op == op) {
            return TW_OK;
        }
        *recvs += c.op == TW_OP_RECV;
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    static char none;
    unsigned char *slot = window + (size_t)w->t * opt.bytes;
    bool go;

    pthread_mutex_lock(&start_lock); /* main holds it until every thread started */
    go = start_ok;
    pthread_mutex_unlock(&start_lock);
    if (!go) {
        return NULL;
    }
    for (int round = 0; round < opt.rounds && errors == 0; round++) {
        tw_status_t st;
        int recvs = 0;
        for (size_t i = 0; i < opt.bytes; i++) {
            w->block[i] = pattern(rank, w->t, round, i);
        }
        /* as a target: the notice of this round's block from prev */
        if ((st = POST(tw_recv(ctx, prev, TAG(round, w->t), 0, &none, 0, w->cq, NULL))) != TW_OK ||
            (st = POST(tw_put(ctx, next, w->block, opt.bytes,
                              target.addr + (uint64_t)w->t * opt.bytes, target.key, w->cq,
                              NULL))) != TW_OK ||
            (st = wait_for(w->cq, TW_OP_PUT, &recvs)) != TW_OK ||
            (st = POST(tw_flush(ctx, next, w->cq, NULL))) != TW_OK ||
            (st = wait_for(w->cq, TW_OP_FLUSH, &recvs)) != TW_OK ||
            (st = POST(tw_send(ctx, next, TAG(round, w->t), &none, 0, w->cq, NULL))) != TW_OK ||
            (st = wait_for(w->cq, TW_OP_SEND, &recvs)) != TW_OK ||
            (recvs == 0 && (st = wait_for(w->cq, TW_OP_RECV, &recvs)) != TW_OK)) {
            fprintf(stderr, "put_ring: rank %d thread %d round %d: %s\n", rank, w->t, round,
                    tw_strerror(st));
            errors++;
            break;
        }
        for (size_t i = 0; i < opt.bytes; i++) {
            if (slot[i] != pattern(prev, w->t, round, i)) {
                fprintf(stderr,
                        "put_ring: rank %d: slot %d, round %d, byte %zu: 0x%02x, want 0x%02x\n",
                        rank, w->t, round, i, slot[i], pattern(prev, w->t, round, i));
                errors++;
                break;
            }
        }
        /* the slot is read: prev may write it again; and our target's word */
        recvs = 0;
        if ((st = POST(tw_recv(ctx, next, TAG_ACK | TAG(round, w->t), 0, &none, 0, w->cq, NULL))) !=
                TW_OK ||
            (st = POST(tw_send(ctx, prev, TAG_ACK | TAG(round, w->t), &none, 0, w->cq, NULL))) !=
                TW_OK ||
            (st = wait_for(w->cq, TW_OP_SEND, &recvs)) != TW_OK ||
            (recvs == 0 && (st = wait_for(w->cq, TW_OP_RECV, &recvs)) != TW_OK)) {
            fprintf(stderr, "put_ring: rank %d thread %d round %d: acknowledging: %s\n", rank, w->t,
                    round, tw_strerror(st));
            errors++;
            break;
        }
    }
    return NULL;
}

/* Register the window, send its key to prev, take next's. @return 0 or 1. */
static int exchange_keys(tw_mr_t **mr)
{
    unsigned char msg[sizeof(uint64_t) + TW_RKEY_MAX], got[sizeof(msg)];
    size_t key_len = TW_RKEY_MAX;
    uint64_t addr = (uint64_t)(uintptr_t)window;
    tw_completion_t c;
    tw_cq_t *cq;
    tw_status_t st;
    int done = 0;

    if ((st = tw_mem_register(ctx, window, (size_t)opt.threads * opt.bytes, mr)) != TW_OK ||
        (st = tw_mr_pack(*mr, msg + sizeof(addr), &key_len)) != TW_OK ||
        (st = tw_cq_create(ctx, 4, &cq)) != TW_OK) {
        fprintf(stderr, "put_ring: rank %d: the window: %s\n", rank, tw_strerror(st));
        return 1;
    }
    memcpy(msg, &addr, sizeof(addr));
    if ((st = tw_recv(ctx, next, TAG_KEY, 0, got, sizeof(got), cq, NULL)) == TW_OK) {
        st = tw_send(ctx, prev, TAG_KEY, msg, sizeof(addr) + key_len, cq, NULL);
    }
    while (st == TW_OK && done < 2) {
        if (tw_cq_wait(cq, &c, 1, 1000) == 1) {
            st = c.status;
            done++;
        }
    }
    tw_cq_destroy(cq);
    if (st != TW_OK) {
        fprintf(stderr, "put_ring: rank %d: exchanging keys: %s\n", rank, tw_strerror(st));
        return 1;
    }
    memcpy(&target.addr, got, sizeof(target.addr));
    memcpy(target.key, got + sizeof(target.addr), TW_RKEY_MAX);
    return 0;
}

/* @return true when @p mine holds in every process (one allreduce). */
static bool everyone(bool mine)
{
    int32_t in = mine, all = 0;

    return tw_allreduce(tw_group_world(ctx), &in, &all, 1, TW_INT32, TW_MIN) == TW_OK && all == 1;
}

static int parse(int argc, char **argv)
{
    int c;

    while ((c = getopt(argc, argv, "t:b:r:h")) != -1) {
        switch (c) {
        case 't':
            opt.threads = atoi(optarg);
            break;
        case 'b':
            opt.bytes = strtoull(optarg, NULL, 0);
            break;
        case 'r':
            opt.rounds = atoi(optarg);
            break;
        default:
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: twrun -n P put_ring [-t THREADS (4)] [-b BYTES (65536)] "
                    "[-r ROUNDS (200)]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (opt.threads < 1 || opt.threads > MAX_THREADS || opt.bytes < 1 || opt.bytes > (64u << 20) ||
        opt.rounds < 1 || opt.rounds >= 1 << 24) {
        fprintf(stderr, "put_ring: want 1..%d threads, 1 B..64 MiB blocks, 1..2^24 rounds\n",
                MAX_THREADS);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv)
{
    tw_config_t cfg;
    tw_status_t st;
    tw_mr_t *mr = NULL;
    worker_t w[MAX_THREADS] = {0};
    int rc = parse(argc, argv);
    uint64_t t0;

    if (rc >= 0) {
        return rc;
    }
    tw_config_init(&cfg);
    if ((st = tw_init(&cfg, &ctx)) != TW_OK) {
        fprintf(stderr, "put_ring: tw_init: %s\n", tw_strerror(st));
        return 1;
    }
    rank = tw_rank(ctx);
    size = tw_size(ctx);
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;
    window = calloc((size_t)opt.threads, opt.bytes);
    rc = window == NULL || exchange_keys(&mr) != 0;
    for (int t = 0; rc == 0 && t < opt.threads; t++) {
        w[t].t = t;
        w[t].block = malloc(opt.bytes);
        if (w[t].block == NULL || tw_cq_create(ctx, 8, &w[t].cq) != TW_OK) {
            fprintf(stderr, "put_ring: rank %d: out of memory\n", rank);
            rc = 1;
        }
    }
    if (rc == 0) {
        int started = 0;
        pthread_mutex_lock(&start_lock);
        for (; started < opt.threads; started++) {
            int err = pthread_create(&w[started].th, NULL, worker_main, &w[started]);
            if (err != 0) {
                fprintf(stderr, "put_ring: rank %d: pthread_create of thread %d: %s\n", rank,
                        started, strerror(err));
                break;
            }
        }
        start_ok = everyone(started == opt.threads);
        t0 = now_ns();
        pthread_mutex_unlock(&start_lock);
        for (int t = 0; t < started; t++) {
            pthread_join(w[t].th, NULL);
        }
        double secs = (double)(now_ns() - t0) / 1e9;
        if (!start_ok && started == opt.threads) {
            fprintf(stderr, "put_ring: rank %d: a thread of another process did not start\n", rank);
        }
        rc = !start_ok || errors != 0;
        if (rc == 0 && rank == 0) {
            printf("put_ring: %d processes x %d threads, %d rounds of %zu B puts: every block "
                   "checked at its target; rank 0 put %.1f MB/s\n",
                   size, opt.threads, opt.rounds, opt.bytes,
                   (double)opt.threads * opt.rounds * (double)opt.bytes / secs / 1e6);
        }
    }
    for (int t = 0; t < opt.threads; t++) {
        if (w[t].cq != NULL) {
            tw_cq_destroy(w[t].cq);
        }
        free(w[t].block);
    }
    if (mr != NULL) {
        tw_mem_deregister(mr);
    }
    if ((st = tw_finalize(ctx)) != TW_OK) {
        fprintf(stderr, "put_ring: tw_finalize: %s\n", tw_strerror(st));
        rc = 1;
    }
    free(window);
    return rc;
}
