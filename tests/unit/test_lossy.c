/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The lossy transport (src/transports/lossy/tw_lossy.c) on a manual
 * progress engine, with exact expectations; around `self` (rank 0 of 1)
 * unless a case says otherwise. One ctest entry per case
 * (unit/lossy.cmake); no case may log a warning:
 *
 *   passthrough      the wrapper does what self does, in self's place;
 *                    no faults delivers everything in order;
 *   drop_all         drop=1 delivers nothing (a dropped zero-copy frame
 *                    completes from progress); drop=0 everything;
 *   drop_seeded      a seeded drop delivers the frames the fault streams
 *                    say (the same set twice);
 *   corrupt          corrupt flips exactly the bit the stream names (tx,
 *                    rx, zero-copy);
 *   dup              dup delivers twice per direction (zero-copy: one
 *                    completion);
 *   reorder          reorder delivers everything, out of order, within
 *                    2 ms, in the order the release points say;
 *   delay            delay waits delay_time;
 *   scoped           scoped faults hit only their am ids; bad wraps refused;
 *   kill_self        kill fails sends, noticed by progress or by the next
 *                    frame; held frames never leave;
 *   kill_reports     around the fake transport (tests/common/tw_fake_tl.h)
 *                    as rank 1 of 4: the kill reports each other peer once,
 *                    arrivals from them then vanish;
 *   again            around the fake, which refuses every k-th send: a
 *                    refused send takes its draw back, and refused held
 *                    frames and duplicates go later, once;
 *   blackhole        the blackhole drops in its window only;
 *   blackhole_after  from the N-th decision on, everything is blackholed;
 *   set_spec         the spec changed at run time;
 *   close_held       closing with frames held;
 *   threads          a multi-threaded run whose deliveries match the
 *                    counters exactly (the ThreadSanitizer case).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/tw_log.h"
#include "core/tw_time.h"
#include "progress/tw_pe.h"
#include "transports/base/tw_tl.h"
#include "transports/lossy/tw_lossy.h"
#include "tw_fake_tl.h"
#include "tw_test.h"

#define HDR_LEN      8
#define DATA_LEN     56
#define FRAME_LEN    (HDR_LEN + DATA_LEN)
#define MAX_ARRIVALS 8192
#define AM_DATA      4
#define AM_ACK       5
#define AM_INLINE    6
#define MS           1000000ull

typedef struct arrival {
    uint8_t am_id;
    int src;
    uint64_t t_ns;
    unsigned char bytes[FRAME_LEN];
} arrival_t;

static struct rig {
    twt_fake_t *fake; /* the inner's wire, when the inner is the fake (else self) */
    tw_pe_t *pe;
    tw_tl_iface_t *iface;
    tw_fault_spec_t spec;
    uint64_t t_before, t_after; /* around tw_lossy_wrap: the schedule's zero */
    unsigned narr;
    arrival_t arr[MAX_ARRIVALS];
    int downs[8];
    tw_status_t down_why[8];
    int rndvs;
} rig;

static atomic_uint mt_arrivals;

/* ---- helpers --------------------------------------------------------------------- */

static void make_frame(uint32_t seq, unsigned char *f)
{
    uint32_t magic = 0x1055u;

    memcpy(f, &seq, 4);
    memcpy(f + 4, &magic, 4);
    twt_fill(f + HDR_LEN, DATA_LEN, seq + 1u);
}

static uint32_t frame_seq(const unsigned char *f)
{
    uint32_t seq;

    memcpy(&seq, f, 4);
    return seq;
}

static void recv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len)
{
    arrival_t *a;

    (void)arg;
    TWT_EQ(hdr_len, HDR_LEN);
    TWT_EQ(len, DATA_LEN);
    TWT_CHECK(rig.narr < MAX_ARRIVALS);
    a = &rig.arr[rig.narr++];
    a->am_id = am_id;
    a->src = src;
    a->t_ns = tw_time_ns();
    memcpy(a->bytes, hdr, HDR_LEN);
    memcpy(a->bytes + HDR_LEN, data, DATA_LEN);
}

/* Multi-threaded run: arrivals on the engine and (inline ids) on senders. */
static void mt_recv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                       const void *data, size_t len)
{
    (void)arg, (void)src, (void)am_id, (void)hdr, (void)data;
    TWT_CHECK(hdr_len == HDR_LEN && len == DATA_LEN);
    atomic_fetch_add_explicit(&mt_arrivals, 1, memory_order_relaxed);
}

static void rndv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len, size_t len,
                    tw_tl_rndv_t *rndv)
{
    (void)arg, (void)src, (void)am_id, (void)hdr, (void)hdr_len, (void)len, (void)rndv;
    rig.rndvs++;
}

static void down_cb(void *arg, int peer, tw_status_t why)
{
    (void)arg;
    TWT_CHECK(peer >= 0 && peer < 8);
    rig.downs[peer]++;
    rig.down_why[peer] = why;
}

static tw_fault_spec_t parse(const char *text)
{
    tw_fault_spec_t spec;
    char why[160] = "";

    TWT_CHECKF(tw_fault_parse(text, &spec, why, sizeof(why)) == TW_OK, "'%s': %s", text, why);
    return spec;
}

/* Lossy over @p fake's endpoint (rank, path 0), or over self (NULL). */
static void rig_open_on(twt_fake_t *fake, int rank, int size, const char *text,
                        const uint8_t *am_class, uint64_t inline_ids, tw_tl_recv_fn_t recv)
{
    tw_pe_params_t pp = {.name = "lossy-test", .thread = false, .bind_package = -1};
    tw_tl_iface_t *in;
    tw_tl_params_t p = {.rank = rank,
                        .size = size,
                        .pe_params = &pp,
                        .recv = recv,
                        .inline_am_ids = inline_ids,
                        .am_class = am_class,
                        .recv_rndv = rndv_cb,
                        .peer_down = down_cb,
                        .job_key = "",
                        .local_size = 1};

    memset(&rig, 0, sizeof(rig));
    rig.fake = fake;
    rig.spec = parse(text);
    TWT_EQ(tw_pe_create(&pp, &rig.pe), TW_OK);
    p.pe = rig.pe;
    rig.t_before = tw_time_ns();
    if (fake != NULL) {
        TWT_EQ(twt_fake_open(fake, 0, &p, &in), TW_OK);
    } else {
        TWT_EQ(tw_tl_iface_open(tw_tl_find("self"), &p, &in), TW_OK);
    }
    TWT_EQ(tw_lossy_wrap(in, &p, &rig.spec, &rig.iface), TW_OK);
    rig.t_after = tw_time_ns();
    TWT_EQ(tw_tl_pe_add_tree(rig.iface), TW_OK);
    TWT_EQ(tw_pe_start(rig.pe), TW_OK); /* manual: we drive it */
}

