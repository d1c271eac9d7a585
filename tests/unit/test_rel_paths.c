/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* test_rel's cases of streams, paths and time (test_rel.c lists them). */
#include <signal.h>
#include <unistd.h>

#include "test_rel_rig.h"

/* Timeouts short enough for streams and path failures to play out fast;
 * @p path_timeout_ns: 0 for the default. */
static tw_rel_cfg_t fast_cfg(uint64_t path_timeout_ns)
{
    tw_rel_cfg_t cfg = test_cfg();

    cfg.rto_ns = 2000000;
    cfg.rto_max_ns = 10000000;
    if (path_timeout_ns != 0) {
        cfg.path_timeout_ns = path_timeout_ns;
    }
    return cfg;
}

/* ---- streams through a lossy wire ------------------------------------- */

/* Lose rig.lose_permille of all frames (either way), or flip one bit. */
static twt_fake_fate_t lossy_hook(void *arg, twt_fake_frame_t *f)
{
    (void)arg;
    if (twt_rand(&rig.rng) % 1000 < rig.lose_permille) {
        return TWT_FAKE_DROP;
    }
    if (twt_rand(&rig.rng) % 1000 < rig.corrupt_permille) {
        twt_fake_flip_bit(&rig.wire, f, twt_rand(&rig.rng) % ((f->hdr_len + f->len) * 8));
    }
    return TWT_FAKE_PASS;
}

static bool all_delivered_both(void)
{
    return rig.sides[1].delivered >= rig.next_out[0] && rig.sides[0].delivered >= rig.next_out[1];
}

/* Stream @p n messages each way through lossy_hook. */
static void stream(int n, size_t max_len)
{
    rig.wire.on_deliver = lossy_hook;
    for (int i = 0; i < n; i++) {
        size_t len = (size_t)(twt_rand(&rig.rng) % 8 == 0 ? twt_rand(&rig.rng) % max_len
                                                          : twt_rand(&rig.rng) % 300);
        for (int r = 0; r < 2; r++) {
            tw_status_t st;
            while ((st = send_msg(r, len)) == TW_ERR_AGAIN) {
                pump(1, NULL);
            }
            TWT_CHECK(st == TW_OK);
        }
        if (i % 8 == 0) {
            pump(0, NULL);
        }
    }
    TWT_CHECK(pump(20000, all_delivered_both));
    for (int r = 0; r < 2; r++) {
        TWT_EQ(rig.sides[r].delivered, rig.next_out[1 - r]);
        TWT_EQ(rig.sides[r].bad, 0u);
        TWT_EQ(rig.sides[r].downs, 0);
    }
}

void case_wrap(void)
{
    tw_rel_cfg_t cfg = fast_cfg(0);

    case_begin("sequence wraparound with 5% loss");
    cfg.seq_start = UINT32_MAX - 40;
    rig_open(&cfg, 1);
    rig.lose_permille = 50;
    stream(400 / twt_scale() + 100, 20000);
    TWT_CHECK(rig.wire.dropped > 0);
    TWT_CHECK(rel_stat(0, TW_REL_STAT_RETRANSMITS) > 0);
    case_end();
}

static void corrupt_stream(int msgs, size_t max_len)
{
    tw_rel_cfg_t cfg = fast_cfg(0);

    case_begin("1% of frames corrupted");
    rig_open(&cfg, 1);
    rig.corrupt_permille = 10;
    stream(msgs, max_len);
    TWT_CHECK(rig.wire.corrupted > 0);
    /* every corrupted frame was caught (a bit flipped in a frame still
     * queued behind a retransmission may be the same fragment twice) */
    TWT_EQ(rel_stat(0, TW_REL_STAT_CRC_FAILURES) + rel_stat(1, TW_REL_STAT_CRC_FAILURES),
           rig.wire.corrupted);
    printf("    %llu data fragments sent, %llu frames corrupted, all caught, 0 corrupted "
           "deliveries\n",
           (unsigned long long)(rel_stat(0, TW_REL_STAT_FRAGS_SENT) +
                                rel_stat(1, TW_REL_STAT_FRAGS_SENT)),
           (unsigned long long)rig.wire.corrupted);
    case_end();
}

void case_corrupt(void)
{
    corrupt_stream((int)twt_scaled(4000, 500), 12000);
}

