/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * TCP's sender-side rendezvous (issue 15 item 3), two ranks over
 * TW_TRANSPORTS=tcp. Rank 0 sends NMSG large messages (64 MiB each; a
 * quarter under sanitizers, TWTEST_SCALE) that rank 1 has not asked for,
 * then a small marker on the same connection: frames stay in order, so
 * once the marker is in, every large message has been announced.
 *
 *   test_tcp_rndv unmatched   rank 1 checks that the announcements cost
 *       it no more than the documented bound (RSS from /proc/self/statm,
 *       before and after, with a margin for the allocator), tells rank 0
 *       "go", and only then posts its receives -- the last one too short
 *       (TW_ERR_TRUNCATED, the prefix intact). Rank 0 checks that no large
 *       send completed before "go" arrived (the go frame precedes every
 *       CTS on the connection, and the completions of one engine reach
 *       the CQ in order), and that each completes once, TW_OK; rank 1
 *       checks every payload's bytes.
 *   test_tcp_rndv kill DIR    (twrun -n 2 --keep-going) rank 1 SIGKILLs
 *       itself once the announcements are in; rank 0's large sends all
 *       complete with TW_ERR_PEER_FAILED, the error handler runs once, and
 *       rank 0 leaves DIR/rank0.pass (tcp_rndv_kill_test.sh checks the
 *       rest). No timing is asserted: a hang is the watchdog's failure.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "threadwire/threadwire.h"
#include "tw_mp.h"
#include "tw_test.h"

#define NMSG       8
#define TAG_MARKER 100
#define TAG_GO     101
#define TAG_BAR    200
/* What the receiver may hold for NMSG unmatched announcements: the
 * documented bound is under 1 KiB each (src/transports/tcp/README.md);
 * the margin covers the connection's receive buffer (up to 1 MiB), the
 * CQs and whatever the allocator keeps. Staging the payloads, as before
 * the rendezvous, would cost NMSG x the message size. */
#define ANNOUNCE_BOUND (NMSG * 1024ul)
#define RSS_MARGIN     (24ul << 20)

static size_t msg_len(void)
{
    return (size_t)twt_scaled(64, 16) << 20; /* 64 MiB, 16 under sanitizers */
}

static uint64_t seed_of(int i)
{
    return 0x7c9a0000u + (uint64_t)i;
}

/* Resident bytes of this process (/proc/self/statm, second field). */
static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;

    TW_MP_CHECK(f != NULL, "cannot open /proc/self/statm");
    TW_MP_CHECK(fscanf(f, "%lu %lu", &size, &resident) == 2, "cannot read /proc/self/statm");
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* One completion from @p cq (forever: the watchdog bounds the wait). */
static tw_completion_t wait_one(tw_context_t *ctx, tw_cq_t *cq)
{
    tw_completion_t c;

    while (tw_cq_wait(cq, &c, 1, 100) != 1) {
        (void)tw_progress(ctx);
    }
    tw_mp_tick();
    return c;
}

/* Rank 0: the large sends, then the marker. */
static void post_sends(tw_context_t *ctx, tw_cq_t *cq, unsigned char **bufs)
{
    static char marker;
    tw_status_t st;

    for (int i = 0; i < NMSG; i++) {
        bufs[i] = malloc(msg_len());
        TW_MP_CHECK(bufs[i] != NULL, "out of memory");
        (void)twt_fill(bufs[i], msg_len(), seed_of(i));
        st = TW_MP_POST(
            ctx, tw_send(ctx, 1, (uint64_t)i, bufs[i], msg_len(), cq, (void *)(uintptr_t)(i + 1)));
        TW_MP_CHECK(st == TW_OK, "tw_send %d: %s", i, tw_strerror(st));
    }
    st = TW_MP_POST(ctx, tw_send(ctx, 1, TAG_MARKER, &marker, 0, cq, NULL));
    TW_MP_CHECK(st == TW_OK, "marker: %s", tw_strerror(st));
}

/* Rank 0, unmatched: nothing large completes before "go"; then each
 * completes once, TW_OK. */
