/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The public API end to end on a job of one process, in the mode given:
 *   test_api_basic thread|manual
 * exact / masked / wildcard receives, receive-before-send and
 * send-before-receive, truncation and longer buffers, zero length, eager
 * and zero-copy sizes, active messages (handler thread, header and data),
 * AM ids without handler, tw_stats_print.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "threadwire/threadwire.h"
#include "tw_test.h"

static tw_context_t *ctx;
static bool manual;

static tw_completion_t wait_one(tw_cq_t *cq)
{
    tw_completion_t c;
    int n;
    double t0 = twt_now();
    while ((n = tw_cq_wait(cq, &c, 1, 100)) == 0) {
        TWT_CHECKF(twt_now() - t0 < 20, "no completion within 20 s");
    }
    TWT_EQ(n, 1);
    return c;
}

static void roundtrip(tw_cq_t *cq, size_t send_len, size_t recv_len, bool recv_first)
{
    unsigned char *sbuf = malloc(send_len + 1), *rbuf = malloc(recv_len + 1);
    uint64_t tag = 0x1234000000000000ull | send_len;
    tw_completion_t c[2];
    int got_send = 0, got_recv = 0;

    TWT_CHECK(sbuf && rbuf);
    twt_fill(sbuf, send_len, send_len);
    memset(rbuf, 0xAB, recv_len + 1);
    if (recv_first) {
        TWT_EQ(tw_recv(ctx, 0, tag, 0, rbuf, recv_len, cq, rbuf), TW_OK);
        TWT_EQ(tw_send(ctx, 0, tag, sbuf, send_len, cq, sbuf), TW_OK);
    } else {
        TWT_EQ(tw_send(ctx, 0, tag, sbuf, send_len, cq, sbuf), TW_OK);
        if (manual) {
            tw_progress(ctx); /* let it become unexpected */
        }
        TWT_EQ(tw_recv(ctx, 0, tag, 0, rbuf, recv_len, cq, rbuf), TW_OK);
    }
    for (int i = 0; i < 2; i++) {
        c[i] = wait_one(cq);
        if (c[i].op == TW_OP_SEND) {
            got_send++;
            TWT_CHECK(c[i].user == sbuf);
            TWT_EQ(c[i].status, TW_OK);
            TWT_EQ(c[i].length, send_len);
            TWT_EQ(c[i].peer, 0);
        } else {
            got_recv++;
            TWT_EQ(c[i].op, TW_OP_RECV);
            TWT_CHECK(c[i].user == rbuf);
            TWT_EQ(c[i].peer, 0);
            TWT_EQ(c[i].tag, tag);
            TWT_EQ(c[i].length, send_len); /* the sent length, also when truncated */
            TWT_EQ(c[i].status, send_len > recv_len ? TW_ERR_TRUNCATED : TW_OK);
            size_t n = send_len < recv_len ? send_len : recv_len;
            TWT_CHECK(memcmp(rbuf, sbuf, n) == 0);
            TWT_EQ(rbuf[n], 0xAB); /* nothing written past the message */
        }
    }
    TWT_EQ(got_send, 1);
    TWT_EQ(got_recv, 1);
    free(sbuf);
    free(rbuf);
}

static void test_matching(tw_cq_t *cq)
{
    int v[4] = {10, 11, 12, 13}, r[4] = {0};
    tw_completion_t c;

    /* Masked: ignore the low byte. Wildcard source. Messages first. */
    TWT_EQ(tw_send(ctx, 0, 0x500, &v[0], sizeof(int), cq, NULL), TW_OK);
    TWT_EQ(tw_send(ctx, 0, 0x501, &v[1], sizeof(int), cq, NULL), TW_OK);
    TWT_EQ(tw_send(ctx, 0, 0x600, &v[2], sizeof(int), cq, NULL), TW_OK);
    for (int i = 0; i < 3; i++) {
        c = wait_one(cq);
        TWT_EQ(c.op, TW_OP_SEND);
    }
    if (manual) {
        while (tw_progress(ctx) > 0) {
        }
    }
    /* matches 0x500 then 0x501, in send order, not 0x600 */
    TWT_EQ(tw_recv(ctx, TW_ANY_SOURCE, 0x5ff, 0xff, &r[0], sizeof(int), cq, &r[0]), TW_OK);
    TWT_EQ(tw_recv(ctx, 0, 0x5aa, 0xff, &r[1], sizeof(int), cq, &r[1]), TW_OK);
    for (int i = 0; i < 2; i++) {
        c = wait_one(cq);
        TWT_EQ(c.op, TW_OP_RECV);
        TWT_EQ(c.status, TW_OK);
        if (c.user == &r[0]) {
            TWT_EQ(c.tag, 0x500);
        } else {
            TWT_CHECK(c.user == &r[1]);
            TWT_EQ(c.tag, 0x501);
        }
    }
    TWT_EQ(r[0], 10);
    TWT_EQ(r[1], 11);
    /* Receives first: the earliest-posted matching receive wins, whether
     * exact or wildcard. */
    TWT_EQ(tw_recv(ctx, TW_ANY_SOURCE, 0x700, 0, &r[2], sizeof(int), cq, &r[2]), TW_OK);
    TWT_EQ(tw_recv(ctx, 0, 0x700, 0, &r[3], sizeof(int), cq, &r[3]), TW_OK);
    TWT_EQ(tw_send(ctx, 0, 0x700, &v[3], sizeof(int), cq, NULL), TW_OK);
    int recvs = 0;
    for (int i = 0; i < 2; i++) { /* the send and one receive, in any order */
        c = wait_one(cq);
        if (c.op == TW_OP_RECV) {
            TWT_CHECK(c.user == &r[2]); /* the wildcard, posted first */
            recvs++;
        }
    }
    TWT_EQ(recvs, 1);
    TWT_EQ(r[2], 13);
    /* 0x600 is still unexpected: the exact receive posted above takes the
     * next 0x700 message; 0x600 goes to a fresh receive. */
    TWT_EQ(tw_recv(ctx, 0, 0x600, 0, &r[0], sizeof(int), cq, &r[0]), TW_OK);
    c = wait_one(cq);
    TWT_CHECK(c.user == &r[0] && c.tag == 0x600 && r[0] == 12);
    TWT_EQ(tw_send(ctx, 0, 0x700, &v[0], sizeof(int), cq, NULL), TW_OK);
    for (int i = 0; i < 2; i++) {
        c = wait_one(cq);
        if (c.op == TW_OP_RECV) {
            TWT_CHECK(c.user == &r[3]);
        }
    }
    TWT_EQ(r[3], 10);
}