/* Matrix row B6: 10^6 fragments (both ways) with 1% corrupted. */
void case_b6(void)
{
    corrupt_stream((int)twt_scaled(500000, 20000), 8000); /* eager: no buffers kept */
}

/* ---- paths ------------------------------------------------------------ */

static bool path1_used(void)
{
    return rig.sides[1].delivered >= rig.next_out[0];
}

void case_failover(void)
{
    tw_rel_cfg_t cfg = fast_cfg(100000000); /* path timeout 100 ms */
    uint64_t t0;

    case_begin("failover to path 1, fail-back to path 0");
    rig_open(&cfg, 2);
    for (int i = 0; i < 20; i++) {
        TWT_CHECK(send_msg(0, 1000) == TW_OK);
    }
    rig.want_delivered = rig.next_out[0];
    TWT_CHECK(pump(2000, all_delivered));
    path_dark(0, true);
    t0 = rig.vnow;
    for (int i = 0; i < 20; i++) {
        TWT_CHECK(send_msg(0, 1000) == TW_OK);
    }
    TWT_CHECK(pump(3000, path1_used));
    uint64_t took = rig.vnow - t0;
    printf("    traffic moved to path 1 after %.0f ms (path timeout 100 ms)\n", took / 1e6);
    TWT_CHECK(took < 1000000000u);
    TWT_EQ(rel_stat(0, TW_REL_STAT_FAILOVERS), 1u);
    TWT_EQ(rig.sides[1].delivered, rig.next_out[0]);
    TWT_EQ(rig.sides[1].bad, 0u);
    TWT_EQ(rig.sides[0].downs + rig.sides[1].downs, 0);
    /* heal: probes (every 20 ms, 3 answers) bring traffic back */
    path_dark(0, false);
    TWT_CHECK(pump(500, NULL));
    TWT_EQ(rel_stat(0, TW_REL_STAT_FAILBACKS), 1u);
    for (int i = 0; i < 20; i++) {
        TWT_CHECK(send_msg(0, 1000) == TW_OK);
    }
    rig.want_delivered = rig.next_out[0];
    TWT_CHECK(pump(2000, all_delivered));
    TWT_EQ(rig.sides[1].bad, 0u);
    case_end();
}

/* Path 0's transport tells both ranks the peer is down through it (as
 * tw_tl_peer_down_fn_t: @p why). */
static void path0_down(tw_status_t why)
{
    for (int r = 0; r < 2; r++) {
        twt_fake_report_down(&rig.wire, r, 0, 1 - r, why);
    }
}

/* @p n messages from rank 0, all delivered. */
static void stream_small(int n)
{
    for (int i = 0; i < n; i++) {
        TWT_CHECK(send_msg(0, 1000) == TW_OK);
    }
    rig.want_delivered = rig.next_out[0];
    TWT_CHECK(pump(2000, all_delivered));
    TWT_EQ(rig.sides[1].bad, 0u);
}

static void livelock_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: the timer pass never returned (a livelock)\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(1);
}

/* A fragment retransmitted on path 1 until its path timeout is near, when
 * path 0 comes back first (fail-back): at its next timeout it is fresh
 * (not sent on the current path) and goes out on path 0. It does not
 * fail path 1, which carried it but no longer carries the traffic: that
 * "loss" would change nothing, and the timer pass looped on it for ever
 * (a CI hang in finalize: the engine held the peer's lock). */
