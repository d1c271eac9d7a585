/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * TW_FAULT (src/transports/lossy/tw_fault.c), the parser and the
 * decisions. One ctest entry per case (unit/lossy.cmake, fault_spec):
 *
 *   parse           defaults, exact fixed-point probabilities, scoping by
 *                   direction and fragment type with the narrower key
 *                   winning, every rejection;
 *   determinism     the same seed gives the same faults; paths have
 *                   streams of their own;
 *   rates           measured rates match the asked ones; corrupt bits stay
 *                   inside the frame; reorder holds stay inside the window;
 *                   a scoped drop hits only its direction and type;
 *   schedule        blackhole and kill start on time; a zero-length frame
 *                   is never corrupted;
 *   blackhole_heal  a blackhole with blackhole_for heals on time, the
 *                   streams staying aligned; without it, never.
 */
#include <string.h>

#include "transports/lossy/tw_fault.h"
#include "tw_test.h"

#define ONE (1ull << 32)

static tw_fault_spec_t parse_ok(const char *text)
{
    tw_fault_spec_t s;
    char why[160] = "";
    tw_status_t st = tw_fault_parse(text, &s, why, sizeof(why));

    TWT_CHECKF(st == TW_OK, "'%s' refused: %s", text, why);
    return s;
}

static void parse_bad(const char *text, const char *want)
{
    tw_fault_spec_t s;
    char why[160] = "";

    memset(&s, 0x5a, sizeof(s));
    TWT_CHECKF(tw_fault_parse(text, &s, why, sizeof(why)) == TW_ERR_INVALID, "'%s' accepted", text);
    TWT_CHECKF(strstr(why, want) != NULL, "'%s': reason '%s' lacks '%s'", text, why, want);
    TWT_CHECK(s.seed == 0x5a5a5a5a5a5a5a5aull); /* written only on success */
}

static void test_parse(void)
{
    tw_fault_spec_t s = parse_ok(NULL);

    TWT_CHECK(!s.any);
    TWT_EQ(s.seed, 1u);
    TWT_EQ(s.window, 4u);
    TWT_EQ(s.delay_ns, 1000000u);
    s = parse_ok("");
    TWT_CHECK(!s.any);

    s = parse_ok("drop=0.05,corrupt=0.01,dup=0.01,reorder=0.1,seed=42");
    TWT_CHECK(s.any);
    TWT_EQ(s.seed, 42u);
    for (int d = 0; d < TW_FAULT_NDIRS; d++) {
        for (int t = 0; t < TW_FAULT_NTYPES; t++) {
            TWT_EQ(s.p[d][t][TW_FAULT_DROP], (5ull << 32) / 100);
            TWT_EQ(s.p[d][t][TW_FAULT_CORRUPT], ONE / 100);
            TWT_EQ(s.p[d][t][TW_FAULT_REORDER], ONE / 10);
            TWT_EQ(s.p[d][t][TW_FAULT_DELAY], 0u);
        }
    }
    s = parse_ok("drop=1,dup=0,corrupt=1.0,delay=0.000000001");
    TWT_EQ(s.p[0][0][TW_FAULT_DROP], ONE);
    TWT_EQ(s.p[0][0][TW_FAULT_CORRUPT], ONE);
    TWT_EQ(s.p[0][0][TW_FAULT_DUP], 0u);
    TWT_EQ(s.p[1][3][TW_FAULT_DELAY], ONE / 1000000000u);

    /* Scoping: the narrower key wins whatever the order; equals: the later. */
    s = parse_ok("rx.ack.drop=1,drop=0.5,ack.drop=0.25,tx.drop=0.75");
    TWT_EQ(s.p[TW_FAULT_RX][TW_FAULT_ACK][TW_FAULT_DROP], ONE);
    TWT_EQ(s.p[TW_FAULT_TX][TW_FAULT_ACK][TW_FAULT_DROP], ONE * 3 / 4); /* later of two level-1 */
    TWT_EQ(s.p[TW_FAULT_RX][TW_FAULT_DATA][TW_FAULT_DROP], ONE / 2);
    TWT_EQ(s.p[TW_FAULT_TX][TW_FAULT_NACK][TW_FAULT_DROP], ONE * 3 / 4);
    TWT_EQ(s.p[TW_FAULT_RX][TW_FAULT_NACK][TW_FAULT_DROP], ONE / 2);

    s = parse_ok("window=64,delay_time=250us,blackhole=2s,kill=3500ms,seed=18446744073709551615");
    TWT_EQ(s.window, 64u);
    TWT_EQ(s.delay_ns, 250000u);
    TWT_EQ(s.blackhole_ns, 2000000000ull);
    TWT_EQ(s.kill_ns, 3500000000ull);
    TWT_EQ(s.seed, UINT64_MAX);
    TWT_EQ(s.blackhole_len_ns, 0u); /* forever */
    TWT_CHECK(s.any);
    s = parse_ok("blackhole_for=5ms,blackhole=1ms");
    TWT_EQ(s.blackhole_ns, 1000000u);
    TWT_EQ(s.blackhole_len_ns, 5000000u);
    TWT_CHECK(s.any);
    s = parse_ok("blackhole_for=5ms"); /* no blackhole to heal: nothing happens */
    TWT_CHECK(!s.any);
    s = parse_ok("blackhole_after=500");
    TWT_EQ(s.blackhole_frames, 500u);
    TWT_CHECK(s.any);
    s = parse_ok(",,drop=0.5,,"); /* empty items are skipped */
    TWT_CHECK(s.any);

    parse_bad("drop", "key=value");
    parse_bad("drop=1.5", "probability");
    parse_bad("drop=2", "probability");
    parse_bad("drop=-0.1", "probability");
    parse_bad("drop=0.", "probability");
    parse_bad("drop=.5", "probability");
    parse_bad("drop=0.1234567891", "probability");
    parse_bad("drop=1e-3", "probability");
    parse_bad("drop=", "probability");
    parse_bad("loss=0.1", "unknown key");
    parse_bad("tx.seed=3", "unknown key");
    parse_bad("ack.tx.drop=0.1", "in that order");
    parse_bad("tx.rx.drop=0.1", "in that order");
    parse_bad("data.ack.drop=0.1", "in that order");
    parse_bad("tx.data.ack.drop=0.1", "fault");
    parse_bad(".drop=0.1", "fault");
    parse_bad("window=0", "1..64");
    parse_bad("window=65", "1..64");
    parse_bad("seed=18446744073709551616", "seed");
    parse_bad("seed=-1", "seed");
    parse_bad("blackhole=soon", "duration");
    parse_bad("kill=", "duration");
    parse_bad("blackhole_for=forever", "duration");
    parse_bad("blackhole_len=1ms", "blackhole_for");
    parse_bad("blackhole_after=0", "frames");
    parse_bad("blackhole_after=soon", "frames");
}

