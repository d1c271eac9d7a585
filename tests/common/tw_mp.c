/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The scaffolding of the multi-process test programs (tw_mp.h). State is
 * per process and global: a test program is one job member.
 */
#define _GNU_SOURCE
#include "tw_mp.h"

#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_rank = -1;
static atomic_int g_size;
static tw_mp_opts_t g_opts = {.threads = 1, .stall_s = 60};

int tw_mp_rank(void)
{
    return atomic_load_explicit(&g_rank, memory_order_relaxed);
}

int tw_mp_size(void)
{
    return atomic_load_explicit(&g_size, memory_order_relaxed);
}

void tw_mp_set_rank(int rank, int size)
{
    atomic_store_explicit(&g_rank, rank, memory_order_relaxed);
    atomic_store_explicit(&g_size, size, memory_order_relaxed);
}

/* ---- options ------------------------------------------------------------ */

/* The common options: short letter, long name, what it takes, which bit. */
enum { OPT_MAX_SIZE = 256, OPT_SEED, OPT_STALL, OPT_STATS, OPT_EXTRA = 512 };

static int parse_u64(const char *s, int size_suffix, uint64_t *v_p)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 0);

    if (end == s || s[0] == '-') {
        return -1;
    }
    if (size_suffix && (*end == 'k' || *end == 'K')) {
        v <<= 10;
        end++;
    } else if (size_suffix && (*end == 'm' || *end == 'M')) {
        v <<= 20;
        end++;
    }
    if (*end != '\0' || (size_suffix && v > (1ull << 30))) {
        return -1;
    }
    *v_p = v;
    return 0;
}

static int parse_double(const char *s, double *v_p)
{
    char *end;
    double v = strtod(s, &end);

    if (end == s || *end != '\0' || !(v > 0)) {
        return -1;
    }
    *v_p = v;
    return 0;
}

static void usage(FILE *out, const char *prog, unsigned common, const tw_mp_opt_t *extra,
                  size_t nextra, const tw_mp_opts_t *o)
{
    fprintf(out, "usage: %s [options]\n", prog);
    if (common & TW_MP_THREADS) {
        fprintf(out, "  -t, --threads N     workers per rank (%u; 1..%u)\n", o->threads,
                o->max_threads);
    }
    if (common & TW_MP_MESSAGES) {
        fprintf(out, "  -m, --messages N    messages per worker and peer (%llu, / TWTEST_SCALE)\n",
                (unsigned long long)o->messages);
    }
    if (common & TW_MP_MAX_SIZE) {
        fprintf(out, "  --max-size B[k|m]   largest message (%llu)\n",
                (unsigned long long)o->max_size);
    }
    if (common & TW_MP_SEED) {
        fprintf(out, "  --seed S            sizes and payloads (%llu)\n",
                (unsigned long long)o->seed);
    }
    if (common & TW_MP_STALL) {
        fprintf(out,
                "  --max-stall S       fail after S seconds without progress (%.0f; "
                "also --stall)\n",
                o->stall_s);
    }
    if (common & TW_MP_STATS) {
        fprintf(out, "  --stats[=json]      the library's counters before tw_finalize: "
                     "tw_stats_print, or tw_stats_json (one line per rank)\n");
    }
    for (size_t i = 0; i < nextra; i++) {
        char lhs[40];
        snprintf(lhs, sizeof(lhs), "%c%c%s--%s%s", extra[i].short_name ? '-' : ' ',
                 extra[i].short_name ? extra[i].short_name : ' ', extra[i].short_name ? ", " : "  ",
                 extra[i].name, extra[i].kind == TW_MP_ARG_FLAG ? "" : " V");
        fprintf(out, "  %-18s  %s\n", lhs, extra[i].help);
    }
}

static int set_extra(const tw_mp_opt_t *x, const char *arg)
{
    switch (x->kind) {
    case TW_MP_ARG_FLAG:
        *(bool *)x->value = true;
        return 0;
    case TW_MP_ARG_U64:
        return parse_u64(arg, 0, x->value);
    case TW_MP_ARG_SIZE:
        return parse_u64(arg, 1, x->value);
    case TW_MP_ARG_STR:
        *(const char **)x->value = arg;
        return 0;
    default:
        return parse_double(arg, x->value);
    }
}