static void rig_open(const char *text, const uint8_t *am_class)
{
    rig_open_on(NULL, 0, 1, text, am_class, 0, recv_cb);
}

/* Progress until the engine reports no work twice (held frames count as
 * work), at most 10 s (generous: a loaded machine may stop us a second). */
static void drain(void)
{
    uint64_t deadline = tw_time_ns() + 10000 * MS;
    unsigned passes = 0;
    int idle = 0;

    while (idle < 2) {
        idle = tw_pe_progress(rig.pe) == 0 ? idle + 1 : 0;
        passes++;
        TWT_CHECKF(tw_time_ns() < deadline, "the engine never went idle (%u passes, %u arrivals)",
                   passes, rig.narr);
    }
}

static void rig_close(void)
{
    drain();
    tw_tl_close(rig.iface);
    tw_pe_stop(rig.pe);
    tw_pe_destroy(rig.pe);
    rig.iface = NULL;
    if (rig.fake != NULL) {
        twt_fake_cleanup(rig.fake);
    }
}

static uint64_t ctr(unsigned id)
{
    return tw_stats_read(tw_lossy_stats(rig.iface), id);
}

static tw_status_t send_seq(uint32_t seq, uint8_t am_id)
{
    unsigned char f[FRAME_LEN];

    make_frame(seq, f);
    return tw_tl_am_short(rig.iface, 0, am_id, f, HDR_LEN, f + HDR_LEN, DATA_LEN);
}

static void send_n(unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        TWT_EQ(send_seq(i, AM_DATA), TW_OK);
    }
}

static unsigned popcount8(unsigned char b)
{
    unsigned n = 0;

    for (; b != 0; b &= (unsigned char)(b - 1)) {
        n++;
    }
    return n;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    nanosleep(&ts, NULL);
}

/* Zero-copy completion. */
typedef struct test_comp {
    tw_tl_comp_t super;
    atomic_int done;
    atomic_int status;
} test_comp_t;

static void comp_cb(tw_tl_comp_t *comp, tw_status_t st)
{
    test_comp_t *c = (test_comp_t *)comp;

    atomic_store_explicit(&c->status, st, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->done, 1, memory_order_release);
}

static void comp_init(test_comp_t *c)
{
    c->super.cb = comp_cb;
    atomic_init(&c->done, 0);
    atomic_init(&c->status, 1);
}

static int comp_done(test_comp_t *c)
{
    return atomic_load_explicit(&c->done, memory_order_acquire);
}

/* ---- cases ------------------------------------------------------------------------ */

static void test_passthrough(void)
{
    const tw_tl_ops_t *self = tw_tl_find("self");
    tw_tl_iface_t *inner;
    unsigned char f[FRAME_LEN];
    test_comp_t c;
    uint64_t e0;

    rig_open("", NULL);
    inner = tw_lossy_inner(rig.iface);
    TWT_CHECK(inner != NULL && inner != rig.iface);
    TWT_CHECK(tw_lossy_inner(inner) == NULL);
    TWT_CHECK(tw_lossy_stats(inner) == NULL);
    TWT_CHECK(strcmp(tw_stats_name(tw_lossy_stats(rig.iface)), "lossy:self") == 0);
    /* It does what self does, in self's place: a tree of two. */
    TWT_CHECK(strcmp(rig.iface->ops->name, "lossy") == 0);
    TWT_CHECK(strcmp(inner->ops->name, "self") == 0 && inner->ops == self);
    TWT_EQ(rig.iface->caps, self->caps & TW_TL_CAP_OPS_MASK);
    TWT_CHECK(rig.iface->caps & TW_TL_CAP_INLINE_SEND);
    TWT_CHECK(!(rig.iface->caps & TW_TL_CAP_POLL)); /* self has none */
    TWT_CHECK(tw_tl_caps_consistent(rig.iface->ops));
    TWT_EQ(rig.iface->ninner, 1u);
    TWT_CHECK(rig.iface->inner[0] == inner && inner->ninner == 0);
    TWT_CHECK(rig.iface->stats == tw_lossy_stats(rig.iface) && inner->stats != rig.iface->stats);
    TWT_CHECK(rig.iface->pe == rig.pe && inner->pe == rig.pe);
    TWT_CHECK(memcmp(&rig.iface->attr, &inner->attr, sizeof(inner->attr)) == 0);
    TWT_CHECK(tw_tl_reachable(rig.iface, 0) && !tw_tl_reachable(rig.iface, 1));
    /* Its arrivals come through the wrapper. */
    TWT_CHECK(inner->recv != recv_cb && inner->recv_arg == rig.iface);
    TWT_CHECK(rig.iface->recv == recv_cb);
    /* A wrapper is never opened on its own, and wraps one iface at a time. */
    TWT_EQ(tw_tl_iface_open(rig.iface->ops, NULL, NULL), TW_ERR_UNSUPPORTED);
    e0 = tw_log_count(TW_LOG_ERROR);
    tw_tl_iface_t *two[2] = {inner, inner}, *w = NULL;
    tw_tl_params_t p2 = {.rank = 0, .size = 1, .pe = rig.pe, .recv = recv_cb};
    TWT_EQ(tw_tl_wrap_open(rig.iface->ops, two, 2, &p2, &w), TW_ERR_INVALID);
    TWT_CHECK(w == NULL);
    TWT_EQ(tw_log_count(TW_LOG_ERROR), e0 + 1);

    /* Everything, in order, unchanged. */
    send_n(64);
    TWT_EQ(rig.narr, 0u); /* delivered by the engine */
    drain();
    TWT_EQ(rig.narr, 64u);
    for (unsigned i = 0; i < 64; i++) {
        make_frame(i, f);
        TWT_CHECK(memcmp(rig.arr[i].bytes, f, FRAME_LEN) == 0);
        TWT_EQ(rig.arr[i].am_id, AM_DATA);
    }
    /* Zero-copy goes through with the caller's completion. */
    comp_init(&c);
    make_frame(99, f);
    TWT_EQ(tw_tl_am_zcopy(rig.iface, 0, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN, &c.super),
           TW_OK);
    drain();
    TWT_EQ(comp_done(&c), 1);
    TWT_EQ(rig.narr, 65u);
    /* The inner's refusals, with no draw. */
    TWT_EQ(tw_tl_am_short(rig.iface, 1, AM_DATA, f, HDR_LEN, f, DATA_LEN), TW_ERR_UNREACHABLE);
    TWT_EQ(tw_tl_am_short(rig.iface, 0, AM_DATA, f, 70000, f, 0), TW_ERR_INVALID);
    TWT_EQ(tw_tl_am_zcopy(rig.iface, 0, AM_DATA, f, HDR_LEN, f, DATA_LEN, NULL), TW_ERR_INVALID);
    for (unsigned id = 0; id < TW_LOSSY_STAT_COUNT; id++) {
        TWT_EQ(ctr(id), 0u);
    }
    rig_close();
}

