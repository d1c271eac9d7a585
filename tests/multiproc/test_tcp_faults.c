/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * A TCP peer that stops answering, three ways (twrun -n 2, TW_TRANSPORTS=tcp,
 * TWTEST_FAULT selects, TW_TCP_TIMEOUT = T):
 *
 *   sigstop    rank 0 sends rank 1 SIGSTOP mid-stream. Rank 1's kernel
 *              still acknowledges and answers keepalives, so only the
 *              lanes' PINGs and silence check (or a full window hitting
 *              TCP_USER_TIMEOUT) can tell: detected in [T/2, 1.25 T + 0.25 s].
 *              Then SIGCONT: rank 1 finds rank 0 gone, and nothing it still
 *              sends reaches rank 0 (its tl stats count no new arrival).
 *   blackhole  rank 0 makes the network drop every TCP segment (nftables, in
 *              a network namespace of the job's own: tcp_netfault_test.sh):
 *              detected in the same window as sigstop.
 *   reset      rank 0 makes the network answer every TCP segment with a
 *              reset: detected within 500 ms.
 *
 * Rank 0 streams 32 KiB checksummed messages with a window of 8 and
 * injects the fault after 200 of them. Both ranks check that every
 * operation posted completes (OK or TW_ERR_PEER_FAILED), that what arrived
 * is intact and arrived once, and that the error handler ran once.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "threadwire/threadwire.h"
#include "tw_mp.h"
#include "tw_mp_tcp.h"

#define LEN       (32u * 1024u)
#define WINDOW    8
#define INJECT_AT 200
#define TAG_PID   (1ull << 50)

/* Run an nftables command (inside the test's network namespace). */
static void nft(const char *rules)
{
    char cmd[512];
    const char *bin = getenv("TWTEST_NFT");

    snprintf(cmd, sizeof(cmd), "%s -f - <<'EOF'\n%s\nEOF\n", bin != NULL ? bin : "nft", rules);
    TWT_CHECKF(system(cmd) == 0, "nft failed: %s", rules);
}

static void inject(const char *fault, pid_t victim)
{
    if (strcmp(fault, "sigstop") == 0) {
        TWT_EQ(kill(victim, SIGSTOP), 0);
    } else if (strcmp(fault, "blackhole") == 0) {
        nft("table inet twt {\n chain out {\n  type filter hook output priority 0\n"
            "  meta l4proto tcp drop\n }\n}");
    } else if (strcmp(fault, "reset") == 0) {
        nft("table inet twt {\n chain out {\n  type filter hook output priority 0\n"
            "  tcp flags & rst == 0 reject with tcp reset\n }\n}");
    } else {
        TWT_CHECKF(0, "unknown TWTEST_FAULT '%s'", fault);
    }
}

static double timeout_s(void)
{
    const char *t = getenv("TW_TCP_TIMEOUT"); /* the test sets it in seconds: "2s" */
    TWT_CHECKF(t != NULL && atof(t) > 0, "set TW_TCP_TIMEOUT (seconds, e.g. 2s)");
    return atof(t);
}

/* Rank 0: stream, inject, measure. */
static void observer(tw_context_t *ctx, tw_cq_t *cq, const char *fault)
{
    static unsigned char bufs[WINDOW][LEN];
    double T = timeout_s(), t0 = 0, t_err = 0;
    unsigned posted = 0, ok = 0, failed = 0;
    pid_t victim = 0;
    tw_completion_t c;

    TWT_EQ(tw_recv(ctx, 1, TAG_PID, 0, &victim, sizeof(victim), cq, NULL), TW_OK);
    TWT_EQ(tw_cq_wait(cq, &c, 1, 10000), 1);
    TWT_EQ(c.status, TW_OK);
    TWT_CHECK(victim > 0);
    for (unsigned i = 0; failed == 0; i++) {
        if (posted - ok - failed == WINDOW) {
            TWT_CHECKF(tw_cq_wait(cq, &c, 1, (int)(T * 3000)) == 1,
                       "no completion for 3 T after the fault: the failure was not detected");
            if (c.status == TW_OK) {
                ok++;
            } else {
                TWT_EQ(c.status, TW_ERR_PEER_FAILED);
                failed++;
                t_err = twt_now();
            }
        }
        if (failed > 0) {
            break;
        }
        if (i == INJECT_AT) {
            inject(fault, victim);
            t0 = twt_now();
        }
        twt_fill(bufs[i % WINDOW], LEN, i);
        tw_status_t st = tw_send(ctx, 1, i, bufs[i % WINDOW], LEN, cq, NULL);
        if (st == TW_ERR_PEER_FAILED) {
            failed++;
            t_err = twt_now();
            break;
        }
        TWT_EQ(st, TW_OK);
        posted++;
    }
    /* Every operation completes; none after the failure is OK. */
    while (ok + failed < posted) {
        TWT_EQ(tw_cq_wait(cq, &c, 1, 5000), 1);
        TWT_CHECK(c.status == TW_OK || c.status == TW_ERR_PEER_FAILED);
        c.status == TW_OK ? ok++ : failed++;
    }
    double took = t_err - t0;
    printf("rank 0: %s detected after %.3f s (TW_TCP_TIMEOUT %.1f s); %u sends ok, %u failed\n",
           fault, took, T, ok, failed);
    if (strcmp(fault, "reset") == 0) {
        TWT_CHECKF(took <= 0.5, "a reset took %.3f s to fail the peer (bound 0.5 s)", took);
    } else {
        TWT_CHECKF(took >= T / 2 && took <= 1.25 * T + 0.25,
                   "%s detected after %.3f s, outside [%.2f, %.2f]", fault, took, T / 2,
                   1.25 * T + 0.25);
    }
    (void)tw_mp_errors_expect_once(1 - tw_rank(ctx), TW_ERR_PEER_FAILED);
    TWT_EQ(tw_send(ctx, 1, 0, bufs[0], 8, cq, NULL), TW_ERR_PEER_FAILED);

    if (strcmp(fault, "sigstop") == 0) {
        /* Rank 1 resumes: whatever it still sends must not arrive. */
        uint64_t rx = tw_stats_read(tw_mp_tcp_iface(ctx)->stats, TW_TL_STAT_RX_MSGS);
        TWT_EQ(kill(victim, SIGCONT), 0);
        usleep(500000);
        TWT_EQ(tw_stats_read(tw_mp_tcp_iface(ctx)->stats, TW_TL_STAT_RX_MSGS), rx);
    } else {
        nft("flush ruleset");
    }
}

/* Rank 1: receive in order until rank 0 is gone. */
static void victim(tw_context_t *ctx, tw_cq_t *cq)
{
    static unsigned char bufs[WINDOW][LEN];
    pid_t me = getpid();
    static unsigned char seen[1u << 16];
    unsigned got = 0, done = 0, posted = 0, failed = 0;
    tw_completion_t c;

    TWT_EQ(tw_send(ctx, 0, TAG_PID, &me, sizeof(me), cq, NULL), TW_OK);
    TWT_EQ(tw_cq_wait(cq, &c, 1, 10000), 1);
    TWT_EQ(c.status, TW_OK);
    for (unsigned i = 0; i < WINDOW; i++) {
        TWT_EQ(tw_recv(ctx, 0, i, 0, bufs[i], LEN, cq, (void *)(uintptr_t)i), TW_OK);
        posted++;
    }
    while (done < posted) {
        TWT_CHECKF(tw_cq_wait(cq, &c, 1, 60000) == 1, "rank 1: no completion for 60 s");
        done++;
        if (c.status != TW_OK) {
            TWT_EQ(c.status, TW_ERR_PEER_FAILED);
            failed++;
            continue;
        }
        /* Receives complete in any order (a message that arrived before
         * its receive was posted is copied out later), each exactly once. */
        unsigned i = (unsigned)(uintptr_t)c.user, tag = (unsigned)c.tag;
        TWT_CHECK(tag < sizeof(seen) && tag % WINDOW == i && !seen[tag]);
        seen[tag] = 1;
        TWT_EQ(c.length, (size_t)LEN);
        TWT_CHECKF(twt_verify(bufs[i], LEN, tag), "message %u corrupted", tag);
        got++;
        if (failed == 0 && tag + WINDOW < sizeof(seen)) {
            tw_status_t st =
                tw_recv(ctx, 0, tag + WINDOW, 0, bufs[i], LEN, cq, (void *)(uintptr_t)i);
            if (st == TW_OK) {
                posted++;
            } else {
                TWT_EQ(st, TW_ERR_PEER_FAILED);
            }
        }
    }
    TWT_CHECKF(failed > 0, "rank 1 never saw rank 0 fail");
    /* Not every message rank 0 saw complete arrived: a send completes
     * once the socket took it, and what was still in the kernel's buffers
     * when rank 0 reset the connection is gone (no reliability layer). */
    TWT_CHECK(got > 0);
    (void)tw_mp_errors_expect_once(1 - tw_rank(ctx), TW_ERR_PEER_FAILED);
    /* Stale traffic: a send to the failed peer is refused at once. */
    TWT_EQ(tw_send(ctx, 0, 1, bufs[0], 8, cq, NULL), TW_ERR_PEER_FAILED);
    printf("rank 1: %u messages intact, each once, then rank 0 failed (%u receives failed)\n", got,
           failed);
}

int main(void)
{
    const char *fault = getenv("TWTEST_FAULT");
    tw_context_t *ctx;
    tw_cq_t *cq;

    TWT_CHECKF(fault != NULL, "set TWTEST_FAULT to sigstop, blackhole or reset");
    TWT_EQ(tw_init(NULL, &ctx), TW_OK);
    tw_mp_attach(ctx);
    TWT_EQ(tw_size(ctx), 2);
    TWT_CHECK(tw_mp_tcp_iface(ctx) != NULL);
    TWT_EQ(tw_cq_create(ctx, 64, &cq), TW_OK);
    if (tw_rank(ctx) == 0) {
        observer(ctx, cq, fault);
    } else {
        victim(ctx, cq);
    }
    TWT_EQ(tw_finalize(ctx), TW_OK);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    return 0;
}
