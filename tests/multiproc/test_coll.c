/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The collectives (groups, barrier, bcast, reduce, allreduce, blocking and
 * nonblocking) checked exactly, across ranks and threads.
 *
 *   twrun -n N test_coll --mode basic|threads|nonblocking|leave|errors [-t T] [-m ROUNDS]
 *                        [--seed S] [--max-stall S] [--stats[=json]]
 *
 * Every input is a function of (seed, group, round, world rank): each rank
 * regenerates every member's input and computes the result serially, in
 * group order, and the library's result must equal it bit for bit. Floats
 * hold small integers (sums and products exact; PROD factors in {-2, -1, 1,
 * 2}); MIN and MAX of floats meet NaNs, which lose to numbers (fmin/fmax);
 * integer SUM and PROD wrap, computed in the unsigned type. After every
 * allreduce and bcast the members agree on a hash of what they got (an
 * allreduce TW_MAX of {h, ~h}: max and ~min). Every buffer has a guard
 * zone after it; reduce leaves non-roots' recvbuf (a canary, NULL or the
 * in-place input) untouched; bcast receivers start from garbage.
 *
 *   basic        on the world group, its reverse, its rotation, the
 *                even / odd ranks and the caller alone: every collective,
 *                dtype and op (bitwise ops on floats are TW_ERR_INVALID and
 *                the group goes on), in place and not, roots over every
 *                member, 0 B .. 4 MiB; a barrier no member leaves before
 *                the last one entered (the monotonic clock is the
 *                machine's, the same in every process); float and double
 *                sums that round, where the library's order shows: the
 *                same bits on every member, in place and not, and within
 *                rounding of the exact sum.
 *   threads      T threads (-t), each creating its own groups in the same
 *                order on every rank (the world list under two keys, its
 *                parity subset, the reversed list), then ROUNDS (-m) mixed
 *                rounds on them, then ROUNDS / 20 groups made, used and
 *                freed in turn under one key; then two threads share one
 *                group: while
 *                one holds an iallreduce that cannot complete (the other
 *                ranks post theirs only when told), every collective the
 *                other posts there must be TW_ERR_INVALID at once, and the
 *                held one completes right; afterwards both succeed in turn.
 *   nonblocking  per thread, two nonblocking collectives on two groups in
 *                flight at once with a ring of tw_send / tw_recv on the same
 *                CQ and a busy loop of checked arithmetic; every completion
 *                checked (op, user, peer, length, status); point-to-point
 *                bytes and checksums summed over the job at the end. Works
 *                in manual mode (TW_PROGRESS_THREADS=0): waiters progress.
 *   leave        allreduces of 1 MiB and bcasts of 256 KiB on the world
 *                group, checked, then tw_finalize at once -- no barrier:
 *                the last ones' sends complete locally before their
 *                receivers read them (rendezvous), and finalize must
 *                still deliver them (no rank fails, nothing logged).
 *   errors       bad arguments (a NULL group, roots out of range, bad
 *                dtype and op values, NULL buffers with data, NULL CQs, bad
 *                rank lists, destroying the world group or a busy group)
 *                return TW_ERR_INVALID at once, and the groups go on; a
 *                full CQ is TW_ERR_AGAIN and leaves the group usable.
 *
 * Sizes are divided by TWTEST_SCALE where they cost time. A failed check
 * names the rank, the group, the round, the collective and the seed.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "threadwire/threadwire.h"
#include "tw_mp.h"

#define MAX_RANKS   64
#define MAX_THREADS 8
#define GUARD       64
#define GUARD_BYTE  0xa5
#define CANARY_BYTE 0x5a
#define GARBAGE     0xee
#define GOLD        0x9E3779B97F4A7C15ull

/* Tags of this test's own point-to-point messages. */
#define TAG_END        0xc011000000000001ull
#define TAG_TOKEN(k)   (0xc012000000000000ull | (uint64_t)(k))
#define TAG_RING(t, k) (0xc013000000000000ull | ((uint64_t)(t) << 32) | (uint64_t)(k))

enum { NDT = 8, NOP = 7 };
static const char *const dt_name[NDT] = {"INT32", "INT64",  "UINT32", "UINT64",
                                         "FLOAT", "DOUBLE", "INT8",   "UINT8"};
static const char *const op_name[NOP] = {"SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR"};

static tw_context_t *g_ctx;
static int g_rank, g_size;
static uint64_t g_seed;
static unsigned g_threads;
static uint64_t g_rounds;
static uint64_t g_cycles; /* threads: groups made and freed in turn */
static bool g_manual;

/* ---- groups -------------------------------------------------------------- */

typedef struct tgroup {
    tw_group_t *g; /* NULL: this rank is not a member */
    char name[48];
    int n, me;
    int ranks[MAX_RANKS]; /* world ranks, in group order */
    uint64_t id;          /* the same on every member: seeds the inputs */
    uint64_t round;       /* collectives so far (the same on every member) */
    bool made;            /* by tw_group_create: destroy at the end */
} tgroup_t;

static void group_check(const tgroup_t *tg)
{
    TW_MP_CHECK(tw_group_size(tg->g) == tg->n, "group %s: tw_group_size %d, want %d", tg->name,
                tw_group_size(tg->g), tg->n);
    TW_MP_CHECK(tw_group_rank(tg->g) == tg->me, "group %s: tw_group_rank %d, want %d", tg->name,
                tw_group_rank(tg->g), tg->me);
}

static void group_world(tgroup_t *tg, uint64_t id)
{
    *tg = (tgroup_t){.g = tw_group_world(g_ctx), .n = g_size, .me = g_rank, .id = id};
    snprintf(tg->name, sizeof(tg->name), "world");
    TW_MP_CHECK(tg->g != NULL, "tw_group_world returned NULL");
    for (int i = 0; i < g_size; i++) {
        tg->ranks[i] = i;
    }
    group_check(tg);
}

/* tw_group_create over @p list when this rank is in it (else tg->g = NULL). */
static void group_make(tgroup_t *tg, const char *name, const int *list, int n, uint64_t key,
                       uint64_t id)
{
    *tg = (tgroup_t){.n = n, .me = -1, .id = id};
    snprintf(tg->name, sizeof(tg->name), "%s", name);
    for (int i = 0; i < n; i++) {
        tg->ranks[i] = list[i];
        if (list[i] == g_rank) {
            tg->me = i;
        }
    }
    if (tg->me < 0) {
        return;
    }
    tw_status_t st = tw_group_create(g_ctx, list, n, key, &tg->g);
    TW_MP_CHECK(st == TW_OK, "tw_group_create(%s, %d ranks, key %llu): %s", name, n,
                (unsigned long long)key, tw_strerror(st));
    tg->made = true;
    group_check(tg);
    tw_mp_tick();
}

static void group_free(tgroup_t *tg)
{
    if (tg->made) {
        tw_status_t st = tw_group_destroy(tg->g);
        TW_MP_CHECK(st == TW_OK, "tw_group_destroy(%s): %s", tg->name, tw_strerror(st));
        tg->made = false;
    }
    tg->g = NULL;
}

/* The lists every mode uses: the world in order, reversed, rotated by one,
 * and the ranks that share one bit of their rank with the caller. */
static int list_world(int *l)
{
    for (int i = 0; i < g_size; i++) {
        l[i] = i;
    }
    return g_size;
}
static int list_reversed(int *l)
{
    for (int i = 0; i < g_size; i++) {
        l[i] = g_size - 1 - i;
    }
    return g_size;
}
static int list_rotated(int *l)
{
    for (int i = 0; i < g_size; i++) {
        l[i] = (i + 1) % g_size;
    }
    return g_size;
}
/* The ranks that share bit @p bit of their rank with the caller's. */
static int list_part(int *l, int bit)
{
    int n = 0;
    for (int i = 0; i < g_size; i++) {
        if (((i ^ g_rank) >> bit & 1) == 0) {
            l[n++] = i;
        }
    }
    return n;
}

/* ---- inputs and the serial reduction ------------------------------------ */

static size_t dt_size(tw_dtype_t dt)
{
    static const size_t sz[NDT] = {4, 8, 4, 8, 4, 8, 1, 1};
    return sz[dt];
}
static bool dt_float(tw_dtype_t dt)
{
    return dt == TW_FLOAT || dt == TW_DOUBLE;
}
static bool op_bitwise(tw_redop_t op)
{
    return op == TW_BAND || op == TW_BOR || op == TW_BXOR;
}
/* A bitwise op on a floating type: TW_ERR_INVALID by contract. */
static bool combo_invalid(tw_dtype_t dt, tw_redop_t op)
{
    return dt_float(dt) && op_bitwise(op);
}

static uint64_t input_base(const tgroup_t *tg, uint64_t round, int wrank)
{
    uint64_t s =
        g_seed ^ (tg->id * 0xD1B54A32D192ED03ull) ^ (round << 24) ^ ((uint64_t)wrank << 52);
    return twt_rand(&s);
}

static uint64_t shape_int(tw_redop_t op, uint64_t r)
{
    if (op == TW_BAND) {
        return r | (r >> 7) | (r << 13); /* mostly ones: AND keeps some */
    }
    if (op == TW_BOR) {
        return r & (r >> 5) & (r << 11); /* mostly zeros: OR adds some */
    }
    return r; /* SUM and PROD wrap; MIN and MAX over the whole range */
}

static double shape_fp(tw_redop_t op, uint64_t r)
{
    static const double factor[4] = {-2, -1, 1, 2};
    if (op == TW_PROD) {
        return factor[r & 3];
    }
    if ((op == TW_MIN || op == TW_MAX) && (r >> 20) % 16 == 0) {
        return NAN; /* loses to a number */
    }
    return (double)((int64_t)(r % 2001) - 1000);
}

static void gen_input(tw_dtype_t dt, tw_redop_t op, uint64_t base, size_t count, void *out)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t st = base + i * GOLD, r = twt_rand(&st);
        switch (dt) {
        case TW_INT32:
            ((int32_t *)out)[i] = (int32_t)(uint32_t)shape_int(op, r);
            break;
        case TW_INT64:
            ((int64_t *)out)[i] = (int64_t)shape_int(op, r);
            break;
        case TW_UINT32:
            ((uint32_t *)out)[i] = (uint32_t)shape_int(op, r);
            break;
        case TW_UINT64:
            ((uint64_t *)out)[i] = shape_int(op, r);
            break;
        case TW_FLOAT:
            ((float *)out)[i] = (float)shape_fp(op, r);
            break;
        case TW_DOUBLE:
            ((double *)out)[i] = shape_fp(op, r);
            break;
        case TW_INT8:
            ((int8_t *)out)[i] = (int8_t)(uint8_t)shape_int(op, r);
            break;
        case TW_UINT8:
            ((uint8_t *)out)[i] = (uint8_t)shape_int(op, r);
            break;
        }
    }
}

