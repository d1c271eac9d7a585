/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * A threadwire rank for the failure scripts (public API only):
 *
 *   tw_mp_rank wait DIR [SECONDS [UNTIL]]
 *                                       init, then wait (twrun_kill_test.sh);
 *                                       leave early once DIR/UNTIL exists,
 *                                       then write DIR/rankR.left after
 *                                       tw_finalize (cluster_lifeline.sh)
 *   tw_mp_rank crash R DIR              init; once every rank is up, rank R
 *                                       calls abort(); the others wait
 *   tw_mp_rank peer-kill DIR [BIGSIZE]  twrun -n 2 --keep-going: rank 1 dies
 *                                       by SIGKILL mid-transfer, rank 0
 *                                       checks the failure contract
 *   tw_mp_rank node-loss DIR LOST       (tests/cluster) the ranks in the
 *                                       comma list LOST are cut off or die
 *                                       together, as a node does; the
 *                                       others check they fail and nothing
 *                                       else does
 *
 * Every rank writes into DIR, once tw_init returned: rankR.pid (its pid),
 * rankR.boot (TW_BOOT_ADDR), rankR.shm (the /dev/shm files it has mapped,
 * from /proc/self/maps) and rank 0 job.prefix ("tw-<crc32c of the job
 * key>-", the prefix of the job's segment names), so the scripts can look
 * for orphans and leftovers of exactly this job.
 *
 * peer-kill, rank 1: posts a receive for a large message (BIGSIZE, 16 MiB)
 * and one for "go", sends "ready" (its pid) and a large message of its own
 * (BIGSIZE) that rank 0 receives, then dies: it writes its CLOCK_MONOTONIC
 * time to DIR/victim.t and raises SIGKILL as soon as a watcher thread sees
 * its large receive buffer partly written (mid-transfer), or else when "go"
 * arrives (rank 0 sends it right after the large message; TSan builds
 * always wait for "go": the watcher's reads would race with the copy).
 * Rank 0 posts the receive for rank 1's large message first; after "ready"
 * it sends two 4 MiB messages rank 1 never receives and a few small ones,
 * posts an exact, a masked and a large receive from rank 1 and a
 * TW_ANY_SOURCE receive, then sends the large message rank 1 receives and
 * "go" (these two may be refused with TW_ERR_PEER_FAILED: rank 1 may be
 * dead by then). Posts retry on TW_ERR_AGAIN (the ring to a peer fills
 * while a large message streams through it). It checks the contract for
 * a dead local peer:
 *   - the two unmatched large sends and the three receives naming rank 1
 *     complete TW_ERR_PEER_FAILED within 500 ms (TWTEST_PEER_FAIL_MS) of
 *     rank 1's time stamp, and not before it; the other sends to rank 1
 *     complete TW_OK or TW_ERR_PEER_FAILED;
 *   - the error handler runs exactly once, with (1, TW_ERR_PEER_FAILED),
 *     within the same bound;
 *   - new sends (small and large) and receives naming rank 1 return, or
 *     complete with, TW_ERR_PEER_FAILED within the bound;
 *   - the TW_ANY_SOURCE receive stays posted, and still matches a message
 *     rank 0 then sends itself;
 *   - tw_finalize and tw_cq_destroy return TW_OK;
 * then writes DIR/rank0.pass. (twrun's exit status is rank 1's death, so
 * the script needs this file to know that rank 0 passed.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "threadwire/threadwire.h"
#include "tw_mp.h"

#define MIB (1024u * 1024u)

enum {
    T_READY = 1,
    T_GO,
    T_BIG0 = 10,
    T_BIG1,
    T_BIG2,
    T_BIGR,
    T_SMALL = 20,
    T_NEVER = 30,
    T_NEVER_BIG,
    T_NEVER_MASKED = 0x100, /* received with ignore mask 0xff */
    T_ANY = 40,
    T_NEW = 50
};

static const char *g_dir;

static double now_ms(void)
{
    return twt_now() * 1e3;
}

static void write_file(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void write_file(const char *name, const char *fmt, ...)
{
    char path[512], tmp[520];
    va_list ap;
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    TW_MP_CHECK(f != NULL, "cannot write %s: %s", tmp, strerror(errno));
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    TW_MP_CHECK(fclose(f) == 0 && rename(tmp, path) == 0, "cannot write %s", path);
}

/* The /dev/shm files this process has mapped (unlinked ones included). */
static void record_shm(void)
{
    char line[1024], list[8192] = "", name[64];
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *p = strstr(line, " /dev/shm/");
        if (p == NULL) {
            continue;
        }
        p += strlen(" /dev/shm/");
        p[strcspn(p, " \n")] = '\0'; /* drops " (deleted)" */
        snprintf(name, sizeof(name), "%s\n", p);
        if (strstr(list, name) == NULL && strlen(list) + strlen(name) < sizeof(list)) {
            strcat(list, name);
        }
    }
    fclose(f);
    snprintf(name, sizeof(name), "rank%d.shm", tw_mp_rank());
    write_file(name, "%s", list);
}

/* CRC32C (Castagnoli), as tw_seg_make_name derives the segment prefix. */
static uint32_t crc32c(const char *s)
{
    uint32_t crc = ~0u;
    for (; *s != '\0'; s++) {
        crc ^= (unsigned char)*s;
        for (int k = 0; k < 8; k++) {
            crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

static void announce(void)
{
    char name[64];
    const char *boot = getenv("TW_BOOT_ADDR"), *key = getenv("TW_JOB_KEY");

    snprintf(name, sizeof(name), "rank%d.boot", tw_mp_rank());
    write_file(name, "%s\n", boot != NULL ? boot : "");
    if (tw_mp_rank() == 0 && key != NULL) {
        write_file("job.prefix", "tw-%08x-\n", crc32c(key));
    }
    record_shm();
    snprintf(name, sizeof(name), "rank%d.pid", tw_mp_rank()); /* last: the scripts wait for it */
    write_file(name, "%d\n", (int)getpid());
}

/* Drive progress and wait a little for completions. */
static int wait_some(tw_context_t *ctx, tw_cq_t *cq, tw_completion_t *c, int max, int ms)
{
    tw_progress(ctx);
    int n = tw_cq_wait(cq, c, max, ms);
    TW_MP_CHECK(n >= 0, "tw_cq_wait returned %d", n);
    return n;
}

/* ---- wait / crash ----------------------------------------------------- */

static int count_pid_files(int size)
{
    int n = 0;
    for (int r = 0; r < size; r++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/rank%d.pid", g_dir, r);
        n += access(path, F_OK) == 0;
    }
    return n;
}

static int run_wait(int crash_rank, double seconds, const char *until)
{
    tw_context_t *ctx = tw_mp_init();
    tw_cq_t *cq;
    tw_completion_t c[4];
    char buf[64], path[512];
    bool crashed = false;

    announce();
    TW_MP_CHECK(tw_cq_create(ctx, 8, &cq) == TW_OK, "tw_cq_create");
    /* something outstanding, as a real application would have */
    TW_MP_CHECK(tw_recv(ctx, TW_ANY_SOURCE, T_NEVER, 0, buf, sizeof(buf), cq, NULL) == TW_OK,
                "tw_recv");
    double end = twt_now() + seconds, give_up = twt_now() + 20;
    while (twt_now() < end) {
        if (tw_mp_rank() == crash_rank && !crashed) {
            if (count_pid_files(tw_size(ctx)) == tw_size(ctx)) {
                write_file("crash.t", "%.3f\n", now_ms());
                fflush(stdout);
                abort(); /* SIGABRT: sanitizers leave it alone, unlike SIGSEGV */
            }
            TW_MP_CHECK(twt_now() < give_up, "the other ranks never came up");
        }
        int n = wait_some(ctx, cq, c, 4, 100);
        TW_MP_CHECK(n == 0, "unexpected completion (status %s)", tw_strerror(c[0].status));
        if (until != NULL) {
            snprintf(path, sizeof(path), "%s/%s", g_dir, until);
            if (access(path, F_OK) == 0) {
                break;
            }
        }
    }
    TW_MP_CHECK(tw_finalize(ctx) == TW_OK, "tw_finalize");
    while (tw_cq_poll(cq, c, 4) > 0) {
    }
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy");
    if (until != NULL) {
        snprintf(path, sizeof(path), "rank%d.left", tw_mp_rank());
        write_file(path, "ok\n");
    }
    return 0;
}

/* ---- peer-kill: rank 1, the victim -------------------------------------- */

#if defined(__SANITIZE_THREAD__)
#define TW_MP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TW_MP_TSAN 1
#endif
#endif

/* The watcher (mid-transfer) and the main thread ("go") may both get
 * here: the first one writes the files and dies, the other waits for it
 * (both writing the same temporary file made one rename fail). */
static void die_now(const char *how)
{
    static atomic_flag dying = ATOMIC_FLAG_INIT;

    if (atomic_flag_test_and_set(&dying)) {
        for (;;) {
            pause();
        }
    }
    record_shm();
    write_file("victim.how", "%s\n", how);
    write_file("victim.t", "%.3f\n", now_ms());
    raise(SIGKILL);
}

#ifndef TW_MP_TSAN
typedef struct watch {
    const volatile unsigned char *buf;
    size_t len;
} watch_t;

/* Dies once the large receive is under way but not finished. */
static void *victim_watch(void *arg)
{
    const watch_t *w = arg;
    for (;;) {
        if (w->buf[0] != 0 && w->buf[w->len - 1] == 0) {
            die_now("mid-transfer");
        }
        if (w->buf[w->len - 1] != 0) {
            return NULL; /* too late: done already */
        }
    }
}
#endif

static int run_victim(tw_context_t *ctx, size_t big)
{
    tw_cq_t *cq;
    tw_completion_t c[8];
    unsigned char *bigbuf = calloc(1, big), *mine = malloc(big), go[8];
    int me = (int)getpid();
    bool got_go = false;

    TW_MP_CHECK(bigbuf != NULL && mine != NULL && big > 0, "no memory");
    memset(mine, 0xc3, big);
    TW_MP_CHECK(tw_cq_create(ctx, 16, &cq) == TW_OK, "tw_cq_create");
    TW_MP_CHECK(tw_recv(ctx, 0, T_BIG0, 0, bigbuf, big, cq, bigbuf) == TW_OK, "recv big");
    TW_MP_CHECK(tw_recv(ctx, 0, T_GO, 0, go, sizeof(go), cq, go) == TW_OK, "recv go");
#ifndef TW_MP_TSAN
    static watch_t w;
    pthread_t th;
    w = (watch_t){.buf = bigbuf, .len = big};
    TW_MP_CHECK(pthread_create(&th, NULL, victim_watch, &w) == 0, "pthread_create");
#endif
    TW_MP_CHECK(TW_MP_POST(ctx, tw_send(ctx, 0, T_READY, &me, sizeof(me), cq, NULL)) == TW_OK,
                "send ready");
    TW_MP_CHECK(TW_MP_POST(ctx, tw_send(ctx, 0, T_BIGR, mine, big, cq, NULL)) == TW_OK, "send big");
    double give_up = twt_now() + 20;
    while (!got_go) {
        int n = wait_some(ctx, cq, c, 8, 100);
        for (int i = 0; i < n; i++) {
            TW_MP_CHECK(c[i].status == TW_OK, "victim: %s", tw_strerror(c[i].status));
            got_go |= c[i].user == go;
        }
        TW_MP_CHECK(twt_now() < give_up, "victim: no go from rank 0");
    }
    die_now("at-go");
    return 1; /* not reached */
}

/* ---- peer-kill: rank 0, the survivor ------------------------------------ */

enum expect { MUST_FAIL, MAY_FAIL, MUST_STAY };

typedef struct op {
    const char *what;
    enum expect expect;
    bool done;
    tw_status_t status;
    double t_ms;
} op_t;

/* Watches rank 1's pid: the time it was seen dead. */
static pid_t g_victim_pid;
static _Atomic double g_dead_ms;
static atomic_bool g_watch_stop;

static void *watcher_main(void *arg)
{
    (void)arg;
    int fd = (int)syscall(SYS_pidfd_open, g_victim_pid, 0);
    while (!atomic_load_explicit(&g_watch_stop, memory_order_acquire)) {
        bool dead;
        if (fd >= 0) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            dead = poll(&p, 1, 50) == 1;
        } else { /* no pidfd: gone once twrun reaped it */
            dead = kill(g_victim_pid, 0) != 0 && errno == ESRCH;
            if (!dead) {
                usleep(1000);
            }
        }
        if (dead) {
            atomic_store_explicit(&g_dead_ms, now_ms(), memory_order_release);
            break;
        }
    }
    if (fd >= 0) {
        close(fd);
    }
    return NULL;
}

static double read_ms(const char *name)
{
    char path[512];
    double v = 0;
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%lf", &v) != 1) {
            v = 0;
        }
        fclose(f);
    }
    return v;
}

/* The first word of DIR/NAME ("" when missing). */
static const char *read_word(const char *name)
{
    static char word[64];
    char path[512];
    word[0] = '\0';
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%63s", word) != 1) {
            word[0] = '\0';
        }
        fclose(f);
    }
    return word;
}

/* Post a new send or receive naming the dead peer: it returns, or
 * completes with, TW_ERR_PEER_FAILED. Returns the time it failed. */
static double new_op_fails(tw_context_t *ctx, tw_cq_t *cq, bool send, void *buf, size_t len,
                           double deadline_ms, const char *what)
{
    tw_completion_t c;
    op_t op = {.what = what};
    tw_status_t st = send ? tw_send(ctx, 1, T_NEW, buf, len, cq, &op)
                          : tw_recv(ctx, 1, T_NEW, 0, buf, len, cq, &op);
    if (st != TW_OK) {
        TW_MP_CHECK(st == TW_ERR_PEER_FAILED, "%s to the dead rank 1 returned %s", what,
                    tw_strerror(st));
        return now_ms();
    }
    for (;;) {
        int n = wait_some(ctx, cq, &c, 1, 10);
        if (n == 1) {
            TW_MP_CHECK(c.user == &op, "%s: a completion of another operation", what);
            TW_MP_CHECK(c.status == TW_ERR_PEER_FAILED, "%s to the dead rank 1 completed %s", what,
                        tw_strerror(c.status));
            return now_ms();
        }
        TW_MP_CHECK(now_ms() < deadline_ms + 5000, "%s to the dead rank 1 never completed", what);
    }
}

static op_t g_ops[] = {
    {.what = "send of the large message rank 1 is receiving", .expect = MAY_FAIL},
    {.what = "4 MiB send rank 1 never receives (1)", .expect = MUST_FAIL},
    {.what = "4 MiB send rank 1 never receives (2)", .expect = MUST_FAIL},
    {.what = "small send 0", .expect = MAY_FAIL},
    {.what = "small send 1", .expect = MAY_FAIL},
    {.what = "small send 2", .expect = MAY_FAIL},
    {.what = "small send 3", .expect = MAY_FAIL},
    {.what = "exact receive from rank 1", .expect = MUST_FAIL},
    {.what = "masked receive from rank 1", .expect = MUST_FAIL},
    {.what = "4 MiB receive from rank 1", .expect = MUST_FAIL},
    {.what = "TW_ANY_SOURCE receive", .expect = MUST_STAY},
    {.what = "send of go", .expect = MAY_FAIL},
    {.what = "receive of rank 1's large message", .expect = MAY_FAIL},
};
#define NOPS    ((int)TWT_ARRAY_SIZE(g_ops))
#define OP_ANY  10
#define OP_GO   11
#define OP_BIGR 12

/* Record a completion of one of g_ops; anything else is a failure. */
static void absorb(const tw_completion_t *c, bool any_may_complete)
{
    op_t *op = c->user;
    TW_MP_CHECK(op >= g_ops && op < g_ops + NOPS, "a completion nobody posted (status %s)",
                tw_strerror(c->status));
    TW_MP_CHECK(!op->done, "%s completed twice", op->what);
    TW_MP_CHECK(op->expect != MUST_STAY || any_may_complete,
                "%s completed (%s, peer %d): it must stay posted", op->what, tw_strerror(c->status),
                c->peer);
    op->done = true;
    op->status = c->status;
    op->t_ms = now_ms();
}

static int run_survivor(tw_context_t *ctx, size_t big)
{
    double bound = 500;
    const char *b = getenv("TWTEST_PEER_FAIL_MS");
    const char *tls = getenv("TW_TRANSPORTS"), *route = getenv("TW_ROUTE");
    if (b != NULL && atof(b) > 0) {
        bound = atof(b);
    }
    if ((tls != NULL && strstr(tls, "tcp") != NULL) ||
        (route != NULL && strcmp(route, "leader") == 0)) {
        /* TCP has no rendezvous yet: a send completes once the socket
         * took it, so the 4 MiB sends may end TW_OK before rank 1 dies.
         * Through the leaders (tests/cluster) likewise: route completes
         * a send once its last fragment left for the next hop. */
        g_ops[1].expect = MAY_FAIL;
        g_ops[2].expect = MAY_FAIL;
    }
    tw_cq_t *cq;
    tw_completion_t c[16];
    int victim_pid = 0;
    unsigned char *big0 = malloc(big), *big1 = malloc(4 * MIB), *big2 = malloc(4 * MIB);
    unsigned char *rbig = malloc(4 * MIB), *rbigr = calloc(1, big);
    unsigned char small[4][64], rsmall[2][64], anybuf[64], go[8] = {0};
    pthread_t watcher;
    tw_status_t st[NOPS];

    alarm(60); /* a hang is a failure with a name, not a ctest timeout */
    TW_MP_CHECK(big0 && big1 && big2 && rbig && rbigr, "no memory");
    memset(big0, 0xb0, big);
    memset(big1, 0xb1, 4 * MIB);
    memset(big2, 0xb2, 4 * MIB);
    TW_MP_CHECK(tw_cq_create(ctx, 64, &cq) == TW_OK, "tw_cq_create");

    /* 1. rank 1's large message may come at any time; then it is ready
     * (and says its pid) */
    st[OP_BIGR] = TW_MP_POST(ctx, tw_recv(ctx, 1, T_BIGR, 0, rbigr, big, cq, &g_ops[OP_BIGR]));
    TW_MP_CHECK(st[OP_BIGR] == TW_OK, "recv big: %s", tw_strerror(st[OP_BIGR]));
    TW_MP_CHECK(TW_MP_POST(ctx, tw_recv(ctx, 1, T_READY, 0, &victim_pid, sizeof(victim_pid), cq,
                                        NULL)) == TW_OK,
                "recv ready");
    for (bool ready = false; !ready;) {
        int n = wait_some(ctx, cq, c, 16, 100);
        for (int i = 0; i < n; i++) {
            if (c[i].user != NULL) {
                absorb(&c[i], false);
                continue;
            }
            TW_MP_CHECK(c[i].status == TW_OK && victim_pid > 0, "ready: %s",
                        tw_strerror(c[i].status));
            ready = true;
        }
    }
    g_victim_pid = victim_pid;
    TW_MP_CHECK(pthread_create(&watcher, NULL, watcher_main, NULL) == 0, "pthread_create");

    /* 2. operations with rank 1 that its death must fail (or that may
     * still finish), and an ANY_SOURCE receive that must stay. The large
     * message rank 1 receives goes last but "go": rank 1 may die as soon
     * as its data flows, and then those two posts may already be refused. */
    st[1] = TW_MP_POST(ctx, tw_send(ctx, 1, T_BIG1, big1, 4 * MIB, cq, &g_ops[1]));
    st[2] = TW_MP_POST(ctx, tw_send(ctx, 1, T_BIG2, big2, 4 * MIB, cq, &g_ops[2]));
    for (int i = 0; i < 4; i++) {
        memset(small[i], i, sizeof(small[i]));
        st[3 + i] = TW_MP_POST(
            ctx, tw_send(ctx, 1, T_SMALL, small[i], sizeof(small[i]), cq, &g_ops[3 + i]));
    }
    st[7] =
        TW_MP_POST(ctx, tw_recv(ctx, 1, T_NEVER, 0, rsmall[0], sizeof(rsmall[0]), cq, &g_ops[7]));
    st[8] = TW_MP_POST(
        ctx, tw_recv(ctx, 1, T_NEVER_MASKED, 0xff, rsmall[1], sizeof(rsmall[1]), cq, &g_ops[8]));
    st[9] = TW_MP_POST(ctx, tw_recv(ctx, 1, T_NEVER_BIG, 0, rbig, 4 * MIB, cq, &g_ops[9]));
    st[OP_ANY] = TW_MP_POST(
        ctx, tw_recv(ctx, TW_ANY_SOURCE, T_ANY, 0, anybuf, sizeof(anybuf), cq, &g_ops[OP_ANY]));
    for (int i = 1; i < OP_BIGR; i++) {
        if (i != OP_GO) {
            TW_MP_CHECK(st[i] == TW_OK, "posting %s: %s", g_ops[i].what, tw_strerror(st[i]));
        }
    }
    st[0] = TW_MP_POST(ctx, tw_send(ctx, 1, T_BIG0, big0, big, cq, &g_ops[0]));
    st[OP_GO] = TW_MP_POST(ctx, tw_send(ctx, 1, T_GO, go, sizeof(go), cq, &g_ops[OP_GO]));
    static const int last[] = {0, OP_GO};
    for (int k = 0; k < 2; k++) {
        int i = last[k];
        if (st[i] == TW_ERR_PEER_FAILED) { /* refused at once: rank 1 is gone already */
            g_ops[i].done = true;
            g_ops[i].status = st[i];
            g_ops[i].t_ms = now_ms();
            continue;
        }
        TW_MP_CHECK(st[i] == TW_OK, "posting %s: %s", g_ops[i].what, tw_strerror(st[i]));
    }

    /* 3. rank 1 dies: everything but the ANY_SOURCE receive completes */
    double start = now_ms();
    for (;;) {
        int pending = 0;
        for (int i = 0; i < NOPS; i++) {
            pending += !g_ops[i].done && g_ops[i].expect != MUST_STAY;
        }
        if (pending == 0 && atomic_load(&g_dead_ms) != 0) {
            break;
        }
        int n = wait_some(ctx, cq, c, 16, 10);
        for (int i = 0; i < n; i++) {
            absorb(&c[i], false);
        }
        double t = now_ms(), dead = atomic_load(&g_dead_ms);
        if (t - start > 20000 || (dead > 0 && t - dead > bound + 5000)) {
            for (int i = 0; i < NOPS; i++) {
                if (!g_ops[i].done && g_ops[i].expect != MUST_STAY) {
                    fprintf(stderr, "rank 0: still outstanding: %s\n", g_ops[i].what);
                }
            }
            TW_MP_CHECK(false, "%s",
                        dead > 0 ? "operations with the dead rank 1 never completed"
                                 : "rank 1 never died");
        }
    }
    atomic_store_explicit(&g_watch_stop, true, memory_order_release);
    pthread_join(watcher, NULL);

    /* Rank 1's own time stamp, just before raise(SIGKILL), is the
     * reference: stricter than when we saw its pid gone. */
    double t_kill = read_ms("victim.t"), t_dead = atomic_load(&g_dead_ms), worst = 0;
    TW_MP_CHECK(t_kill > 0, "rank 1 left no time stamp");
    int failed = 0;
    for (int i = 0; i < NOPS; i++) {
        const op_t *op = &g_ops[i];
        if (op->expect == MUST_STAY || (op->expect == MAY_FAIL && op->status == TW_OK)) {
            continue;
        }
        TW_MP_CHECK(op->status == TW_ERR_PEER_FAILED, "%s completed %s, want TW_ERR_PEER_FAILED",
                    op->what, tw_strerror(op->status));
        TW_MP_CHECK(op->t_ms >= t_kill, "%s failed %.1f ms before rank 1 died", op->what,
                    t_kill - op->t_ms);
        TW_MP_CHECK(op->t_ms - t_kill <= bound,
                    "%s failed %.1f ms after rank 1's death (bound %.0f ms)", op->what,
                    op->t_ms - t_kill, bound);
        worst = op->t_ms - t_kill > worst ? op->t_ms - t_kill : worst;
        failed++;
    }

    if (g_ops[OP_BIGR].status == TW_OK) {
        for (size_t i = 0; i < big; i++) {
            TW_MP_CHECK(rbigr[i] == 0xc3, "rank 1's large message arrived corrupted at byte %zu",
                        i);
        }
    }

    /* 4. the error handler: (1, TW_ERR_PEER_FAILED), in time */
    while (tw_mp_errors_count() == 0 && now_ms() - t_kill <= bound + 1000) {
        int n = wait_some(ctx, cq, c, 16, 10);
        for (int i = 0; i < n; i++) {
            absorb(&c[i], false);
        }
    }
    TW_MP_CHECK(tw_mp_errors_count() >= 1, "the error handler was not called");
    tw_mp_error_t eh = tw_mp_errors_get(0);
    TW_MP_CHECK(eh.peer == 1 && eh.status == TW_ERR_PEER_FAILED,
                "error handler called with (%d, %s)", eh.peer, tw_strerror(eh.status));
    double t_eh = eh.t * 1e3;
    TW_MP_CHECK(t_eh >= t_kill && t_eh - t_kill <= bound,
                "error handler called %.1f ms after rank 1's death (bound %.0f ms)", t_eh - t_kill,
                bound);

    /* 5. new operations naming rank 1 fail at once */
    unsigned char one[16] = {0};
    double dl = now_ms() + bound;
    double t1 = new_op_fails(ctx, cq, true, one, sizeof(one), dl, "new small send");
    double t2 = new_op_fails(ctx, cq, true, big1, 4 * MIB, dl, "new 4 MiB send");
    double t3 = new_op_fails(ctx, cq, false, one, sizeof(one), dl, "new receive from rank 1");
    TW_MP_CHECK(t1 <= dl && t2 <= dl && t3 <= dl, "new operations took %.1f/%.1f/%.1f ms to fail",
                t1 - dl + bound, t2 - dl + bound, t3 - dl + bound);

    /* 6. the ANY_SOURCE receive stayed posted and still takes a message */
    double until = now_ms() + 100;
    while (now_ms() < until) {
        int n = wait_some(ctx, cq, c, 16, 10);
        for (int i = 0; i < n; i++) {
            absorb(&c[i], false);
        }
    }
    unsigned char hello[32];
    op_t self_send = {.what = "send to myself", .expect = MAY_FAIL};
    memset(hello, 0x5e, sizeof(hello));
    TW_MP_CHECK(TW_MP_POST(ctx, tw_send(ctx, 0, T_ANY, hello, sizeof(hello), cq, &self_send)) ==
                    TW_OK,
                "self send");
    double give_up = now_ms() + 5000;
    for (int want = 2; want > 0;) {
        int n = wait_some(ctx, cq, c, 16, 10);
        for (int i = 0; i < n; i++, want--) {
            if (c[i].user == &self_send) {
                TW_MP_CHECK(c[i].status == TW_OK, "self send: %s", tw_strerror(c[i].status));
                continue;
            }
            absorb(&c[i], true);
            TW_MP_CHECK(c[i].user == &g_ops[OP_ANY], "%s completed late",
                        ((op_t *)c[i].user)->what);
            TW_MP_CHECK(c[i].status == TW_OK && c[i].peer == 0 && c[i].length == sizeof(hello) &&
                            memcmp(anybuf, hello, sizeof(hello)) == 0,
                        "the TW_ANY_SOURCE receive completed %s from %d", tw_strerror(c[i].status),
                        c[i].peer);
        }
        TW_MP_CHECK(now_ms() < give_up, "the TW_ANY_SOURCE receive did not take a message from me");
    }
    TW_MP_CHECK(tw_mp_errors_count() == 1, "error handler called %d times", tw_mp_errors_count());

    /* 7. leave */
    record_shm();
    TW_MP_CHECK(tw_finalize(ctx) == TW_OK, "tw_finalize");
    TW_MP_CHECK(tw_cq_poll(cq, c, 16) == 0, "completion after finalize");
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy");
    TW_MP_CHECK(tw_mp_errors_count() == 1, "error handler called %d times", tw_mp_errors_count());
    char how[64];
    snprintf(how, sizeof(how), "%s", read_word("victim.how"));
    printf("peer-kill: rank 1 (pid %d) SIGKILLed %s (its receive of %zu bytes %s, our receive "
           "of its %zu bytes %s); %d operations with it failed TW_ERR_PEER_FAILED, the last "
           "%.1f ms after its death (bound %.0f ms; pid seen dead after %.1f ms); error handler "
           "once after %.1f ms; new sends/receives refused; TW_ANY_SOURCE receive kept; "
           "finalize ok\n",
           victim_pid, how, big, g_ops[0].status == TW_OK ? "completed" : "cut off", big,
           g_ops[OP_BIGR].status == TW_OK ? "completed intact" : "cut off", failed, worst, bound,
           t_dead - t_kill, t_eh - t_kill);
    write_file("rank0.pass", "ok\n");
    free(big0);
    free(big1);
    free(big2);
    free(rbig);
    free(rbigr);
    return 0;
}

/* ---- node-loss ---------------------------------------------------------- */

/* Every rank says hello to every other (so every connection exists), then
 * posts a receive from each that nobody ever sends, and writes
 * DIR/rankR.up. The lost ranks then only wait: the test cuts their node's
 * link or kills it. Each other rank checks, within TWTEST_NODE_LOSS_S
 * (default 30 s) of its post: the receives from the lost ranks complete
 * TW_ERR_PEER_FAILED, the error handler ran once for each lost rank and
 * for no other, the receives from the survivors are still posted (each
 * survivor then sends every other the message they wait for, and they
 * complete TW_OK), then finalizes and writes DIR/rankR.pass. */
static int run_node_loss(const char *lost_list)
{
    tw_context_t *ctx = tw_mp_init();
    int me = tw_rank(ctx), size = tw_size(ctx), nlost = 0, pending_lost = 0;
    bool *lost = calloc((size_t)size, sizeof(bool));
    char *list = strdup(lost_list), *save = NULL, name[64];
    const char *env = getenv("TWTEST_NODE_LOSS_S");
    double bound_s = env != NULL ? atof(env) : 30;
    tw_completion_t c[16];
    tw_cq_t *cq;
    char *rbuf;

    TW_MP_CHECK(lost != NULL && list != NULL, "out of memory");
    for (char *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long r = strtol(t, &end, 10);
        TW_MP_CHECK(*end == '\0' && end != t && r >= 0 && r < size && !lost[r],
                    "bad lost rank '%s' (ranks 0..%d, each once)", t, size - 1);
        lost[r] = true;
        nlost++;
    }
    free(list);
    TW_MP_CHECK(nlost > 0 && nlost < size, "lose 1 .. %d ranks, not %d", size - 1, nlost);
    TW_MP_CHECK(tw_cq_create(ctx, (unsigned)(4 * size + 8), &cq) == TW_OK, "tw_cq_create");
    rbuf = calloc((size_t)size, 8);
    TW_MP_CHECK(rbuf != NULL, "out of memory");
    tw_mp_barrier(ctx, T_READY); /* hello: every connection exists */
    for (int r = 0; r < size; r++) {
        if (r != me) {
            TW_MP_POST(ctx, tw_recv(ctx, r, T_NEVER, 0, rbuf + 8 * r, 8, cq, (void *)(intptr_t)r));
        }
    }
    snprintf(name, sizeof(name), "rank%d.up", me);
    write_file(name, "%d\n", (int)getpid());
    if (lost[me]) {
        double end = twt_now() + bound_s + 30;
        while (twt_now() < end) { /* cut off or killed meanwhile */
            (void)wait_some(ctx, cq, c, 16, 100);
        }
        return 0;
    }
    for (int r = 0; r < size; r++) {
        pending_lost += lost[r];
    }
    /* One loop takes it all: the lost ranks' failures, then (once ours
     * are in) our words to the survivors and theirs to us -- which may
     * come first, from a survivor that saw the loss sooner. */
    int survivors = size - nlost, got = 0, sends_done = 0;
    uint64_t word = 0x5eed0000u + (uint64_t)me;
    bool sent = false;
    double t0 = twt_now(), t_failed = 0;
    while (pending_lost > 0 || got < survivors - 1 || sends_done < survivors - 1) {
        TW_MP_CHECK(twt_now() - t0 < bound_s,
                    "after %.0f s: %d lost rank(s) not failed, %d of %d survivors' words, %d of "
                    "%d sends",
                    bound_s, pending_lost, got, survivors - 1, sends_done, survivors - 1);
        if (pending_lost == 0 && !sent) {
            t_failed = twt_now() - t0;
            for (int r = 0; r < size; r++) {
                if (!lost[r] && r != me) {
                    TW_MP_POST(ctx, tw_send(ctx, r, T_NEVER, &word, sizeof(word), cq, NULL));
                }
            }
            sent = true;
        }
        int n = wait_some(ctx, cq, c, 16, 100);
        for (int i = 0; i < n; i++) {
            if (c[i].op == TW_OP_SEND) {
                TW_MP_CHECK(c[i].status == TW_OK, "a send to a survivor: %s",
                            tw_strerror(c[i].status));
                sends_done++;
                continue;
            }
            int r = (int)(intptr_t)c[i].user;
            if (lost[r]) {
                TW_MP_CHECK(c[i].status == TW_ERR_PEER_FAILED, "the receive from lost rank %d: %s",
                            r, tw_strerror(c[i].status));
                pending_lost--;
                continue;
            }
            uint64_t v;
            memcpy(&v, rbuf + 8 * r, sizeof(v));
            TW_MP_CHECK(c[i].status == TW_OK && v == 0x5eed0000u + (uint64_t)r,
                        "the receive from survivor %d: %s, word %#" PRIx64, r,
                        tw_strerror(c[i].status), v);
            got++;
        }
    }
    for (int r = 0; r < size; r++) {
        int calls = tw_mp_errors_for(r, TW_ERR_PEER_FAILED);
        TW_MP_CHECK(calls == (lost[r] ? 1 : 0), "error handler called %d time(s) for rank %d",
                    calls, r);
    }
    TW_MP_CHECK(tw_mp_errors_count() == nlost, "error handler called %d times, %d ranks lost",
                tw_mp_errors_count(), nlost);
    printf("node-loss: rank %d: %d lost rank(s) failed within %.1f s, handler once each; %d "
           "survivor(s) still talk\n",
           me, nlost, t_failed, survivors - 1);
    TW_MP_CHECK(tw_finalize(ctx) == TW_OK, "tw_finalize");
    while (tw_cq_poll(cq, c, 16) > 0) {
    }
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy");
    free(rbuf);
    free(lost);
    /* Last: the driver may stop the job once every survivor wrote it. */
    snprintf(name, sizeof(name), "rank%d.pass", me);
    write_file(name, "ok\n");
    return 0;
}

static int run_peer_kill(size_t big)
{
    tw_context_t *ctx = tw_mp_init();
    TW_MP_CHECK(tw_size(ctx) == 2, "run me as twrun -n 2 --keep-going");
    announce();
    return tw_mp_rank() == 1 ? run_victim(ctx, big) : run_survivor(ctx, big);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && strcmp(argv[1], "wait") == 0) {
        g_dir = argv[2];
        return run_wait(-1, argc > 3 ? atof(argv[3]) : 30, argc > 4 ? argv[4] : NULL);
    }
    if (argc >= 4 && strcmp(argv[1], "crash") == 0) {
        g_dir = argv[3];
        return run_wait(atoi(argv[2]), 30, NULL);
    }
    if (argc >= 3 && strcmp(argv[1], "peer-kill") == 0) {
        g_dir = argv[2];
        return run_peer_kill(argc > 3 ? strtoull(argv[3], NULL, 10) : 16 * MIB);
    }
    if (argc >= 4 && strcmp(argv[1], "node-loss") == 0) {
        g_dir = argv[2];
        return run_node_loss(argv[3]);
    }
    fprintf(stderr, "usage: tw_mp_rank wait DIR [SECONDS] | crash R DIR | peer-kill DIR "
                    "[BIGSIZE] | node-loss DIR LOST\n");
    return 2;
}
