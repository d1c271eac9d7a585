/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Progress engines. One ctest entry per case (unit/progress.cmake):
 *   threads   start/stop/join: thread count, tid, thread name, idempotent stop
 *   modes     spin, block, adaptive: 10^5 commands from 4 submitters run
 *             exactly once, on the owner
 *   manual    no thread: several threads call tw_pe_progress at once; the
 *             try-lock keeps commands and progress functions serial
 *   doorbell  a command (or tw_pe_wake, or a registered fd) wakes a
 *             sleeping thread well before the epoll safety net
 *   fds       every fd the pe made is closed by destroy
 *   pinned    the whole process on CPU 0: 10 submitters into a pe and 10
 *             producers into a CQ finish (no livelock on commit waits)
 *   bind      binding to hwloc package 0; a missing package warns and
 *             runs unbound
 *   handover  tw_pe_hand_over, with a thread and without: a command goes
 *             through the lane, or runs in the caller (once, as the owner)
 *             when the lane cannot be had
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/tw_log.h"
#include "core/tw_stats.h"
#include "progress/tw_cq.h"
#include "progress/tw_pe.h"
#include "tw_test.h"

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static tw_pe_t *make_pe(const char *name, bool thread, tw_wait_mode_t mode, unsigned ring_depth,
                        int bind)
{
    tw_pe_params_t p = {.name = name,
                        .thread = thread,
                        .wait_mode = mode,
                        .spin_ns = 0,
                        .bind_package = bind,
                        .ring_depth = ring_depth};
    tw_pe_t *pe;

    TWT_EQ(tw_pe_create(&p, &pe), TW_OK);
    return pe;
}

/* Submit, retrying with progress/yield while the ring is full. */
static void submit(tw_pe_t *pe, const tw_pe_cmd_t *cmd, bool drive)
{
    unsigned tries = 0;

    while (tw_pe_submit(pe, cmd) == TW_ERR_AGAIN) {
        if (drive) {
            tw_pe_progress(pe);
        }
        /* Yield a little, then sleep: long yield phases starve the owner. */
        if (++tries > 32) {
            usleep(20);
        } else if (tries > 4) {
            sched_yield();
        }
    }
}

/* ---- threads ------------------------------------------------------------ */