/* acc[i] = acc[i] op src[i]; integers wrap (in the unsigned type UT). */
#define FOLD_INT(T, UT)                              \
    do {                                             \
        T *a = acc;                                  \
        const T *b = src;                            \
        for (size_t i = 0; i < count; i++) {         \
            switch (op) {                            \
            case TW_SUM:                             \
                a[i] = (T)(UT)((UT)a[i] + (UT)b[i]); \
                break;                               \
            case TW_PROD:                            \
                a[i] = (T)(UT)((UT)a[i] * (UT)b[i]); \
                break;                               \
            case TW_MIN:                             \
                a[i] = b[i] < a[i] ? b[i] : a[i];    \
                break;                               \
            case TW_MAX:                             \
                a[i] = b[i] > a[i] ? b[i] : a[i];    \
                break;                               \
            case TW_BAND:                            \
                a[i] = (T)(a[i] & b[i]);             \
                break;                               \
            case TW_BOR:                             \
                a[i] = (T)(a[i] | b[i]);             \
                break;                               \
            case TW_BXOR:                            \
                a[i] = (T)(a[i] ^ b[i]);             \
                break;                               \
            }                                        \
        }                                            \
    } while (0)
#define FOLD_FP(T, MIN, MAX)                         \
    do {                                             \
        T *a = acc;                                  \
        const T *b = src;                            \
        for (size_t i = 0; i < count; i++) {         \
            a[i] = op == TW_SUM    ? a[i] + b[i]     \
                   : op == TW_PROD ? a[i] * b[i]     \
                   : op == TW_MIN  ? MIN(a[i], b[i]) \
                                   : MAX(a[i], b[i]); \
        }                                            \
    } while (0)

static void fold(tw_dtype_t dt, tw_redop_t op, void *acc, const void *src, size_t count)
{
    switch (dt) {
    case TW_INT32:
        FOLD_INT(int32_t, uint32_t);
        break;
    case TW_INT64:
        FOLD_INT(int64_t, uint64_t);
        break;
    case TW_UINT32:
        FOLD_INT(uint32_t, uint32_t);
        break;
    case TW_UINT64:
        FOLD_INT(uint64_t, uint64_t);
        break;
    case TW_FLOAT:
        FOLD_FP(float, fminf, fmaxf);
        break;
    case TW_DOUBLE:
        FOLD_FP(double, fmin, fmax);
        break;
    case TW_INT8:
        FOLD_INT(int8_t, uint8_t);
        break;
    case TW_UINT8:
        FOLD_INT(uint8_t, uint8_t);
        break;
    }
}

/* What every member must get: the members' inputs folded in group order. */
static void *expected(const tgroup_t *tg, uint64_t round, tw_dtype_t dt, tw_redop_t op,
                      size_t count)
{
    size_t bytes = count * dt_size(dt);
    unsigned char *acc = malloc(bytes + 1), *tmp = malloc(bytes + 1);
    TW_MP_CHECK(acc != NULL && tmp != NULL, "no memory for %zu bytes", bytes);
    gen_input(dt, op, input_base(tg, round, tg->ranks[0]), count, acc);
    for (int j = 1; j < tg->n; j++) {
        gen_input(dt, op, input_base(tg, round, tg->ranks[j]), count, tmp);
        fold(dt, op, acc, tmp, count);
    }
    free(tmp);
    return acc;
}

/* ---- buffers with a guard zone ------------------------------------------- */

static unsigned char *buf_new(size_t bytes, int fill)
{
    unsigned char *b = malloc(bytes + GUARD);
    TW_MP_CHECK(b != NULL, "no memory for %zu bytes", bytes);
    memset(b, fill, bytes);
    memset(b + bytes, GUARD_BYTE, GUARD);
    return b;
}

static bool all_bytes(const unsigned char *b, size_t n, int v)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i] != (unsigned char)v) {
            return false;
        }
    }
    return true;
}

/* What a failure message says about a collective. */
typedef struct what {
    const char *coll;
    const tgroup_t *tg;
    uint64_t round;
    tw_dtype_t dt;
    tw_redop_t op;
    size_t count; /* elements, or bytes for bcast */
    int root;
    bool inplace;
} what_t;

static char *describe(const what_t *w, char *s, size_t len)
{
    snprintf(s, len,
             "%.24s on group %.47s (%d members, me %d) round %llu: %s %s count %zu root %d%s, "
             "seed %llu",
             w->coll, w->tg->name, w->tg->n, w->tg->me, (unsigned long long)w->round,
             dt_name[w->dt], op_name[w->op], w->count, w->root, w->inplace ? " in place" : "",
             (unsigned long long)g_seed);
    return s;
}

static void check_guard(const unsigned char *b, size_t bytes, const what_t *w, const char *which)
{
    char d[256];
    TW_MP_CHECK(all_bytes(b + bytes, GUARD, GUARD_BYTE), "%s: written past the end of %s",
                describe(w, d, sizeof(d)), which);
}

static void check_equal(const void *got, const void *want, const what_t *w)
{
    size_t es = w->coll[0] == 'b' ? 1 : dt_size(w->dt), bytes = w->count * es;
    if (memcmp(got, want, bytes) == 0) {
        return;
    }
    size_t i = 0, bad = 0;
    while (memcmp((const char *)got + i * es, (const char *)want + i * es, es) == 0) {
        i++;
    }
    for (size_t k = i; k < w->count; k++) {
        bad += memcmp((const char *)got + k * es, (const char *)want + k * es, es) != 0;
    }
    uint64_t g = 0, x = 0;
    memcpy(&g, (const char *)got + i * es, es);
    memcpy(&x, (const char *)want + i * es, es);
    char d[256];
    TW_MP_FAIL("%s: element %zu is %#llx, want %#llx (%zu of %zu elements wrong)",
               describe(w, d, sizeof(d)), i, (unsigned long long)g, (unsigned long long)x, bad,
               w->count);
}

/* Every member got the same bytes: an allreduce MAX of {h, ~h} gives max h
 * and ~min h, both h on every member. */
static void agree(const tgroup_t *tg, const void *buf, size_t bytes, const what_t *w)
{
    uint64_t h = twt_checksum(buf, bytes), v[2] = {h, ~h};
    tw_status_t st = tw_allreduce(tg->g, v, v, 2, TW_UINT64, TW_MAX);
    char d[256];
    TW_MP_CHECK(st == TW_OK, "%s: the hash allreduce after it: %s", describe(w, d, sizeof(d)),
                tw_strerror(st));
    TW_MP_CHECK(v[0] == h && ~v[1] == h,
                "%s: members got different bytes: hash %#llx here, max %#llx, min %#llx",
                describe(w, d, sizeof(d)), (unsigned long long)h, (unsigned long long)v[0],
                (unsigned long long)~v[1]);
    tw_mp_tick();
}

/* ---- the blocking collectives, checked ----------------------------------- */

static void do_barrier(tgroup_t *tg)
{
    tw_status_t st = tw_barrier(tg->g);
    TW_MP_CHECK(st == TW_OK, "tw_barrier on group %s round %llu: %s", tg->name,
                (unsigned long long)tg->round, tw_strerror(st));
    tg->round++;
    tw_mp_tick();
}

/* The member @p late enters 20 ms after the others; nobody may leave
 * before it entered (CLOCK_MONOTONIC is system-wide). */
static void do_barrier_timed(tgroup_t *tg, int late)
{
    double entered = 0;
    if (tg->me == late) {
        usleep(20000);
        entered = twt_now();
    }
    do_barrier(tg);
    double left = twt_now();
    tw_status_t st = tw_bcast(tg->g, &entered, sizeof(entered), late);
    TW_MP_CHECK(st == TW_OK, "tw_bcast after the timed barrier: %s", tw_strerror(st));
    TW_MP_CHECK(left >= entered,
                "tw_barrier on group %s: left %.6f s before member %d entered (seed %llu)",
                tg->name, entered - left, late, (unsigned long long)g_seed);
    tg->round++;
}

