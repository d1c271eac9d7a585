/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Self-traffic stress: T threads of one process send each other messages
 * through the public API, all at once.
 *
 * usage: test_self_stress MODE WAIT [THREADS] [MSGS_PER_THREAD]
 *   MODE  thread | manual      WAIT  adaptive | spin | block
 *
 * Each thread sends MSGS (scaled by TWTEST_SCALE) messages of 0 B..64 KiB
 * (mostly small) to random threads, following a schedule every thread can
 * replay from a seed, so each receiver knows exactly what it must get. The
 * tag carries (destination thread, sender thread, class, sequence number
 * per sender->destination). Classes pick the kind of receive that will
 * take the message (80 % exact, 10 % masked, 10 % wildcard), so the kinds
 * never compete for one message:
 *   class 0: exact receives (every tag bit), some with a buffer one byte
 *            short: they must complete TW_ERR_TRUNCATED with the sent length;
 *   class 1: masked receives that ignore the sequence number (one sender);
 *   class 2: TW_ANY_SOURCE receives that ignore sender and sequence.
 * Senders are paced (SLACK messages ahead of the receiver's posted
 * receives per sender) so unexpected queues stay bounded; order is kept
 * per (sender, destination), which is what the sequence numbers check.
 * Checks: every message arrives exactly once (bitmap), its length and
 * payload are intact (generated from a seed, verified byte for byte), and
 * masked/wildcard receives posted by one thread get each sender's
 * messages in send order (non-overtaking).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "threadwire/threadwire.h"
#include "tw_test.h"

#define MAX_THREADS 16
#define MAX_SIZE    (64u * 1024u)
#define RECV_WINDOW 32
#define SEND_SLOTS  16
#define CQ_DEPTH    (RECV_WINDOW + SEND_SLOTS + 8)

#define TAG(dst, src, cls, seq) \
    (((uint64_t)(dst) << 56) | ((uint64_t)(src) << 48) | ((uint64_t)(cls) << 40) | (uint64_t)(seq))
#define TAG_DST(t)   ((unsigned)((t) >> 56))
#define TAG_SRC(t)   ((unsigned)(((t) >> 48) & 0xff))
#define TAG_CLS(t)   ((unsigned)(((t) >> 40) & 0xff))
#define TAG_SEQ(t)   ((t)&0xffffffffffull)
#define MASK_SEQ     0xffffffffffull
#define MASK_SRC_SEQ (0xffull << 48 | MASK_SEQ)

static tw_context_t *g_ctx;
static bool g_manual;
static unsigned g_threads;
static uint64_t g_msgs;
static atomic_uint g_done_threads;

/* One scheduled message of sender s. */
typedef struct sched_msg {
    unsigned dst, cls;
    uint32_t size;
    uint64_t seq; /* per (sender, dst) */
} sched_msg_t;

static sched_msg_t *g_sched[MAX_THREADS]; /* [sender][i] */

static uint64_t payload_seed(unsigned src, unsigned dst, uint64_t seq)
{
    return 0x5eed0000ull ^ ((uint64_t)src << 52) ^ ((uint64_t)dst << 44) ^ (seq * 7919);
}

static uint32_t pick_size(uint64_t *rng)
{
    uint64_t r = twt_rand(rng) % 1000;
    if (r < 5) {
        return 0;
    }
    if (r < 900) {
        return (uint32_t)(twt_rand(rng) % 257);
    }
    if (r < 990) {
        return (uint32_t)(twt_rand(rng) % 8193);
    }
    return (uint32_t)(twt_rand(rng) % (MAX_SIZE + 1));
}

static void build_schedules(void)
{
    for (unsigned s = 0; s < g_threads; s++) {
        uint64_t rng = 1000 + s, seq[MAX_THREADS] = {0};
        g_sched[s] = calloc(g_msgs, sizeof(sched_msg_t));
        TWT_CHECK(g_sched[s] != NULL);
        for (uint64_t i = 0; i < g_msgs; i++) {
            sched_msg_t *m = &g_sched[s][i];
            m->dst = (unsigned)(twt_rand(&rng) % g_threads);
            /* 80 % exact, 10 % masked, 10 % TW_ANY_SOURCE: wildcard
             * receives scan the unexpected queues (as in every MPI), so
             * they stay the minority they are in applications. */
            uint64_t c = twt_rand(&rng) % 10;
            m->cls = c < 8 ? 0u : c == 8 ? 1u : 2u;
            m->size = pick_size(&rng);
            m->seq = seq[m->dst]++;
        }
    }
}