static void read_comm(int tid, char *buf, size_t len)
{
    char path[64];
    FILE *f;

    snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
    f = fopen(path, "r");
    TWT_CHECK(f != NULL);
    TWT_CHECK(fgets(buf, (int)len, f) != NULL);
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

static void *nothing(void *arg)
{
    return arg;
}

static void case_threads(void)
{
    pthread_t warm;
    int t0;
    tw_pe_t *pe;
    char comm[32];

    /* Sanitizers start a helper thread with the first pthread_create:
     * let that happen before counting. */
    TWT_EQ(pthread_create(&warm, NULL, nothing, NULL), 0);
    pthread_join(warm, NULL);
    t0 = twt_thread_count();
    pe = make_pe("socket0.verylongname", true, TW_WAIT_ADAPTIVE, 0, -1);

    TWT_EQ(twt_thread_count(), t0); /* create starts nothing */
    TWT_EQ(tw_pe_tid(pe), 0);
    TWT_CHECK(strcmp(tw_pe_name(pe), "socket0.verylongname") == 0);
    TWT_EQ(tw_pe_start(pe), TW_OK);
    TWT_EQ(twt_thread_count(), t0 + 1);
    TWT_CHECK(tw_pe_tid(pe) > 0);
    read_comm(tw_pe_tid(pe), comm, sizeof(comm));
    TWT_CHECKF(strcmp(comm, "tw-socket0.very") == 0, "comm '%s'", comm);
    TWT_CHECK(strcmp(tw_pe_binding(pe), "unbound") == 0);
    TWT_EQ(tw_pe_start(pe), TW_ERR_INVALID); /* once */
    TWT_CHECK(!tw_pe_is_owner(pe));
    tw_pe_stop(pe);
    TWT_EQ(twt_thread_count_settled(t0), t0);
    TWT_EQ(tw_pe_tid(pe), 0);
    tw_pe_stop(pe); /* idempotent */
    TWT_EQ(twt_thread_count_settled(t0), t0);
    tw_pe_destroy(pe);

    /* A manual pe never has a thread; destroy without stop is fine. */
    pe = make_pe("manual", false, TW_WAIT_BLOCK, 0, -1);
    TWT_EQ(tw_pe_start(pe), TW_OK);
    TWT_EQ(twt_thread_count_settled(t0), t0);
    TWT_EQ(tw_pe_tid(pe), 0);
    tw_pe_destroy(pe);

    /* Several start/stop cycles on fresh engines. */
    for (int i = 0; i < 10; i++) {
        pe = make_pe("cycle", true, (tw_wait_mode_t)(i % 3), 0, -1);
        TWT_EQ(tw_pe_start(pe), TW_OK);
        TWT_EQ(twt_thread_count(), t0 + 1);
        tw_pe_destroy(pe); /* stops it */
        TWT_EQ(twt_thread_count_settled(t0), t0);
    }
}

/* ---- commands run exactly once ----------------------------------------- */

#define SUBMITTERS 4

typedef struct {
    tw_pe_t *pe;
    unsigned char *counts; /* written by the owner only */
    atomic_uint inside;    /* serial execution check */
    atomic_uint violations;
    atomic_uint not_owner;
    atomic_ullong done;
    atomic_int go;
} cmd_ctx_t;

static void count_cmd(void *arg, void *data, uint64_t id)
{
    cmd_ctx_t *cx = arg;

    (void)data;
    if (atomic_exchange_explicit(&cx->inside, 1, memory_order_acquire) != 0) {
        atomic_fetch_add_explicit(&cx->violations, 1, memory_order_relaxed);
    }
    if (!tw_pe_is_owner(cx->pe)) {
        atomic_fetch_add_explicit(&cx->not_owner, 1, memory_order_relaxed);
    }
    cx->counts[id]++;
    atomic_store_explicit(&cx->inside, 0, memory_order_release);
    atomic_fetch_add_explicit(&cx->done, 1, memory_order_relaxed);
}

typedef struct {
    cmd_ctx_t *cx;
    uint64_t first, count;
    bool drive; /* manual mode: also call tw_pe_progress */
} sub_arg_t;

static void *submitter(void *p)
{
    sub_arg_t *a = p;
    tw_pe_cmd_t cmd = {.fn = count_cmd, .arg = a->cx};

    while (atomic_load_explicit(&a->cx->go, memory_order_acquire) == 0) {
        sched_yield();
    }
    for (uint64_t i = 0; i < a->count; i++) {
        cmd.u64 = a->first + i;
        submit(a->cx->pe, &cmd, a->drive);
        if (a->drive && i % 4 == 0) {
            tw_pe_progress(a->cx->pe);
        }
    }
    return NULL;
}

static void cmd_ctx_init(cmd_ctx_t *cx, tw_pe_t *pe, uint64_t total)
{
    cx->pe = pe;
    cx->counts = calloc(total, 1);
    TWT_CHECK(cx->counts != NULL);
    atomic_init(&cx->inside, 0);
    atomic_init(&cx->violations, 0);
    atomic_init(&cx->not_owner, 0);
    atomic_init(&cx->done, 0);
    atomic_init(&cx->go, 0);
}

static void run_submitters(cmd_ctx_t *cx, uint64_t per, bool drive, unsigned n)
{
    pthread_t th[16];
    sub_arg_t a[16];

    for (unsigned i = 0; i < n; i++) {
        a[i] = (sub_arg_t){.cx = cx, .first = i * per, .count = per, .drive = drive};
        TWT_EQ(pthread_create(&th[i], NULL, submitter, &a[i]), 0);
    }
    atomic_store_explicit(&cx->go, 1, memory_order_release);
    for (unsigned i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
    }
}

static void check_once(cmd_ctx_t *cx, uint64_t total)
{
    for (uint64_t i = 0; i < total; i++) {
        TWT_CHECKF(cx->counts[i] == 1, "command %llu ran %u times", (unsigned long long)i,
                   cx->counts[i]);
    }
    TWT_EQ(atomic_load(&cx->violations), 0);
    TWT_EQ(atomic_load(&cx->not_owner), 0);
    free(cx->counts);
}

static void case_modes(void)
{
    static const tw_wait_mode_t modes[] = {TW_WAIT_SPIN, TW_WAIT_BLOCK, TW_WAIT_ADAPTIVE};
    uint64_t per = twt_scaled(100000, 20000) / SUBMITTERS;
    uint64_t total = per * SUBMITTERS;

    for (unsigned m = 0; m < 3; m++) {
        tw_pe_t *pe = make_pe("modes", true, modes[m], 64 /* AGAIN paths too */, -1);
        cmd_ctx_t cx;
        double t0 = twt_now();

        cmd_ctx_init(&cx, pe, total);
        TWT_EQ(tw_pe_start(pe), TW_OK);
        run_submitters(&cx, per, false, SUBMITTERS);
        /* The thread runs them all without help. */
        while (atomic_load_explicit(&cx.done, memory_order_relaxed) < total) {
            TWT_CHECKF(twt_now() - t0 < 60.0, "mode %u: %llu of %llu ran", m,
                       (unsigned long long)atomic_load(&cx.done), (unsigned long long)total);
            sleep_ms(1);
        }
        tw_pe_stop(pe);
        TWT_EQ(tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_CMDS), total);
        if (modes[m] == TW_WAIT_SPIN) {
            TWT_EQ(tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_SLEEPS), 0);
        }
        tw_pe_destroy(pe);
        check_once(&cx, total);
    }

    /* Commands still queued at destroy run there, once. */
    {
        tw_pe_t *pe = make_pe("drain", false, TW_WAIT_BLOCK, 0, -1);
        cmd_ctx_t cx;
        tw_pe_cmd_t cmd = {.fn = count_cmd, .arg = &cx};

        cmd_ctx_init(&cx, pe, 100);
        for (uint64_t i = 0; i < 100; i++) {
            cmd.u64 = i;
            TWT_EQ(tw_pe_submit(pe, &cmd), TW_OK);
        }
        tw_pe_destroy(pe);
        TWT_EQ(atomic_load(&cx.done), 100);
        check_once(&cx, 100);
    }
}