static void do_bcast(tgroup_t *tg, size_t len, int root)
{
    uint64_t round = tg->round++, bseed = input_base(tg, round, tg->ranks[root]);
    what_t w = {.coll = "bcast", .tg = tg, .round = round, .count = len, .root = root};
    unsigned char *buf = NULL;
    if (len > 0 || round % 2 == 0) { /* 0 bytes: NULL every other time */
        buf = buf_new(len, GARBAGE);
        if (tg->me == root) {
            twt_fill(buf, len, bseed);
        }
    }
    tw_status_t st = tw_bcast(tg->g, buf, len, root);
    char d[256];
    TW_MP_CHECK(st == TW_OK, "%s: %s", describe(&w, d, sizeof(d)), tw_strerror(st));
    if (buf != NULL) {
        if (!twt_verify(buf, len, bseed)) {
            unsigned char *want = buf_new(len, 0);
            twt_fill(want, len, bseed);
            check_equal(buf, want, &w);
            free(want);
        }
        check_guard(buf, len, &w, "the buffer");
        agree(tg, buf, len, &w);
        free(buf);
    }
    tw_mp_tick();
}

/* allreduce (@p root < 0) or reduce to @p root. */
static void do_reduction(tgroup_t *tg, tw_dtype_t dt, tw_redop_t op, size_t count, int root,
                         bool inplace)
{
    uint64_t round = tg->round++;
    size_t bytes = count * dt_size(dt);
    bool all = root < 0, mine = all || tg->me == root, bad = combo_invalid(dt, op);
    what_t w = {.coll = all ? "allreduce" : "reduce",
                .tg = tg,
                .round = round,
                .dt = dt,
                .op = op,
                .count = count,
                .root = root,
                .inplace = inplace};
    char d[256];
    unsigned char *send = NULL, *recv = NULL, *input = NULL;
    bool null_ok = count == 0 && round % 2 == 0; /* no data: NULL buffers are fine */

    if (!null_ok) {
        send = buf_new(bytes, 0);
        gen_input(dt, op, input_base(tg, round, tg->ranks[tg->me]), count, send);
        input = buf_new(bytes, 0);
        memcpy(input, send, bytes);
        if (inplace) {
            recv = send;
        } else if (mine || round % 3 != 0) { /* a non-root's recvbuf: a canary, or NULL */
            recv = buf_new(bytes, CANARY_BYTE);
        }
    }
    tw_status_t st = all ? tw_allreduce(tg->g, send, recv, count, dt, op)
                         : tw_reduce(tg->g, send, recv, count, dt, op, root);
    if (bad) {
        TW_MP_CHECK(st == TW_ERR_INVALID, "%s: a bitwise op on a float returned %s, not invalid",
                    describe(&w, d, sizeof(d)), tw_strerror(st));
    } else {
        TW_MP_CHECK(st == TW_OK, "%s: %s", describe(&w, d, sizeof(d)), tw_strerror(st));
    }
    if (!null_ok) {
        if (mine && !bad) {
            void *want = expected(tg, round, dt, op, count);
            check_equal(recv, want, &w);
            free(want);
        } else if (recv == send) {
            TW_MP_CHECK(memcmp(recv, input, bytes) == 0, "%s: %s changed the in-place buffer",
                        describe(&w, d, sizeof(d)), bad ? "the refused call" : "a non-root");
        } else if (recv != NULL) {
            TW_MP_CHECK(all_bytes(recv, bytes, CANARY_BYTE), "%s: %s wrote into recvbuf",
                        describe(&w, d, sizeof(d)), bad ? "the refused call" : "a non-root");
        }
        if (recv != send) {
            TW_MP_CHECK(memcmp(send, input, bytes) == 0, "%s: sendbuf changed",
                        describe(&w, d, sizeof(d)));
        }
        check_guard(send, bytes, &w, "sendbuf");
        if (recv != NULL && recv != send) {
            check_guard(recv, bytes, &w, "recvbuf");
        }
    }
    if (all && !bad && recv != NULL) {
        agree(tg, recv, bytes, &w);
    }
    if (bad) {
        do_barrier(tg); /* the refused call did not disturb the group */
    }
    if (recv != send) {
        free(recv);
    }
    free(send);
    free(input);
    tw_mp_tick();
}

/* Sums that round: fractional inputs of mixed magnitude, so the order of
 * the additions shows in the last bits. No serial result to compare with
 * bit for bit (the order is the library's), but every member must get the
 * same bits, out of place and in place alike, twice (never on timing),
 * within rounding of the exact sum. */
static double rounding_input(const tgroup_t *tg, uint64_t round, int wrank, size_t i, tw_dtype_t dt)
{
    uint64_t st = input_base(tg, round, wrank) + i * GOLD, r = twt_rand(&st);
    double v = ldexp((double)(r >> 40) - 8388608.0, -(int)(r % 40));
    return dt == TW_FLOAT ? (double)(float)v : v;
}

static void do_rounding_sum(tgroup_t *tg, tw_dtype_t dt, size_t count)
{
    uint64_t round = tg->round;
    size_t es = dt_size(dt), bytes = count * es;
    unsigned char *in = buf_new(bytes, 0), *a = buf_new(bytes, GARBAGE);
    unsigned char *b = buf_new(bytes, 0);
    what_t w = {.coll = "allreduce (rounding)",
                .tg = tg,
                .round = round,
                .dt = dt,
                .op = TW_SUM,
                .count = count,
                .root = -1};
    char d[256];

    for (size_t i = 0; i < count; i++) {
        double v = rounding_input(tg, round, tg->ranks[tg->me], i, dt);
        if (dt == TW_FLOAT) {
            ((float *)in)[i] = (float)v;
        } else {
            ((double *)in)[i] = v;
        }
    }
    memcpy(b, in, bytes);
    tw_status_t st = tw_allreduce(tg->g, in, a, count, dt, TW_SUM);
    TW_MP_CHECK(st == TW_OK, "%s: %s", describe(&w, d, sizeof(d)), tw_strerror(st));
    agree(tg, a, bytes, &w);
    st = tw_allreduce(tg->g, b, b, count, dt, TW_SUM);
    TW_MP_CHECK(st == TW_OK, "%s in place: %s", describe(&w, d, sizeof(d)), tw_strerror(st));
    /* the same inputs reduced in place: the same bits */
    check_equal(b, a, &w);
    check_guard(a, bytes, &w, "recvbuf");
    check_guard(b, bytes, &w, "the in-place buffer");
    for (size_t i = 0; i < count; i++) { /* within rounding of the exact sum */
        double exact = 0, mag = 0, got = dt == TW_FLOAT ? ((float *)a)[i] : ((double *)a)[i];
        for (int j = 0; j < tg->n; j++) {
            double v = rounding_input(tg, round, tg->ranks[j], i, dt);
            exact += v;
            mag += fabs(v);
        }
        double eps = dt == TW_FLOAT ? 1.2e-7 : 2.3e-16;
        TW_MP_CHECK(fabs(got - exact) <= 2.0 * tg->n * eps * mag,
                    "%s: element %zu is %.17g, the exact sum %.17g", describe(&w, d, sizeof(d)), i,
                    got, exact);
    }
    tg->round += 3; /* the inputs' round, the hash, the in-place pass */
    free(in);
    free(a);
    free(b);
    tw_mp_tick();
}

/* ---- mode basic ----------------------------------------------------------- */

/* Element counts (bcast: bytes); the last two are bytes (1 MiB, 4 MiB). */
static const size_t small_counts[] = {0, 1, 7, 8, 56, 57, 64, 1000, 4096, 8192};
#define BIG_COUNTS 3 /* 64 Ki elements, 1 MiB, 4 MiB */

static size_t big_bytes(int i)
{
    static const size_t b[BIG_COUNTS] = {0, 1u << 20, 4u << 20};
    return b[i];
}

/* Every dtype x op, in place and not, allreduce and reduce (roots turn over
 * the members), counts turning over the small list; then every size, up to
 * 4 MiB where @p big. */