/* A receive this thread will post. */
typedef struct planned_recv {
    unsigned cls;
    unsigned src;  /* class 0/1: the sender; class 2: any */
    uint64_t tag;  /* class 0: exact tag */
    uint32_t size; /* class 0: exact size */
    bool truncate;
} planned_recv_t;

typedef struct recv_slot {
    uint64_t post_idx;
    size_t buflen;
    unsigned char *buf;
    bool busy;
} recv_slot_t;

typedef struct send_slot {
    unsigned char *buf;
    bool busy;
} send_slot_t;

typedef struct worker {
    unsigned id;
    pthread_t th;
    tw_cq_t *cq;
    planned_recv_t *plan;
    uint64_t nplan;
    /* results by post index: sender and seq actually matched */
    uint32_t *res_src;
    uint64_t *res_seq;
    uint8_t *got[MAX_THREADS];      /* [sender][seq] */
    uint32_t *size_of[MAX_THREADS]; /* [sender][seq]: scheduled size */
    uint64_t expect_from[MAX_THREADS];
    uint64_t received, truncated, sent, sent_posted, am_sent, am_done;
} worker_t;

static worker_t g_w[MAX_THREADS];

/* Active messages: every thread also sends one AM per AM_EVERY messages
 * (small ones copied, every 4th one 16 KiB zero-copy). Handlers run on the
 * progress engine, one at a time, so these counters are theirs alone. */
#define AM_ID    7
#define AM_EVERY 16
#define AM_BIG   (16u * 1024u)
static uint64_t g_am_seen[MAX_THREADS], g_am_bad;

typedef struct am_hdr {
    uint32_t sender;
    uint32_t pad;
    uint64_t seq;
} am_hdr_t;

static size_t am_len(uint64_t seq)
{
    return seq % 4 == 3 ? AM_BIG : (size_t)(seq % 200);
}

static void am_handler(tw_context_t *ctx, int src, const void *hdr, size_t hdr_len,
                       const void *data, size_t len, void *arg)
{
    am_hdr_t h;
    (void)ctx, (void)arg;
    if (src != 0 || hdr_len != sizeof(h)) {
        g_am_bad++;
        return;
    }
    memcpy(&h, hdr, sizeof(h));
    if (h.sender >= g_threads || h.seq != g_am_seen[h.sender] || len != am_len(h.seq) ||
        !twt_verify(data, len, 0xa3000000ull ^ ((uint64_t)h.sender << 40) ^ h.seq)) {
        g_am_bad++; /* lost, duplicated, reordered or corrupted */
        return;
    }
    g_am_seen[h.sender]++;
}
/* g_posted[d][s]: receives d has posted for messages from s (pacing). */
static atomic_uint_fast64_t g_posted[MAX_THREADS][MAX_THREADS];
#define SLACK 16

static void plan_receives(worker_t *w)
{
    /* Replay every sender's schedule; post in a round-robin over senders
     * so receives of all kinds interleave. */
    uint64_t pos[MAX_THREADS] = {0}, total = 0;
    for (unsigned s = 0; s < g_threads; s++) {
        for (uint64_t i = 0; i < g_msgs; i++) {
            if (g_sched[s][i].dst == w->id) {
                w->expect_from[s]++;
            }
        }
        total += w->expect_from[s];
        w->got[s] = calloc(w->expect_from[s] + 1, 1);
        w->size_of[s] = calloc(w->expect_from[s] + 1, sizeof(uint32_t));
        TWT_CHECK(w->got[s] != NULL && w->size_of[s] != NULL);
        for (uint64_t i = 0; i < g_msgs; i++) {
            if (g_sched[s][i].dst == w->id) {
                w->size_of[s][g_sched[s][i].seq] = g_sched[s][i].size;
            }
        }
    }
    w->plan = calloc(total + 1, sizeof(planned_recv_t));
    w->res_src = calloc(total + 1, sizeof(uint32_t));
    w->res_seq = calloc(total + 1, sizeof(uint64_t));
    TWT_CHECK(w->plan && w->res_src && w->res_seq);
    for (uint64_t n = 0; n < total;) {
        for (unsigned s = 0; s < g_threads; s++) {
            while (pos[s] < g_msgs && g_sched[s][pos[s]].dst != w->id) {
                pos[s]++;
            }
            if (pos[s] == g_msgs) {
                continue;
            }
            const sched_msg_t *m = &g_sched[s][pos[s]++];
            planned_recv_t *p = &w->plan[n++];
            p->cls = m->cls;
            p->src = s;
            p->tag = TAG(w->id, s, m->cls, m->seq);
            p->size = m->size;
            p->truncate = m->cls == 0 && m->size > 0 && m->seq % 13 == 5;
        }
    }
    w->nplan = total;
}