/* ---- manual mode -------------------------------------------------------- */

static void flag_cmd(void *arg, void *data, uint64_t u64);

static int serial_fn(void *arg)
{
    cmd_ctx_t *cx = arg;

    if (atomic_exchange_explicit(&cx->inside, 1, memory_order_acquire) != 0) {
        atomic_fetch_add_explicit(&cx->violations, 1, memory_order_relaxed);
    }
    if (!tw_pe_is_owner(cx->pe)) {
        atomic_fetch_add_explicit(&cx->not_owner, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&cx->inside, 0, memory_order_release);
    return 0;
}

static atomic_int slow_entered;
static atomic_int slow_release;

static void slow_cmd(void *arg, void *data, uint64_t u64)
{
    (void)arg;
    (void)data;
    (void)u64;
    atomic_store_explicit(&slow_entered, 1, memory_order_release);
    while (atomic_load_explicit(&slow_release, memory_order_acquire) == 0) {
        sched_yield();
    }
}

static void *progress_once(void *p)
{
    tw_pe_progress(p);
    return NULL;
}

static void case_manual(void)
{
    uint64_t per = twt_scaled(50000, 5000);
    uint64_t total = per * SUBMITTERS;
    tw_pe_t *pe = make_pe("manual", false, TW_WAIT_ADAPTIVE, 32, -1);
    cmd_ctx_t cx;

    cmd_ctx_init(&cx, pe, total);
    TWT_EQ(tw_pe_add(pe, serial_fn, &cx, -1), TW_OK);
    TWT_EQ(tw_pe_start(pe), TW_OK);
    run_submitters(&cx, per, true, SUBMITTERS);
    while (tw_pe_progress(pe) > 0) {
    }
    TWT_EQ(atomic_load(&cx.done), total);
    TWT_CHECK(!tw_pe_is_owner(pe));
    check_once(&cx, total);

    /* Nobody progressing: the ring fills (at least ring_depth), then
     * refuses with TW_ERR_AGAIN, counted; progress makes room again. */
    {
        tw_pe_cmd_t cmd = {.fn = flag_cmd};
        unsigned n = 0;
        uint64_t again = tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_AGAIN);

        while (tw_pe_submit(pe, &cmd) == TW_OK) {
            TWT_CHECK(++n < 100000);
        }
        TWT_CHECK(n >= 32);
        TWT_EQ(tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_AGAIN), again + 1);
        TWT_CHECK(tw_pe_progress(pe) > 0);
        TWT_EQ(tw_pe_submit(pe, &cmd), TW_OK);
        while (tw_pe_progress(pe) > 0) {
        }
    }

    /* A busy pe is skipped at once, never waited for. */
    {
        tw_pe_cmd_t cmd = {.fn = slow_cmd};
        pthread_t th;
        double t0;

        TWT_EQ(tw_pe_submit(pe, &cmd), TW_OK);
        TWT_EQ(pthread_create(&th, NULL, progress_once, pe), 0);
        while (atomic_load_explicit(&slow_entered, memory_order_acquire) == 0) {
            sched_yield();
        }
        t0 = twt_now();
        TWT_EQ(tw_pe_progress(pe), 0);
        TWT_CHECK(twt_now() - t0 < 0.5);
        atomic_store_explicit(&slow_release, 1, memory_order_release);
        pthread_join(th, NULL);
    }
    tw_pe_destroy(pe);
}