void case_failback_due(void)
{
    tw_rel_cfg_t cfg = test_cfg();

    case_begin("a fragment due on the path failed back from");
    cfg.rto_ns = cfg.rto_max_ns = 20000000; /* 20 ms each time: tries are countable */
    cfg.path_timeout_ns = 200000000;        /* lost at the 10th timeout */
    cfg.probe_ns = 2000000;
    cfg.probes = 1;
    signal(SIGALRM, livelock_alarm);
    alarm(10);
    rig_open(&cfg, 2);
    stream_small(5);
    /* path 0 dark: after its path timeout, traffic on path 1 */
    path_dark(0, true);
    stream_small(5);
    TWT_CHECK(pump(5, NULL)); /* and acknowledged */
    TWT_EQ(rel_stat(0, TW_REL_STAT_FAILOVERS), 1u);
    /* path 1 dark too; one message, sent and retransmitted on it 9 times */
    path_dark(1, true);
    uint64_t on1 = carried(1);
    TWT_CHECK(send_msg(0, 1000) == TW_OK);
    rig.want_delivered = rig.next_out[0];
    for (int ms = 0; carried(1) < on1 + 10; ms++) {
        TWT_CHECK(ms < 300); /* 10 sends 20 ms apart */
        TWT_CHECK(!pump(1, all_delivered));
    }
    TWT_EQ(rel_stat(0, TW_REL_STAT_FAILOVERS), 1u);
    TWT_EQ(rig.sides[0].downs + rig.sides[1].downs, 0);
    /* path 0 heals: probed back within a few ms, before the 10th timeout */
    path_dark(0, false);
    TWT_CHECK(pump(100, all_delivered));
    TWT_EQ(rel_stat(0, TW_REL_STAT_FAILBACKS), 1u);
    TWT_EQ(rel_stat(0, TW_REL_STAT_FAILOVERS), 1u);
    TWT_EQ(carried(1), on1 + 10);
    TWT_EQ(rig.sides[0].downs + rig.sides[1].downs, 0);
    TWT_EQ(rig.sides[1].bad, 0u);
    stream_small(5);
    TWT_EQ(carried(1), on1 + 10);
    alarm(0);
    case_end();
}

/* A path down for now (TW_ERR_TRANSPORT, as verbs reports a port that went
 * down): fail over at once, probe, fail back once the transport takes
 * sends again. @p refused_first: its sends are refused before its
 * peer_down runs (the transport's engine reports later). @p why: what the
 * report says (TW_ERR_PEER_FAILED for contrast: dead, never probed). */
static void fornow_case(const char *name, bool refused_first, tw_status_t why)
{
    tw_rel_cfg_t cfg = test_cfg();
    bool back = why == TW_ERR_TRANSPORT;

    case_begin(name);
    rig_open(&cfg, 2);
    stream_small(20);
    TWT_EQ(carried(1), 0u);
    path_refuse(0, TW_ERR_TRANSPORT);
    if (refused_first) {
        stream_small(20); /* the first DATA refused is the news */
        path0_down(why);
    } else {
        path0_down(why);
        stream_small(20);
    }
    TWT_EQ(rel_stat(0, TW_REL_STAT_FAILOVERS), 1u);
    TWT_CHECK(carried(1) >= 20);
    /* Still down: probes (every 20 ms) are refused, nothing fails back,
     * nobody fails. */
    TWT_CHECK(pump(300, NULL));
    TWT_EQ(rel_stat(0, TW_REL_STAT_FAILBACKS), 0u);
    TWT_EQ(rel_stat(1, TW_REL_STAT_FAILBACKS), 0u);
    /* Back: three answered probes later, path 0 carries the stream again
     * (for good: never). */
    path_refuse(0, TW_OK);
    TWT_CHECK(pump(300, NULL));
    TWT_EQ(rel_stat(0, TW_REL_STAT_FAILBACKS), (back ? 1u : 0u));
    TWT_EQ(rel_stat(1, TW_REL_STAT_FAILBACKS), (back ? 1u : 0u));
    uint64_t c0 = carried(0), c1 = carried(1);
    stream_small(20);
    if (back) {
        TWT_CHECK(carried(0) >= c0 + 20);
        TWT_EQ(carried(1), c1);
    } else {
        TWT_EQ(carried(0), c0);
        TWT_CHECK(carried(1) >= c1 + 20);
    }
    TWT_EQ(rig.sides[1].delivered, rig.next_out[0]);
    TWT_EQ(rig.sides[0].downs + rig.sides[1].downs, 0);
    TWT_EQ(rel_stat(0, TW_REL_STAT_PEER_FAILURES) + rel_stat(1, TW_REL_STAT_PEER_FAILURES), 0u);
    case_end();
}

void case_fornow(void)
{
    fornow_case("a path down for now fails over, then back", false, TW_ERR_TRANSPORT);
}

void case_fornow_refused(void)
{
    fornow_case("... refused before its report", true, TW_ERR_TRANSPORT);
}

void case_fornow_forgood(void)
{
    fornow_case("a path down for good is not probed", false, TW_ERR_PEER_FAILED);
}

static bool peer_down_seen(void)
{
    return rig.sides[0].downs > 0;
}

