/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The scaffolding of a multi-process test program (twrun -n N prog ...),
 * written once: its common options, its rank for failure messages, a job
 * barrier, a stall watchdog, the error handler's record and --stats.
 *
 *   static uint64_t iters = 24;
 *   static const tw_mp_opt_t mine[] = {
 *       {"iters", 'i', TW_MP_ARG_U64, &iters, "rounds per worker (24)"}};
 *   tw_mp_opts_t o = {.threads = 4, .seed = 7, .stall_s = 60};
 *   tw_mp_parse(argc, argv, "test_x", TW_MP_THREADS | TW_MP_SEED | TW_MP_STATS,
 *               mine, TWT_ARRAY_SIZE(mine), &o);
 *   tw_context_t *ctx = tw_mp_init();          // rank known from here on
 *   tw_mp_watchdog_start(o.stall_s, dump);     // workers call tw_mp_tick()
 *   ... TW_MP_CHECK(cond, "what, with %d", x) from any thread ...
 *   tw_mp_barrier(ctx, TAG_END);
 *   tw_mp_stats(ctx);                          // --stats / --stats=json
 *
 * A failed check prints "FAIL rank R (file:line): cond: message" and ends
 * the process with _exit(1), from any thread: the library's threads run
 * on, so no exit handler may tear anything down under them.
 */
#ifndef TW_MP_H
#define TW_MP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "threadwire/threadwire.h"
#include "tw_test.h"

/* ---- checks that name the rank --------------------------------------- */

/* -1 until tw_mp_init (or tw_mp_set_rank). Thread: any. */
int tw_mp_rank(void);
int tw_mp_size(void);
void tw_mp_set_rank(int rank, int size);

#define TW_MP_CHECK(cond, ...) TWT_RANK_CHECK(tw_mp_rank(), cond, __VA_ARGS__)
#define TW_MP_FAIL(...)        TWT_RANK_FAIL(tw_mp_rank(), __VA_ARGS__)

/* ---- options --------------------------------------------------------- */

typedef enum tw_mp_stats_mode {
    TW_MP_STATS_NONE = 0,
    TW_MP_STATS_TEXT, /* --stats: tw_stats_print */
    TW_MP_STATS_JSON  /* --stats=json: tw_stats_json, one line per rank */
} tw_mp_stats_mode_t;

/* The common options a program takes (tw_mp_parse's @p common). */
enum {
    TW_MP_THREADS = 1u << 0,  /* -t, --threads N */
    TW_MP_MESSAGES = 1u << 1, /* -m, --messages N */
    TW_MP_MAX_SIZE = 1u << 2, /* --max-size BYTES[k|m] */
    TW_MP_SEED = 1u << 3,     /* --seed S */
    TW_MP_STALL = 1u << 4,    /* --max-stall S (alias --stall) */
    TW_MP_STATS = 1u << 5     /* --stats[=text|json] */
};

/* Values of the common options; the caller sets the defaults before
 * tw_mp_parse (usage prints them). */
typedef struct tw_mp_opts {
    unsigned threads;     /* workers per rank */
    unsigned max_threads; /* 0: 64 */
    uint64_t messages;    /* before TWTEST_SCALE */
    uint64_t max_size;    /* bytes */
    uint64_t seed;
    double stall_s; /* seconds without progress that fail the rank */
    tw_mp_stats_mode_t stats;
} tw_mp_opts_t;

typedef enum tw_mp_arg {
    TW_MP_ARG_FLAG,   /* bool, set true */
    TW_MP_ARG_U64,    /* uint64_t */
    TW_MP_ARG_SIZE,   /* uint64_t, with k/m suffixes */
    TW_MP_ARG_DOUBLE, /* double */
    TW_MP_ARG_STR     /* const char *, the argument itself */
} tw_mp_arg_t;

/* A program's own option. */
typedef struct tw_mp_opt {
    const char *name; /* long name, without "--" */
    int short_name;   /* a letter, or 0 */
    tw_mp_arg_t kind;
    void *value;
    const char *help;
} tw_mp_opt_t;