static void basic_schedule(tgroup_t *tg, bool big)
{
    unsigned combo = 0;

    tw_mp_phase("basic: barriers");
    for (int late = 0; late < tg->n && late < 4; late++) {
        do_barrier_timed(tg, (late + tg->n - 1) % tg->n);
    }
    tw_mp_phase("basic: bcast");
    for (size_t i = 0; i < TWT_ARRAY_SIZE(small_counts); i++) {
        do_bcast(tg, small_counts[i], (int)(i % (size_t)tg->n));
    }
    tw_mp_phase("basic: every dtype and op");
    for (int dt = 0; dt < NDT; dt++) {
        for (int op = 0; op < NOP; op++) {
            for (int inplace = 0; inplace < 2; inplace++, combo++) {
                size_t count = small_counts[combo % TWT_ARRAY_SIZE(small_counts)];
                do_reduction(tg, (tw_dtype_t)dt, (tw_redop_t)op, count, -1, inplace);
                do_reduction(tg, (tw_dtype_t)dt, (tw_redop_t)op, count,
                             (int)(combo % (unsigned)tg->n), inplace);
            }
        }
    }
    tw_mp_phase("basic: every size");
    for (size_t i = 0; i < TWT_ARRAY_SIZE(small_counts) + BIG_COUNTS; i++) {
        tw_dtype_t dt = (tw_dtype_t)(i % NDT);
        tw_redop_t op = (tw_redop_t)(i % (dt_float(dt) ? 4 : NOP));
        int root = (int)((i + 1) % (size_t)tg->n);
        size_t count;
        if (i < TWT_ARRAY_SIZE(small_counts)) {
            count = small_counts[i];
        } else if (!big) {
            break;
        } else if (i == TWT_ARRAY_SIZE(small_counts)) {
            count = 65536;
        } else {
            size_t b = big_bytes((int)(i - TWT_ARRAY_SIZE(small_counts)));
            if (twt_scale() > 1 && b > (1u << 20)) {
                b = 1u << 20; /* sanitizers: 1 MiB at most for reductions */
            }
            count = b / dt_size(dt);
        }
        do_reduction(tg, dt, op, count, -1, i % 2 == 0);
        do_reduction(tg, dt, op, count, root, i % 2 == 1);
        if (i >= TWT_ARRAY_SIZE(small_counts)) {
            size_t len = i == TWT_ARRAY_SIZE(small_counts)
                             ? 65536
                             : big_bytes((int)(i - TWT_ARRAY_SIZE(small_counts)));
            do_bcast(tg, len, root);
        }
    }
    tw_mp_phase("basic: rounding sums");
    do_rounding_sum(tg, TW_FLOAT, 57);
    do_rounding_sum(tg, TW_DOUBLE, 1000);
    do_rounding_sum(tg, TW_FLOAT, 8192);
    do_barrier(tg);
}

static void mode_basic(void)
{
    int l[MAX_RANKS], n;
    tgroup_t world, rev, rot, par, self;

    group_world(&world, 1);
    n = list_reversed(l);
    group_make(&rev, "reversed", l, n, 1, 2);
    n = list_rotated(l);
    group_make(&rot, "rotated", l, n, 2, 3);
    n = list_part(l, 0);
    group_make(&par, g_rank % 2 ? "odd ranks" : "even ranks", l, n, 3, 4);
    group_make(&self, "self", &g_rank, 1, 4, 5);

    basic_schedule(&world, true);
    basic_schedule(&rev, true);
    basic_schedule(&rot, false);
    basic_schedule(&par, false);
    basic_schedule(&self, false);

    tw_mp_phase("basic: destroy");
    group_free(&self);
    group_free(&par);
    group_free(&rot);
    group_free(&rev);
    printf("coll basic rank %d of %d: 5 groups, %llu + %llu + %llu + %llu + %llu collectives "
           "exact\n",
           g_rank, g_size, (unsigned long long)world.round, (unsigned long long)rev.round,
           (unsigned long long)rot.round, (unsigned long long)par.round,
           (unsigned long long)self.round);
}

/* ---- mode threads ---------------------------------------------------------- */

enum { TG_WORLD, TG_PARITY, TG_WORLD2, TG_REVERSED, NTG };

typedef struct worker {
    unsigned id;
    pthread_t th;
    tgroup_t groups[NTG];
    uint64_t done, cycles;
} worker_t;

static worker_t g_w[MAX_THREADS];

/* One random round on one of the worker's groups; the draws are the same
 * on every rank (seeded by the thread), so the members agree. */
static void mixed_round(worker_t *w, uint64_t *rng)
{
    uint64_t r1 = twt_rand(rng), r2 = twt_rand(rng), r3 = twt_rand(rng);
    tgroup_t *tg = &w->groups[r1 % NTG];
    tw_dtype_t dt = (tw_dtype_t)(r2 % NDT);
    tw_redop_t op = (tw_redop_t)((r2 >> 8) % NOP);
    size_t count = (r3 >> 32) % 64 == 0 ? (r3 >> 8) % 65536 : (r3 >> 8) % 300;
    int root = (int)((r3 >> 40) % (uint64_t)tg->n);
    bool inplace = (r1 >> 20) & 1;

    if (!combo_invalid(dt, op) || (r1 >> 24) % 8 == 0) { /* a few refused ones */
        switch ((r1 >> 8) % 8) {
        case 0:
            do_barrier(tg);
            break;
        case 1:
        case 2:
            do_bcast(tg, count, root);
            break;
        case 3:
        case 4:
        case 5:
            do_reduction(tg, dt, op, count, -1, inplace);
            break;
        default:
            do_reduction(tg, dt, op, count, root, inplace);
            break;
        }
    }
    w->done++;
}

static void *thread_main(void *arg)
{
    worker_t *w = arg;
    int l[MAX_RANKS], n;
    uint64_t key = 100 + 16 * (uint64_t)w->id, id = 1000 + 16 * (uint64_t)w->id;
    uint64_t rng = g_seed ^ (0x7EADull << 32) ^ w->id;

    n = list_world(l);
    group_make(&w->groups[TG_WORLD], "world list", l, n, key, id);
    n = list_part(l, (int)w->id % 2); /* even threads: even / odd ranks; odd: ranks 0-1 / 2-3 */
    group_make(&w->groups[TG_PARITY], "part list", l, n, key + 1, id + 1);
    n = list_world(l);
    group_make(&w->groups[TG_WORLD2], "world list, 2nd key", l, n, key + 2, id + 2);
    n = list_reversed(l);
    group_make(&w->groups[TG_REVERSED], "reversed list", l, n, key + 3, id + 3);
    for (uint64_t k = 0; k < g_rounds; k++) {
        mixed_round(w, &rng);
    }
    for (int i = 0; i < NTG; i++) {
        do_barrier(&w->groups[i]);
        group_free(&w->groups[i]);
    }
    /* Groups made and freed in turn, one key for all of them (they never
     * overlap): their slot sets and ids are reused while the other
     * threads do the same. */
    for (uint64_t c = 0; c < g_cycles; c++) {
        tgroup_t tg;
        n = c % 2 ? list_reversed(l) : list_world(l);
        group_make(&tg, c % 2 ? "cycled reversed list" : "cycled world list", l, n, key + 8,
                   id + 8 + c);
        do_reduction(&tg, TW_INT32, TW_SUM, c % 3 == 0 ? 5 : 3000, -1, c % 4 < 2);
        do_bcast(&tg, 100, (int)(c % (uint64_t)n));
        group_free(&tg);
        w->cycles++;
    }
    return NULL;
}

/* Two threads, one group: thread A holds an iallreduce outstanding while
 * thread B posts on the same group. */
typedef struct shared_group {
    tgroup_t tg;
    uint64_t attempts, refused;
    _Atomic uint64_t posted, completed, b_done; /* attempt + 1 */
} shared_group_t;

static shared_group_t g_sh;

static void wait_atomic(_Atomic uint64_t *v, uint64_t want, const char *what)
{
    double t0 = twt_now();
    while (atomic_load(v) < want) {
        TW_MP_CHECK(twt_now() - t0 < tw_mp_opts()->stall_s, "waited %.0f s for %s",
                    tw_mp_opts()->stall_s, what);
        if (g_manual) {
            tw_progress(g_ctx);
        }
        sched_yield();
    }
}

/* Wait for @p n completions on @p cq into @p c, progressing. */
static void cq_take(tw_cq_t *cq, tw_completion_t *c, int n, const char *what)
{
    double last = twt_now();
    int got = 0;
    while (got < n) {
        tw_progress(g_ctx);
        int k = tw_cq_wait(cq, c + got, n - got, 100);
        TW_MP_CHECK(k >= 0, "tw_cq_wait: %d", k);
        got += k;
        if (k > 0) {
            last = twt_now();
            tw_mp_tick();
        }
        TW_MP_CHECK(twt_now() - last < tw_mp_opts()->stall_s,
                    "%s: %d of %d completions after %.0f s", what, got, n, tw_mp_opts()->stall_s);
    }
}

#define HELD_COUNT (256u * 1024u) /* int64: 2 MiB */