static void test_drop_all(void)
{
    unsigned char f[FRAME_LEN];
    test_comp_t c;

    rig_open("drop=1", NULL);
    send_n(100);
    drain();
    TWT_EQ(rig.narr, 0u);
    TWT_EQ(ctr(TW_LOSSY_STAT_DROPPED), 100u);
    /* A dropped zero-copy frame completes TW_OK, from progress only. */
    comp_init(&c);
    make_frame(7, f);
    TWT_EQ(tw_tl_am_zcopy(rig.iface, 0, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN, &c.super),
           TW_OK);
    TWT_EQ(comp_done(&c), 0);
    tw_pe_progress(rig.pe);
    TWT_EQ(comp_done(&c), 1);
    TWT_EQ(atomic_load(&c.status), TW_OK);
    TWT_EQ(ctr(TW_LOSSY_STAT_DROPPED), 101u);
    TWT_EQ(ctr(TW_LOSSY_STAT_CORRUPTED) + ctr(TW_LOSSY_STAT_DUPLICATED), 0u);
    rig_close();

    rig_open("drop=0", NULL);
    send_n(100);
    drain();
    TWT_EQ(rig.narr, 100u);
    TWT_EQ(ctr(TW_LOSSY_STAT_DROPPED), 0u);
    rig_close();
}

/* Which of @p n frames arrive under @p text: a bitmap. */
static void run_drop(const char *text, unsigned n, unsigned char *got)
{
    rig_open(text, NULL);
    for (unsigned i = 0; i < n; i++) {
        TWT_EQ(send_seq(i, AM_DATA), TW_OK);
        if (i % 16 == 15) {
            tw_pe_progress(rig.pe); /* arrivals interleave with sends */
        }
    }
    drain();
    memset(got, 0, n);
    for (unsigned i = 0; i < rig.narr; i++) {
        uint32_t seq = frame_seq(rig.arr[i].bytes);
        TWT_CHECK(seq < n && !got[seq]);
        got[seq] = 1;
    }
    TWT_EQ(ctr(TW_LOSSY_STAT_DROPPED), n - rig.narr);
    rig_close();
}

static void test_drop_seeded(void)
{
    enum { N = 1000 };
    static unsigned char a[N], b[N];
    tw_fault_spec_t spec = parse("drop=0.3,seed=4242");
    tw_fault_rng_t tx, rx;
    unsigned n = 0;

    /* One direction: the same set twice, about 70 %. */
    run_drop("tx.drop=0.3,seed=4242", N, a);
    run_drop("tx.drop=0.3,seed=4242", N, b);
    TWT_CHECK(memcmp(a, b, N) == 0);
    for (unsigned i = 0; i < N; i++) {
        n += a[i];
    }
    TWT_CHECKF(n > N * 62 / 100 && n < N * 78 / 100, "%u of %u arrived", n, N);

    /* Both directions: exactly what the two streams say (the rx stream
     * draws for arrivals only). */
    run_drop("drop=0.3,seed=4242", N, a);
    tw_fault_rng_init(&tx, spec.seed, 0, 0, TW_FAULT_TX);
    tw_fault_rng_init(&rx, spec.seed, 0, 0, TW_FAULT_RX);
    n = 0;
    for (unsigned i = 0; i < N; i++) {
        tw_fault_decision_t d;
        bool arrives;
        tw_fault_decide(&spec, &tx, TW_FAULT_TX, TW_FAULT_DATA, FRAME_LEN, 0, &d);
        arrives = !d.drop;
        if (arrives) {
            tw_fault_decide(&spec, &rx, TW_FAULT_RX, TW_FAULT_DATA, FRAME_LEN, 0, &d);
            arrives = !d.drop;
        }
        TWT_CHECKF(a[i] == arrives, "frame %u: arrived %d, streams say %d", i, a[i], arrives);
        n += arrives;
    }
    TWT_CHECKF(n > N * 40 / 100 && n < N * 58 / 100, "%u of %u arrived", n, N);
}

/* Each arrival differs from its original in exactly the bit the stream
 * of @p dir names (header bytes first, then payload). */
static void check_corrupt(const char *text, tw_fault_dir_t dir, bool zcopy)
{
    enum { N = 64 };
    tw_fault_spec_t spec = parse(text);
    tw_fault_rng_t rng;
    unsigned char f[FRAME_LEN];
    test_comp_t c[N];

    rig_open(text, NULL);
    for (unsigned i = 0; i < N; i++) {
        make_frame(i, f);
        if (zcopy) {
            comp_init(&c[i]);
            TWT_EQ(tw_tl_am_zcopy(rig.iface, 0, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN,
                                  &c[i].super),
                   TW_OK);
            TWT_EQ(comp_done(&c[i]), 0); /* from progress */
        } else {
            TWT_EQ(tw_tl_am_short(rig.iface, 0, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN), TW_OK);
        }
        memset(f, 0, sizeof(f)); /* the buffer is the caller's again */
    }
    drain();
    TWT_EQ(rig.narr, N);
    tw_fault_rng_init(&rng, spec.seed, 0, 0, dir);
    for (unsigned i = 0; i < N; i++) {
        tw_fault_decision_t d;
        unsigned bits = 0;
        size_t at = 0;
        tw_fault_decide(&spec, &rng, dir, TW_FAULT_DATA, FRAME_LEN, 0, &d);
        TWT_CHECK(d.corrupt);
        make_frame(i, f);
        for (size_t k = 0; k < FRAME_LEN; k++) {
            unsigned char x = (unsigned char)(f[k] ^ rig.arr[i].bytes[k]);
            if (x != 0) {
                at = k * 8 + (size_t)__builtin_ctz(x);
            }
            bits += popcount8(x);
        }
        TWT_EQ(bits, 1u);
        TWT_EQ(at, d.bit);
        if (zcopy) {
            TWT_EQ(comp_done(&c[i]), 1);
            TWT_EQ(atomic_load(&c[i].status), TW_OK);
        }
    }
    TWT_EQ(ctr(TW_LOSSY_STAT_CORRUPTED), N);
    rig_close();
}