/* Parse argv: the @p common options and @p extra. -h/--help prints the
 * usage and exits 0; a bad option or value prints it and exits 2; so
 * does a thread count outside 1..max_threads or 0 messages. Arguments
 * that are not options are left in argv[optind..] (getopt). */
void tw_mp_parse(int argc, char **argv, const char *prog, unsigned common, const tw_mp_opt_t *extra,
                 size_t nextra, tw_mp_opts_t *o);
/* The parsed options (for tw_mp_stats, the barrier's and watchdog's
 * bound). */
const tw_mp_opts_t *tw_mp_opts(void);

/* ---- the job --------------------------------------------------------- */

/* tw_init with the default configuration (TW_* from the environment),
 * checked; records the rank and size and installs the error record's
 * handler (tw_mp_errors_*). */
tw_context_t *tw_mp_init(void);
/* The same for a context the caller made: rank, size, error record. */
void tw_mp_attach(tw_context_t *ctx);

/* Every rank (itself included) sends every rank a 0-byte message with
 * @p tag and receives one from each: no rank returns before all arrived.
 * A rank that waits longer than the stall bound fails, naming the ranks
 * it still waits for. Progresses the context itself (manual mode). */
void tw_mp_barrier(tw_context_t *ctx, uint64_t tag);

/* Post @p call again while it returns TW_ERR_AGAIN (a full CQ or ring),
 * progressing the context in between; fails the rank after the stall
 * bound. Evaluates to the call's last status. */
#define TW_MP_POST(ctx, call)                       \
    ({                                              \
        tw_status_t st_;                            \
        double since_ = twt_now();                  \
        while ((st_ = (call)) == TW_ERR_AGAIN) {    \
            tw_mp_post_again((ctx), since_, #call); \
        }                                           \
        st_;                                        \
    })
void tw_mp_post_again(tw_context_t *ctx, double since, const char *what);

/* --stats: tw_stats_print to stdout; --stats=json: tw_stats_json as one
 * line on stdout, in one write (ranks share the job's stdout). */
void tw_mp_stats(tw_context_t *ctx);

/* ---- stall watchdog -------------------------------------------------- */

/* A thread that fails the rank when nobody called tw_mp_tick for
 * @p stall_s seconds: it first asks the workers to describe what they
 * wait for (tw_mp_watchdog_asks), runs @p dump (may be NULL; it runs on
 * the watchdog's thread, so it reads only atomics), waits a moment for
 * the workers' reports, then fails with the current phase. */
void tw_mp_watchdog_start(double stall_s, void (*dump)(void));
void tw_mp_watchdog_stop(void);
/* Something happened (a completion, an arrival). Thread: any. */
void tw_mp_tick(void);
/* What the rank is doing, for the failure message (a string literal). */
void tw_mp_phase(const char *phase);
/* True once the watchdog asked for a report: each worker then prints its
 * own state (no other thread reads it) and goes on. Thread: any. */
bool tw_mp_watchdog_asks(void);

/* ---- the error handler's record -------------------------------------- */

typedef struct tw_mp_error {
    int peer;
    tw_status_t status;
    double t; /* twt_now() when the handler ran */
    int tid;  /* the thread it ran on */
    char what[96];
} tw_mp_error_t;

/* Forget every call (before a new context). */
void tw_mp_errors_reset(void);
/* Handler calls so far. Thread: any. */
int tw_mp_errors_count(void);
/* The @p i-th call (0 = first; the first 16 are kept). */
tw_mp_error_t tw_mp_errors_get(int i);
/* Calls so far that reported @p peer with @p status. Thread: any. */
int tw_mp_errors_for(int peer, tw_status_t status);
/* Waits up to 2 s for a first call, then a little for a second one, and
 * checks that the handler ran exactly once, for @p peer, with @p status.
 * Returns that call. */
tw_mp_error_t tw_mp_errors_expect_once(int peer, tw_status_t status);

#endif /* TW_MP_H */