static void *holder_main(void *arg)
{
    (void)arg;
    shared_group_t *sh = &g_sh;
    tgroup_t *tg = &sh->tg;
    tw_cq_t *cq;
    tw_completion_t c;
    int64_t *send = malloc(HELD_COUNT * 8), *recv = malloc(HELD_COUNT * 8);
    char token[8];

    TW_MP_CHECK(send != NULL && recv != NULL, "no memory");
    TW_MP_CHECK(tw_cq_create(g_ctx, 16, &cq) == TW_OK, "tw_cq_create");
    for (uint64_t k = 0; k < sh->attempts; k++) {
        int holder = (int)(k % (uint64_t)tg->n);
        uint64_t round = tg->round;
        if (tg->me != holder) { /* post only once B was refused at the holder */
            TW_MP_CHECK(tw_recv(g_ctx, tg->ranks[holder], TAG_TOKEN(k), 0, token, sizeof(token), cq,
                                token) == TW_OK,
                        "tw_recv token");
            cq_take(cq, &c, 1, "the holder's token");
            TW_MP_CHECK(c.op == TW_OP_RECV && c.status == TW_OK && c.user == token,
                        "token: op %d %s", (int)c.op, tw_strerror(c.status));
        }
        gen_input(TW_INT64, TW_SUM, input_base(tg, round, g_rank), HELD_COUNT, send);
        memset(recv, GARBAGE, HELD_COUNT * 8);
        tw_status_t st =
            tw_iallreduce(tg->g, send, recv, HELD_COUNT, TW_INT64, TW_SUM, cq, &sh->tg);
        TW_MP_CHECK(st == TW_OK, "shared group, attempt %llu: tw_iallreduce: %s",
                    (unsigned long long)k, tw_strerror(st));
        atomic_store(&sh->posted, k + 1);
        cq_take(cq, &c, 1, "the held iallreduce");
        TW_MP_CHECK(c.op == TW_OP_COLL && c.status == TW_OK && c.user == &sh->tg &&
                        c.peer == tg->me && c.length == HELD_COUNT * 8,
                    "the held iallreduce, attempt %llu (holder %d): op %d, %s, user %p, peer %d, "
                    "length %zu",
                    (unsigned long long)k, holder, (int)c.op, tw_strerror(c.status), c.user, c.peer,
                    c.length);
        void *want = expected(tg, round, TW_INT64, TW_SUM, HELD_COUNT);
        what_t w = {.coll = "held iallreduce",
                    .tg = tg,
                    .round = round,
                    .dt = TW_INT64,
                    .op = TW_SUM,
                    .count = HELD_COUNT,
                    .root = -1};
        check_equal(recv, want, &w);
        free(want);
        tg->round++;
        atomic_store(&sh->completed, k + 1);
        wait_atomic(&sh->b_done, k + 1, "thread B's allreduce");
    }
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy");
    free(send);
    free(recv);
    return NULL;
}

static void refused(tw_status_t st, const char *call, uint64_t k)
{
    TW_MP_CHECK(st == TW_ERR_INVALID,
                "attempt %llu: %s on a group with an iallreduce outstanding returned %s, not "
                "invalid",
                (unsigned long long)k, call, tw_strerror(st));
}

static void *intruder_main(void *arg)
{
    (void)arg;
    shared_group_t *sh = &g_sh;
    tgroup_t *tg = &sh->tg;
    tw_cq_t *cq;
    tw_completion_t c[MAX_RANKS];
    int64_t v[4] = {1, 2, 3, 4}, r[4];
    char token[8] = "token";

    TW_MP_CHECK(tw_cq_create(g_ctx, MAX_RANKS + 8, &cq) == TW_OK, "tw_cq_create");
    for (uint64_t k = 0; k < sh->attempts; k++) {
        int holder = (int)(k % (uint64_t)tg->n);
        if (tg->me == holder) {
            wait_atomic(&sh->posted, k + 1, "thread A's iallreduce");
            /* A's iallreduce cannot complete: the others post theirs
             * only on our token. */
            double t0 = twt_now();
            /* nonblocking first: one wrongly taken does not block */
            refused(tw_ibarrier(tg->g, cq, c), "tw_ibarrier", k);
            refused(tw_ireduce(tg->g, v, r, 4, TW_INT64, TW_SUM, 0, cq, c), "tw_ireduce", k);
            refused(tw_iallreduce(tg->g, v, v, 4, TW_INT64, TW_MIN, cq, c), "tw_iallreduce", k);
            refused(tw_barrier(tg->g), "tw_barrier", k);
            refused(tw_bcast(tg->g, v, sizeof(v), 0), "tw_bcast", k);
            refused(tw_allreduce(tg->g, v, r, 4, TW_INT64, TW_MAX), "tw_allreduce", k);
            sh->refused += 6;
            double dt = twt_now() - t0;
            TW_MP_CHECK(dt < 2.0, "the refused calls took %.2f s", dt);
            TW_MP_CHECK(tw_cq_poll(cq, c, MAX_RANKS) == 0, "a refused call completed");
            TW_MP_CHECK(atomic_load(&sh->completed) == k,
                        "attempt %llu: the held iallreduce completed before every member posted",
                        (unsigned long long)k);
            for (int i = 0; i < tg->n; i++) {
                if (i != holder) {
                    tw_status_t s = TW_MP_POST(g_ctx, tw_send(g_ctx, tg->ranks[i], TAG_TOKEN(k),
                                                              token, sizeof(token), cq, token));
                    TW_MP_CHECK(s == TW_OK, "send token: %s", tw_strerror(s));
                }
            }
            cq_take(cq, c, tg->n - 1, "token sends");
        }
        /* Not overlapping: after A's completed here, B's succeeds. */
        wait_atomic(&sh->completed, k + 1, "thread A's completion");
        do_reduction(tg, TW_UINT32, TW_BXOR, 33, -1, k % 2 == 0);
        atomic_store(&sh->b_done, k + 1);
    }
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy");
    return NULL;
}

static void mode_threads(void)
{
    for (unsigned i = 0; i < g_threads; i++) {
        g_w[i].id = i;
        TW_MP_CHECK(pthread_create(&g_w[i].th, NULL, thread_main, &g_w[i]) == 0, "pthread_create");
    }
    uint64_t rounds = 0;
    for (unsigned i = 0; i < g_threads; i++) {
        pthread_join(g_w[i].th, NULL);
        rounds += g_w[i].done;
    }
    TW_MP_CHECK(rounds == g_rounds * g_threads, "%llu rounds", (unsigned long long)rounds);
    for (unsigned i = 0; i < g_threads; i++) {
        TW_MP_CHECK(g_w[i].cycles == g_cycles, "thread %u: %llu group cycles", i,
                    (unsigned long long)g_w[i].cycles);
    }

    tw_mp_phase("threads: one group, two threads");
    int l[MAX_RANKS], n = list_world(l);
    group_make(&g_sh.tg, "shared", l, n, 99, 99);
    g_sh.attempts =
        g_size < 2 || g_threads < 2 ? 0 : twt_scaled(8u * (unsigned)g_size, 2u * g_size);
    pthread_t a, b;
    TW_MP_CHECK(pthread_create(&a, NULL, holder_main, NULL) == 0, "pthread_create");
    TW_MP_CHECK(pthread_create(&b, NULL, intruder_main, NULL) == 0, "pthread_create");
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (g_sh.attempts > 0) {
        TW_MP_CHECK(g_sh.refused >= 6, "no call was refused on the busy group");
    }
    do_barrier(&g_sh.tg);
    group_free(&g_sh.tg);
    printf("coll threads rank %d of %d: %u threads x %llu mixed rounds on 4 groups each exact, "
           "%llu groups made and freed in turn; shared group: %llu attempts, %llu calls "
           "refused while held\n",
           g_rank, g_size, g_threads, (unsigned long long)g_rounds, (unsigned long long)g_cycles,
           (unsigned long long)g_sh.attempts, (unsigned long long)g_sh.refused);
}

/* ---- mode nonblocking ------------------------------------------------------ */

/* One nonblocking collective in flight. */
typedef struct nbop {
    int kind; /* 0 barrier, 1 bcast, 2 reduce, 3 allreduce */
    tgroup_t *tg;
    uint64_t round, bseed;
    tw_dtype_t dt;
    tw_redop_t op;
    size_t count; /* elements; bytes for bcast */
    int root;
    bool inplace, done;
    unsigned char *send, *recv, *input;
} nbop_t;

static const char *const nb_name[4] = {"ibarrier", "ibcast", "ireduce", "iallreduce"};

static void nb_what(const nbop_t *o, what_t *w)
{
    *w = (what_t){.coll = o->kind == 1 ? "bcast (ibcast)" : nb_name[o->kind],
                  .tg = o->tg,
                  .round = o->round,
                  .dt = o->dt,
                  .op = o->op,
                  .count = o->count,
                  .root = o->root,
                  .inplace = o->inplace};
}

static void nb_post(nbop_t *o, tgroup_t *tg, uint64_t *rng, tw_cq_t *cq)
{
    uint64_t r1 = twt_rand(rng), r2 = twt_rand(rng);
    tw_status_t st = TW_OK;
    *o = (nbop_t){.kind = (int)(r1 % 4),
                  .tg = tg,
                  .round = tg->round++,
                  .dt = (tw_dtype_t)((r1 >> 8) % NDT),
                  .root = (int)((r1 >> 16) % (uint64_t)tg->n),
                  .inplace = (r1 >> 24) & 1,
                  .count = (r2 >> 40) % 16 == 0 ? (r2 >> 8) % 262144 : (r2 >> 8) % 2000};
    o->op = (tw_redop_t)((r2 >> 4) % (dt_float(o->dt) ? 4 : NOP));
    size_t bytes = o->kind == 1 ? o->count : o->count * dt_size(o->dt);
    if (o->kind == 1) {
        o->bseed = input_base(tg, o->round, tg->ranks[o->root]);
        o->send = buf_new(bytes, GARBAGE);
        if (tg->me == o->root) {
            twt_fill(o->send, bytes, o->bseed);
        }
    } else if (o->kind >= 2) {
        o->send = buf_new(bytes, 0);
        gen_input(o->dt, o->op, input_base(tg, o->round, tg->ranks[tg->me]), o->count, o->send);
        o->input = buf_new(bytes, 0);
        memcpy(o->input, o->send, bytes);
        o->recv = o->inplace ? o->send : buf_new(bytes, CANARY_BYTE);
    }
    switch (o->kind) {
    case 0:
        st = tw_ibarrier(tg->g, cq, o);
        break;
    case 1:
        st = tw_ibcast(tg->g, o->send, o->count, o->root, cq, o);
        break;
    case 2:
        st = tw_ireduce(tg->g, o->send, o->recv, o->count, o->dt, o->op, o->root, cq, o);
        break;
    default:
        st = tw_iallreduce(tg->g, o->send, o->recv, o->count, o->dt, o->op, cq, o);
        break;
    }
    what_t w;
    char d[256];
    nb_what(o, &w);
    TW_MP_CHECK(st == TW_OK, "posting %s: %s", describe(&w, d, sizeof(d)), tw_strerror(st));
}