static int set_common(int opt, const char *arg, tw_mp_opts_t *o)
{
    uint64_t v;

    switch (opt) {
    case 't':
        if (parse_u64(arg, 0, &v) != 0 || v < 1 || v > o->max_threads) {
            return -1;
        }
        o->threads = (unsigned)v;
        return 0;
    case 'm':
        return parse_u64(arg, 0, &o->messages) != 0 || o->messages < 1 ? -1 : 0;
    case OPT_MAX_SIZE:
        return parse_u64(arg, 1, &o->max_size) != 0 || o->max_size < 1 ? -1 : 0;
    case OPT_SEED:
        return parse_u64(arg, 0, &o->seed);
    case OPT_STALL:
        return parse_double(arg, &o->stall_s);
    case OPT_STATS:
        if (arg == NULL || strcmp(arg, "text") == 0) {
            o->stats = TW_MP_STATS_TEXT;
        } else if (strcmp(arg, "json") == 0) {
            o->stats = TW_MP_STATS_JSON;
        } else {
            return -1;
        }
        return 0;
    default:
        return -1;
    }
}

void tw_mp_parse(int argc, char **argv, const char *prog, unsigned common, const tw_mp_opt_t *extra,
                 size_t nextra, tw_mp_opts_t *o)
{
    static const struct {
        unsigned bit;
        struct option opt;
    } all[] = {
        {TW_MP_THREADS, {"threads", required_argument, NULL, 't'}},
        {TW_MP_MESSAGES, {"messages", required_argument, NULL, 'm'}},
        {TW_MP_MAX_SIZE, {"max-size", required_argument, NULL, OPT_MAX_SIZE}},
        {TW_MP_SEED, {"seed", required_argument, NULL, OPT_SEED}},
        {TW_MP_STALL, {"max-stall", required_argument, NULL, OPT_STALL}},
        {TW_MP_STALL, {"stall", required_argument, NULL, OPT_STALL}},
        {TW_MP_STATS, {"stats", optional_argument, NULL, OPT_STATS}},
    };
    struct option opts[TWT_ARRAY_SIZE(all) + 32];
    char shorts[80] = "h";
    size_t n = 0;
    int opt;

    TWT_CHECKF(nextra < 30, "%s: too many options", prog);
    if (o->max_threads == 0) {
        o->max_threads = 64;
    }
    for (size_t i = 0; i < TWT_ARRAY_SIZE(all); i++) {
        if (common & all[i].bit) {
            opts[n++] = all[i].opt;
        }
    }
    strcat(shorts, common & TW_MP_THREADS ? "t:" : "");
    strcat(shorts, common & TW_MP_MESSAGES ? "m:" : "");
    for (size_t i = 0; i < nextra; i++) {
        int has = extra[i].kind == TW_MP_ARG_FLAG ? no_argument : required_argument;
        opts[n++] = (struct option){extra[i].name, has, NULL, OPT_EXTRA + (int)i};
        if (extra[i].short_name != 0) {
            size_t len = strlen(shorts);
            shorts[len++] = (char)extra[i].short_name;
            shorts[len] = '\0';
            strcat(shorts, has == required_argument ? ":" : "");
        }
    }
    opts[n++] = (struct option){"help", no_argument, NULL, 'h'};
    opts[n] = (struct option){NULL, 0, NULL, 0};
    while ((opt = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        int rc = -1;
        if (opt == 'h') {
            usage(stdout, prog, common, extra, nextra, o);
            exit(0);
        }
        for (size_t i = 0; i < nextra && opt < OPT_EXTRA; i++) {
            if (opt == extra[i].short_name) {
                opt = OPT_EXTRA + (int)i;
            }
        }
        if (opt >= OPT_EXTRA && opt < OPT_EXTRA + (int)nextra) {
            rc = set_extra(&extra[opt - OPT_EXTRA], optarg);
        } else if (opt != '?') {
            rc = set_common(opt, optarg, o);
        }
        if (rc != 0) {
            if (opt != '?') {
                fprintf(stderr, "%s: bad value '%s'\n", prog, optarg != NULL ? optarg : "");
            }
            usage(stderr, prog, common, extra, nextra, o);
            exit(2);
        }
    }
    g_opts = *o;
}

const tw_mp_opts_t *tw_mp_opts(void)
{
    return &g_opts;
}

/* ---- the job --------------------------------------------------------------- */

static void tw_mp_on_error(tw_context_t *ctx, int peer, tw_status_t err, const char *what,
                           void *arg);

void tw_mp_attach(tw_context_t *ctx)
{
    int rank = tw_rank(ctx), size = tw_size(ctx);

    TWT_RANK_CHECK(rank, size >= 1 && rank >= 0 && rank < size, "rank %d of %d", rank, size);
    tw_mp_set_rank(rank, size);
    tw_mp_errors_reset();
    tw_status_t st = tw_set_error_handler(ctx, tw_mp_on_error, NULL);
    TW_MP_CHECK(st == TW_OK, "tw_set_error_handler: %s", tw_strerror(st));
}

tw_context_t *tw_mp_init(void)
{
    tw_context_t *ctx;
    tw_config_t cfg;

    tw_config_init(&cfg);
    tw_status_t st = tw_init(&cfg, &ctx);
    TW_MP_CHECK(st == TW_OK, "tw_init: %s", tw_strerror(st));
    tw_mp_attach(ctx);
    return ctx;
}

void tw_mp_post_again(tw_context_t *ctx, double since, const char *what)
{
    TW_MP_CHECK(twt_now() - since < g_opts.stall_s, "%s: TW_ERR_AGAIN for %.0f s", what,
                g_opts.stall_s);
    tw_progress(ctx);
    sched_yield();
}

/* The completions' user pointers say which rank and which direction. */
#define BARRIER_SEND ((uintptr_t)1 << 30)

void tw_mp_barrier(tw_context_t *ctx, uint64_t tag)
{
    int size = tw_mp_size(), want = 2 * size, got = 0;
    unsigned char *seen = calloc((size_t)want, 1);
    tw_completion_t c[16];
    double last = twt_now();
    tw_cq_t *cq;
    char dummy[1];

    TW_MP_CHECK(seen != NULL && size > 0, "barrier of %d ranks", size);
    TW_MP_CHECK(tw_cq_create(ctx, (unsigned)want, &cq) == TW_OK, "barrier CQ");
    for (int r = 0; r < size; r++) {
        tw_status_t st = tw_recv(ctx, r, tag, 0, dummy, 0, cq, (void *)(uintptr_t)r);
        TW_MP_CHECK(st == TW_OK, "barrier %#llx: recv from %d: %s", (unsigned long long)tag, r,
                    tw_strerror(st));
    }
    for (int r = 0; r < size; r++) {
        tw_status_t st = TW_MP_POST(
            ctx, tw_send(ctx, r, tag, dummy, 0, cq, (void *)(BARRIER_SEND | (uintptr_t)r)));
        TW_MP_CHECK(st == TW_OK, "barrier %#llx: send to %d: %s", (unsigned long long)tag, r,
                    tw_strerror(st));
    }
    while (got < want) {
        tw_progress(ctx);
        int n = tw_cq_wait(cq, c, 16, 100);
        TW_MP_CHECK(n >= 0, "barrier: tw_cq_wait returned %d", n);
        for (int i = 0; i < n; i++) {
            uintptr_t u = (uintptr_t)c[i].user;
            int r = (int)(u & ~BARRIER_SEND), k = r + ((u & BARRIER_SEND) ? size : 0);
            TW_MP_CHECK(c[i].status == TW_OK && c[i].length == 0 && r < size && !seen[k],
                        "barrier %#llx: %s with rank %d: %s, %zu bytes%s", (unsigned long long)tag,
                        u & BARRIER_SEND ? "send" : "recv", r, tw_strerror(c[i].status),
                        c[i].length, seen[k] ? ", twice" : "");
            seen[k] = 1;
        }
        got += n;
        if (n > 0) {
            last = twt_now();
            tw_mp_tick();
        } else if (twt_now() - last > g_opts.stall_s) {
            char missing[256] = "";
            for (int k = 0; k < want && strlen(missing) < sizeof(missing) - 24; k++) {
                if (!seen[k]) {
                    snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %s %d",
                             k < size ? "from" : "to", k % size);
                }
            }
            TW_MP_FAIL("barrier %#llx: %d of %d completions after %.0f s; waiting for:%s",
                       (unsigned long long)tag, got, want, g_opts.stall_s, missing);
        }
    }
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "barrier CQ destroy");
    free(seen);
}