static void test_corrupt(void)
{
    check_corrupt("tx.corrupt=1,seed=5", TW_FAULT_TX, false);
    check_corrupt("rx.corrupt=1,seed=6", TW_FAULT_RX, false);
    check_corrupt("tx.corrupt=1,seed=7", TW_FAULT_TX, true); /* fits a short: copied */
}

static void check_dup(const char *text, unsigned per_frame, unsigned dup_count)
{
    enum { N = 50 };
    unsigned seen[N] = {0};

    rig_open(text, NULL);
    send_n(N);
    drain();
    TWT_EQ(rig.narr, N * per_frame);
    for (unsigned i = 0; i < rig.narr; i++) {
        uint32_t seq = frame_seq(rig.arr[i].bytes);
        TWT_CHECK(seq < N);
        seen[seq]++;
    }
    for (unsigned i = 0; i < N; i++) {
        TWT_EQ(seen[i], per_frame);
    }
    TWT_EQ(ctr(TW_LOSSY_STAT_DUPLICATED), dup_count);
    rig_close();
}

static void test_dup(void)
{
    unsigned char f[FRAME_LEN];
    test_comp_t c;

    check_dup("tx.dup=1", 2, 50);
    check_dup("rx.dup=1", 2, 50);
    check_dup("dup=1", 4, 50 + 100); /* twice sent, each arrival delivered twice */

    /* Zero-copy: forwarded once plus a short copy; one completion. */
    rig_open("tx.dup=1", NULL);
    comp_init(&c);
    make_frame(3, f);
    TWT_EQ(tw_tl_am_zcopy(rig.iface, 0, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN, &c.super),
           TW_OK);
    drain();
    TWT_EQ(comp_done(&c), 1);
    TWT_EQ(rig.narr, 2u);
    TWT_CHECK(memcmp(rig.arr[0].bytes, f, FRAME_LEN) == 0);
    TWT_CHECK(memcmp(rig.arr[1].bytes, f, FRAME_LEN) == 0);
    rig_close();
}

static void check_reorder(const char *text, tw_fault_dir_t dir)
{
    enum { N = 32 };
    tw_fault_spec_t spec = parse(text);
    tw_fault_rng_t rng;
    unsigned seen[N] = {0}, in_order = 0, early = 0;
    uint64_t release[N], t_last, t_held;
    int late_passes = 0;

    rig_open(text, NULL);
    send_n(N - 1);
    t_last = tw_time_ns(); /* the last frame's hold starts after this */
    TWT_EQ(send_seq(N - 1, AM_DATA), TW_OK);
    tw_pe_progress(rig.pe); /* rx: every frame arrives, and is held, in this pass */
    t_held = tw_time_ns();  /* every hold started before this */
    /* Nothing waits beyond 2 ms plus progress: the first pass that starts
     * after that releases the rest (tx: self delivers them in the pass
     * after). Counted in passes, not time: a busy machine may stop us. */
    while (rig.narr < N) {
        late_passes += tw_time_ns() >= t_held + 2 * MS;
        TWT_CHECKF(late_passes <= 2, "%u of %u frames after %d passes past the 2 ms", rig.narr, N,
                   late_passes - 1);
        tw_pe_progress(rig.pe);
    }
    drain();
    TWT_EQ(rig.narr, N);
    for (unsigned i = 0; i < N; i++) {
        uint32_t seq = frame_seq(rig.arr[i].bytes);
        TWT_CHECK(seq < N);
        seen[seq]++;
        in_order += seq == i;
    }
    for (unsigned i = 0; i < N; i++) {
        TWT_EQ(seen[i], 1u);
    }
    TWT_CHECKF(in_order < N, "reorder=1 delivered in order");
    /* The last frames have nothing behind them: they leave after 2 ms. */
    TWT_CHECKF(rig.arr[N - 1].t_ns >= t_last + 2 * MS, "last arrival %.3f ms after the last send",
               (double)(rig.arr[N - 1].t_ns - t_last) / 1e6);
    /* Every frame was held; those whose h later frames all went by (here:
     * sent before the first progress) come first, by release point. */
    tw_fault_rng_init(&rng, spec.seed, 0, 0, dir);
    for (unsigned i = 0; i < N; i++) {
        tw_fault_decision_t d;
        tw_fault_decide(&spec, &rng, dir, TW_FAULT_DATA, FRAME_LEN, 0, &d);
        TWT_CHECK(d.hold >= 1 && d.hold <= spec.window);
        release[i] = i + 1 + d.hold;
        early += release[i] <= N;
    }
    for (unsigned k = 1; k < early; k++) {
        uint32_t a = frame_seq(rig.arr[k - 1].bytes), b = frame_seq(rig.arr[k].bytes);
        TWT_CHECK(release[a] <= N && release[b] <= N);
        TWT_CHECK(release[a] < release[b] || (release[a] == release[b] && a < b));
    }
    TWT_EQ(ctr(TW_LOSSY_STAT_REORDERED), N);
    rig_close();
}

static void test_reorder(void)
{
    check_reorder("tx.reorder=1,window=4,seed=11", TW_FAULT_TX);
    check_reorder("rx.reorder=1,window=4,seed=12", TW_FAULT_RX);
}

static void check_delay(const char *text)
{
    enum { N = 8 };
    uint64_t sent[N];

    rig_open(text, NULL);
    for (unsigned i = 0; i < N; i++) {
        sent[i] = tw_time_ns();
        TWT_EQ(send_seq(i, AM_DATA), TW_OK);
        tw_pe_progress(rig.pe);
    }
    drain();
    TWT_EQ(rig.narr, N);
    for (unsigned i = 0; i < N; i++) {
        uint32_t seq = frame_seq(rig.arr[i].bytes);
        TWT_CHECK(seq < N);
        TWT_CHECKF(rig.arr[i].t_ns >= sent[seq] + 1 * MS, "frame %u after %.3f ms", seq,
                   (double)(rig.arr[i].t_ns - sent[seq]) / 1e6);
    }
    TWT_EQ(ctr(TW_LOSSY_STAT_DELAYED), N);
    rig_close();
}

static void test_delay(void)
{
    check_delay("tx.delay=1,delay_time=1ms");
    check_delay("rx.delay=1,delay_time=1ms");
}