static void nb_complete(nbop_t *o, const tw_completion_t *c)
{
    what_t w;
    char d[256];
    nb_what(o, &w);
    size_t bytes = o->kind == 1 ? o->count : o->kind == 0 ? 0 : o->count * dt_size(o->dt);
    bool result_here = o->kind != 2 || o->tg->me == o->root;
    TW_MP_CHECK(!o->done, "%s completed twice", describe(&w, d, sizeof(d)));
    o->done = true;
    TW_MP_CHECK(c->status == TW_OK, "%s: completion %s", describe(&w, d, sizeof(d)),
                tw_strerror(c->status));
    TW_MP_CHECK(c->peer == o->tg->me, "%s: completion peer %d, want the group rank %d",
                describe(&w, d, sizeof(d)), c->peer, o->tg->me);
    /* length = bytes of the result; a reduce's non-root has none (0), or
     * may report the count's bytes. */
    TW_MP_CHECK(c->length == bytes || (!result_here && c->length == 0),
                "%s: completion length %zu, want %zu", describe(&w, d, sizeof(d)), c->length,
                bytes);
    if (o->kind == 1) {
        if (!twt_verify(o->send, bytes, o->bseed)) {
            unsigned char *want = buf_new(bytes, 0);
            twt_fill(want, bytes, o->bseed);
            check_equal(o->send, want, &w);
        }
        check_guard(o->send, bytes, &w, "the buffer");
    } else if (o->kind >= 2) {
        if (result_here) {
            void *want = expected(o->tg, o->round, o->dt, o->op, o->count);
            check_equal(o->recv, want, &w);
            free(want);
        } else if (o->inplace) {
            TW_MP_CHECK(memcmp(o->recv, o->input, bytes) == 0,
                        "%s: a non-root's in-place buffer changed", describe(&w, d, sizeof(d)));
        } else {
            TW_MP_CHECK(all_bytes(o->recv, bytes, CANARY_BYTE), "%s: a non-root's recvbuf changed",
                        describe(&w, d, sizeof(d)));
        }
        if (!o->inplace) {
            TW_MP_CHECK(memcmp(o->send, o->input, bytes) == 0, "%s: sendbuf changed",
                        describe(&w, d, sizeof(d)));
            check_guard(o->recv, bytes, &w, "recvbuf");
        }
        check_guard(o->send, bytes, &w, "sendbuf");
    }
    if (o->recv != o->send) {
        free(o->recv);
    }
    free(o->send);
    free(o->input);
    o->send = o->recv = o->input = NULL;
}

/* The ring's messages: to (rank + 1), from (rank - 1); the payload of
 * (thread, round) from rank r is twt_fill'ed from a seed of them. */
typedef struct ring {
    unsigned char *sbuf, *rbuf;
    size_t len;
    bool sent, received;
    uint64_t sum_sent, sum_recv, bytes_sent, bytes_recv, msgs;
} ring_t;

static uint64_t ring_seed(unsigned t, uint64_t k, int from)
{
    uint64_t s = g_seed ^ 0x7269ull << 48 ^ (uint64_t)t << 40 ^ k << 8 ^ (uint64_t)from;
    return twt_rand(&s);
}

static size_t ring_len(unsigned t, uint64_t k)
{
    uint64_t s = g_seed ^ (uint64_t)t << 40 ^ k, r = twt_rand(&s);
    return r % 8 == 0 ? r % (256u * 1024) : r % 4096;
}

/* Checked busy work: sum of i for i < n must be n (n - 1) / 2. */
static uint64_t compute(uint64_t n)
{
    volatile uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        sum += i;
    }
    TW_MP_CHECK(sum == n * (n - 1) / 2, "arithmetic while collectives ran: %llu",
                (unsigned long long)sum);
    return n;
}

typedef struct nbworker {
    unsigned id;
    pthread_t th;
    uint64_t colls, work, polls, waits;
    ring_t ring;
} nbworker_t;

static nbworker_t g_nb[MAX_THREADS];

static void *nb_main(void *arg)
{
    nbworker_t *w = arg;
    tgroup_t ga, gb;
    int l[MAX_RANKS], n;
    uint64_t rng = g_seed ^ (0x1B0Cull << 32) ^ w->id;
    tw_cq_t *cq;
    tw_completion_t c[8];
    int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;

    n = list_world(l);
    group_make(&ga, "world list", l, n, 200 + 4 * (uint64_t)w->id, 2000 + 4 * (uint64_t)w->id);
    n = list_reversed(l);
    group_make(&gb, "reversed list", l, n, 201 + 4 * (uint64_t)w->id, 2001 + 4 * (uint64_t)w->id);
    TW_MP_CHECK(tw_cq_create(g_ctx, 32, &cq) == TW_OK, "tw_cq_create");
    for (uint64_t k = 0; k < g_rounds; k++) {
        nbop_t a, b;
        ring_t *rg = &w->ring;
        nb_post(&a, &ga, &rng, cq);
        nb_post(&b, &gb, &rng, cq);
        size_t len = ring_len(w->id, k);
        rg->rbuf = buf_new(len, GARBAGE);
        rg->sbuf = buf_new(len, 0);
        rg->sum_sent += twt_fill(rg->sbuf, len, ring_seed(w->id, k, g_rank));
        rg->sent = rg->received = false;
        tw_status_t st = tw_recv(g_ctx, left, TAG_RING(w->id, k), 0, rg->rbuf, len, cq, rg->rbuf);
        TW_MP_CHECK(st == TW_OK, "tw_recv: %s", tw_strerror(st));
        st = TW_MP_POST(g_ctx,
                        tw_send(g_ctx, right, TAG_RING(w->id, k), rg->sbuf, len, cq, rg->sbuf));
        TW_MP_CHECK(st == TW_OK, "tw_send: %s", tw_strerror(st));
        rg->bytes_sent += len;
        /* Compute between polls until all four are in: poll in even
         * rounds, wait (briefly) in odd ones. */
        int left_ops = 4;
        double last = twt_now();
        while (left_ops > 0) {
            w->work += compute(2000);
            if (g_manual) {
                tw_progress(g_ctx);
            }
            int got;
            if (k % 2 == 0) {
                got = tw_cq_poll(cq, c, 8);
                w->polls++;
            } else {
                got = tw_cq_wait(cq, c, 8, 1);
                w->waits++;
            }
            TW_MP_CHECK(got >= 0, "tw_cq_poll/wait: %d", got);
            for (int i = 0; i < got; i++) {
                if (c[i].user == &a || c[i].user == &b) {
                    TW_MP_CHECK(c[i].op == TW_OP_COLL, "a collective completed as op %d",
                                (int)c[i].op);
                    nb_complete(c[i].user, &c[i]);
                } else if (c[i].user == rg->sbuf) {
                    TW_MP_CHECK(c[i].op == TW_OP_SEND && c[i].status == TW_OK && !rg->sent &&
                                    c[i].peer == right,
                                "ring send: op %d %s peer %d", (int)c[i].op,
                                tw_strerror(c[i].status), c[i].peer);
                    rg->sent = true;
                } else {
                    TW_MP_CHECK(c[i].user == rg->rbuf && c[i].op == TW_OP_RECV &&
                                    c[i].status == TW_OK && !rg->received && c[i].peer == left &&
                                    c[i].length == len && c[i].tag == TAG_RING(w->id, k),
                                "ring receive (round %llu): op %d %s peer %d length %zu/%zu",
                                (unsigned long long)k, (int)c[i].op, tw_strerror(c[i].status),
                                c[i].peer, c[i].length, len);
                    TW_MP_CHECK(twt_verify(rg->rbuf, len, ring_seed(w->id, k, left)),
                                "ring message %llu from rank %d corrupted", (unsigned long long)k,
                                left);
                    rg->sum_recv += twt_checksum(rg->rbuf, len);
                    rg->bytes_recv += len;
                    rg->received = true;
                }
                left_ops--;
            }
            if (got > 0) {
                last = twt_now();
                tw_mp_tick();
            }
            TW_MP_CHECK(twt_now() - last < tw_mp_opts()->stall_s,
                        "thread %u round %llu: %d of 4 operations outstanding after %.0f s "
                        "(%s %s, %s %s, send %s, receive %s)",
                        w->id, (unsigned long long)k, left_ops, tw_mp_opts()->stall_s,
                        nb_name[a.kind], a.done ? "done" : "waiting", nb_name[b.kind],
                        b.done ? "done" : "waiting", rg->sent ? "done" : "waiting",
                        rg->received ? "done" : "waiting");
        }
        TW_MP_CHECK(a.done && b.done && rg->sent && rg->received, "round %llu incomplete",
                    (unsigned long long)k);
        free(rg->sbuf);
        free(rg->rbuf);
        rg->msgs++;
        w->colls += 2;
    }
    TW_MP_CHECK(tw_cq_poll(cq, c, 8) == 0, "a completion after the last one");
    /* Over the job: what was sent is what was received (sums of the
     * checksums and the bytes, through an allreduce). */
    uint64_t v[4] = {w->ring.sum_sent, w->ring.sum_recv, w->ring.bytes_sent, w->ring.bytes_recv};
    tw_status_t st = tw_allreduce(ga.g, v, v, 4, TW_UINT64, TW_SUM);
    TW_MP_CHECK(st == TW_OK, "tw_allreduce of the counts: %s", tw_strerror(st));
    TW_MP_CHECK(v[0] == v[1] && v[2] == v[3],
                "thread %u: the job sent checksum %#llx, %llu bytes; received %#llx, %llu bytes",
                w->id, (unsigned long long)v[0], (unsigned long long)v[2], (unsigned long long)v[1],
                (unsigned long long)v[3]);
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy");
    group_free(&gb);
    group_free(&ga);
    return NULL;
}