void case_nopath(void)
{
    tw_rel_cfg_t cfg = fast_cfg(100000000);
    uint64_t t0;

    case_begin("the only path dies");
    rig_open(&cfg, 1);
    path_dark(0, true);
    t0 = rig.vnow;
    for (int i = 0; i < 10; i++) {
        TWT_CHECK(send_msg(0, 20000) == TW_OK); /* zcopy: completions to check */
    }
    TWT_CHECK(pump(3000, peer_down_seen));
    double ms = (rig.vnow - t0) / 1e6;
    printf("    peer failed after %.0f ms (path timeout 100 ms)\n", ms);
    TWT_CHECK(ms < 1000);
    TWT_EQ(rig.sides[0].downs, 1);
    TWT_EQ(rig.sides[0].down_why, TW_ERR_PEER_FAILED);
    for (int i = 0; i < 10; i++) {
        TWT_EQ(rig.sreqs[0][i].done, 1);
        TWT_EQ(rig.sreqs[0][i].status, TW_ERR_PEER_FAILED);
    }
    tw_tl_iface_t *rel = rig.sides[0].rel;
    unsigned char b[8] = {0};
    TWT_EQ(rel->ops->am_short(rel, 1, 7, b, 8, b, 8), TW_ERR_PEER_FAILED);
    TWT_CHECK(pump(50, NULL));
    TWT_EQ(rig.sides[0].downs, 1); /* once */
    case_end();
}

/* A path whose transport refuses every frame (TW_ERR_AGAIN: a hop that
 * stopped reading, a ring nobody drains) while the peer acknowledges
 * nothing new: lost after the path timeout, like one whose
 * retransmissions go unanswered -- over to path 1 with two paths, the
 * peer failed with one. Never offered for ever. */
static void refusing_case(const char *name, int npaths)
{
    tw_rel_cfg_t cfg = fast_cfg(100000000); /* path timeout 100 ms */

    case_begin(name);
    rig_open(&cfg, npaths);
    stream_small(10);
    path_refuse(0, TW_ERR_AGAIN);
    uint64_t t0 = rig.vnow;
    for (int i = 0; i < 10; i++) {
        TWT_CHECK(send_msg(0, 20000) == TW_OK); /* zcopy: completions to check */
    }
    rig.want_delivered = rig.next_out[0];
    TWT_CHECK(pump(3000, npaths == 2 ? all_delivered : peer_down_seen));
    double ms = (rig.vnow - t0) / 1e6;
    printf("    path 0 given up after %.0f ms of refusals (path timeout 100 ms)\n", ms);
    TWT_CHECK(ms >= 100 && ms < 1000);
    if (npaths == 2) {
        TWT_EQ(rel_stat(0, TW_REL_STAT_FAILOVERS), 1u);
        TWT_EQ(rig.sides[1].delivered, rig.next_out[0]);
        TWT_EQ(rig.sides[1].bad, 0u);
        TWT_EQ(rig.sides[0].downs + rig.sides[1].downs, 0);
        TWT_CHECK(pump(500, NULL)); /* the acks that complete the sends */
    } else {
        TWT_EQ(rig.sides[0].downs, 1);
        TWT_EQ(rig.sides[0].down_why, TW_ERR_PEER_FAILED);
    }
    for (int i = 10; i < 20; i++) {
        TWT_EQ(rig.sreqs[0][i].done, 1);
        TWT_EQ(rig.sreqs[0][i].status, npaths == 2 ? TW_OK : TW_ERR_PEER_FAILED);
    }
    case_end();
}

void case_refusing(void)
{
    refusing_case("a path that refuses every frame fails over", 2);
}

void case_refusing_only(void)
{
    refusing_case("the only path refuses every frame: the peer fails", 1);
}

/* ---- time ------------------------------------------------------------- */

/* After a pause of progress longer than the keepalive bound, both sides
 * see the other as silent -- from readings older than the frames that
 * arrive first: they ping before they fail anyone. */
static void keepalive_open(const char *name)
{
    tw_rel_cfg_t cfg = test_cfg();

    case_begin(name);
    cfg.keepalive_ns = 50000000; /* 50 ms x 3 */
    cfg.misses = 3;
    rig_open(&cfg, 1);
}