void tw_mp_stats(tw_context_t *ctx)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    if (g_opts.stats == TW_MP_STATS_NONE) {
        return;
    }
    /* Built in memory, written at once: the ranks share the job's stdout. */
    f = open_memstream(&text, &len);
    TW_MP_CHECK(f != NULL, "open_memstream");
    tw_status_t st =
        g_opts.stats == TW_MP_STATS_JSON ? tw_stats_json(ctx, f) : tw_stats_print(ctx, f);
    TW_MP_CHECK(fclose(f) == 0 && st == TW_OK, "tw_stats_%s: %s",
                g_opts.stats == TW_MP_STATS_JSON ? "json" : "print", tw_strerror(st));
    fflush(stdout);
    for (size_t off = 0; off < len;) {
        ssize_t n = write(STDOUT_FILENO, text + off, len - off);
        TW_MP_CHECK(n > 0, "writing the statistics");
        off += (size_t)n;
    }
    free(text);
}

/* ---- stall watchdog ----------------------------------------------------- */

static atomic_uint_fast64_t g_ticks;
static _Atomic(const char *) g_phase = "start";
static atomic_int g_asks;
static atomic_int g_stop;
static pthread_t g_watchdog;
static double g_stall_s;
static void (*g_dump)(void);

void tw_mp_tick(void)
{
    atomic_fetch_add_explicit(&g_ticks, 1, memory_order_relaxed);
}

