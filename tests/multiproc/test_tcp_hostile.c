/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Hostile clients against a live TCP job (TW_TRANSPORTS=tcp twrun -n 4):
 *
 *   ranks 0 and 1 exchange checksummed messages the whole time;
 *   rank 2 attacks the listening ports of ranks 0 and 1 with raw sockets:
 *     connect-and-close (10^4, scaled), one byte then silence (must be
 *     closed by the handshake timeout), wrong magic, wrong version, a
 *     job of another size, random bytes, and a HELLO claiming rank 3
 *     (which never talks to them) followed by a PROVE with a wrong proof;
 *   then, with the job key, a full handshake claiming rank 3 and a frame
 *   header whose payload length is 2^63 (to rank 0), or a CTS naming a
 *   rendezvous cookie the victim never gave (rank 1).
 * Ranks 0 and 1 must go on intact, never stall more than 1 s, count every
 * refused handshake (tw_stats "refused") and the bad frame, and call the
 * error handler once: for "rank 3", whose connection sent the bad frame.
 *
 * Rank 3, which nobody talks to, checks the other side of the handshake:
 * its transport is given (addr_connect, as at init) the address of a
 * socket the test holds as rank 2's, and a send to rank 2 dials it. That
 * fake acceptor answers the HELLO with a WELCOME whose proof is made under
 * another key, and a frame right behind it. The connector must refuse the
 * proof: drop the connection without writing a byte after its HELLO (no
 * PROVE, no frame), deliver nothing of what came, count the refusal,
 * fail rank 2 (the send completes with TW_ERR_PEER_FAILED, the error
 * handler runs once) and refuse later sends to it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/tw_siphash.h"
#include "threadwire/threadwire.h"
#include "transports/tcp/tw_tcp.h"
#include "transports/tcp/tw_tcp_proto.h"
#include "tw_mp_tcp.h"
#include "tw_test.h"

#define TAG_DONE     (1ull << 50)
#define TAG_FLAG     (1ull << 40)
#define BAD_PER_RANK 6 /* refused handshakes rank 2 causes at each victim */

static atomic_int handler_calls;

static atomic_int failed_peer = -1;

static void on_error(tw_context_t *ctx, int peer, tw_status_t err, const char *what, void *arg)
{
    (void)ctx, (void)err, (void)what, (void)arg;
    atomic_store(&failed_peer, peer);
    atomic_fetch_add(&handler_calls, 1);
}