/* ---- doorbell ------------------------------------------------------------ */

static atomic_int flag;
static atomic_int fn_work;
static atomic_int fn_seen;
static int test_efd = -1;

static void flag_cmd(void *arg, void *data, uint64_t u64)
{
    (void)arg;
    (void)data;
    (void)u64;
    atomic_store_explicit(&flag, 1, memory_order_release);
}

/* Registered function: consumes the test eventfd and the fn_work flag. */
static int watch_fn(void *arg)
{
    uint64_t v;
    int n = 0;

    (void)arg;
    if (read(test_efd, &v, sizeof(v)) == (ssize_t)sizeof(v)) {
        n++;
    }
    if (atomic_exchange_explicit(&fn_work, 0, memory_order_acq_rel) != 0) {
        n++;
    }
    if (n > 0) {
        atomic_fetch_add_explicit(&fn_seen, 1, memory_order_release);
    }
    return n;
}

static void wait_asleep(tw_pe_t *pe, uint64_t sleeps_before)
{
    double t0 = twt_now();

    while (tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_SLEEPS) <= sleeps_before) {
        TWT_CHECK(twt_now() - t0 < 10.0);
        sleep_ms(1);
    }
    sleep_ms(50); /* well inside epoll_wait now */
}

static double wait_flag(atomic_int *f, int want)
{
    double t0 = twt_now();

    while (atomic_load_explicit(f, memory_order_acquire) < want) {
        TWT_CHECK(twt_now() - t0 < 5.0);
        usleep(100);
    }
    return twt_now() - t0;
}

static void case_doorbell(void)
{
    static const tw_wait_mode_t modes[] = {TW_WAIT_BLOCK, TW_WAIT_ADAPTIVE};

    test_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    TWT_CHECK(test_efd >= 0);
    for (unsigned m = 0; m < 2; m++) {
        tw_pe_t *pe = make_pe("bell", true, modes[m], 0, -1);
        tw_pe_cmd_t cmd = {.fn = flag_cmd};
        uint64_t one = 1, sleeps;
        double dt;

        TWT_EQ(tw_pe_add(pe, watch_fn, NULL, test_efd), TW_OK);
        TWT_EQ(tw_pe_start(pe), TW_OK);
        TWT_EQ(tw_pe_add(pe, watch_fn, NULL, -1), TW_ERR_INVALID); /* after start */

        /* 1: a submitted command rings the doorbell. SLEEPS is read
         * before each trigger: the sleep after it is the next one. */
        atomic_store(&flag, 0);
        wait_asleep(pe, 0);
        sleeps = tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_SLEEPS);
        TWT_EQ(tw_pe_submit(pe, &cmd), TW_OK);
        dt = wait_flag(&flag, 1);
        TWT_CHECKF(dt < 0.5, "mode %u: command ran %.3f s after submit", m, dt);
        TWT_CHECK(tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_DOORBELL) >= 1);

        /* 2: tw_pe_wake after publishing work elsewhere. */
        wait_asleep(pe, sleeps);
        sleeps = tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_SLEEPS);
        atomic_store(&fn_seen, 0);
        atomic_store_explicit(&fn_work, 1, memory_order_release);
        tw_pe_wake(pe);
        dt = wait_flag(&fn_seen, 1);
        TWT_CHECKF(dt < 0.5, "mode %u: woke %.3f s after tw_pe_wake", m, dt);

        /* 3: a registered fd becoming readable. */
        wait_asleep(pe, sleeps);
        atomic_store(&fn_seen, 0);
        TWT_EQ(write(test_efd, &one, sizeof(one)), (ssize_t)sizeof(one));
        dt = wait_flag(&fn_seen, 1);
        TWT_CHECKF(dt < 0.5, "mode %u: woke %.3f s after the fd", m, dt);

        tw_pe_destroy(pe);
    }
    close(test_efd);
}