static void mode_nonblocking(void)
{
    for (unsigned i = 0; i < g_threads; i++) {
        g_nb[i].id = i;
        TW_MP_CHECK(pthread_create(&g_nb[i].th, NULL, nb_main, &g_nb[i]) == 0, "pthread_create");
    }
    uint64_t colls = 0, msgs = 0, bytes = 0, work = 0;
    for (unsigned i = 0; i < g_threads; i++) {
        pthread_join(g_nb[i].th, NULL);
        colls += g_nb[i].colls;
        msgs += g_nb[i].ring.msgs;
        bytes += g_nb[i].ring.bytes_recv;
        work += g_nb[i].work;
    }
    TW_MP_CHECK(colls == 2 * g_rounds * g_threads && msgs == g_rounds * g_threads,
                "%llu collectives, %llu messages", (unsigned long long)colls,
                (unsigned long long)msgs);
    printf("coll nonblocking rank %d of %d (%s progress): %u threads: %llu collectives exact, "
           "%llu ring messages (%.1f MiB) intact, %llu additions checked alongside\n",
           g_rank, g_size, g_manual ? "manual" : "thread", g_threads, (unsigned long long)colls,
           (unsigned long long)msgs, (double)bytes / (1 << 20), (unsigned long long)work);
}

/* ---- mode errors ----------------------------------------------------------- */

#define EXPECT_INVALID(call)                                                                    \
    do {                                                                                        \
        double t0_ = twt_now();                                                                 \
        tw_status_t st_ = (call);                                                               \
        TW_MP_CHECK(st_ == TW_ERR_INVALID, "%s returned %s, not invalid", #call,                \
                    tw_strerror(st_));                                                          \
        TW_MP_CHECK(twt_now() - t0_ < 2.0, "%s took %.1f s to refuse", #call, twt_now() - t0_); \
        bad_calls++;                                                                            \
    } while (0)

static void mode_leave(void)
{
    size_t n = (1u << 20) / sizeof(double), nb = 256u << 10;
    double *in = malloc(n * sizeof(double)), *out = malloc(n * sizeof(double));
    unsigned char *b = malloc(nb);
    tw_group_t *w = tw_group_world(g_ctx);

    TW_MP_CHECK(in != NULL && out != NULL && b != NULL, "malloc");
    for (uint64_t round = 0; round < 4; round++) {
        for (size_t i = 0; i < n; i++) {
            in[i] = (double)((i + round * 7 + (size_t)g_rank) % 1000);
        }
        tw_status_t st = tw_allreduce(w, in, out, n, TW_DOUBLE, TW_SUM);
        TW_MP_CHECK(st == TW_OK, "leave: allreduce round %llu: %s", (unsigned long long)round,
                    tw_strerror(st));
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < g_size; r++) {
                want += (double)((i + round * 7 + (size_t)r) % 1000);
            }
            TW_MP_CHECK(out[i] == want, "leave: allreduce round %llu element %zu: %g, not %g",
                        (unsigned long long)round, i, out[i], want);
        }
        int root = (int)(round % (uint64_t)g_size);
        for (size_t i = 0; i < nb; i++) {
            b[i] = g_rank == root ? (unsigned char)(i * 31 + round) : 0;
        }
        st = tw_bcast(w, b, nb, root);
        TW_MP_CHECK(st == TW_OK, "leave: bcast round %llu: %s", (unsigned long long)round,
                    tw_strerror(st));
        for (size_t i = 0; i < nb; i++) {
            TW_MP_CHECK(b[i] == (unsigned char)(i * 31 + round), "leave: bcast byte %zu", i);
        }
        tw_mp_tick();
    }
    free(in);
    free(out);
    free(b);
}