void tw_mp_phase(const char *phase)
{
    atomic_store_explicit(&g_phase, phase, memory_order_relaxed);
    tw_mp_tick();
}

bool tw_mp_watchdog_asks(void)
{
    return atomic_load_explicit(&g_asks, memory_order_relaxed) != 0;
}

/* Every thread's stack, on stderr, where gdb is installed (tools/
 * install-deps.sh installs it): what a stall that happens once in a
 * hundred runs was doing. Bounded: gdb gets 20 s. */
static void dump_stacks(void)
{
    char pid[24];
    pid_t child;

    if (access("/usr/bin/gdb", X_OK) != 0) {
        return;
    }
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    child = fork();
    if (child == 0) {
        (void)dup2(STDERR_FILENO, STDOUT_FILENO);
        execl("/usr/bin/timeout", "timeout", "20", "/usr/bin/gdb", "-nx", "-batch", "-p", pid,
              "-ex", "thread apply all bt 30", (char *)NULL);
        _exit(127);
    }
    if (child > 0) {
        (void)waitpid(child, NULL, 0);
    }
}

static void *watchdog_main(void *arg)
{
    uint64_t seen = atomic_load(&g_ticks);
    double last = twt_now();

    (void)arg;
    while (!atomic_load(&g_stop)) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        uint64_t now = atomic_load_explicit(&g_ticks, memory_order_relaxed);
        if (now != seen) {
            seen = now;
            last = twt_now();
        } else if (twt_now() - last > g_stall_s) {
            fprintf(stderr, "rank %d: nothing happened for %.1f s in phase '%s'\n", tw_mp_rank(),
                    g_stall_s, atomic_load(&g_phase));
            atomic_store(&g_asks, 1);
            if (g_dump != NULL) {
                g_dump();
            }
            sleep(1); /* the workers' own reports */
            fprintf(stderr, "rank %d: the stacks of its threads:\n", tw_mp_rank());
            dump_stacks();
            TW_MP_FAIL("stalled for %.1f s in phase '%s' (see above)", g_stall_s,
                       atomic_load(&g_phase));
        }
    }
    return NULL;
}