/* ---- fds ----------------------------------------------------------------- */

static void case_fds(void)
{
    int fd0 = twt_fd_count();

    for (int i = 0; i < 3; i++) {
        tw_pe_t *pe = make_pe("fds", i != 2, (tw_wait_mode_t)i, 0, -1);
        TWT_CHECK(twt_fd_count() > fd0);
        TWT_EQ(tw_pe_start(pe), TW_OK);
        sleep_ms(20);
        tw_pe_stop(pe);
        tw_pe_destroy(pe);
        TWT_EQ(twt_fd_count(), fd0);
    }
    /* Create then destroy without ever starting. */
    tw_pe_destroy(make_pe("fds", true, TW_WAIT_BLOCK, 0, -1));
    TWT_EQ(twt_fd_count(), fd0);
}

/* ---- everything on one CPU ---------------------------------------------- */

#define PINNED_THREADS 10

typedef struct {
    tw_cq_t *cq;
    uint64_t count;
    atomic_int *go;
} cq_prod_arg_t;

static void *cq_producer(void *p)
{
    cq_prod_arg_t *a = p;

    while (atomic_load_explicit(a->go, memory_order_acquire) == 0) {
        sched_yield();
    }
    for (uint64_t i = 0; i < a->count; i++) {
        tw_completion_t c = {.tag = i};
        unsigned tries = 0;
        while (tw_cq_reserve(a->cq) != TW_OK) {
            if (++tries > 32) {
                usleep(20);
            } else {
                sched_yield();
            }
        }
        tw_cq_push(a->cq, &c);
    }
    return NULL;
}

static void case_pinned(void)
{
    cpu_set_t set;
    double t0 = twt_now();

    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        printf("skip: cannot pin to CPU 0\n");
        exit(TWT_SKIP);
    }

    /* 10 submitters into a pe's ring of 16 (its thread shares the CPU). */
    {
        uint64_t per = twt_scaled(20000, 2000);
        uint64_t total = per * PINNED_THREADS;
        tw_pe_t *pe = make_pe("pinned", true, TW_WAIT_ADAPTIVE, 16, -1);
        cmd_ctx_t cx;

        cmd_ctx_init(&cx, pe, total);
        TWT_EQ(tw_pe_start(pe), TW_OK);
        run_submitters(&cx, per, false, PINNED_THREADS);
        while (atomic_load_explicit(&cx.done, memory_order_relaxed) < total) {
            TWT_CHECK(twt_now() - t0 < 60.0);
            sleep_ms(1);
        }
        tw_pe_destroy(pe);
        check_once(&cx, total);
    }

    /* 10 producers into a CQ of depth 16, one consumer (this thread). */
    {
        tw_cq_params_t p = {.depth = 16, .wait_mode = TW_WAIT_ADAPTIVE};
        uint64_t per = twt_scaled(20000, 2000), got = 0;
        uint64_t next[PINNED_THREADS] = {0};
        cq_prod_arg_t a[PINNED_THREADS];
        pthread_t th[PINNED_THREADS];
        tw_completion_t out[16];
        atomic_int go = 0;
        tw_cq_t *cq;

        TWT_EQ(tw_cq_open(&p, &cq), TW_OK);
        for (int i = 0; i < PINNED_THREADS; i++) {
            a[i] = (cq_prod_arg_t){.cq = cq, .count = per, .go = &go};
            TWT_EQ(pthread_create(&th[i], NULL, cq_producer, &a[i]), 0);
        }
        atomic_store_explicit(&go, 1, memory_order_release);
        while (got < per * PINNED_THREADS) {
            int n = tw_cq_wait(cq, out, 16, 10000);
            TWT_CHECK(n > 0);
            got += (uint64_t)n;
            TWT_CHECK(twt_now() - t0 < 60.0);
        }
        for (int i = 0; i < PINNED_THREADS; i++) {
            pthread_join(th[i], NULL);
        }
        (void)next;
        TWT_EQ(tw_cq_destroy(cq), TW_OK);
    }
    printf("pinned: %.2f s\n", twt_now() - t0);
}