static void sender_unmatched(tw_context_t *ctx, tw_cq_t *cq)
{
    unsigned char *bufs[NMSG];
    bool done[NMSG] = {false}, go = false;
    int left = NMSG;
    char go_byte;

    tw_mp_phase("sender: posting");
    TW_MP_CHECK(tw_recv(ctx, 1, TAG_GO, 0, &go_byte, 1, cq, (void *)(uintptr_t)999) == TW_OK,
                "recv go");
    post_sends(ctx, cq, bufs);
    tw_mp_phase("sender: waiting for go and the sends");
    while (left > 0 || !go) {
        tw_completion_t c = wait_one(ctx, cq);
        uintptr_t u = (uintptr_t)c.user;
        if (u == 999) {
            TW_MP_CHECK(c.status == TW_OK, "go: %s", tw_strerror(c.status));
            go = true;
        } else if (u >= 1 && u <= NMSG) {
            int i = (int)u - 1;
            TW_MP_CHECK(go, "send %d completed before the receiver posted its receive", i);
            TW_MP_CHECK(!done[i], "send %d completed twice", i);
            TW_MP_CHECK(c.status == TW_OK, "send %d: %s", i, tw_strerror(c.status));
            done[i] = true;
            left--;
        } else {
            TW_MP_CHECK(u == 0 && c.status == TW_OK, "marker send: %s", tw_strerror(c.status));
        }
    }
    for (int i = 0; i < NMSG; i++) {
        free(bufs[i]);
    }
    printf("rank 0: %d sends of %zu bytes completed once each, none before the receives\n", NMSG,
           msg_len());
}

/* Rank 1: wait for the marker (every announcement is in behind it). */
static void wait_marker(tw_context_t *ctx, tw_cq_t *cq)
{
    char m;

    TW_MP_CHECK(tw_recv(ctx, 0, TAG_MARKER, 0, &m, 1, cq, NULL) == TW_OK, "recv marker");
    tw_completion_t c = wait_one(ctx, cq);
    TW_MP_CHECK(c.status == TW_OK && c.length == 0, "marker: %s", tw_strerror(c.status));
}

/* Rank 1, unmatched: bounded memory, then every receive, checked. */
static void receiver_unmatched(tw_context_t *ctx, tw_cq_t *cq, size_t rss0)
{
    unsigned char *bufs[NMSG];
    size_t lens[NMSG];
    bool done[NMSG] = {false};
    static char go_byte = 1;
    tw_status_t st;

    tw_mp_phase("receiver: waiting for the announcements");
    wait_marker(ctx, cq);
    /* Let the engine run a while: a transport that staged the payloads
     * would be reading them now. */
    for (int k = 0; k < 20; k++) {
        (void)tw_progress(ctx);
        usleep(10000);
    }
    size_t rss1 = rss_bytes();
    size_t grew = rss1 > rss0 ? rss1 - rss0 : 0;
    printf("rank 1: RSS %zu KiB before, %zu KiB with %d unmatched %zu-byte messages "
           "(bound %lu KiB + margin %lu KiB)\n",
           rss0 >> 10, rss1 >> 10, NMSG, msg_len(), ANNOUNCE_BOUND >> 10, RSS_MARGIN >> 10);
    TW_MP_CHECK(grew <= ANNOUNCE_BOUND + RSS_MARGIN,
                "unmatched announcements grew the RSS by %zu KiB (bound %lu KiB + margin %lu KiB)",
                grew >> 10, ANNOUNCE_BOUND >> 10, RSS_MARGIN >> 10);

    st = TW_MP_POST(ctx, tw_send(ctx, 0, TAG_GO, &go_byte, 1, cq, NULL));
    TW_MP_CHECK(st == TW_OK, "go: %s", tw_strerror(st));
    tw_mp_phase("receiver: receiving");
    for (int i = 0; i < NMSG; i++) {
        /* The last receive is too short: truncated, its prefix intact. */
        lens[i] = i == NMSG - 1 ? msg_len() / 2 + 3 : msg_len();
        bufs[i] = malloc(lens[i]);
        TW_MP_CHECK(bufs[i] != NULL, "out of memory");
        st = TW_MP_POST(
            ctx, tw_recv(ctx, 0, (uint64_t)i, 0, bufs[i], lens[i], cq, (void *)(uintptr_t)(i + 1)));
        TW_MP_CHECK(st == TW_OK, "tw_recv %d: %s", i, tw_strerror(st));
    }
    for (int left = NMSG + 1; left > 0; left--) { /* and the go send */
        tw_completion_t c = wait_one(ctx, cq);
        uintptr_t u = (uintptr_t)c.user;
        if (u == 0) {
            TW_MP_CHECK(c.status == TW_OK, "go send: %s", tw_strerror(c.status));
            continue;
        }
        TW_MP_CHECK(u >= 1 && u <= NMSG, "unexpected completion %p", c.user);
        int i = (int)u - 1;
        TW_MP_CHECK(!done[i], "receive %d completed twice", i);
        done[i] = true;
        TW_MP_CHECK(c.status == (i == NMSG - 1 ? TW_ERR_TRUNCATED : TW_OK), "receive %d: %s", i,
                    tw_strerror(c.status));
        TW_MP_CHECK(c.length == msg_len(), "receive %d: length %zu", i, c.length);
        if (i < NMSG - 1) {
            TW_MP_CHECK(twt_verify(bufs[i], lens[i], seed_of(i)), "receive %d: payload differs", i);
        } else {
            unsigned char *want = malloc(msg_len());
            TW_MP_CHECK(want != NULL, "out of memory");
            (void)twt_fill(want, msg_len(), seed_of(i));
            TW_MP_CHECK(memcmp(want, bufs[i], lens[i]) == 0, "truncated receive: prefix differs");
            free(want);
        }
    }
    for (int i = 0; i < NMSG; i++) {
        free(bufs[i]);
    }
    printf("rank 1: %d receives completed once each, payloads verified (one truncated)\n", NMSG);
}