static void test_scoped(void)
{
    static const uint8_t am_class[64] = {[AM_ACK] = TW_TL_FRAME_ACK};
    tw_tl_params_t p = {.size = 1, .recv = recv_cb};
    tw_fault_spec_t spec = parse("");
    tw_tl_iface_t *iface = NULL;

    rig_open("rx.ack.drop=1", am_class);
    for (unsigned i = 0; i < 40; i++) {
        TWT_EQ(send_seq(i, i % 2 == 0 ? AM_DATA : AM_ACK), TW_OK);
    }
    drain();
    TWT_EQ(rig.narr, 20u);
    for (unsigned i = 0; i < rig.narr; i++) {
        TWT_EQ(rig.arr[i].am_id, AM_DATA);
        TWT_EQ(frame_seq(rig.arr[i].bytes), 2 * i);
    }
    TWT_EQ(ctr(TW_LOSSY_STAT_DROPPED), 20u);
    rig_close();

    uint64_t e0 = tw_log_count(TW_LOG_ERROR);
    TWT_EQ(tw_lossy_wrap(NULL, &p, &spec, &iface), TW_ERR_INVALID);
    tw_tl_iface_t dummy = {.ops = tw_tl_find("self")}; /* refused before it is looked at */
    TWT_EQ(tw_lossy_wrap(&dummy, &p, NULL, &iface), TW_ERR_INVALID);
    TWT_CHECK(iface == NULL);
    TWT_EQ(tw_log_count(TW_LOG_ERROR), e0 + 2);
}

static void test_kill_self(void)
{
    tw_log_level_t level = tw_log_level();
    unsigned char f[FRAME_LEN];
    test_comp_t c;
    tw_status_t st;
    uint64_t i0;

    tw_log_set_level(TW_LOG_INFO); /* the kill is said, once */
    i0 = tw_log_count(TW_LOG_INFO);

    /* Noticed by progress once its time passed. */
    rig_open("kill=1ms", NULL);
    st = send_seq(0, AM_DATA);
    if (tw_time_ns() < rig.t_before + 1 * MS) { /* surely before the kill */
        TWT_EQ(st, TW_OK);
    }
    while (tw_time_ns() < rig.t_after + 1 * MS) {
        tw_pe_progress(rig.pe);
    }
    tw_pe_progress(rig.pe);
    TWT_EQ(ctr(TW_LOSSY_STAT_KILLED_PATHS), 1u);
    TWT_EQ(tw_log_count(TW_LOG_INFO), i0 + 1);
    TWT_EQ(rig.downs[0], 0); /* self reaches only rank 0, itself */
    TWT_EQ(send_seq(1, AM_DATA), TW_ERR_PEER_FAILED);
    comp_init(&c);
    make_frame(2, f);
    TWT_EQ(tw_tl_am_zcopy(rig.iface, 0, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN, &c.super),
           TW_ERR_PEER_FAILED);
    TWT_EQ(comp_done(&c), 0);
    TWT_CHECK(rig.narr <= 1);
    rig_close();

    /* Noticed by the first frame after it, before any progress. */
    rig_open("kill=1ms", NULL);
    sleep_ns(2 * MS);
    TWT_EQ(send_seq(0, AM_DATA), TW_ERR_PEER_FAILED);
    TWT_EQ(ctr(TW_LOSSY_STAT_KILLED_PATHS), 1u);
    TWT_EQ(send_seq(1, AM_DATA), TW_ERR_PEER_FAILED);
    TWT_EQ(ctr(TW_LOSSY_STAT_DROPPED), 0u);
    rig_close();
    TWT_EQ(tw_log_count(TW_LOG_INFO), i0 + 2);

    /* Frames held when the path dies never leave; one held by reference
     * (too large for a short copy) completes TW_ERR_PEER_FAILED. */
    rig_open("tx.delay=1,delay_time=50ms,kill=3ms", NULL);
    size_t big_len = rig.iface->attr.max_short + 1;
    unsigned char *big = calloc(1, big_len);
    TWT_CHECK(big != NULL);
    comp_init(&c);
    st = tw_tl_am_zcopy(rig.iface, 0, AM_DATA, f, HDR_LEN, big, big_len, &c.super);
    TWT_CHECK(st == TW_OK || st == TW_ERR_PEER_FAILED); /* PEER_FAILED: a slow machine */
    while (tw_time_ns() < rig.t_after + 3 * MS) {
        tw_pe_progress(rig.pe);
    }
    tw_pe_progress(rig.pe);
    if (st == TW_OK) {
        TWT_EQ(comp_done(&c), 1);
        TWT_EQ(atomic_load(&c.status), TW_ERR_PEER_FAILED);
        TWT_EQ(ctr(TW_LOSSY_STAT_DELAYED), 1u);
    }
    TWT_EQ(rig.narr, 0u);
    rig_close();
    free(big);
    tw_log_set_level(level);
}

/* ---- over the fake transport, which reaches every rank of the job ------------------ */

/* What lossy sent through the fake: its on_send hook records each frame
 * that went out, and refuses (back-pressure) every `every`-th call. */
#define SINK_MAX 4096
static struct sink {
    twt_fake_t wire;
    unsigned calls, every; /* refuse call k when k % every == every - 1 */
    unsigned accepted;     /* lossy's sends accepted so far (the test counts) */
    unsigned n;            /* frames that went out */
    uint32_t seqs[SINK_MAX];
    unsigned at[SINK_MAX];                 /* sends accepted when it went out */
    uint64_t t[SINK_MAX], acc_t[SINK_MAX]; /* when it went out; its accepted send began */
} sink;

static twt_fake_fate_t sink_send(void *arg, twt_fake_frame_t *f)
{
    struct sink *k = arg;

    if (k->every != 0 && k->calls++ % k->every == k->every - 1) {
        return TWT_FAKE_AGAIN;
    }
    TWT_CHECK(f->hdr_len == HDR_LEN && k->n < SINK_MAX);
    k->at[k->n] = k->accepted;
    k->t[k->n] = tw_time_ns();
    k->seqs[k->n++] = frame_seq(f->bytes);
    return TWT_FAKE_DROP; /* recorded: nobody listens at the other end */
}

/* Lossy over the fake as rank @p rank of @p size, from a fresh sink. */
static void sink_open(int rank, int size, const char *text)
{
    static const tw_tl_attr_t attr = {.max_short = 256, .max_hdr = 64, .max_zcopy = 0};

    memset(&sink, 0, sizeof(sink));
    twt_fake_init(&sink.wire, size, &attr);
    sink.wire.on_send = sink_send;
    sink.wire.hook_arg = &sink;
    rig_open_on(&sink.wire, rank, size, text, NULL, 0, recv_cb);
}