static void mode_errors(void)
{
    tgroup_t world, self, busy;
    tw_group_t *g = NULL, *w;
    tw_cq_t *cq;
    int64_t v[4] = {1, 2, 3, 4}, r[4];
    double f[4] = {1, 2, 3, 4}; /* room for 4 of either floating type */
    unsigned bad_calls = 0;
    int l[MAX_RANKS] = {0}, n = g_size;
    const tw_dtype_t bad_dt = (tw_dtype_t)(TW_UINT8 + 1), neg_dt = (tw_dtype_t)-1;
    const tw_redop_t bad_op = (tw_redop_t)(TW_BXOR + 1), neg_op = (tw_redop_t)-1;

    group_world(&world, 1);
    w = world.g;
    group_make(&self, "self", &g_rank, 1, 7, 7);
    TW_MP_CHECK(tw_cq_create(g_ctx, 16, &cq) == TW_OK, "tw_cq_create");

    /* NULL group */
    TW_MP_CHECK(tw_group_rank(NULL) == -1 && tw_group_size(NULL) == -1, "rank/size of NULL");
    EXPECT_INVALID(tw_barrier(NULL));
    EXPECT_INVALID(tw_bcast(NULL, v, sizeof(v), 0));
    EXPECT_INVALID(tw_reduce(NULL, v, r, 4, TW_INT64, TW_SUM, 0));
    EXPECT_INVALID(tw_allreduce(NULL, v, r, 4, TW_INT64, TW_SUM));
    EXPECT_INVALID(tw_ibarrier(NULL, cq, NULL));
    EXPECT_INVALID(tw_ibcast(NULL, v, sizeof(v), 0, cq, NULL));
    EXPECT_INVALID(tw_ireduce(NULL, v, r, 4, TW_INT64, TW_SUM, 0, cq, NULL));
    EXPECT_INVALID(tw_iallreduce(NULL, v, r, 4, TW_INT64, TW_SUM, cq, NULL));
    /* roots out of range */
    EXPECT_INVALID(tw_bcast(w, v, sizeof(v), n));
    EXPECT_INVALID(tw_bcast(w, v, sizeof(v), -1));
    EXPECT_INVALID(tw_reduce(w, v, r, 4, TW_INT64, TW_SUM, n));
    EXPECT_INVALID(tw_reduce(w, v, r, 4, TW_INT64, TW_SUM, -1));
    EXPECT_INVALID(tw_ibcast(w, v, sizeof(v), n, cq, NULL));
    EXPECT_INVALID(tw_ireduce(w, v, r, 4, TW_INT64, TW_SUM, n + 5, cq, NULL));
    EXPECT_INVALID(tw_reduce(self.g, v, r, 4, TW_INT64, TW_SUM, 1));
    /* bad dtype and op values; bitwise ops on floating types */
    EXPECT_INVALID(tw_allreduce(w, v, r, 4, bad_dt, TW_SUM));
    EXPECT_INVALID(tw_allreduce(w, v, r, 4, neg_dt, TW_SUM));
    EXPECT_INVALID(tw_allreduce(w, v, r, 4, TW_INT64, bad_op));
    EXPECT_INVALID(tw_allreduce(w, v, r, 4, TW_INT64, neg_op));
    EXPECT_INVALID(tw_reduce(w, v, r, 4, bad_dt, TW_SUM, 0));
    EXPECT_INVALID(tw_reduce(w, v, r, 4, TW_INT64, bad_op, 0));
    EXPECT_INVALID(tw_iallreduce(w, v, r, 4, bad_dt, TW_SUM, cq, NULL));
    EXPECT_INVALID(tw_ireduce(w, v, r, 4, TW_INT64, bad_op, 0, cq, NULL));
    EXPECT_INVALID(tw_allreduce(w, f, f, 4, TW_FLOAT, TW_BAND));
    EXPECT_INVALID(tw_allreduce(w, f, f, 4, TW_DOUBLE, TW_BXOR));
    EXPECT_INVALID(tw_reduce(w, f, f, 4, TW_FLOAT, TW_BOR, 0));
    EXPECT_INVALID(tw_iallreduce(w, f, f, 2, TW_DOUBLE, TW_BOR, cq, NULL));
    /* NULL buffers with data; a NULL recvbuf at the root */
    EXPECT_INVALID(tw_bcast(w, NULL, 8, 0));
    EXPECT_INVALID(tw_allreduce(w, NULL, r, 4, TW_INT64, TW_SUM));
    EXPECT_INVALID(tw_allreduce(w, v, NULL, 4, TW_INT64, TW_SUM));
    EXPECT_INVALID(tw_reduce(w, NULL, r, 4, TW_INT64, TW_SUM, 0));
    EXPECT_INVALID(tw_reduce(self.g, v, NULL, 4, TW_INT64, TW_SUM, 0));
    EXPECT_INVALID(tw_ibcast(w, NULL, 8, 0, cq, NULL));
    EXPECT_INVALID(tw_iallreduce(w, v, NULL, 4, TW_INT64, TW_SUM, cq, NULL));
    EXPECT_INVALID(tw_ireduce(w, NULL, r, 4, TW_INT64, TW_SUM, 0, cq, NULL));
    /* nonblocking without a CQ */
    EXPECT_INVALID(tw_ibarrier(w, NULL, NULL));
    EXPECT_INVALID(tw_iallreduce(w, v, r, 4, TW_INT64, TW_SUM, NULL, NULL));
    TW_MP_CHECK(tw_cq_poll(cq, (tw_completion_t[1]){0}, 1) == 0, "a refused call completed");
    /* bad rank lists: the caller not in it, duplicates, out of range */
    for (int i = 0, k = 0; i < g_size; i++) {
        if (i != g_rank) {
            l[k++] = i;
        }
    }
    if (g_size > 1) {
        EXPECT_INVALID(tw_group_create(g_ctx, l, g_size - 1, 11, &g));
    }
    l[0] = g_rank;
    l[1] = g_rank;
    EXPECT_INVALID(tw_group_create(g_ctx, l, 2, 12, &g));
    l[1] = g_size;
    EXPECT_INVALID(tw_group_create(g_ctx, l, 2, 13, &g));
    l[1] = -1;
    EXPECT_INVALID(tw_group_create(g_ctx, l, 2, 14, &g));
    EXPECT_INVALID(tw_group_create(g_ctx, l, 0, 15, &g));
    EXPECT_INVALID(tw_group_create(g_ctx, l, -1, 16, &g));
    EXPECT_INVALID(tw_group_create(g_ctx, l, g_size + 1, 16, &g));
    EXPECT_INVALID(tw_group_create(g_ctx, NULL, 1, 17, &g));
    EXPECT_INVALID(tw_group_create(g_ctx, &g_rank, 1, 18, NULL));
    EXPECT_INVALID(tw_group_create(NULL, &g_rank, 1, 19, &g));
    TW_MP_CHECK(g == NULL, "a refused tw_group_create set the group");
    /* the world group is not destroyed; neither is NULL */
    EXPECT_INVALID(tw_group_destroy(w));
    EXPECT_INVALID(tw_group_destroy(NULL));

    /* Every group still works. */
    do_reduction(&world, TW_INT64, TW_SUM, 4, -1, false);
    do_reduction(&world, TW_INT32, TW_MAX, 4, g_size - 1, false);
    do_bcast(&world, 100, 0);
    do_reduction(&self, TW_UINT8, TW_BXOR, 5, 0, true);

    /* A group with a collective outstanding is not destroyed: rank 0
     * holds an iallreduce the others post only when it says so. */
    n = list_world(l);
    group_make(&busy, "busy", l, n, 20, 20);
    int64_t in[4], out[4];
    char token[8] = "token";
    tw_completion_t c[MAX_RANKS];
    gen_input(TW_INT64, TW_SUM, input_base(&busy, busy.round, g_rank), 4, in);
    if (g_rank != 0) {
        TW_MP_CHECK(tw_recv(g_ctx, 0, TAG_TOKEN(0), 0, token, sizeof(token), cq, token) == TW_OK,
                    "tw_recv token");
        cq_take(cq, c, 1, "rank 0's token");
    }
    TW_MP_CHECK(tw_iallreduce(busy.g, in, out, 4, TW_INT64, TW_SUM, cq, &busy) == TW_OK,
                "tw_iallreduce on the busy group");
    if (g_rank == 0) {
        if (g_size > 1) {
            EXPECT_INVALID(tw_group_destroy(busy.g));
        }
        for (int i = 1; i < g_size; i++) {
            TW_MP_CHECK(TW_MP_POST(g_ctx, tw_send(g_ctx, i, TAG_TOKEN(0), token, sizeof(token), cq,
                                                  token)) == TW_OK,
                        "send token");
        }
        cq_take(cq, c, g_size - 1, "token sends");
    }
    cq_take(cq, c, 1, "the busy group's iallreduce");
    TW_MP_CHECK(c[0].user == &busy && c[0].op == TW_OP_COLL && c[0].status == TW_OK,
                "the busy group's iallreduce: %s", tw_strerror(c[0].status));
    void *want = expected(&busy, busy.round, TW_INT64, TW_SUM, 4);
    what_t wh = {
        .coll = "iallreduce", .tg = &busy, .dt = TW_INT64, .op = TW_SUM, .count = 4, .root = -1};
    check_equal(out, want, &wh);
    free(want);
    busy.round++;
    do_barrier(&busy);
    group_free(&busy);

    /* A full CQ: TW_ERR_AGAIN, and the group is not left busy by it. */
    tw_cq_t *one;
    TW_MP_CHECK(tw_cq_create(g_ctx, 1, &one) == TW_OK, "tw_cq_create");
    TW_MP_CHECK(tw_ibarrier(self.g, one, &self) == TW_OK, "tw_ibarrier on the self group");
    tw_status_t st = tw_ibarrier(w, one, &world);
    TW_MP_CHECK(st == TW_ERR_AGAIN, "tw_ibarrier on a full CQ returned %s", tw_strerror(st));
    cq_take(one, c, 1, "the self group's ibarrier");
    TW_MP_CHECK(c[0].user == &self && c[0].op == TW_OP_COLL && c[0].status == TW_OK,
                "the self group's ibarrier: %s", tw_strerror(c[0].status));
    st = tw_ibarrier(w, one, &world);
    TW_MP_CHECK(st == TW_OK, "tw_ibarrier after the CQ drained: %s", tw_strerror(st));
    cq_take(one, c, 1, "the world's ibarrier");
    TW_MP_CHECK(c[0].user == &world && c[0].op == TW_OP_COLL && c[0].status == TW_OK,
                "the world's ibarrier: %s", tw_strerror(c[0].status));
    TW_MP_CHECK(tw_cq_destroy(one) == TW_OK, "tw_cq_destroy");
    group_free(&self);
    do_barrier(&world);
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy");
    printf("coll errors rank %d of %d: %u bad calls refused at once; the groups went on\n", g_rank,
           g_size, bad_calls);
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    tw_mp_opts_t o = {
        .threads = 2, .max_threads = MAX_THREADS, .messages = 2000, .seed = 1, .stall_s = 30};
    const char *mode = NULL;
    const char *pt = getenv("TW_PROGRESS_THREADS");

    /* --mode NAME (or --mode=NAME), taken out before the common options. */
    for (int i = 1; i < argc; i++) {
        int drop = 0;
        if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
            mode = argv[i + 1];
            drop = 2;
        } else if (strncmp(argv[i], "--mode=", 7) == 0) {
            mode = argv[i] + 7;
            drop = 1;
        }
        if (drop > 0) {
            memmove(&argv[i], &argv[i + drop], (size_t)(argc - i - drop + 1) * sizeof(char *));
            argc -= drop;
            i--;
        }
    }
    tw_mp_parse(argc, argv, "test_coll --mode basic|threads|nonblocking|leave|errors",
                TW_MP_THREADS | TW_MP_MESSAGES | TW_MP_SEED | TW_MP_STALL | TW_MP_STATS, NULL, 0,
                &o);
    TWT_CHECKF(mode != NULL && (strcmp(mode, "basic") == 0 || strcmp(mode, "threads") == 0 ||
                                strcmp(mode, "nonblocking") == 0 || strcmp(mode, "leave") == 0 ||
                                strcmp(mode, "errors") == 0),
               "--mode basic|threads|nonblocking|leave|errors (got %s)", mode ? mode : "none");
    g_seed = o.seed;
    g_threads = o.threads;
    g_rounds = twt_scaled(o.messages, 4);
    g_cycles = twt_scaled(o.messages / 20, 4);
    g_manual = pt != NULL && strcmp(pt, "0") == 0;

    g_ctx = tw_mp_init();
    g_rank = tw_mp_rank();
    g_size = tw_mp_size();
    TW_MP_CHECK(g_size <= MAX_RANKS, "at most %d ranks", MAX_RANKS);
    tw_mp_watchdog_start(o.stall_s + 10, NULL);
    double t0 = twt_now();
    tw_mp_phase(mode);
    if (strcmp(mode, "basic") == 0) {
        mode_basic();
    } else if (strcmp(mode, "threads") == 0) {
        mode_threads();
    } else if (strcmp(mode, "nonblocking") == 0) {
        mode_nonblocking();
    } else if (strcmp(mode, "leave") == 0) {
        mode_leave();
    } else {
        mode_errors();
    }
    double dt = twt_now() - t0;
    if (strcmp(mode, "leave") != 0) {
        tw_mp_phase("end barrier");
        tw_mp_barrier(g_ctx, TAG_END);
        tw_mp_stats(g_ctx);
    }
    tw_mp_phase("tw_finalize");
    tw_status_t st = tw_finalize(g_ctx);
    tw_mp_watchdog_stop();
    TW_MP_CHECK(st == TW_OK, "tw_finalize: %s", tw_strerror(st));
    printf("coll %s rank %d: %.2f s (seed %llu)\n", mode, g_rank, dt, (unsigned long long)g_seed);
    return 0;
}