void case_keepalive(void)
{
    keepalive_open("keepalive: a hung peer");
    TWT_CHECK(pump(400, NULL)); /* pings answered: nobody fails */
    TWT_EQ(rig.sides[0].downs + rig.sides[1].downs, 0);
    TWT_CHECK(rel_stat(0, TW_REL_STAT_PINGS) > 0);
    rank_mute(1);
    TWT_CHECK(pump(3000, peer_down_seen));
    double ms = (rig.vnow - rig.last_heard[0]) / 1e6;
    printf("    hung peer failed %.0f ms after it was last heard (bound 150 ms)\n", ms);
    TWT_CHECK(ms >= 150 && ms <= 150 * 1.1);
    TWT_EQ(rig.sides[0].down_why, TW_ERR_PEER_FAILED);
    case_end();
}

void case_pause(void)
{
    keepalive_open("a pause longer than the keepalive bound: ping first, fail nobody");
    TWT_CHECK(send_msg(0, 100) == TW_OK);
    rig.want_delivered = 1;
    TWT_CHECK(pump(100, all_delivered));
    rig.vnow += 1000000000ull; /* 1 s, 20 x the keepalive */
    TWT_CHECK(send_msg(0, 100) == TW_OK);
    rig.want_delivered = 2;
    TWT_CHECK(pump(100, all_delivered));
    TWT_CHECK(pump(300, NULL));
    TWT_EQ(rig.sides[0].downs + rig.sides[1].downs, 0);
    TWT_EQ(rel_stat(0, TW_REL_STAT_PEER_FAILURES) + rel_stat(1, TW_REL_STAT_PEER_FAILURES), 0u);
    TWT_CHECK(rel_stat(0, TW_REL_STAT_PINGS) > 0 && rel_stat(1, TW_REL_STAT_PINGS) > 0);
    TWT_EQ(rig.sides[1].bad, 0u);
    case_end();
}

/* In manual progress a send into an empty window is stamped with the
 * peer's latest clock reading (here: the ack of the message before): the
 * pass that finds it due times it from then on, so its first timeout
 * comes between one and two TW_REL_RTO after the send -- also when that
 * reading is much older than the send. */
void case_early_stamp(void)
{
    tw_rel_cfg_t cfg = test_cfg();
    int rto_ms = (int)(cfg.rto_ns / 1000000);

    case_begin("a send stamped with an earlier reading: timed from the pass");
    rig_open(&cfg, 1);
    /* The first send reads the clock (no round-trip sample yet); its ack
     * gives the sample. */
    TWT_CHECK(send_msg(0, 100) == TW_OK);
    TWT_CHECK(pump(5, NULL));
    path_dark(0, true);
    TWT_CHECK(send_msg(0, 100) == TW_OK); /* lost */
    TWT_CHECK(pump(rto_ms + 5, NULL));    /* a clock read at the send would resend by now */
    TWT_EQ(rel_stat(0, TW_REL_STAT_RETRANSMITS), 0u);
    TWT_CHECK(pump(rto_ms, NULL));
    TWT_EQ(rel_stat(0, TW_REL_STAT_RETRANSMITS), 1u);
    path_dark(0, false);
    rig.want_delivered = 2;
    TWT_CHECK(pump(500, all_delivered));
    TWT_CHECK(pump(5, NULL));
    uint64_t resent = rel_stat(0, TW_REL_STAT_RETRANSMITS);
    /* A pause: no pass runs, rank 0's latest reading ages by 10 RTO. */
    rig.vnow += 10 * cfg.rto_ns;
    path_dark(0, true);
    TWT_CHECK(send_msg(0, 100) == TW_OK); /* lost */
    TWT_CHECK(pump(2, NULL));             /* passes ran: due, stamped, not resent */
    TWT_EQ(rel_stat(0, TW_REL_STAT_RETRANSMITS), resent);
    TWT_CHECK(pump(rto_ms + 2, NULL));
    TWT_EQ(rel_stat(0, TW_REL_STAT_RETRANSMITS), resent + 1);
    path_dark(0, false);
    rig.want_delivered = 3;
    TWT_CHECK(pump(500, all_delivered));
    TWT_EQ(rig.sides[1].bad, 0u);
    TWT_EQ(rel_stat(1, TW_REL_STAT_DUPLICATES), 0u);
    case_end();
}