/* Rank 1 of 4 over the fake: the kill (noticed by progress) reports ranks 0, 2 and 3 once each;
 * arrivals from any of them then vanish; rendezvous and the inner's own
 * peer_down pass through. */
static void test_kill_reports(void)
{
    tw_fault_spec_t kill;
    tw_tl_iface_t *inner;
    unsigned char f[FRAME_LEN];

    sink_open(1, 4, "");
    inner = tw_lossy_inner(rig.iface);
    TWT_CHECK(tw_tl_caps_consistent(rig.iface->ops));
    TWT_CHECK(!(rig.iface->caps & TW_TL_CAP_AM_ZCOPY)); /* the inner has none */
    TWT_CHECK(strcmp(tw_stats_name(tw_lossy_stats(rig.iface)), "lossy:fake") == 0);
    make_frame(1, f);
    /* Arrivals from three peers and rendezvous pass while the path lives. */
    TWT_EQ(twt_fake_inject(&sink.wire, 0, 1, 0, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN), TW_OK);
    TWT_EQ(twt_fake_inject(&sink.wire, 3, 1, 0, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN), TW_OK);
    TWT_EQ(twt_fake_pump(&sink.wire), 2u);
    inner->recv_rndv(inner->recv_arg, 2, AM_DATA, f, HDR_LEN, 1u << 20, NULL);
    twt_fake_report_down(&sink.wire, 1, 0, 2, TW_OK);
    TWT_EQ(rig.rndvs, 1);
    TWT_EQ(rig.downs[2], 1);
    TWT_EQ(rig.down_why[2], TW_OK);
    rig.downs[2] = 0;
    TWT_EQ(rig.downs[0] + rig.downs[3], 0);
    /* A kill scheduled in the past (set at run time): the next progress. */
    while (tw_time_ns() < rig.t_after + 1 * MS) {
        tw_pe_progress(rig.pe);
    }
    TWT_EQ(ctr(TW_LOSSY_STAT_KILLED_PATHS), 0u);
    kill = parse("kill=1ms");
    tw_lossy_set_spec(rig.iface, &kill);
    tw_pe_progress(rig.pe);
    tw_pe_progress(rig.pe);
    for (int peer = 0; peer < 4; peer++) {
        TWT_EQ(rig.downs[peer], peer == 1 ? 0 : 1);
        if (peer != 1) {
            TWT_EQ(rig.down_why[peer], TW_ERR_PEER_FAILED);
        }
    }
    TWT_EQ(ctr(TW_LOSSY_STAT_KILLED_PATHS), 1u);
    TWT_EQ(tw_tl_am_short(rig.iface, 2, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN),
           TW_ERR_PEER_FAILED);
    TWT_EQ(twt_fake_inject(&sink.wire, 0, 1, 0, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN), TW_OK);
    TWT_EQ(twt_fake_pump(&sink.wire), 1u);
    TWT_EQ(sink.wire.ep[1][0].received, 3u); /* the fake handed it to lossy */
    TWT_EQ(rig.narr, 2u);                    /* the two from before the kill */
    TWT_EQ(rig.arr[0].src, 0);
    TWT_EQ(rig.arr[1].src, 3);
    TWT_EQ(sink.n, 0u); /* nothing was sent */
    TWT_EQ(sink.wire.ep[1][0].sent[TW_TL_FRAME_DATA] + sink.wire.ep[1][0].refused, 0u);
    rig_close();
}

/* Back-pressure: a send the inner refuses gives its draw back (the frames
 * that pass are still exactly those the stream says), and held frames and
 * duplicates the inner refuses are retried until they went, once each. */
static void run_again(const char *text, unsigned n, unsigned every)
{
    unsigned char f[FRAME_LEN];

    sink_open(0, 2, text);
    sink.every = every;
    for (unsigned i = 0; i < n; i++) {
        tw_status_t st;
        unsigned again = 0;
        make_frame(i, f);
        for (;;) {
            sink.acc_t[i] = tw_time_ns(); /* a hold starts after this */
            st = tw_tl_am_short(rig.iface, 1, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN);
            if (st != TW_ERR_AGAIN) {
                break;
            }
            TWT_CHECK(++again < 10);
            tw_pe_progress(rig.pe);
        }
        TWT_EQ(st, TW_OK);
        sink.accepted++;
    }
    drain();
    TWT_CHECK(sink.calls > sink.n); /* some were refused */
    TWT_EQ(sink.wire.ep[0][0].refused, sink.calls - sink.n);
    TWT_EQ(sink.wire.ep[0][0].sent[TW_TL_FRAME_DATA], sink.n);
    sink.every = 0;
}

static void test_again(void)
{
    enum { N = 300 };
    tw_fault_spec_t spec = parse("tx.drop=0.5,seed=21");
    unsigned seen[N] = {0};
    tw_fault_rng_t rng;
    int k = 0;

    run_again("tx.drop=0.5,seed=21", N, 3);
    tw_fault_rng_init(&rng, spec.seed, 0, 1, TW_FAULT_TX);
    for (unsigned i = 0; i < N; i++) {
        tw_fault_decision_t d;
        tw_fault_decide(&spec, &rng, TW_FAULT_TX, TW_FAULT_DATA, FRAME_LEN, 0, &d);
        if (!d.drop) {
            TWT_CHECK(k < (int)sink.n);
            TWT_EQ(sink.seqs[k++], i);
        }
    }
    TWT_EQ(k, sink.n);
    TWT_EQ(ctr(TW_LOSSY_STAT_DROPPED), (unsigned)(N - k));
    rig_close();

    /* Every second call refused: the duplicate's in particular. */
    run_again("tx.dup=1,tx.reorder=0.5,seed=22", N, 2);
    TWT_EQ(sink.n, 2 * N);
    for (unsigned i = 0; i < sink.n; i++) {
        TWT_CHECK(sink.seqs[i] < N);
        seen[sink.seqs[i]]++;
    }
    for (unsigned i = 0; i < N; i++) {
        TWT_EQ(seen[i], 2u);
    }
    TWT_EQ(ctr(TW_LOSSY_STAT_DUPLICATED), N);
    TWT_CHECK(ctr(TW_LOSSY_STAT_REORDERED) > 0);
    rig_close();

    /* A refused frame does not count as one that went by: a frame held
     * for h leaves after h frames were accepted behind it (or 2 ms). */
    spec = parse("tx.reorder=0.5,window=3,seed=23");
    run_again("tx.reorder=0.5,window=3,seed=23", N, 3);
    TWT_EQ(sink.n, N);
    tw_fault_rng_init(&rng, spec.seed, 0, 1, TW_FAULT_TX);
    for (unsigned i = 0; i < N; i++) {
        tw_fault_decision_t d;
        tw_fault_decide(&spec, &rng, TW_FAULT_TX, TW_FAULT_DATA, FRAME_LEN, 0, &d);
        for (unsigned j = 0; j < sink.n && d.hold > 0; j++) {
            if (sink.seqs[j] == i) {
                TWT_CHECKF(sink.at[j] >= i + 1 + d.hold || sink.t[j] >= sink.acc_t[i] + 2 * MS,
                           "frame %u (hold %u) left with %u accepted", i, d.hold, sink.at[j]);
            }
        }
    }
    TWT_CHECK(ctr(TW_LOSSY_STAT_REORDERED) > 0);
    rig_close();
}