static int dial(uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    TWT_CHECK(fd >= 0);
    TWT_CHECKF(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s", strerror(errno));
    return fd;
}

/* Send @p len bytes, then wait (up to @p ms) for the server to close. */
static bool sent_then_closed(uint16_t port, const void *buf, size_t len, int ms)
{
    int fd = dial(port);
    char junk[256];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    bool closed = false;

    if (len > 0) {
        TWT_CHECK(send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len);
    }
    for (int waited = 0; waited < ms && !closed; waited += 10) {
        if (poll(&p, 1, 10) > 0) {
            ssize_t n = recv(fd, junk, sizeof(junk), MSG_DONTWAIT);
            closed = n == 0 || (n < 0 && errno == ECONNRESET);
        }
    }
    close(fd);
    return closed;
}

/* Dial @p port, send HELLO @p hello, read the whole WELCOME into @p welcome;
 * returns the connection. */
static int hello_welcome(uint16_t port, const uint8_t hello[TW_TCP_HS_LEN],
                         uint8_t welcome[TW_TCP_HS_LEN])
{
    int fd = dial(port);
    size_t got = 0;

    TWT_CHECK(send(fd, hello, TW_TCP_HS_LEN, MSG_NOSIGNAL) == (ssize_t)TW_TCP_HS_LEN);
    while (got < TW_TCP_HS_LEN) {
        ssize_t r = recv(fd, welcome + got, TW_TCP_HS_LEN - got, 0);
        TWT_CHECKF(r > 0, "no WELCOME for a well-formed HELLO");
        got += (size_t)r;
    }
    return fd;
}

static void attack(tw_context_t *ctx, int victim)
{
    uint16_t port = tw_tcp_test_peer_port(tw_mp_tcp_iface(ctx), victim);
    uint8_t m[TW_TCP_HS_LEN], key[16];
    tw_tcp_hs_t hs = {.type = TW_TCP_HS_HELLO, .rank = 3, .size = 4};
    unsigned n = (unsigned)twt_scaled(5000, 250); /* per victim: 10^4 in all */

    TWT_CHECK(port != 0);
    TWT_EQ(tw_siphash_key_parse(getenv("TW_JOB_KEY"), key), TW_OK);
    for (unsigned i = 0; i < n; i++) {
        close(dial(port)); /* connect and close */
    }
    /* One byte, then silence: the handshake timeout (2 s) closes it. */
    TWT_CHECKF(sent_then_closed(port, "x", 1, 5000), "a silent client was not closed");
    /* Wrong magic, version, job size; random bytes. */
    tw_tcp_hs_pack(&hs, m);
    m[0] ^= 0xff;
    TWT_CHECK(sent_then_closed(port, m, sizeof(m), 3000));
    tw_tcp_hs_pack(&hs, m);
    m[4] = 99;
    TWT_CHECK(sent_then_closed(port, m, sizeof(m), 3000));
    hs.size = 5;
    tw_tcp_hs_pack(&hs, m);
    hs.size = 4;
    TWT_CHECK(sent_then_closed(port, m, sizeof(m), 3000));
    twt_fill(m, sizeof(m), 12345);
    TWT_CHECK(sent_then_closed(port, m, sizeof(m), 3000));
    /* HELLO as idle rank 3, then a PROVE with a wrong proof. */
    uint8_t welcome[TW_TCP_HS_LEN];
    tw_tcp_hs_pack(&hs, m);
    int fd = hello_welcome(port, m, welcome);
    hs.type = TW_TCP_HS_PROVE;
    hs.proof = 0x1234;
    tw_tcp_hs_pack(&hs, m);
    TWT_CHECK(send(fd, m, sizeof(m), MSG_NOSIGNAL) == (ssize_t)sizeof(m));
    char c;
    TWT_CHECKF(recv(fd, &c, 1, 0) <= 0, "a wrong proof was not refused");
    close(fd);
    /* With the job key (a rank gone rogue): a full handshake as idle rank
     * 3, then a frame header whose payload length is 2^63 (victim 0), or
     * a CTS asking for 1 MiB of a send the victim never announced (victim
     * 1, cookie 42). The victim counts a bad frame and fails rank 3 -- it
     * read, allocated and sent nothing for it. */
    tw_tcp_hs_t w;
    tw_tcp_frame_t bad = {.type = TW_TCP_FRAME_AM, .am_id = 1, .len = 1ull << 63};
    if (victim == 1) {
        bad = (tw_tcp_frame_t){
            .type = TW_TCP_FRAME_CTS, .hdr_len = TW_TCP_COOKIE_LEN, .len = 1u << 20};
    }
    uint8_t frame[TW_TCP_FRAME_LEN + TW_TCP_COOKIE_LEN] = {0};
    frame[TW_TCP_FRAME_LEN] = 42; /* the cookie, little-endian */
    hs.type = TW_TCP_HS_HELLO;
    hs.proof = 0;
    twt_fill(hs.nonce, sizeof(hs.nonce), 99);
    tw_tcp_hs_pack(&hs, m);
    fd = hello_welcome(port, m, welcome);
    TWT_EQ(tw_tcp_hs_parse(welcome, sizeof(welcome), TW_TCP_HS_WELCOME, 4, &w, NULL), TW_OK);
    hs.type = TW_TCP_HS_PROVE;
    hs.proof = tw_tcp_hs_proof(key, 'C', w.nonce, hs.nonce, (uint32_t)victim, 3);
    tw_tcp_hs_pack(&hs, m);
    TWT_CHECK(send(fd, m, sizeof(m), MSG_NOSIGNAL) == (ssize_t)sizeof(m));
    tw_tcp_frame_pack(&bad, frame);
    size_t flen = TW_TCP_FRAME_LEN + (victim == 1 ? TW_TCP_COOKIE_LEN : 0);
    TWT_CHECK(send(fd, frame, flen, MSG_NOSIGNAL) == (ssize_t)flen);
    TWT_CHECKF(recv(fd, &c, 1, 0) <= 0, "a bad frame (type %u, length %#llx) was not refused",
               bad.type, (unsigned long long)bad.len);
    close(fd);
    /* bad magic, bad version, other job size, random, wrong proof, and
     * the silent one: BAD_PER_RANK refusals. */
    printf("rank 2: %u connect-and-close, %d bad handshakes and a bad frame (type %u, length "
           "%#llx) against rank %d\n",
           n, BAD_PER_RANK, bad.type, (unsigned long long)bad.len, victim);
}

/* Rank 3's fake acceptor: a listening socket the test holds, published to
 * rank 3's transport as FAKE_PEER's address. */
#define FAKE_PEER 2
typedef struct fake_acceptor {
    int lfd;
    uint8_t key[16]; /* the job key: the WELCOME's proof is made under another */
    bool hello;      /* a well-formed HELLO from rank 3 arrived */
    bool dropped;    /* then EOF or a reset: the connector dropped us */
    size_t after;    /* bytes that came after the HELLO */
} fake_acceptor_t;

/* Read @p len bytes from @p fd within @p ms; false on EOF, error or time. */
static bool read_full(int fd, uint8_t *buf, size_t len, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    size_t got = 0;

    for (int waited = 0; got < len && waited < ms; waited += 10) {
        if (poll(&p, 1, 10) > 0) {
            ssize_t n = recv(fd, buf + got, len - got, MSG_DONTWAIT);
            if (n <= 0 && !(n < 0 && errno == EAGAIN)) {
                return false;
            }
            got += n > 0 ? (size_t)n : 0;
        }
    }
    return got == len;
}

/* Take one connection; answer its HELLO with a WELCOME as FAKE_PEER whose
 * proof is over the right nonces and ranks but under a wrong key, and an
 * AM frame right behind it; then count what else comes until the
 * connector drops us (5 s at most). */
static void *fake_acceptor_main(void *arg)
{
    fake_acceptor_t *fa = arg;
    struct pollfd p = {.fd = fa->lfd, .events = POLLIN};
    uint8_t m[TW_TCP_HS_LEN + TW_TCP_FRAME_LEN], junk[4096], wrong[16];
    tw_tcp_hs_t hello, w = {.type = TW_TCP_HS_WELCOME, .rank = FAKE_PEER, .size = 4};
    tw_tcp_frame_t f = {.type = TW_TCP_FRAME_AM, .am_id = 1};
    int fd;

    if (poll(&p, 1, 10000) != 1 || (fd = accept(fa->lfd, NULL, NULL)) < 0) {
        return NULL; /* never dialed: main reports it */
    }
    if (!read_full(fd, m, TW_TCP_HS_LEN, 5000) ||
        tw_tcp_hs_parse(m, TW_TCP_HS_LEN, TW_TCP_HS_HELLO, 4, &hello, NULL) != TW_OK ||
        hello.rank != 3) {
        close(fd);
        return NULL;
    }
    fa->hello = true;
    memcpy(wrong, fa->key, sizeof(wrong));
    wrong[0] ^= 0x01;
    twt_fill(w.nonce, sizeof(w.nonce), 77);
    w.proof = tw_tcp_hs_proof(wrong, 'A', hello.nonce, w.nonce, FAKE_PEER, 3);
    tw_tcp_hs_pack(&w, m);
    tw_tcp_frame_pack(&f, m + TW_TCP_HS_LEN);
    if (send(fd, m, sizeof(m), MSG_NOSIGNAL) == (ssize_t)sizeof(m)) {
        struct pollfd q = {.fd = fd, .events = POLLIN};
        for (int waited = 0; waited < 5000 && !fa->dropped; waited += 10) {
            if (poll(&q, 1, 10) > 0) {
                ssize_t n = recv(fd, junk, sizeof(junk), MSG_DONTWAIT);
                if (n > 0) {
                    fa->after += (size_t)n;
                } else if (n == 0 || errno != EAGAIN) {
                    fa->dropped = true;
                }
            }
        }
    }
    close(fd);
    return NULL;
}

/* Rank 3: a send to FAKE_PEER meets the fake acceptor (see the top). */
static void dial_fake_acceptor(tw_context_t *ctx, tw_cq_t *cq)
{
    static unsigned char big[128 * 1024]; /* zero-copy (an RTS): fails with the peer */
    tw_tl_iface_t *iface = tw_mp_tcp_iface(ctx);
    fake_acceptor_t fa = {.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof(a);
    tw_tcp_addr_blob_t b = {
        .lanes = 1, .naddrs = 1, .flags = TW_TCP_ADDR_THREADS, .timeout_ms = 10000};
    uint8_t blob[TW_TCP_ADDR_MAX];
    size_t len = 0;
    tw_completion_t c;
    pthread_t t;

    TWT_EQ(tw_siphash_key_parse(getenv("TW_JOB_KEY"), fa.key), TW_OK);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    TWT_CHECK(fa.lfd >= 0);
    TWT_CHECKF(bind(fa.lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fa.lfd, 1) == 0 &&
                   getsockname(fa.lfd, (struct sockaddr *)&a, &alen) == 0,
               "listen: %s", strerror(errno));
    b.addrs[0].family = 4;
    memcpy(b.addrs[0].addr, &a.sin_addr, 4);
    b.addrs[0].ports[0] = ntohs(a.sin_port);
    TWT_EQ(tw_tcp_addr_blob_pack(&b, blob, sizeof(blob), &len), TW_OK);
    /* After init, but nothing touched rank 2's endpoint here yet, and the
     * send below reaches the lane through the engine's try-lock or a
     * submission: both order the new address before it. */
    TWT_EQ(tw_tl_addr_connect(iface, FAKE_PEER, blob, len), TW_OK);
    TWT_EQ(pthread_create(&t, NULL, fake_acceptor_main, &fa), 0);

    TWT_EQ(tw_send(ctx, FAKE_PEER, 1, big, sizeof(big), cq, NULL), TW_OK);
    TWT_EQ(pthread_join(t, NULL), 0);
    close(fa.lfd);
    TWT_CHECKF(fa.hello, "rank 3 never sent a HELLO to the fake acceptor");
    TWT_CHECKF(fa.after == 0,
               "rank 3 wrote %zu bytes (PROVE, frames) to an acceptor that did "
               "not prove the job key",
               fa.after);
    TWT_CHECKF(fa.dropped, "rank 3 kept a connection whose acceptor did not prove the job key");
    TWT_CHECKF(tw_cq_wait(cq, &c, 1, 5000) == 1, "the send to the fake acceptor never completed");
    TWT_CHECKF(c.status == TW_ERR_PEER_FAILED, "the send to the fake acceptor completed with %s",
               tw_strerror(c.status));
    TWT_EQ(tw_stats_read(iface->stats, TW_TL_STAT_REFUSED), 1);
    TWT_CHECKF(tw_stats_read(iface->stats, TW_TL_STAT_RX_MSGS) == 0,
               "rank 3 delivered a frame from an acceptor that did not prove the job key");
    for (int i = 0; i < 100 && atomic_load(&handler_calls) == 0; i++) {
        usleep(10000);
    }
    TWT_EQ(atomic_load(&handler_calls), 1);
    TWT_EQ(atomic_load(&failed_peer), FAKE_PEER);
    TWT_EQ(tw_send(ctx, FAKE_PEER, 2, big, 8, cq, NULL), TW_ERR_PEER_FAILED);
    printf("rank 3: an acceptor with a wrong proof was refused, nothing sent or delivered\n");
}

static void wait_one(tw_cq_t *cq, tw_completion_t *c)
{
    int n = tw_cq_wait(cq, c, 1, 1000);
    TWT_CHECKF(n == 1, "no completion for 1 s: the job stalled (%d)", n);
}

int main(void)
{
    tw_context_t *ctx;
    tw_cq_t *cq;
    tw_completion_t c;
    int me;

    TWT_EQ(tw_init(NULL, &ctx), TW_OK);
    TWT_EQ(tw_set_error_handler(ctx, on_error, NULL), TW_OK);
    TWT_EQ(tw_size(ctx), 4);
    TWT_CHECK(tw_mp_tcp_iface(ctx) != NULL);
    TWT_EQ(tw_cq_create(ctx, 64, &cq), TW_OK);
    me = tw_rank(ctx);
    if (me == 2) {
        attack(ctx, 0);
        attack(ctx, 1);
        for (int v = 0; v < 2; v++) {
            TWT_EQ(tw_send(ctx, v, TAG_DONE, NULL, 0, cq, NULL), TW_OK);
            wait_one(cq, &c);
            TWT_EQ(c.status, TW_OK);
        }
    } else if (me < 2) {
        int peer = 1 - me, round = 0;
        bool done = false;
        unsigned char sbuf[4096], rbuf[4096];
        /* Until both saw rank 2's "done": each round says whether we did
         * (a tag bit), and both stop at the first round where both did. */
        TWT_EQ(tw_recv(ctx, 2, TAG_DONE, 0, NULL, 0, cq, NULL), TW_OK);
        for (bool mine = false, theirs = false; !(mine && theirs); round++) {
            size_t len = (size_t)(round * 131) % sizeof(sbuf);
            mine = done;
            twt_fill(sbuf, len, (uint64_t)me << 32 | (unsigned)round);
            TWT_EQ(tw_recv(ctx, peer, (uint64_t)round, TAG_FLAG, rbuf, sizeof(rbuf), cq, NULL),
                   TW_OK);
            TWT_EQ(tw_send(ctx, peer, (uint64_t)round | (mine ? TAG_FLAG : 0), sbuf, len, cq, NULL),
                   TW_OK);
            for (int k = 0; k < 2;) {
                wait_one(cq, &c);
                TWT_EQ(c.status, TW_OK);
                if (c.op == TW_OP_RECV && c.peer == 2) {
                    done = true;
                    continue;
                }
                if (c.op == TW_OP_RECV) {
                    TWT_EQ(c.length, len);
                    TWT_CHECK(twt_verify(rbuf, len, (uint64_t)peer << 32 | (unsigned)round));
                    theirs = (c.tag & TAG_FLAG) != 0;
                }
                k++;
            }
        }
        uint64_t refused = tw_stats_read(tw_mp_tcp_iface(ctx)->stats, TW_TL_STAT_REFUSED);
        TWT_CHECKF(refused >= BAD_PER_RANK, "rank %d counted %llu refused handshakes, want %d", me,
                   (unsigned long long)refused, BAD_PER_RANK);
        /* The rogue "rank 3" was failed once; nothing else was. */
        TWT_EQ(tw_stats_read(tw_mp_tcp_iface(ctx)->stats, TW_TL_STAT_BAD_FRAMES), 1);
        for (int i = 0; i < 100 && atomic_load(&handler_calls) == 0; i++) {
            usleep(10000);
        }
        TWT_EQ(atomic_load(&handler_calls), 1);
        TWT_EQ(atomic_load(&failed_peer), 3);
        printf("rank %d: %d intact exchanges with rank %d during the attack; %llu refused\n", me,
               round, peer, (unsigned long long)refused);
    }
    if (me == 3) {
        dial_fake_acceptor(ctx, cq);
    }
    TWT_EQ(tw_finalize(ctx), TW_OK);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    return 0;
}