static void test_determinism(void)
{
    tw_fault_spec_t s = parse_ok("drop=0.1,corrupt=0.1,dup=0.1,reorder=0.1,delay=0.1,seed=7");
    tw_fault_rng_t a, b, c;
    unsigned same_as_other_path = 0;

    tw_fault_rng_init(&a, s.seed, 0, 1, TW_FAULT_TX);
    tw_fault_rng_init(&b, s.seed, 0, 1, TW_FAULT_TX);
    tw_fault_rng_init(&c, s.seed, 0, 2, TW_FAULT_TX);
    for (int i = 0; i < 100000; i++) {
        tw_fault_decision_t x, y, z;
        tw_fault_decide(&s, &a, TW_FAULT_TX, TW_FAULT_DATA, 100, (uint64_t)i, &x);
        tw_fault_decide(&s, &b, TW_FAULT_TX, TW_FAULT_DATA, 100, (uint64_t)i, &y);
        tw_fault_decide(&s, &c, TW_FAULT_TX, TW_FAULT_DATA, 100, (uint64_t)i, &z);
        TWT_CHECK(memcmp(&x, &y, sizeof(x)) == 0);
        same_as_other_path += memcmp(&x, &z, sizeof(x)) == 0;
    }
    /* Another path is another stream: most decisions are pass-through for
     * both, so compare with what independence gives (~0.45 identical). */
    TWT_CHECKF(same_as_other_path < 60000, "paths 0->1 and 0->2 share a stream (%u/100000)",
               same_as_other_path);

    /* A different seed, a different sequence. */
    tw_fault_rng_init(&a, 7, 0, 1, TW_FAULT_TX);
    tw_fault_rng_init(&b, 8, 0, 1, TW_FAULT_TX);
    unsigned differ = 0;
    for (int i = 0; i < 64; i++) {
        differ += tw_fault_rng_next(&a) != tw_fault_rng_next(&b);
    }
    TWT_EQ(differ, 64u);
}

static void test_rates(void)
{
    tw_fault_spec_t s =
        parse_ok("drop=0.05,corrupt=0.01,dup=0.02,reorder=0.1,delay=0.03,window=8,seed=42");
    tw_fault_rng_t rng;
    unsigned n = 1000000, drop = 0, corrupt = 0, dup = 0, reorder = 0, delay = 0, passed = 0;

    tw_fault_rng_init(&rng, s.seed, 3, 5, TW_FAULT_RX);
    for (unsigned i = 0; i < n; i++) {
        tw_fault_decision_t d;
        size_t len = 1 + i % 300;
        tw_fault_decide(&s, &rng, TW_FAULT_RX, (tw_fault_type_t)(i % TW_FAULT_NTYPES), len, i, &d);
        TWT_CHECK(!d.killed);
        if (d.drop) {
            drop++;
            TWT_CHECK(!d.corrupt && !d.dup && d.hold == 0 && d.delay_ns == 0);
            continue;
        }
        passed++;
        if (d.corrupt) {
            corrupt++;
            TWT_CHECK(d.bit < len * 8);
        }
        dup += d.dup;
        if (d.hold > 0) {
            reorder++;
            TWT_CHECK(d.hold <= 8);
        }
        if (d.delay_ns > 0) {
            delay++;
            TWT_EQ(d.delay_ns, 1000000u);
        }
    }
    /* Within 5 standard deviations of the asked rates. */
    TWT_CHECKF(drop > 48000 && drop < 52000, "drop %u of %u", drop, n);
    TWT_CHECKF(corrupt > passed / 100 - 500 && corrupt < passed / 100 + 500, "corrupt %u", corrupt);
    TWT_CHECKF(dup > passed / 50 - 700 && dup < passed / 50 + 700, "dup %u", dup);
    TWT_CHECKF(reorder > passed / 10 - 1500 && reorder < passed / 10 + 1500, "reorder %u", reorder);
    TWT_CHECKF(delay > passed * 3 / 100 - 900 && delay < passed * 3 / 100 + 900, "delay %u", delay);

    /* Scoped: only incoming acks are lost, all of them. */
    s = parse_ok("rx.ack.drop=1");
    tw_fault_rng_init(&rng, s.seed, 0, 1, TW_FAULT_RX);
    for (int t = 0; t < TW_FAULT_NTYPES; t++) {
        for (int dir = 0; dir < TW_FAULT_NDIRS; dir++) {
            tw_fault_decision_t d;
            tw_fault_decide(&s, &rng, (tw_fault_dir_t)dir, (tw_fault_type_t)t, 64, 0, &d);
            TWT_EQ(d.drop, dir == TW_FAULT_RX && t == TW_FAULT_ACK);
        }
    }
}