/* ---- binding -------------------------------------------------------------- */

static void read_allowed(int tid, char *buf, size_t len)
{
    char path[64], line[256];
    FILE *f;

    snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
    f = fopen(path, "r");
    TWT_CHECK(f != NULL);
    buf[0] = '\0';
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
            const char *v = line + 18;
            v += strspn(v, " \t");
            snprintf(buf, len, "%s", v);
            buf[strcspn(buf, "\n")] = '\0';
        }
    }
    fclose(f);
}

static void case_bind(void)
{
    int npkg = tw_topo_num_packages();
    char allowed[128];
    uint64_t warns;
    tw_pe_t *pe;

    TWT_CHECK(npkg >= 1);
    TWT_EQ(tw_topo_num_packages(), npkg);

    pe = make_pe("bound", true, TW_WAIT_BLOCK, 0, 0);
    TWT_EQ(tw_pe_start(pe), TW_OK);
    TWT_CHECK(strcmp(tw_pe_binding(pe), "unbound") != 0);
    read_allowed(tw_pe_tid(pe), allowed, sizeof(allowed));
    TWT_CHECKF(strcmp(allowed, tw_pe_binding(pe)) == 0, "bound to '%s', kernel says '%s'",
               tw_pe_binding(pe), allowed);
    tw_pe_destroy(pe);

    /* No such package: one warning, and the thread runs unbound. */
    warns = tw_log_count(TW_LOG_WARN);
    pe = make_pe("nopkg", true, TW_WAIT_BLOCK, 0, npkg + 5);
    TWT_EQ(tw_pe_start(pe), TW_OK);
    TWT_CHECK(strcmp(tw_pe_binding(pe), "unbound") == 0);
    TWT_EQ(tw_log_count(TW_LOG_WARN), warns + 1);
    tw_pe_destroy(pe);
}

/* ---- hand-over --------------------------------------------------------- */

static atomic_int ho_runs;
static atomic_bool ho_owner;
static tw_pe_t *ho_pe;

static void ho_cmd(void *arg, void *data, uint64_t u64)
{
    (void)arg, (void)data;
    TWT_EQ(u64, 42u);
    atomic_store(&ho_owner, tw_pe_is_owner(ho_pe));
    atomic_fetch_add(&ho_runs, 1);
}

/* tw_pe_hand_over, with a progress thread and without: a command goes
 * through the lane; when the lane cannot be had (the test hook: as if it
 * could not be allocated), the caller runs it itself before returning --
 * once, as the owner. */
static void case_handover(void)
{
    for (int thread = 0; thread < 2; thread++) {
        tw_pe_t *pe = make_pe("handover", thread != 0, TW_WAIT_ADAPTIVE, 32, -1);
        tw_pe_cmd_t cmd = {.fn = ho_cmd, .u64 = 42};

        ho_pe = pe;
        TWT_EQ(tw_pe_start(pe), TW_OK);
        for (int fail = 0; fail < 2; fail++) {
            atomic_store(&ho_runs, 0);
            atomic_store(&ho_owner, false);
            (void)tw_pe_test_submit_fail(fail ? 1u : 0u);
            tw_pe_hand_over(pe, &cmd);
            if (fail) {
                TWT_EQ(atomic_load(&ho_runs), 1); /* ran here, before the return */
            }
            for (int i = 0; i < 5000 && atomic_load(&ho_runs) == 0; i++) {
                if (!thread) {
                    tw_pe_progress(pe);
                }
                sleep_ms(1);
            }
            sleep_ms(20); /* and not twice */
            if (!thread) {
                tw_pe_progress(pe);
            }
            TWT_EQ(atomic_load(&ho_runs), 1);
            TWT_CHECK(atomic_load(&ho_owner));
            TWT_CHECK(!tw_pe_is_owner(pe));
        }
        TWT_EQ(tw_pe_test_submit_fail(0), 0u); /* every failure armed was met */
        tw_pe_destroy(pe);
    }
}

static const twt_case_t cases[] = {
    {"threads", case_threads},   {"modes", case_modes},       {"manual", case_manual},
    {"doorbell", case_doorbell}, {"fds", case_fds},           {"pinned", case_pinned},
    {"bind", case_bind},         {"handover", case_handover},
};

int main(int argc, char **argv)
{
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