static void check_completion(worker_t *w, const tw_completion_t *c, recv_slot_t *rs,
                             send_slot_t *ss)
{
    if (c->op == TW_OP_AM_SEND) {
        TWT_CHECKF(c->status == TW_OK, "am status %s", tw_strerror(c->status));
        w->am_done++;
        if (c->user != NULL) {
            *(bool *)c->user = false; /* the zero-copy buffer is free again */
        }
        return;
    }
    if (c->op == TW_OP_SEND) {
        send_slot_t *slot = c->user;
        TWT_CHECKF(c->status == TW_OK, "send status %s", tw_strerror(c->status));
        TWT_CHECK(slot >= ss && slot < ss + SEND_SLOTS && slot->busy);
        slot->busy = false;
        w->sent++;
        return;
    }
    TWT_EQ(c->op, TW_OP_RECV);
    recv_slot_t *slot = c->user;
    TWT_CHECK(slot >= rs && slot < rs + RECV_WINDOW && slot->busy);
    const planned_recv_t *p = &w->plan[slot->post_idx];
    unsigned src = TAG_SRC(c->tag), dst = TAG_DST(c->tag), cls = TAG_CLS(c->tag);
    uint64_t seq = TAG_SEQ(c->tag);
    TWT_EQ(c->peer, 0);
    TWT_EQ(dst, w->id);
    TWT_EQ(cls, p->cls);
    TWT_CHECK(src < g_threads);
    if (p->cls != 2) {
        TWT_EQ(src, p->src);
    }
    if (p->cls == 0) {
        TWT_EQ(c->tag, p->tag);
    }
    TWT_CHECKF(seq < w->expect_from[src], "seq %llu from %u", (unsigned long long)seq, src);
    TWT_CHECKF(!w->got[src][seq], "duplicate message %u->%u seq %llu", src, w->id,
               (unsigned long long)seq);
    w->got[src][seq] = 1;
    uint32_t size = w->size_of[src][seq];
    TWT_EQ(c->length, size);
    if (size > slot->buflen) {
        TWT_EQ(c->status, TW_ERR_TRUNCATED);
        w->truncated++;
    } else {
        TWT_CHECKF(c->status == TW_OK, "recv status %s", tw_strerror(c->status));
    }
    size_t n = size < slot->buflen ? size : slot->buflen;
    /* The stored prefix must be the message's prefix. */
    unsigned char *ref = malloc(size + 1);
    TWT_CHECK(ref != NULL);
    twt_fill(ref, size, payload_seed(src, w->id, seq));
    TWT_CHECKF(memcmp(ref, slot->buf, n) == 0, "payload %u->%u seq %llu corrupted", src, w->id,
               (unsigned long long)seq);
    free(ref);
    w->res_src[slot->post_idx] = src;
    w->res_seq[slot->post_idx] = seq;
    slot->busy = false;
    w->received++;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    recv_slot_t rs[RECV_WINDOW];
    send_slot_t ss[SEND_SLOTS];
    uint64_t next_post = 0, cursor[MAX_THREADS] = {0}, sent_to[MAX_THREADS] = {0};
    unsigned rr = 0;
    tw_completion_t comps[16];

    for (int i = 0; i < RECV_WINDOW; i++) {
        rs[i] = (recv_slot_t){.buf = malloc(MAX_SIZE), .busy = false};
        TWT_CHECK(rs[i].buf != NULL);
    }
    for (int i = 0; i < SEND_SLOTS; i++) {
        ss[i] = (send_slot_t){.buf = malloc(MAX_SIZE), .busy = false};
        TWT_CHECK(ss[i].buf != NULL);
    }
    TWT_EQ(tw_cq_create(g_ctx, CQ_DEPTH, &w->cq), TW_OK);

    unsigned char *am_big = malloc(AM_BIG);
    bool am_big_busy = false;
    TWT_CHECK(am_big != NULL);
    while (w->received < w->nplan || w->sent < g_msgs || w->am_done < w->am_sent) {
        bool did = false;
        /* post receives into free slots, in plan order */
        for (int i = 0; i < RECV_WINDOW && next_post < w->nplan; i++) {
            if (rs[i].busy) {
                continue;
            }
            const planned_recv_t *p = &w->plan[next_post];
            rs[i].post_idx = next_post;
            rs[i].busy = true;
            tw_status_t st;
            if (p->cls == 0) {
                rs[i].buflen = p->truncate ? p->size - 1 : p->size;
                st = tw_recv(g_ctx, 0, p->tag, 0, rs[i].buf, rs[i].buflen, w->cq, &rs[i]);
            } else if (p->cls == 1) {
                rs[i].buflen = MAX_SIZE;
                st = tw_recv(g_ctx, 0, TAG(w->id, p->src, 1, 0), MASK_SEQ, rs[i].buf, MAX_SIZE,
                             w->cq, &rs[i]);
            } else {
                rs[i].buflen = MAX_SIZE;
                st = tw_recv(g_ctx, TW_ANY_SOURCE, TAG(w->id, 0, 2, 0), MASK_SRC_SEQ, rs[i].buf,
                             MAX_SIZE, w->cq, &rs[i]);
            }
            if (st == TW_ERR_AGAIN) {
                rs[i].busy = false;
                break;
            }
            TWT_CHECKF(st == TW_OK, "tw_recv: %s", tw_strerror(st));
            atomic_fetch_add_explicit(&g_posted[w->id][p->src], 1, memory_order_release);
            next_post++;
            did = true;
        }
        /* Send a few. Pacing: the k-th message to d goes out once d has
         * posted its receive for our (k - SLACK)-th, so unexpected queues
         * stay bounded (SLACK per sender) instead of growing with the run.
         * Only the order per destination is kept, so a slow destination
         * never holds up the others (no deadlock). */
        bool paced = false;
        for (int i = 0; i < SEND_SLOTS && w->sent_posted < g_msgs; i++) {
            if (ss[i].busy) {
                continue;
            }
            const sched_msg_t *m = NULL;
            for (unsigned k = 0; k < g_threads && m == NULL; k++) {
                unsigned d = (rr + k) % g_threads;
                while (cursor[d] < g_msgs && g_sched[w->id][cursor[d]].dst != d) {
                    cursor[d]++;
                }
                if (cursor[d] < g_msgs &&
                    sent_to[d] <
                        atomic_load_explicit(&g_posted[d][w->id], memory_order_acquire) + SLACK) {
                    m = &g_sched[w->id][cursor[d]];
                }
            }
            if (m == NULL) {
                paced = true;
                break;
            }
            rr = (m->dst + 1) % g_threads;
            twt_fill(ss[i].buf, m->size, payload_seed(w->id, m->dst, m->seq));
            ss[i].busy = true;
            tw_status_t st = tw_send(g_ctx, 0, TAG(m->dst, w->id, m->cls, m->seq), ss[i].buf,
                                     m->size, w->cq, &ss[i]);
            if (st == TW_ERR_AGAIN) {
                ss[i].busy = false;
                break;
            }
            TWT_CHECKF(st == TW_OK, "tw_send: %s", tw_strerror(st));
            cursor[m->dst]++;
            sent_to[m->dst]++;
            w->sent_posted++;
            if (w->sent_posted % AM_EVERY == 0 && !am_big_busy) {
                uint64_t q = w->am_sent;
                am_hdr_t h = {.sender = w->id, .seq = q};
                size_t n = am_len(q);
                unsigned char small[200], *buf = n == AM_BIG ? am_big : small;
                twt_fill(buf, n, 0xa3000000ull ^ ((uint64_t)w->id << 40) ^ q);
                st = tw_am_send(g_ctx, 0, AM_ID, &h, sizeof(h), buf, n, w->cq,
                                n == AM_BIG ? &am_big_busy : NULL);
                if (st == TW_OK) {
                    am_big_busy = n == AM_BIG;
                    w->am_sent++;
                } else {
                    TWT_CHECKF(st == TW_ERR_AGAIN, "tw_am_send: %s", tw_strerror(st));
                }
            }
            did = true;
        }
        if (g_manual) {
            tw_progress(g_ctx);
        }
        int n = did ? tw_cq_poll(w->cq, comps, 16) : tw_cq_wait(w->cq, comps, 16, paced ? 1 : 2000);
        TWT_CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            check_completion(w, &comps[i], rs, ss);
        }
    }
    atomic_fetch_add_explicit(&g_done_threads, 1, memory_order_acq_rel);
    /* Keep driving progress for the threads still running (manual mode). */
    while (g_manual && atomic_load_explicit(&g_done_threads, memory_order_acquire) < g_threads) {
        if (tw_progress(g_ctx) == 0) {
            sched_yield();
        }
    }
    TWT_EQ(tw_cq_poll(w->cq, comps, 16), 0);
    free(am_big);
    TWT_EQ(tw_cq_destroy(w->cq), TW_OK);
    for (int i = 0; i < RECV_WINDOW; i++) {
        free(rs[i].buf);
    }
    for (int i = 0; i < SEND_SLOTS; i++) {
        free(ss[i].buf);
    }
    return NULL;
}