/* Rank 0, kill: every large send fails with the peer, once. */
static void sender_kill(tw_context_t *ctx, tw_cq_t *cq, const char *dir)
{
    unsigned char *bufs[NMSG];
    bool done[NMSG] = {false};
    int left = NMSG;

    tw_mp_phase("sender: posting");
    post_sends(ctx, cq, bufs);
    tw_mp_phase("sender: waiting for the sends to fail");
    while (left > 0) {
        tw_completion_t c = wait_one(ctx, cq);
        uintptr_t u = (uintptr_t)c.user;
        if (u == 0) {
            continue; /* the marker */
        }
        TW_MP_CHECK(u >= 1 && u <= NMSG, "unexpected completion %p", c.user);
        int i = (int)u - 1;
        TW_MP_CHECK(!done[i], "send %d completed twice", i);
        TW_MP_CHECK(c.status == TW_ERR_PEER_FAILED, "send %d: %s, want TW_ERR_PEER_FAILED", i,
                    tw_strerror(c.status));
        done[i] = true;
        left--;
    }
    (void)tw_mp_errors_expect_once(1, TW_ERR_PEER_FAILED);
    for (int i = 0; i < NMSG; i++) {
        free(bufs[i]);
    }
    char path[512];
    snprintf(path, sizeof(path), "%s/rank0.pass", dir);
    FILE *f = fopen(path, "w");
    TW_MP_CHECK(f != NULL, "cannot write %s", path);
    fclose(f);
    printf("rank 0: %d unmatched sends completed with TW_ERR_PEER_FAILED when rank 1 died\n", NMSG);
}

int main(int argc, char **argv)
{
    tw_mp_opts_t o = {.threads = 1, .seed = 1, .stall_s = 60};
    tw_cq_t *cq;

    tw_mp_parse(argc, argv, "test_tcp_rndv", TW_MP_STALL, NULL, 0, &o);
    if (optind >= argc ||
        (strcmp(argv[optind], "unmatched") != 0 && strcmp(argv[optind], "kill") != 0) ||
        (strcmp(argv[optind], "kill") == 0 && optind + 1 >= argc)) {
        fprintf(stderr, "usage: test_tcp_rndv unmatched | kill DIR\n");
        return 2;
    }
    bool kill_mode = strcmp(argv[optind], "kill") == 0;
    tw_context_t *ctx = tw_mp_init();
    TW_MP_CHECK(tw_mp_size() == 2, "run with twrun -n 2");
    TW_MP_CHECK(tw_cq_create(ctx, 64, &cq) == TW_OK, "tw_cq_create");
    tw_mp_watchdog_start(o.stall_s, NULL);
    tw_mp_barrier(ctx, TAG_BAR); /* connected, settled: the RSS baseline */
    size_t rss0 = rss_bytes();
    tw_mp_barrier(ctx, TAG_BAR + 1);
    if (tw_mp_rank() == 0) {
        if (kill_mode) {
            sender_kill(ctx, cq, argv[optind + 1]);
        } else {
            sender_unmatched(ctx, cq);
        }
    } else if (kill_mode) {
        tw_mp_phase("receiver: waiting for the announcements");
        wait_marker(ctx, cq);
        fflush(stdout);
        raise(SIGKILL); /* with NMSG announcements unanswered */
    } else {
        receiver_unmatched(ctx, cq, rss0);
    }
    if (!kill_mode) {
        tw_mp_barrier(ctx, TAG_BAR + 2);
    }
    tw_mp_watchdog_stop();
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy");
    tw_mp_phase("tw_finalize");
    TW_MP_CHECK(tw_finalize(ctx) == TW_OK, "tw_finalize");
    return 0;
}