/* blackhole=B,blackhole_for=5B (B = 1 ms first): each frame's age is
 * known within the uncertainty of the open and of its own round trip;
 * frames surely inside the window are lost, those surely outside arrive.
 * Returns false when the machine was too busy to place a frame surely
 * inside and one after (the caller tries again with a longer B). */
static bool run_blackhole(uint64_t b)
{
    uint64_t i0 = tw_log_count(TW_LOG_INFO);
    unsigned n = 0, lost = 0;
    int in = 0, after = 0;
    char text[96];

    snprintf(text, sizeof(text), "blackhole=%" PRIu64 "us,blackhole_for=%" PRIu64 "us", b / 1000,
             5 * b / 1000);
    rig_open(text, NULL);
    for (bool last = false; !last && n < 4000; n++) {
        uint64_t start = tw_time_ns(), lo, hi, b0 = ctr(TW_LOSSY_STAT_BLACKHOLED);
        unsigned n0 = rig.narr;
        bool arrived;
        last = start >= rig.t_after + 7 * b;
        TWT_EQ(send_seq(n, AM_DATA), TW_OK);
        while (rig.narr == n0 && ctr(TW_LOSSY_STAT_BLACKHOLED) == b0) {
            tw_pe_progress(rig.pe);
        }
        arrived = rig.narr > n0;
        lo = start - rig.t_after;
        hi = tw_time_ns() - rig.t_before;
        if (lo >= b && hi < 6 * b) {
            TWT_CHECKF(!arrived, "%s: frame %u, %.3f..%.3f ms after open, arrived", text, n,
                       (double)lo / 1e6, (double)hi / 1e6);
            in++;
        } else if (hi < b || lo >= 6 * b) {
            TWT_CHECKF(arrived, "%s: frame %u, %.3f..%.3f ms after open, lost", text, n,
                       (double)lo / 1e6, (double)hi / 1e6);
            after += lo >= 6 * b;
        }
        lost += !arrived;
        sleep_ns(b / 16);
    }
    drain();
    TWT_EQ(ctr(TW_LOSSY_STAT_BLACKHOLED), lost);
    TWT_EQ(ctr(TW_LOSSY_STAT_DROPPED), 0u);
    TWT_EQ(rig.narr, n - lost);
    if (in > 0 && after > 0) {
        TWT_EQ(tw_log_count(TW_LOG_INFO), i0 + 2); /* opened, healed */
    }
    rig_close();
    return in > 0 && after > 0;
}

static void test_blackhole(void)
{
    tw_log_level_t level = tw_log_level();
    uint64_t b = 1 * MS;

    tw_log_set_level(TW_LOG_INFO);
    for (int attempt = 1; !run_blackhole(b); attempt++, b *= 4) {
        TWT_CHECKF(attempt < 4, "%d runs too slow to place frames in the blackhole", attempt);
        printf("blackhole: too slow to place a frame surely inside the window; again, 4x longer\n");
    }
    tw_log_set_level(level);
}

/* blackhole_after counts decisions (over self a frame takes two: out, and
 * in on the engine): 5 frames sent and delivered take 10; from the 11th on
 * everything is blackholed, sends as well as frames already on their way. */
static void test_blackhole_after(void)
{
    rig_open("blackhole_after=10", NULL);
    send_n(5);
    drain();
    TWT_EQ(rig.narr, 5u);
    for (unsigned i = 0; i < rig.narr; i++) {
        TWT_EQ(frame_seq(rig.arr[i].bytes), i);
    }
    TWT_EQ(ctr(TW_LOSSY_STAT_BLACKHOLED), 0u);
    send_n(3);
    drain();
    TWT_EQ(rig.narr, 5u);
    TWT_EQ(ctr(TW_LOSSY_STAT_BLACKHOLED), 3u);
    TWT_EQ(ctr(TW_LOSSY_STAT_DROPPED), 0u);
    rig_close();
}

static void test_set_spec(void)
{
    tw_fault_spec_t drop = parse("drop=1"), none = parse("");

    rig_open("", NULL);
    send_n(10);
    tw_lossy_set_spec(rig.iface, &drop);
    send_n(10);
    tw_lossy_set_spec(rig.iface, &none);
    send_n(10);
    drain();
    TWT_EQ(rig.narr, 20u);
    TWT_EQ(ctr(TW_LOSSY_STAT_DROPPED), 10u);
    rig_close();
}

/* Closing with frames on hold frees them; one held by reference completes
 * TW_ERR_CANCELED, a copied one's completion TW_OK. */
static void test_close_held(void)
{
    unsigned char f[FRAME_LEN];
    test_comp_t big_c, small_c;
    size_t big_len;
    unsigned char *big;

    rig_open("tx.delay=1,delay_time=10s", NULL);
    big_len = rig.iface->attr.max_short + 1;
    big = calloc(1, big_len);
    TWT_CHECK(big != NULL);
    send_n(3);
    make_frame(9, f);
    comp_init(&big_c);
    comp_init(&small_c);
    TWT_EQ(tw_tl_am_zcopy(rig.iface, 0, AM_DATA, f, HDR_LEN, big, big_len, &big_c.super), TW_OK);
    TWT_EQ(tw_tl_am_zcopy(rig.iface, 0, AM_DATA, f, HDR_LEN, f + HDR_LEN, DATA_LEN, &small_c.super),
           TW_OK);
    TWT_EQ(tw_pe_progress(rig.pe) > 0, 1); /* busy while frames are held */
    TWT_EQ(comp_done(&small_c), 1);
    TWT_EQ(comp_done(&big_c), 0);
    TWT_EQ(ctr(TW_LOSSY_STAT_DELAYED), 5u);
    tw_tl_close(rig.iface);
    tw_pe_stop(rig.pe);
    tw_pe_destroy(rig.pe);
    TWT_EQ(comp_done(&big_c), 1);
    TWT_EQ(atomic_load(&big_c.status), TW_ERR_CANCELED);
    TWT_EQ(rig.narr, 0u);
    free(big);
}

