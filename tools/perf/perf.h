/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_perf's internals (README.md beside this file has the overview).
 *
 * Roles. Rank 0 plays the initiator (A) and rank 1 the responder (B), or
 * the two ranks --pair names. A job of an even number N >= 4 of processes
 * without --pair runs N/2 pairs of processes at once (as osu_mbw_mr):
 * rank i < N/2 initiates against rank i + N/2; every run starts after a
 * barrier of the whole job, and rank 0 reports a row per pair (each the
 * aggregate of its threads, sent to rank 0 with TAG_RESULT) and the 'all'
 * row over the pairs. With --pair, the other ranks of the job are bystanders:
 * they only wait, in the loop the options say, for the initiator's release
 * (TAG_RELEASE) after the last barrier, and take part in the library's
 * work meanwhile (a node leader passes frames on). In a
 * job of one process every thread plays both, through the self transport;
 * with --split, thread i is the initiator and thread T + i its responder,
 * which runs the two-process code path inside one process.
 * Thread i of one rank pairs with thread i of the other: its messages carry
 * tag i (A to B) or tag i | TAG_REPLY (B to A), and every receive is exact
 * (source and tag), so the pairs never see each other's traffic. Each
 * thread owns one CQ.
 *
 * What is timed (the kernels in perf_tests.c). lat: A posts the pong
 * receive and sends a ping, B answers; half of A's round trip. bw, rate: A
 * sends a window of messages, B acknowledges it with a 0-byte message;
 * bandwidth and rate come from the whole measured run. put_lat, get_lat:
 * one operation to its completion, reported whole: a put completes once
 * its bytes are in place at B, so it is a round trip. put_bw: a window of
 * puts and one tw_flush; get_bw: a window of gets. During a one-sided run
 * B only waits for A's final 0-byte "done" (no idle timeout: no completion
 * comes before it); its progress thread, or in manual mode (-p 0) that
 * wait, serves the operations.
 *
 * Verification. Receives are posted before their message is sent (only
 * the first message of a run may find its partner thread not started yet),
 * so the measured traffic does not take the unexpected-message path. The
 * last iteration sends from a second buffer, the others from the first,
 * each filled with a pattern seeded by (thread, direction, first/last);
 * receivers check the first and the last iteration's payload. One-sided:
 * the last iteration puts into (or gets from) the second slot of B's
 * window, the others the first; B clears the slots before a put run and
 * checks both after it, or fills them with its patterns before a get run,
 * and A checks what the first and the last get read. Every completion is
 * checked for status, op, exact length and source, a receive's also for
 * its tag.
 *
 * Barriers. Between runs (one per test and size) the ranks meet in a
 * barrier of 0-byte messages tagged TAG_BARRIER | sequence, from the main
 * thread on a CQ of its own, which also carries the window keys (TAG_KEYS).
 * Waits give up after --timeout seconds without a completion.
 */
#ifndef TW_PERF_H
#define TW_PERF_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <threadwire/threadwire.h>

#define PERF_MAX_THREADS 256
#define PERF_MAX_WINDOW  65536
#define PERF_MAX_SIZE    ((size_t)1 << 30)
#define PERF_MAX_TESTS   8   /* each test once */
#define PERF_WAIT_MS     100 /* one tw_cq_wait slice: abort/timeout checks between */
#define PERF_POLL_MAX    32

/* Tag layout: bits 0..31 thread index, bit 32 direction, bit 60 a pair's
 * result for rank 0 (pairs of processes), bit 61 the bystanders' release
 * (--pair), bit 62 window keys, bit 63 barrier. */
#define TAG_REPLY   (UINT64_C(1) << 32)
#define TAG_RESULT  (UINT64_C(1) << 60)
#define TAG_RELEASE (UINT64_C(1) << 61)
#define TAG_KEYS    (UINT64_C(1) << 62)
#define TAG_BARRIER (UINT64_C(1) << 63)

typedef enum perf_test {
    TEST_LAT,
    TEST_BW,
    TEST_RATE,
    TEST_PUT_LAT,
    TEST_PUT_BW,
    TEST_GET_LAT,
    TEST_GET_BW,
    TEST_OVERLAP
} perf_test_t;

extern const char *const test_names[]; /* by perf_test_t, as -x names them */

enum { ROLE_A, ROLE_B }; /* initiator, responder */
/* completion user values */
enum { USER_SEND = 1, USER_RECV_A, USER_RECV_B, USER_PUT, USER_GET, USER_FLUSH };
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* How a benchmark thread waits (--loop): in tw_cq_wait (or, with -m spin,
 * in a tw_cq_poll loop, as tw_perf always did); spinning on tw_cq_poll
 * alone, as an MPI code spins on MPI_Test; or computing for a while after
 * each empty poll, as a code that overlaps work with communication. */
typedef enum perf_loop { PERF_LOOP_WAIT, PERF_LOOP_POLL, PERF_LOOP_COMPUTE } perf_loop_t;