static void test_schedule(void)
{
    tw_fault_spec_t s = parse_ok("blackhole=1ms,kill=2ms");
    tw_fault_rng_t rng;
    tw_fault_decision_t d;

    tw_fault_rng_init(&rng, s.seed, 0, 1, TW_FAULT_TX);
    tw_fault_decide(&s, &rng, TW_FAULT_TX, TW_FAULT_DATA, 10, 999999, &d);
    TWT_CHECK(!d.drop && !d.killed);
    tw_fault_decide(&s, &rng, TW_FAULT_TX, TW_FAULT_CTRL, 10, 1000000, &d);
    TWT_CHECK(d.drop && !d.killed);
    tw_fault_decide(&s, &rng, TW_FAULT_TX, TW_FAULT_DATA, 10, 1999999, &d);
    TWT_CHECK(d.drop && !d.killed);
    tw_fault_decide(&s, &rng, TW_FAULT_TX, TW_FAULT_ACK, 10, 2000000, &d);
    TWT_CHECK(d.drop && d.killed);
    /* A zero-length frame is never corrupted (no bit to flip). */
    s = parse_ok("corrupt=1");
    tw_fault_decide(&s, &rng, TW_FAULT_TX, TW_FAULT_DATA, 0, 0, &d);
    TWT_CHECK(!d.corrupt);
    tw_fault_decide(&s, &rng, TW_FAULT_TX, TW_FAULT_DATA, 1, 0, &d);
    TWT_CHECK(d.corrupt && d.bit < 8);
}

/* blackhole=1ms,blackhole_for=5ms: silent in [1 ms, 6 ms) only; frames
 * passing again draw the same values as before (the stream stays aligned). */
static void test_blackhole_heal(void)
{
    tw_fault_spec_t s = parse_ok("blackhole=1ms,blackhole_for=5ms,drop=0.5,seed=3");
    tw_fault_spec_t open_ended = parse_ok("drop=0.5,seed=3");
    const uint64_t at[] = {0, 999999, 1000000, 3000000, 5999999, 6000000, 7000000, 1000000000};
    const bool holed[] = {false, false, true, true, true, false, false, false};
    tw_fault_rng_t a, b;

    tw_fault_rng_init(&a, s.seed, 0, 1, TW_FAULT_RX);
    tw_fault_rng_init(&b, s.seed, 0, 1, TW_FAULT_RX);
    for (size_t i = 0; i < TWT_ARRAY_SIZE(at); i++) {
        tw_fault_decision_t d, ref;
        tw_fault_decide(&s, &a, TW_FAULT_RX, TW_FAULT_ACK, 32, at[i], &d);
        tw_fault_decide(&open_ended, &b, TW_FAULT_RX, TW_FAULT_ACK, 32, at[i], &ref);
        TWT_CHECK(!d.killed);
        if (holed[i]) {
            TWT_CHECKF(d.drop && !d.corrupt && !d.dup, "at %" PRIu64 " ns", at[i]);
        } else {
            TWT_CHECKF(d.drop == ref.drop && d.dup == ref.dup && d.corrupt == ref.corrupt &&
                           d.bit == ref.bit && d.hold == ref.hold && d.delay_ns == ref.delay_ns,
                       "at %" PRIu64 " ns", at[i]);
        }
    }
    /* Without blackhole_for the hole never closes. */
    s = parse_ok("blackhole=1ms");
    tw_fault_decision_t d;
    tw_fault_decide(&s, &a, TW_FAULT_TX, TW_FAULT_DATA, 32, UINT64_MAX, &d);
    TWT_CHECK(d.drop);
}

static const twt_case_t cases[] = {
    {"parse", test_parse},       {"determinism", test_determinism},       {"rates", test_rates},
    {"schedule", test_schedule}, {"blackhole_heal", test_blackhole_heal},
};

int main(int argc, char **argv)
{
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