/* ---- threads ----------------------------------------------------------------------- */

enum { MT_THREADS = 3 };

typedef struct mt_sender {
    pthread_t tid;
    unsigned idx, n;
    unsigned accepted;
    test_comp_t *comps;
    unsigned char (*bufs)[FRAME_LEN];
    unsigned nzcopy;
} mt_sender_t;

static atomic_int mt_running;

static void *mt_main(void *arg)
{
    mt_sender_t *s = arg;
    tw_fault_spec_t other = parse("drop=0.05,corrupt=0.2,dup=0.2,reorder=0.2,delay=0.1,"
                                  "delay_time=100us,window=8,seed=10");

    for (unsigned i = 0; i < s->n; i++) {
        unsigned char *f = s->bufs[i];
        uint8_t am = i % 3 == 0 ? AM_INLINE : AM_DATA;
        tw_status_t st;
        make_frame(s->idx * 100000u + i, f);
        do {
            if (i % 4 == 1) {
                comp_init(&s->comps[i]);
                st = tw_tl_am_zcopy(rig.iface, 0, am, f, HDR_LEN, f + HDR_LEN, DATA_LEN,
                                    &s->comps[i].super);
                s->nzcopy += st == TW_OK;
            } else {
                st = tw_tl_am_short(rig.iface, 0, am, f, HDR_LEN, f + HDR_LEN, DATA_LEN);
            }
            if (st == TW_ERR_AGAIN) {
                sched_yield();
            }
        } while (st == TW_ERR_AGAIN);
        TWT_EQ(st, TW_OK);
        s->accepted++;
        if (s->idx == 0 && i == s->n / 2) {
            tw_lossy_set_spec(rig.iface, &other); /* the test hook, from any thread */
        }
    }
    atomic_fetch_sub_explicit(&mt_running, 1, memory_order_release);
    return NULL;
}

static void test_threads(void)
{
    mt_sender_t s[MT_THREADS];
    unsigned n = (unsigned)twt_scaled(2000, 200), accepted = 0, zc = 0;
    uint64_t e0 = tw_log_count(TW_LOG_ERROR);

    rig_open_on(NULL, 0, 1,
                "drop=0.1,corrupt=0.1,dup=0.1,reorder=0.1,delay=0.05,delay_time=200us,seed=9", NULL,
                1ull << AM_INLINE, mt_recv_cb);
    atomic_store(&mt_arrivals, 0);
    atomic_store(&mt_running, MT_THREADS);
    for (unsigned t = 0; t < MT_THREADS; t++) {
        s[t] = (mt_sender_t){.idx = t, .n = n};
        s[t].comps = calloc(n, sizeof(*s[t].comps));
        s[t].bufs = calloc(n, sizeof(*s[t].bufs));
        TWT_CHECK(s[t].comps != NULL && s[t].bufs != NULL);
        TWT_EQ(pthread_create(&s[t].tid, NULL, mt_main, &s[t]), 0);
    }
    while (atomic_load_explicit(&mt_running, memory_order_acquire) > 0) {
        tw_pe_progress(rig.pe);
    }
    for (unsigned t = 0; t < MT_THREADS; t++) {
        TWT_EQ(pthread_join(s[t].tid, NULL), 0);
    }
    drain();
    for (unsigned t = 0; t < MT_THREADS; t++) {
        accepted += s[t].accepted;
        zc += s[t].nzcopy;
        for (unsigned i = 1; i < n; i += 4) {
            TWT_EQ(comp_done(&s[t].comps[i]), 1); /* exactly once */
            TWT_EQ(atomic_load(&s[t].comps[i].status), TW_OK);
        }
        free(s[t].comps);
        free(s[t].bufs);
    }
    TWT_EQ(accepted, MT_THREADS * n);
    /* Every accepted frame arrives once, less the drops, plus the copies. */
    TWT_EQ(atomic_load(&mt_arrivals),
           accepted - ctr(TW_LOSSY_STAT_DROPPED) + ctr(TW_LOSSY_STAT_DUPLICATED));
    TWT_CHECK(ctr(TW_LOSSY_STAT_DROPPED) > 0 && ctr(TW_LOSSY_STAT_DUPLICATED) > 0 &&
              ctr(TW_LOSSY_STAT_CORRUPTED) > 0 && ctr(TW_LOSSY_STAT_REORDERED) > 0 &&
              ctr(TW_LOSSY_STAT_DELAYED) > 0);
    printf("threads: %u sent (%u zero-copy), %u delivered; dropped %" PRIu64 " corrupted %" PRIu64
           " duplicated %" PRIu64 " reordered %" PRIu64 " delayed %" PRIu64 "\n",
           accepted, zc, atomic_load(&mt_arrivals), ctr(TW_LOSSY_STAT_DROPPED),
           ctr(TW_LOSSY_STAT_CORRUPTED), ctr(TW_LOSSY_STAT_DUPLICATED),
           ctr(TW_LOSSY_STAT_REORDERED), ctr(TW_LOSSY_STAT_DELAYED));
    rig_close();
    TWT_EQ(tw_log_count(TW_LOG_ERROR), e0);
}

static const twt_case_t cases[] = {
    {"passthrough", test_passthrough},
    {"drop_all", test_drop_all},
    {"drop_seeded", test_drop_seeded},
    {"corrupt", test_corrupt},
    {"dup", test_dup},
    {"reorder", test_reorder},
    {"delay", test_delay},
    {"scoped", test_scoped},
    {"kill_self", test_kill_self},
    {"kill_reports", test_kill_reports},
    {"again", test_again},
    {"blackhole", test_blackhole},
    {"blackhole_after", test_blackhole_after},
    {"set_spec", test_set_spec},
    {"close_held", test_close_held},
    {"threads", test_threads},
};

int main(int argc, char **argv)
{
    uint64_t w0 = tw_log_count(TW_LOG_WARN);
    int rc = twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));

    TWT_EQ(tw_log_count(TW_LOG_WARN), w0); /* no case warns */
    return rc;
}