/* --stats: tw_stats_print; --stats=json: tw_stats_json. */
typedef enum perf_stats { PERF_STATS_NONE = 0, PERF_STATS_TEXT, PERF_STATS_JSON } perf_stats_t;

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
    perf_loop_t loop;    /* how a benchmark thread waits for completions */
    unsigned compute_us; /* PERF_LOOP_COMPUTE: work after each empty poll */
    bool split;
    int pair[2]; /* the initiator's and the responder's rank (--pair; 0, 1) */
    bool pair_set;
    bool inject; /* sends of at most TW_INJECT_MAX bytes by tw_send_inject */
    bool csv;
    perf_stats_t stats; /* the library's counters on stderr at the end */
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

/* A benchmark thread. The main thread sets it up before a run's threads
 * start; the worker owns it during the run; the main thread reads the
 * results after the join. */
typedef struct perf_worker {
    int id;
    pthread_t th;
    perf_ep_t ep;
    perf_rma_t *rma; /* NULL without one-sided tests */
    bool role[2];
    unsigned char *sbuf[2][2];  /* [role][first/last iteration pattern] */
    unsigned char *rbuf[2];     /* [role] */
    double *samples;            /* ns per message (lat: half round trip) */
    uint64_t elapsed_ns;        /* measured part of the run */
    double comm_ns, compute_ns; /* overlap: the round trip alone, the computation */
    tw_status_t status;
} perf_worker_t;

/* Set by perf_parse_args, read-only after. */
extern perf_opts_t g_opts;
/* Set by main before the first run, read-only after. */
extern tw_context_t *g_ctx;
extern int g_rank, g_size, g_partner;
extern int g_side;     /* ROLE_A, ROLE_B, or -1: a bystander of a --pair job */
extern int g_npairs;   /* pairs of processes measuring at once (1 but in N/2 pairs) */
extern int g_nworkers; /* threads per process: --threads, twice that with --split */
extern bool g_manual;  /* manual progress (-p 0 or TW_PROGRESS_THREADS=0) */
/* Set by perf_rma_setup, read-only after. */
extern size_t g_rma_slot; /* bytes per window slot: the largest one-sided SIZE */
/* Any thread, atomic relaxed: set on the first failure, the others stop. */
extern atomic_bool g_abort;

static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The --timeout bookkeeping's clock: a few ns, a few ms coarse -- the
 * benchmark reads it on every post and wait, and should not measure it. */
static inline uint64_t coarse_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline bool test_is_rma(perf_test_t t)
{
    return t == TEST_PUT_LAT || t == TEST_PUT_BW || t == TEST_GET_LAT || t == TEST_GET_BW;
}

static inline bool test_is_put(perf_test_t t)
{
    return t == TEST_PUT_LAT || t == TEST_PUT_BW;
}

/* One operation at a time (window 1) rather than windows of them. */
static inline bool test_is_lat(perf_test_t t)
{
    return t == TEST_LAT || t == TEST_PUT_LAT || t == TEST_GET_LAT || t == TEST_OVERLAP;
}

/* A ping-pong of messages (each way), lat's kernel. */
static inline bool test_is_pingpong(perf_test_t t)
{
    return t == TEST_LAT || t == TEST_OVERLAP;
}

/* The functions each file offers the others (their comments are beside
 * their code). Thread: main, except where a comment says otherwise. */

/* perf_params.c: usage text and option parsing */
int perf_parse_args(int argc, char **argv);

/* perf_tests.c: payload patterns, endpoints, the test kernels */
uint64_t perf_pattern_seed(int thread, int role, int which);
void perf_pattern_fill(unsigned char *p, size_t n, uint64_t seed);
tw_status_t perf_ep_wait(perf_ep_t *ep, const uint64_t *counter, uint64_t target);
tw_status_t perf_ep_send(perf_ep_t *ep, const void *buf, size_t len, uint64_t tag);
tw_status_t perf_ep_recv(perf_ep_t *ep, int role, void *buf, size_t len);
tw_status_t perf_worker_run(perf_worker_t *w);
void perf_compute_ns(uint64_t ns);

/* perf_run.c: barrier, defaults, buffers, one-sided windows, one run */
tw_status_t perf_rank_barrier(perf_ep_t *ep, uint64_t seq);
size_t perf_default_size(perf_test_t test);
void perf_run_init(perf_run_t *r, perf_test_t test, size_t size);
int perf_rma_setup(void);
void perf_rma_deregister(void);
void perf_rma_cleanup(void);
int perf_rma_prepare(perf_ep_t *bar, const perf_run_t *r);
int perf_run_one(perf_worker_t *ws, const perf_run_t *r);
void perf_on_error(tw_context_t *ctx, int peer, tw_status_t err, const char *what, void *arg);
void perf_cq_close(tw_cq_t *cq);

/* perf_report.c: statistics, table and CSV */
void perf_print_banner(void);
void perf_print_header(void);
int perf_report_run(perf_worker_t *ws, const perf_run_t *r, perf_result_t *res);
void perf_print_stats(void);

#endif /* TW_PERF_H */