void tw_mp_watchdog_start(double stall_s, void (*dump)(void))
{
    g_stall_s = stall_s;
    g_dump = dump;
    atomic_store(&g_stop, 0);
    TW_MP_CHECK(pthread_create(&g_watchdog, NULL, watchdog_main, NULL) == 0, "pthread_create");
}

void tw_mp_watchdog_stop(void)
{
    atomic_store(&g_stop, 1);
    TW_MP_CHECK(pthread_join(g_watchdog, NULL) == 0, "pthread_join");
}

/* ---- the error handler's record ---------------------------------------- */

#define NKEPT 16

/* A slot is written by the handler call that took its index, then
 * published by `ready` (release); readers look only at ready slots. */
static struct {
    tw_mp_error_t e;
    atomic_int ready;
} g_errs[NKEPT];
static atomic_int g_nerr;

static void tw_mp_on_error(tw_context_t *ctx, int peer, tw_status_t err, const char *what,
                           void *arg)
{
    int i = atomic_fetch_add(&g_nerr, 1);

    (void)ctx, (void)arg;
    if (i < NKEPT) {
        tw_mp_error_t *e = &g_errs[i].e;
        *e = (tw_mp_error_t){.peer = peer, .status = err, .t = twt_now(), .tid = gettid()};
        snprintf(e->what, sizeof(e->what), "%s", what != NULL ? what : "");
        atomic_store_explicit(&g_errs[i].ready, 1, memory_order_release);
    }
    fprintf(stderr, "rank %d: error handler: rank %d, %s (%s)\n", tw_mp_rank(), peer,
            tw_strerror(err), what != NULL ? what : "");
    tw_mp_tick();
}

void tw_mp_errors_reset(void)
{
    for (int i = 0; i < NKEPT; i++) {
        atomic_store(&g_errs[i].ready, 0);
    }
    atomic_store(&g_nerr, 0);
}

int tw_mp_errors_count(void)
{
    return atomic_load(&g_nerr);
}

tw_mp_error_t tw_mp_errors_get(int i)
{
    TW_MP_CHECK(i >= 0 && i < NKEPT && i < tw_mp_errors_count(), "error record %d of %d", i,
                tw_mp_errors_count());
    /* The index is taken before the slot is filled: wait for it. */
    for (int k = 0; !atomic_load_explicit(&g_errs[i].ready, memory_order_acquire); k++) {
        TW_MP_CHECK(k < 1000, "error record %d never filled", i);
        usleep(1000);
    }
    return g_errs[i].e;
}

int tw_mp_errors_for(int peer, tw_status_t status)
{
    int n = tw_mp_errors_count(), found = 0;

    for (int i = 0; i < n && i < NKEPT; i++) {
        tw_mp_error_t e = tw_mp_errors_get(i);
        found += e.peer == peer && e.status == status;
    }
    return found;
}

tw_mp_error_t tw_mp_errors_expect_once(int peer, tw_status_t status)
{
    for (int i = 0; i < 200 && tw_mp_errors_count() == 0; i++) {
        usleep(10000);
    }
    usleep(50000); /* a second call would come about now */
    int n = tw_mp_errors_count();
    TW_MP_CHECK(n == 1, "the error handler ran %d times, want once (for rank %d)", n, peer);
    tw_mp_error_t e = tw_mp_errors_get(0);
    TW_MP_CHECK(e.peer == peer && e.status == status,
                "the error handler reported rank %d with %s (%s); want rank %d with %s", e.peer,
                tw_strerror(e.status), e.what, peer, tw_strerror(status));
    return e;
}