/* ---- active messages ---------------------------------------------------- */

static atomic_int am_calls;
static atomic_int am_bad;
static pthread_t main_thread;

static void am_handler(tw_context_t *hctx, int src, const void *hdr, size_t hdr_len,
                       const void *data, size_t len, void *arg)
{
    if (hctx != ctx || src != 0 || arg != &am_calls || hdr_len != 8 || len != 3000 ||
        memcmp(hdr, "hdr12345", 8) != 0 || !twt_verify(data, len, 77)) {
        atomic_fetch_add(&am_bad, 1);
    }
    /* progress-thread mode: never on the sending thread */
    if (!manual && pthread_equal(pthread_self(), main_thread)) {
        atomic_fetch_add(&am_bad, 1);
    }
    atomic_fetch_add(&am_calls, 1);
}

static void test_am(tw_cq_t *cq)
{
    unsigned char data[3000];
    tw_completion_t c;

    twt_fill(data, sizeof(data), 77);
    main_thread = pthread_self();
    TWT_EQ(tw_am_register(ctx, 9, am_handler, &am_calls), TW_OK);
    TWT_EQ(tw_am_register(ctx, 9, am_handler, NULL), TW_ERR_INVALID); /* once per id */
    for (int i = 0; i < 10; i++) {
        TWT_EQ(tw_am_send(ctx, 0, 9, "hdr12345", 8, data, sizeof(data), cq, &data), TW_OK);
        c = wait_one(cq);
        TWT_EQ(c.op, TW_OP_AM_SEND);
        TWT_EQ(c.status, TW_OK);
        TWT_CHECK(c.user == &data);
    }
    double t0 = twt_now();
    while (atomic_load(&am_calls) < 10) {
        tw_progress(ctx);
        TWT_CHECK(twt_now() - t0 < 20);
    }
    TWT_EQ(atomic_load(&am_bad), 0);
    /* An id nobody registered: dropped at the target with a log line; the
     * send itself completes. Active messages from one thread arrive in
     * order, so once the next handled one ran, the drop is done. */
    TWT_EQ(tw_am_send(ctx, 0, 200, NULL, 0, NULL, 0, cq, NULL), TW_OK);
    c = wait_one(cq);
    TWT_EQ(c.status, TW_OK);
    TWT_EQ(tw_am_send(ctx, 0, 9, "hdr12345", 8, data, sizeof(data), cq, &data), TW_OK);
    c = wait_one(cq);
    TWT_EQ(c.status, TW_OK);
    t0 = twt_now();
    while (atomic_load(&am_calls) < 11) {
        tw_progress(ctx);
        TWT_CHECK(twt_now() - t0 < 20);
    }
    TWT_EQ(atomic_load(&am_bad), 0);
}

int main(int argc, char **argv)
{
    tw_config_t cfg;
    tw_cq_t *cq;
    static const size_t sizes[] = {0, 1, 8, 100, 4096, 8192, 8193, 65536, 1 << 20};

    manual = argc > 1 && strcmp(argv[1], "manual") == 0;
    tw_config_init(&cfg);
    cfg.progress_threads = manual ? 0 : -1;
    TWT_EQ(tw_init(&cfg, &ctx), TW_OK);
    TWT_EQ(tw_rank(ctx), 0);
    TWT_EQ(tw_size(ctx), 1);
    TWT_EQ(tw_cq_create(ctx, 64, &cq), TW_OK);

    for (size_t i = 0; i < TWT_ARRAY_SIZE(sizes); i++) {
        size_t n = sizes[i];
        roundtrip(cq, n, n, true);
        roundtrip(cq, n, n, false);
        roundtrip(cq, n, n + 100, true); /* longer receive buffer */
        if (n > 0) {
            roundtrip(cq, n, n - 1, true);  /* truncated */
            roundtrip(cq, n, n / 2, false); /* truncated, unexpected */
        }
    }
    test_matching(cq);
    test_am(cq);

    char *text = NULL;
    size_t text_len = 0;
    FILE *mem = open_memstream(&text, &text_len);
    TWT_CHECK(mem != NULL);
    TWT_EQ(tw_stats_print(ctx, mem), TW_OK);
    fclose(mem);
    TWT_CHECK(strstr(text, "rank 0 of 1") != NULL);
    TWT_CHECK(strstr(text, "tl:self") != NULL);
    TWT_CHECK(strstr(text, "sent=") != NULL);
    TWT_CHECK(strstr(text, "dropped=1") != NULL); /* the unhandled AM */
    fputs(text, stdout);
    free(text);

    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    TWT_EQ(tw_finalize(ctx), TW_OK);
    printf("api basic (%s): ok\n", manual ? "manual" : "thread");
    return 0;
}