static void verify(worker_t *w)
{
    uint64_t last[2][MAX_THREADS];
    bool seen[2][MAX_THREADS] = {{false}};

    for (unsigned s = 0; s < g_threads; s++) {
        for (uint64_t q = 0; q < w->expect_from[s]; q++) {
            TWT_CHECKF(w->got[s][q], "message %u->%u seq %llu lost", s, w->id,
                       (unsigned long long)q);
        }
    }
    /* Non-overtaking: receives of one kind, in post order, get each
     * sender's messages in increasing sequence. */
    for (uint64_t i = 0; i < w->nplan; i++) {
        unsigned cls = w->plan[i].cls;
        if (cls == 0) {
            continue;
        }
        unsigned s = w->res_src[i];
        uint64_t q = w->res_seq[i];
        if (seen[cls - 1][s]) {
            TWT_CHECKF(q > last[cls - 1][s], "class %u: %u->%u seq %llu after %llu", cls, s, w->id,
                       (unsigned long long)q, (unsigned long long)last[cls - 1][s]);
        }
        seen[cls - 1][s] = true;
        last[cls - 1][s] = q;
    }
}

int main(int argc, char **argv)
{
    tw_config_t cfg;
    const char *mode = argc > 1 ? argv[1] : "thread";
    const char *wait = argc > 2 ? argv[2] : "adaptive";
    uint64_t total_recv = 0, total_trunc = 0;
    double t0;

    g_threads = argc > 3 ? (unsigned)atoi(argv[3]) : 8;
    g_msgs = twt_scaled(argc > 4 ? strtoull(argv[4], NULL, 10) : 100000, 500);
    TWT_CHECK(g_threads >= 1 && g_threads <= MAX_THREADS);

    tw_config_init(&cfg);
    g_manual = strcmp(mode, "manual") == 0;
    cfg.progress_threads = g_manual ? 0 : -1;
    cfg.wait_mode = strcmp(wait, "spin") == 0    ? TW_WAIT_SPIN
                    : strcmp(wait, "block") == 0 ? TW_WAIT_BLOCK
                                                 : TW_WAIT_ADAPTIVE;
    build_schedules();
    TWT_EQ(tw_init(&cfg, &g_ctx), TW_OK);
    TWT_EQ(tw_size(g_ctx), 1);
    TWT_EQ(tw_am_register(g_ctx, AM_ID, am_handler, NULL), TW_OK);

    t0 = twt_now();
    for (unsigned i = 0; i < g_threads; i++) {
        g_w[i].id = i;
        plan_receives(&g_w[i]);
    }
    for (unsigned i = 0; i < g_threads; i++) {
        TWT_EQ(pthread_create(&g_w[i].th, NULL, worker_main, &g_w[i]), 0);
    }
    for (unsigned i = 0; i < g_threads; i++) {
        pthread_join(g_w[i].th, NULL);
    }
    double dt = twt_now() - t0;
    for (unsigned i = 0; i < g_threads; i++) {
        verify(&g_w[i]);
        total_recv += g_w[i].received;
        total_trunc += g_w[i].truncated;
        TWT_EQ(g_w[i].sent, g_msgs);
    }
    TWT_EQ(total_recv, (uint64_t)g_threads * g_msgs);
    /* Every AM handled once, in order, intact, by the time finalize
     * returns (it drains the engines). */
    uint64_t am_total = 0;
    TWT_CHECK(total_trunc > 0);
    TWT_EQ(tw_finalize(g_ctx), TW_OK);
    TWT_EQ(g_am_bad, 0);
    for (unsigned i = 0; i < g_threads; i++) {
        TWT_EQ(g_am_seen[i], g_w[i].am_sent);
        am_total += g_am_seen[i];
    }
    TWT_CHECK(am_total > 0);
    printf("self stress %s/%s: %u threads x %llu msgs: %llu received intact, %llu truncated "
           "as expected, %llu active messages handled in order, %.2f s (%.0f msgs/s)\n",
           mode, wait, g_threads, (unsigned long long)g_msgs, (unsigned long long)total_recv,
           (unsigned long long)total_trunc, (unsigned long long)am_total, dt,
           (double)total_recv / dt);
    for (unsigned i = 0; i < g_threads; i++) {
        for (unsigned s = 0; s < g_threads; s++) {
            free(g_w[i].got[s]);
            free(g_w[i].size_of[s]);
        }
        free(g_w[i].plan);
        free(g_w[i].res_src);
        free(g_w[i].res_seq);
        free(g_sched[i]);
    }
    return 0;
}
