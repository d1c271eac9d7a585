/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * verbs_probe - proves that the test VM (tests/vm/tw-vm.sh) gives a working
 * RDMA device, with plain rdma-core verbs and no threadwire code.
 *
 *   verbs_probe [-n ITERS]             two RC QPs of one process, connected
 *                                      to each other through the device's
 *                                      RoCE v2 GID (GRH addressing)
 *   verbs_probe --qp-error [-n ITERS]  same, then one QP is moved to
 *                                      IBV_QPS_ERR with work in flight
 *   verbs_probe --pair [-n ITERS]      one RC QP per VM of the two-VM group;
 *                                      TWTEST_VM_ROLE=server|client,
 *                                      TWTEST_VM_PEER_IP (tcp port 18515, or
 *                                      TWTEST_VM_PROBE_PORT) exchanges QP data
 *
 * Device: TWTEST_VM_DEV (else the first one), GID: TWTEST_VM_GID_INDEX (else the
 * first RoCE v2 GID among slots 0..15), path MTU: the port's active_mtu.
 *
 * Threads: a progress thread sleeps on the completion channel
 * (ibv_req_notify_cq / ibv_get_cq_event / ibv_ack_cq_events), drains the one
 * CQ and hands every work completion to the main thread through a bounded
 * queue; only the main thread posts work and looks at completions. Every
 * work request is signaled and gets an id in a table, so each completion
 * is matched to exactly one posted request: a second completion for an id,
 * an unknown id, a wrong opcode or status, a payload whose checksum or
 * sequence number is wrong, and a count that differs from what was posted
 * all fail the run.
 *
 * The QP-error mode checks the flush contract: once a QP is in the error
 * state, every request posted to it (before or after the transition, send
 * or receive) completes exactly once, successfully if it finished before,
 * otherwise with IBV_WC_WR_FLUSH_ERR. Work is kept in flight by running
 * the peer out of receives (receiver-not-ready retries forever). (rxe on
 * Linux 6.1 flushes receives posted after the transition only at the next
 * one: see run_qp_error.)
 *
 * Exit status: 0 ok, 1 failure, 77 no RDMA device.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROBE_MSG_MAX    16384 /* largest send; several MTUs */
#define PROBE_SLOTS      64    /* receive buffers per receive queue */
#define PROBE_SEND_SLOTS 256   /* send buffers per side */
#define PROBE_WINDOW     16    /* sends in flight per direction */
#define PROBE_CHUNK      16384 /* RDMA write/read unit */
#define PROBE_CHUNKS     8     /* RDMA operations in flight */
#define PROBE_MAX_WR     (1u << 20)
#define PROBE_CQ_DEPTH   4096
#define PROBE_QUEUE      1024 /* progress thread -> main thread */
#define PROBE_MAGIC      0x74777670u
#define PROBE_PORT       18515

#define PROBE_CHECK(cond, ...)                                                           \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "verbs_probe: FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

enum wr_kind { WR_SEND, WR_RECV, WR_WRITE, WR_WRITE_IMM, WR_READ, WR_KINDS };
static const char *const kind_name[WR_KINDS] = {"send", "recv", "write", "write_imm", "read"};

/* One posted work request; wr_id is its index in the table. */
struct wr_rec {
    uint8_t kind;
    uint8_t side;
    uint8_t completions;
    uint8_t after_error; /* posted after the QP was moved to the error state */
    uint32_t slot;
    uint32_t len;
    uint32_t seq;
};

struct msg_hdr {
    uint32_t magic;
    uint32_t seq;
    uint32_t len; /* payload bytes after the header */
    uint32_t sum; /* FNV-1a of the payload */
};

/* One endpoint: a QP and the memory it uses, all in one registered buffer. */
struct side {
    const char *name;
    struct ibv_qp *qp;
    bool use_srq;
    char *buf;
    struct ibv_mr *mr;
    char *send_area; /* PROBE_SEND_SLOTS x PROBE_MSG_MAX */
    char *recv_area; /* PROBE_SLOTS x PROBE_MSG_MAX */
    char *region;    /* remote side writes/reads here: PROBE_CHUNKS x PROBE_CHUNK */
    char *rd_area;   /* RDMA read destination: PROBE_CHUNKS x PROBE_CHUNK */
    uint32_t free_send[PROBE_SEND_SLOTS];
    unsigned nfree_send;
    uint32_t send_seq, recv_seq; /* next sequence number to send / expect */
    uint32_t tx_tag, rx_tag;     /* payload seeds: ours, and the sender's we expect */
    uint32_t send_outstanding;
    bool repost; /* repost receives as they complete */
    bool in_error;
    uint64_t posted[WR_KINDS], ok[WR_KINDS], flushed[WR_KINDS];
    uint64_t imm_seen;
    /* what the peer told us (or, in one process, the other side) */
    uint32_t peer_qpn, peer_psn, peer_rkey;
    uint64_t peer_region;
    union ibv_gid peer_gid;
};

struct probe {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *channel;
    struct ibv_cq *cq;
    struct ibv_srq *srq;
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    enum ibv_mtu mtu;
    struct side side[2];
    int nsides;
    /* completion queue handed from the progress thread to the main thread;
     * guarded by lock */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct ibv_wc queue[PROBE_QUEUE];
    unsigned head, tail; /* guarded by lock */
    int wake_pipe[2];    /* main -> progress thread: stop */
    pthread_t thread;
    _Atomic uint64_t events; /* CQ events taken; counted by the progress thread */
};

static struct wr_rec *recs;
static uint32_t nrecs;
static int stall_seconds = 120;

static uint32_t fnv1a(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static void fill(void *dst, size_t len, uint64_t seed)
{
    unsigned char *p = dst;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

static uint32_t msg_len(uint32_t seq)
{
    /* 0..PROBE_MSG_MAX-header, with the edges (0, 1 MTU +- 1) hit early */
    static const uint32_t fixed[] = {0, 1, 1023, 1024, 1025, 4096};
    if (seq < sizeof fixed / sizeof fixed[0])
        return fixed[seq];
    return (uint32_t)((seq * 2654435761u) % (PROBE_MSG_MAX - sizeof(struct msg_hdr) + 1));
}

static uint32_t new_wr(int side, enum wr_kind kind, uint32_t slot, uint32_t len, uint32_t seq,
                       bool after_error)
{
    PROBE_CHECK(nrecs < PROBE_MAX_WR, "more than %u work requests", PROBE_MAX_WR);
    recs[nrecs] = (struct wr_rec){.kind = (uint8_t)kind,
                                  .side = (uint8_t)side,
                                  .after_error = after_error,
                                  .slot = slot,
                                  .len = len,
                                  .seq = seq};
    return nrecs++;
}

/* ---- progress thread -------------------------------------------------- */

static void queue_push(struct probe *p, const struct ibv_wc *wc)
{
    pthread_mutex_lock(&p->lock);
    while (p->head - p->tail == PROBE_QUEUE)
        pthread_cond_wait(&p->cond, &p->lock);
    p->queue[p->head % PROBE_QUEUE] = *wc;
    p->head++;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

static void drain_cq(struct probe *p, struct ibv_cq *cq)
{
    struct ibv_wc wc[16];
    int n;
    while ((n = ibv_poll_cq(cq, 16, wc)) > 0)
        for (int i = 0; i < n; i++)
            queue_push(p, &wc[i]);
    PROBE_CHECK(n == 0, "ibv_poll_cq: %d", n);
}

static void *progress_main(void *arg)
{
    struct probe *p = arg;
    for (;;) {
        struct pollfd fds[2] = {{.fd = p->channel->fd, .events = POLLIN},
                                {.fd = p->wake_pipe[0], .events = POLLIN}};
        if (poll(fds, 2, -1) < 0) {
            PROBE_CHECK(errno == EINTR, "poll: %s", strerror(errno));
            continue;
        }
        if (fds[1].revents)
            break;
        struct ibv_cq *cq;
        void *cq_ctx;
        if (ibv_get_cq_event(p->channel, &cq, &cq_ctx) != 0) {
            PROBE_CHECK(errno == EAGAIN, "ibv_get_cq_event: %s", strerror(errno));
            continue;
        }
        PROBE_CHECK(cq == p->cq, "event for an unknown CQ");
        ibv_ack_cq_events(cq, 1);
        atomic_fetch_add_explicit(&p->events, 1, memory_order_relaxed); /* a statistic */
        /* re-arm first, then drain: a completion that lands in between
         * raises a new event instead of being missed */
        PROBE_CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
        drain_cq(p, cq);
    }
    return NULL;
}

static void progress_start(struct probe *p)
{
    PROBE_CHECK(pipe(p->wake_pipe) == 0, "pipe: %s", strerror(errno));
    int fl = fcntl(p->channel->fd, F_GETFL);
    PROBE_CHECK(fcntl(p->channel->fd, F_SETFL, fl | O_NONBLOCK) == 0, "fcntl: %s", strerror(errno));
    PROBE_CHECK(ibv_req_notify_cq(p->cq, 0) == 0, "ibv_req_notify_cq");
    PROBE_CHECK(pthread_create(&p->thread, NULL, progress_main, p) == 0, "pthread_create");
}

static void progress_stop(struct probe *p)
{
    char c = 'x';
    PROBE_CHECK(write(p->wake_pipe[1], &c, 1) == 1, "write: %s", strerror(errno));
    PROBE_CHECK(pthread_join(p->thread, NULL) == 0, "pthread_join");
    close(p->wake_pipe[0]);
    close(p->wake_pipe[1]);
}

/* Take the next completion; false if none comes for stall_seconds (a
 * diagnostic for a hang, not a timing check). */
static bool queue_pop(struct probe *p, struct ibv_wc *wc, bool wait)
{
    bool got = false;
    pthread_mutex_lock(&p->lock);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += stall_seconds;
    while (wait && p->head == p->tail)
        if (pthread_cond_timedwait(&p->cond, &p->lock, &deadline) == ETIMEDOUT)
            break;
    if (p->head != p->tail) {
        *wc = p->queue[p->tail % PROBE_QUEUE];
        p->tail++;
        pthread_cond_broadcast(&p->cond);
        got = true;
    }
    pthread_mutex_unlock(&p->lock);
    return got;
}

/* ---- posting ------------------------------------------------------------ */

static void print_counts(const struct probe *p)
{
    for (int s = 0; s < p->nsides; s++) {
        const struct side *sd = &p->side[s];
        fprintf(stderr, "verbs_probe: %s:", sd->name);
        for (int k = 0; k < WR_KINDS; k++)
            fprintf(stderr, " %s %" PRIu64 "/%" PRIu64 "/%" PRIu64, kind_name[k], sd->posted[k],
                    sd->ok[k], sd->flushed[k]);
        fprintf(stderr, " (posted/ok/flushed)\n");
    }
}

static int post_recv(struct probe *p, int s, uint32_t slot, bool after_error)
{
    struct side *sd = &p->side[s];
    struct ibv_sge sge = {.addr = (uintptr_t)(sd->recv_area + (size_t)slot * PROBE_MSG_MAX),
                          .length = PROBE_MSG_MAX,
                          .lkey = sd->mr->lkey};
    struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
    wr.wr_id = new_wr(s, WR_RECV, slot, 0, 0, after_error);
    int rc = sd->use_srq ? ibv_post_srq_recv(p->srq, &wr, &bad) : ibv_post_recv(sd->qp, &wr, &bad);
    if (rc == 0)
        sd->posted[WR_RECV]++;
    else
        recs[wr.wr_id].completions = 1; /* never posted: expect nothing */
    return rc;
}

static int post_send_wr(struct probe *p, int s, struct ibv_send_wr *wr)
{
    struct side *sd = &p->side[s];
    struct ibv_send_wr *bad;
    wr->send_flags |= IBV_SEND_SIGNALED;
    int rc = ibv_post_send(sd->qp, wr, &bad);
    if (rc == 0) {
        sd->posted[recs[wr->wr_id].kind]++;
        if (recs[wr->wr_id].kind == WR_SEND)
            sd->send_outstanding++;
    } else {
        recs[wr->wr_id].completions = 1;
    }
    return rc;
}

/* a message of msg_len(seq) payload bytes from side s, checksummed */
static int post_msg(struct probe *p, int s, uint32_t seq, bool after_error)
{
    struct side *sd = &p->side[s];
    PROBE_CHECK(sd->nfree_send > 0, "%s: no free send slot", sd->name);
    uint32_t slot = sd->free_send[--sd->nfree_send];
    char *b = sd->send_area + (size_t)slot * PROBE_MSG_MAX;
    struct msg_hdr h = {.magic = PROBE_MAGIC, .seq = seq, .len = msg_len(seq)};
    fill(b + sizeof h, h.len, ((uint64_t)sd->tx_tag << 32) | seq);
    h.sum = fnv1a(b + sizeof h, h.len);
    memcpy(b, &h, sizeof h);
    struct ibv_sge sge = {
        .addr = (uintptr_t)b, .length = (uint32_t)sizeof h + h.len, .lkey = sd->mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};
    wr.wr_id = new_wr(s, WR_SEND, slot, sge.length, seq, after_error);
    int rc = post_send_wr(p, s, &wr);
    if (rc != 0)
        sd->free_send[sd->nfree_send++] = slot;
    return rc;
}

/* RDMA write of chunk i of side s's source data into the peer's region,
 * with immediate data imm if with_imm */
static int post_write(struct probe *p, int s, uint32_t chunk, uint32_t len, uint64_t seed,
                      bool with_imm, uint32_t imm, bool after_error)
{
    struct side *sd = &p->side[s];
    /* the source is the send area's upper half, away from the send slots
     * in use: chunk c uses send slot PROBE_SEND_SLOTS/2 + c */
    char *src = sd->send_area + (size_t)(PROBE_SEND_SLOTS / 2 + chunk) * PROBE_MSG_MAX;
    fill(src, len, seed);
    struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = sd->mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge,
                             .num_sge = 1,
                             .opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE};
    wr.wr.rdma.remote_addr = sd->peer_region + (uint64_t)chunk * PROBE_CHUNK;
    wr.wr.rdma.rkey = sd->peer_rkey;
    if (with_imm)
        wr.imm_data = htonl(imm);
    wr.wr_id =
        new_wr(s, with_imm ? WR_WRITE_IMM : WR_WRITE, chunk, len, (uint32_t)seed, after_error);
    return post_send_wr(p, s, &wr);
}

/* RDMA read of the peer's region chunk into side s's read area */
static int post_read(struct probe *p, int s, uint32_t chunk, uint32_t len, bool after_error)
{
    struct side *sd = &p->side[s];
    char *dst = sd->rd_area + (size_t)chunk * PROBE_CHUNK;
    memset(dst, 0, len);
    struct ibv_sge sge = {.addr = (uintptr_t)dst, .length = len, .lkey = sd->mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ};
    wr.wr.rdma.remote_addr = sd->peer_region + (uint64_t)chunk * PROBE_CHUNK;
    wr.wr.rdma.rkey = sd->peer_rkey;
    wr.wr_id = new_wr(s, WR_READ, chunk, len, 0, after_error);
    return post_send_wr(p, s, &wr);
}

/* ---- completions ---------------------------------------------------------- */

static int side_of_qp(const struct probe *p, uint32_t qp_num)
{
    for (int s = 0; s < p->nsides; s++)
        if (p->side[s].qp->qp_num == qp_num)
            return s;
    return -1;
}

static void check_msg(struct side *sd, const struct ibv_wc *wc, const char *b)
{
    struct msg_hdr h;
    PROBE_CHECK(wc->byte_len >= sizeof h, "%s: short message (%u bytes)", sd->name, wc->byte_len);
    memcpy(&h, b, sizeof h);
    PROBE_CHECK(h.magic == PROBE_MAGIC, "%s: bad magic %#x", sd->name, h.magic);
    PROBE_CHECK(h.seq == sd->recv_seq, "%s: message %u, expected %u (lost, doubled or reordered)",
                sd->name, h.seq, sd->recv_seq);
    PROBE_CHECK(h.len == msg_len(h.seq) && wc->byte_len == sizeof h + h.len,
                "%s: message %u: %u bytes, header says %u", sd->name, h.seq, wc->byte_len, h.len);
    PROBE_CHECK(fnv1a(b + sizeof h, h.len) == h.sum, "%s: message %u: checksum mismatch", sd->name,
                h.seq);
    /* the content itself, not only a consistent checksum */
    static char expect[PROBE_MSG_MAX];
    fill(expect, h.len, ((uint64_t)sd->rx_tag << 32) | h.seq);
    PROBE_CHECK(memcmp(expect, b + sizeof h, h.len) == 0, "%s: message %u: payload differs",
                sd->name, h.seq);
    sd->recv_seq++;
}

/* Match one completion to its work request and check it. Returns the
 * request's record. */
static struct wr_rec *handle_wc(struct probe *p, const struct ibv_wc *wc)
{
    PROBE_CHECK(wc->wr_id < nrecs, "completion for unknown wr_id %" PRIu64, wc->wr_id);
    struct wr_rec *r = &recs[wc->wr_id];
    struct side *sd = &p->side[r->side];
    PROBE_CHECK(r->completions == 0, "%s: second completion for %s wr %" PRIu64, sd->name,
                kind_name[r->kind], wc->wr_id);
    r->completions = 1;
    if (r->kind != WR_RECV || !sd->use_srq)
        PROBE_CHECK(side_of_qp(p, wc->qp_num) == r->side, "%s: completion from QP %u", sd->name,
                    wc->qp_num);
    if (r->kind == WR_SEND) {
        sd->send_outstanding--;
        sd->free_send[sd->nfree_send++] = r->slot;
    }
    if (wc->status == IBV_WC_WR_FLUSH_ERR) {
        PROBE_CHECK(sd->in_error, "%s: %s wr %" PRIu64 " flushed, but the QP is not in error",
                    sd->name, kind_name[r->kind], wc->wr_id);
        sd->flushed[r->kind]++;
        return r;
    }
    PROBE_CHECK(wc->status == IBV_WC_SUCCESS, "%s: %s wr %" PRIu64 ": %s (vendor_err %#x)",
                sd->name, kind_name[r->kind], wc->wr_id, ibv_wc_status_str(wc->status),
                wc->vendor_err);
    PROBE_CHECK(!r->after_error, "%s: %s wr %" PRIu64 " posted after the error succeeded", sd->name,
                kind_name[r->kind], wc->wr_id);
    static const enum ibv_wc_opcode want[WR_KINDS] = {
        [WR_SEND] = IBV_WC_SEND,        [WR_RECV] = IBV_WC_RECV,
        [WR_WRITE] = IBV_WC_RDMA_WRITE, [WR_WRITE_IMM] = IBV_WC_RDMA_WRITE,
        [WR_READ] = IBV_WC_RDMA_READ,
    };
    if (r->kind == WR_RECV && wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        PROBE_CHECK(wc->wc_flags & IBV_WC_WITH_IMM, "%s: write-with-imm without IBV_WC_WITH_IMM",
                    sd->name);
        /* the immediate names the chunk and the seed of its content */
        uint32_t imm = ntohl(wc->imm_data), chunk = imm % PROBE_CHUNKS;
        static char expect[PROBE_CHUNK];
        PROBE_CHECK(wc->byte_len <= PROBE_CHUNK, "%s: write-with-imm of %u bytes", sd->name,
                    wc->byte_len);
        fill(expect, wc->byte_len, imm);
        PROBE_CHECK(memcmp(expect, sd->region + (size_t)chunk * PROBE_CHUNK, wc->byte_len) == 0,
                    "%s: write-with-imm %u: region content differs", sd->name, imm);
        sd->imm_seen++;
    } else {
        PROBE_CHECK(wc->opcode == want[r->kind], "%s: %s wr %" PRIu64 ": opcode %d", sd->name,
                    kind_name[r->kind], wc->wr_id, (int)wc->opcode);
        if (r->kind == WR_RECV)
            check_msg(sd, wc, sd->recv_area + (size_t)r->slot * PROBE_MSG_MAX);
    }
    sd->ok[r->kind]++;
    if (r->kind == WR_RECV && sd->repost)
        PROBE_CHECK(post_recv(p, r->side, r->slot, false) == 0, "%s: repost recv", sd->name);
    return r;
}

static struct wr_rec *next_wc(struct probe *p)
{
    struct ibv_wc wc;
    if (!queue_pop(p, &wc, true)) {
        print_counts(p);
        PROBE_CHECK(0, "no completion for %d s (TWTEST_VM_PROBE_STALL)", stall_seconds);
    }
    return handle_wc(p, &wc);
}

/* ---- set-up ----------------------------------------------------------------- */

static void open_device(struct probe *p)
{
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL || n == 0) {
        printf("verbs_probe: SKIP: no RDMA device (%s)\n", list ? "none listed" : strerror(errno));
        exit(77);
    }
    const char *want = getenv("TWTEST_VM_DEV");
    struct ibv_device *dev = NULL;
    for (int i = 0; i < n && dev == NULL; i++)
        if (want == NULL || *want == '\0' || strcmp(ibv_get_device_name(list[i]), want) == 0)
            dev = list[i];
    if (dev == NULL) {
        printf("verbs_probe: SKIP: no RDMA device named %s\n", want);
        exit(77);
    }
    p->ctx = ibv_open_device(dev);
    PROBE_CHECK(p->ctx, "ibv_open_device %s: %s", ibv_get_device_name(dev), strerror(errno));
    ibv_free_device_list(list);

    p->port = 1;
    struct ibv_port_attr pa;
    PROBE_CHECK(ibv_query_port(p->ctx, p->port, &pa) == 0, "ibv_query_port");
    PROBE_CHECK(pa.state == IBV_PORT_ACTIVE, "port %u is not active (%d)", p->port, pa.state);
    p->mtu = pa.active_mtu;

    const char *gi = getenv("TWTEST_VM_GID_INDEX");
    p->gid_index = -1;
    if (gi != NULL && *gi != '\0') {
        p->gid_index = atoi(gi);
    } else {
        /* the first RoCE v2 GID; slots 0..15 only (each query reads sysfs) */
        for (int i = 0; i < 16 && i < pa.gid_tbl_len && p->gid_index < 0; i++) {
            struct ibv_gid_entry e;
            if (ibv_query_gid_ex(p->ctx, p->port, (uint32_t)i, &e, 0) == 0 &&
                e.gid_type == IBV_GID_TYPE_ROCE_V2)
                p->gid_index = i;
        }
    }
    PROBE_CHECK(p->gid_index >= 0, "no RoCE v2 GID on %s", ibv_get_device_name(dev));
    PROBE_CHECK(ibv_query_gid(p->ctx, p->port, p->gid_index, &p->gid) == 0, "ibv_query_gid %d",
                p->gid_index);
    char gs[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, p->gid.raw, gs, sizeof gs);
    printf("verbs_probe: %s port %u, active_mtu %d, gid[%d] %s\n", ibv_get_device_name(dev),
           p->port, 128 << p->mtu, p->gid_index, gs);

    p->pd = ibv_alloc_pd(p->ctx);
    PROBE_CHECK(p->pd, "ibv_alloc_pd");
    p->channel = ibv_create_comp_channel(p->ctx);
    PROBE_CHECK(p->channel, "ibv_create_comp_channel");
    p->cq = ibv_create_cq(p->ctx, PROBE_CQ_DEPTH, NULL, p->channel, 0);
    PROBE_CHECK(p->cq, "ibv_create_cq: %s", strerror(errno));
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = 2 * PROBE_SLOTS, .max_sge = 1}};
    p->srq = ibv_create_srq(p->pd, &sa);
    PROBE_CHECK(p->srq, "ibv_create_srq: %s", strerror(errno));
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
}

static void create_side(struct probe *p, int s, const char *name, bool use_srq)
{
    struct side *sd = &p->side[s];
    sd->name = name;
    sd->use_srq = use_srq;
    size_t send_sz = (size_t)PROBE_SEND_SLOTS * PROBE_MSG_MAX;
    size_t recv_sz = (size_t)PROBE_SLOTS * PROBE_MSG_MAX;
    size_t reg_sz = (size_t)PROBE_CHUNKS * PROBE_CHUNK;
    PROBE_CHECK(posix_memalign((void **)&sd->buf, 4096, send_sz + recv_sz + 2 * reg_sz) == 0,
                "posix_memalign");
    memset(sd->buf, 0, send_sz + recv_sz + 2 * reg_sz);
    sd->send_area = sd->buf;
    sd->recv_area = sd->send_area + send_sz;
    sd->region = sd->recv_area + recv_sz;
    sd->rd_area = sd->region + reg_sz;
    sd->mr = ibv_reg_mr(p->pd, sd->buf, send_sz + recv_sz + 2 * reg_sz,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    PROBE_CHECK(sd->mr, "ibv_reg_mr: %s", strerror(errno));
    /* send slots 0..SLOTS/2-1 carry messages; the upper half is RDMA source */
    for (uint32_t i = 0; i < PROBE_SEND_SLOTS / 2; i++)
        sd->free_send[sd->nfree_send++] = PROBE_SEND_SLOTS / 2 - 1 - i;

    struct ibv_qp_init_attr qa = {
        .send_cq = p->cq,
        .recv_cq = p->cq,
        .srq = use_srq ? p->srq : NULL,
        .cap = {.max_send_wr = 256,
                .max_recv_wr = use_srq ? 0 : 2 * PROBE_SLOTS,
                .max_send_sge = 1,
                .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
    };
    sd->qp = ibv_create_qp(p->pd, &qa);
    PROBE_CHECK(sd->qp, "%s: ibv_create_qp: %s", name, strerror(errno));
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                            .port_num = p->port,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                               IBV_ACCESS_REMOTE_READ};
    PROBE_CHECK(
        ibv_modify_qp(sd->qp, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
        "%s: to INIT: %s", name, strerror(errno));
}

static uint32_t side_psn(const struct side *sd)
{
    return (sd->qp->qp_num * 7919u) & 0xffffff;
}

/* INIT -> RTR -> RTS toward the peer recorded in sd; RoCE needs the GRH
 * (is_global) with the peer's GID, and the path MTU of the port */
static void connect_side(struct probe *p, int s)
{
    struct side *sd = &p->side[s];
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = p->mtu,
        .dest_qp_num = sd->peer_qpn,
        .rq_psn = sd->peer_psn,
        .max_dest_rd_atomic = 4,
        .min_rnr_timer = 12,
        .ah_attr = {.is_global = 1,
                    .port_num = p->port,
                    .grh = {.dgid = sd->peer_gid,
                            .sgid_index = (uint8_t)p->gid_index,
                            .hop_limit = 64}},
    };
    PROBE_CHECK(ibv_modify_qp(sd->qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER) == 0,
                "%s: to RTR: %s", sd->name, strerror(errno));
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14; /* 4.096 us << 14 = 67 ms before a retransmission */
    a.retry_cnt = 7;
    a.rnr_retry = 7; /* 7 = retry forever on receiver-not-ready */
    a.sq_psn = side_psn(sd);
    a.max_rd_atomic = 4;
    PROBE_CHECK(ibv_modify_qp(sd->qp, &a,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
                "%s: to RTS: %s", sd->name, strerror(errno));
}

static void teardown(struct probe *p)
{
    for (int s = 0; s < p->nsides; s++) {
        PROBE_CHECK(ibv_destroy_qp(p->side[s].qp) == 0, "ibv_destroy_qp");
        PROBE_CHECK(ibv_dereg_mr(p->side[s].mr) == 0, "ibv_dereg_mr");
        free(p->side[s].buf);
    }
    PROBE_CHECK(ibv_destroy_srq(p->srq) == 0, "ibv_destroy_srq");
    PROBE_CHECK(ibv_destroy_cq(p->cq) == 0, "ibv_destroy_cq");
    PROBE_CHECK(ibv_destroy_comp_channel(p->channel) == 0, "ibv_destroy_comp_channel");
    PROBE_CHECK(ibv_dealloc_pd(p->pd) == 0, "ibv_dealloc_pd");
    PROBE_CHECK(ibv_close_device(p->ctx) == 0, "ibv_close_device");
}

/* Stop the progress thread, then take what is still in the CQ directly:
 * returns how many completions arrived after the run was complete. */
static unsigned finish_completions(struct probe *p)
{
    progress_stop(p);
    unsigned extra = 0;
    struct ibv_wc wc;
    while (queue_pop(p, &wc, false)) {
        handle_wc(p, &wc);
        extra++;
    }
    int n;
    while ((n = ibv_poll_cq(p->cq, 1, &wc)) > 0) {
        handle_wc(p, &wc);
        extra++;
    }
    PROBE_CHECK(n == 0, "ibv_poll_cq: %d", n);
    return extra;
}

/* ---- one process, two QPs ------------------------------------------------------ */

static void setup_loopback(struct probe *p)
{
    p->nsides = 2;
    create_side(p, 0, "qpA", false); /* own receive queue */
    create_side(p, 1, "qpB", true);  /* shared receive queue */
    for (int s = 0; s < 2; s++) {
        struct side *sd = &p->side[s], *peer = &p->side[!s];
        sd->peer_qpn = peer->qp->qp_num;
        sd->peer_psn = side_psn(peer);
        sd->peer_rkey = peer->mr->rkey;
        sd->peer_region = (uintptr_t)peer->region;
        sd->peer_gid = p->gid;
        sd->tx_tag = (uint32_t)s;
        sd->rx_tag = (uint32_t)!s;
    }
    for (int s = 0; s < 2; s++)
        connect_side(p, s);
    progress_start(p);
    for (int s = 0; s < 2; s++) {
        p->side[s].repost = true;
        for (uint32_t i = 0; i < PROBE_SLOTS; i++)
            PROBE_CHECK(post_recv(p, s, i, false) == 0, "post_recv");
    }
}

/* n messages each way, PROBE_WINDOW in flight per direction */
static void run_sends(struct probe *p, uint32_t n)
{
    struct side *a = &p->side[0], *b = &p->side[1];
    while (a->recv_seq < n || b->recv_seq < n || a->send_outstanding || b->send_outstanding) {
        for (int s = 0; s < 2; s++) {
            struct side *sd = &p->side[s];
            while (sd->send_seq < n && sd->send_outstanding < PROBE_WINDOW)
                PROBE_CHECK(post_msg(p, s, sd->send_seq++, false) == 0, "%s: post send", sd->name);
        }
        next_wc(p);
    }
}

/* RDMA writes from side s into the other side's region, PROBE_CHUNKS at a
 * time, each checked in the target memory; every fourth round with
 * immediate data (the target side then gets a receive completion) */
static void run_writes(struct probe *p, int s, uint32_t rounds)
{
    struct side *sd = &p->side[s], *peer = &p->side[!s];
    for (uint32_t r = 0; r < rounds; r++) {
        bool imm = r % 4 == 3;
        uint64_t imm_before = peer->imm_seen, done_before = sd->ok[imm ? WR_WRITE_IMM : WR_WRITE];
        for (uint32_t c = 0; c < PROBE_CHUNKS; c++) {
            uint32_t len = 1 + (r * 7919 + c * 1237) % PROBE_CHUNK;
            /* seed = imm value, and imm % PROBE_CHUNKS == chunk */
            uint32_t seed = r * PROBE_CHUNKS + c + 1000u * PROBE_CHUNKS;
            PROBE_CHECK(post_write(p, s, c, len, seed, imm, seed, false) == 0, "%s: post write",
                        sd->name);
        }
        while (sd->ok[imm ? WR_WRITE_IMM : WR_WRITE] - done_before < PROBE_CHUNKS ||
               (imm && peer->imm_seen - imm_before < PROBE_CHUNKS))
            next_wc(p);
        if (imm)
            continue; /* checked at the receive completion */
        for (uint32_t c = 0; c < PROBE_CHUNKS; c++) {
            static char expect[PROBE_CHUNK];
            uint32_t len = 1 + (r * 7919 + c * 1237) % PROBE_CHUNK;
            fill(expect, len, r * PROBE_CHUNKS + c + 1000u * PROBE_CHUNKS);
            PROBE_CHECK(memcmp(expect, peer->region + (size_t)c * PROBE_CHUNK, len) == 0,
                        "%s: RDMA write %u/%u: target memory differs", sd->name, r, c);
        }
    }
}

/* RDMA reads by side s of the other side's region, after filling it */
static void run_reads(struct probe *p, int s, uint32_t rounds)
{
    struct side *sd = &p->side[s], *peer = &p->side[!s];
    for (uint32_t r = 0; r < rounds; r++) {
        uint64_t done_before = sd->ok[WR_READ];
        for (uint32_t c = 0; c < PROBE_CHUNKS; c++) {
            uint32_t len = 1 + (r * 4099 + c * 3001) % PROBE_CHUNK;
            fill(peer->region + (size_t)c * PROBE_CHUNK, len, 5000u + r * PROBE_CHUNKS + c);
            PROBE_CHECK(post_read(p, s, c, len, false) == 0, "%s: post read", sd->name);
        }
        while (sd->ok[WR_READ] - done_before < PROBE_CHUNKS)
            next_wc(p);
        for (uint32_t c = 0; c < PROBE_CHUNKS; c++) {
            uint32_t len = 1 + (r * 4099 + c * 3001) % PROBE_CHUNK;
            PROBE_CHECK(memcmp(peer->region + (size_t)c * PROBE_CHUNK,
                               sd->rd_area + (size_t)c * PROBE_CHUNK, len) == 0,
                        "%s: RDMA read %u/%u: data differs", sd->name, r, c);
        }
    }
}

static int run_loopback(uint32_t iters)
{
    struct probe *p = calloc(1, sizeof *p);
    PROBE_CHECK(p, "calloc");
    open_device(p);
    setup_loopback(p);
    run_sends(p, iters);
    uint32_t rounds = iters / 64 + 4;
    run_writes(p, 0, rounds);
    run_writes(p, 1, rounds);
    run_reads(p, 1, rounds);
    run_reads(p, 0, rounds);
    unsigned extra = finish_completions(p);
    print_counts(p);
    PROBE_CHECK(extra == 0, "%u completion(s) nobody waited for", extra);
    uint32_t imm_rounds = rounds / 4;
    for (int s = 0; s < 2; s++) {
        struct side *sd = &p->side[s];
        for (int k = 0; k < WR_KINDS; k++)
            PROBE_CHECK(sd->flushed[k] == 0, "%s: flushed %s", sd->name, kind_name[k]);
        PROBE_CHECK(sd->posted[WR_SEND] == iters && sd->ok[WR_SEND] == iters, "%s: sends",
                    sd->name);
        PROBE_CHECK(sd->ok[WR_WRITE] == sd->posted[WR_WRITE] &&
                        sd->ok[WR_WRITE] == (uint64_t)(rounds - imm_rounds) * PROBE_CHUNKS,
                    "%s: writes", sd->name);
        PROBE_CHECK(sd->ok[WR_WRITE_IMM] == sd->posted[WR_WRITE_IMM] &&
                        sd->ok[WR_WRITE_IMM] == (uint64_t)imm_rounds * PROBE_CHUNKS,
                    "%s: writes with immediate", sd->name);
        PROBE_CHECK(sd->ok[WR_READ] == sd->posted[WR_READ] &&
                        sd->ok[WR_READ] == (uint64_t)rounds * PROBE_CHUNKS,
                    "%s: reads", sd->name);
        /* receives: one per message and per write-with-imm from the other
         * side; the PROBE_SLOTS still posted complete at no time */
        PROBE_CHECK(sd->ok[WR_RECV] == iters + (uint64_t)imm_rounds * PROBE_CHUNKS &&
                        sd->posted[WR_RECV] == sd->ok[WR_RECV] + PROBE_SLOTS,
                    "%s: receives", sd->name);
    }
    uint64_t events = atomic_load_explicit(&p->events, memory_order_relaxed);
    printf("verbs_probe: loopback ok: %u messages each way, %u x %d RDMA writes and reads each "
           "way, %u completions, %" PRIu64 " CQ events\n",
           iters, rounds, PROBE_CHUNKS, nrecs - 2 * PROBE_SLOTS, events);
    teardown(p);
    free(p);
    return 0;
}

/* ---- one QP forced into the error state ---------------------------------------- */

/*
 * "Mid-stream" is made deterministic: qpB stops reposting receives, so of a
 * burst from qpA only as many messages as qpB has receives left can
 * succeed; the next one is refused with receiver-not-ready and retried
 * (rnr_retry 7: forever), and everything posted behind it waits. Then qpA
 * goes to the error state: what waits must flush, whatever the timing.
 */
static int run_qp_error(uint32_t iters)
{
    struct probe *p = calloc(1, sizeof *p);
    PROBE_CHECK(p, "calloc");
    open_device(p);
    setup_loopback(p);
    struct side *a = &p->side[0], *b = &p->side[1];
    a->repost = false; /* qpA's receive queue must end up flushed */
    b->repost = false; /* qpB's receives run out during the burst */
    /* some traffic both ways first */
    uint32_t warm = iters < PROBE_SLOTS / 4 ? iters : PROBE_SLOTS / 4;
    run_sends(p, warm);
    uint64_t a_recv_left = a->posted[WR_RECV] - a->ok[WR_RECV];
    uint32_t b_avail = PROBE_SLOTS - warm; /* receives qpB has left */

    /* a burst from qpA of more messages than qpB can take, RDMA behind it */
    uint32_t burst = b_avail + 8, blocked_ops = 0;
    PROBE_CHECK(burst + 8 <= PROBE_SEND_SLOTS / 2, "burst of %u too large", burst);
    for (uint32_t i = 0; i < burst; i++)
        PROBE_CHECK(post_msg(p, 0, a->send_seq++, false) == 0, "post send");
    for (uint32_t c = 0; c < 4; c++) {
        PROBE_CHECK(post_write(p, 0, c, PROBE_CHUNK, 77 + c, false, 0, false) == 0, "post write");
        PROBE_CHECK(post_read(p, 0, 4 + c, PROBE_CHUNK, false) == 0, "post read");
        blocked_ops += 2;
    }
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    a->in_error = true;
    PROBE_CHECK(ibv_modify_qp(a->qp, &attr, IBV_QP_STATE) == 0, "to ERR: %s", strerror(errno));
    struct ibv_qp_init_attr ia;
    PROBE_CHECK(ibv_query_qp(a->qp, &attr, IBV_QP_STATE, &ia) == 0 && attr.qp_state == IBV_QPS_ERR,
                "qpA is not in the error state (%d)", attr.qp_state);

    /* more work after the error: whatever is accepted must flush */
    unsigned refused = 0;
    for (uint32_t i = 0; i < 8; i++) {
        refused += post_msg(p, 0, a->send_seq++, true) != 0;
        refused += post_recv(p, 0, i, true) != 0;
    }
    refused += post_write(p, 0, 0, 100, 1, false, 0, true) != 0;
    refused += post_read(p, 0, 1, 100, true) != 0;
    /* rxe's provider posts receives in user space, without a system call,
     * and the kernel (6.1) flushes a receive queue only when its responder
     * runs, which a transition to the error state triggers: receives posted
     * after the error wait for the next one. Transports should not count on a flush of receives
     * posted to a QP already in error; here a second transition flushes them. */
    attr.qp_state = IBV_QPS_ERR;
    PROBE_CHECK(ibv_modify_qp(a->qp, &attr, IBV_QP_STATE) == 0, "to ERR again: %s",
                strerror(errno));

    /* every request posted on qpA completes exactly once */
    uint64_t a_posted = 0;
    for (int k = 0; k < WR_KINDS; k++)
        a_posted += a->posted[k];
    for (;;) {
        uint64_t a_done = 0;
        for (int k = 0; k < WR_KINDS; k++)
            a_done += a->ok[k] + a->flushed[k];
        if (a_done == a_posted)
            break;
        next_wc(p);
    }
    unsigned extra = finish_completions(p);
    print_counts(p);
    uint64_t flushed = 0;
    for (int k = 0; k < WR_KINDS; k++) {
        PROBE_CHECK(a->ok[k] + a->flushed[k] == a->posted[k],
                    "qpA %s: %" PRIu64 " posted, %" PRIu64 " completed", kind_name[k], a->posted[k],
                    a->ok[k] + a->flushed[k]);
        flushed += a->flushed[k];
    }
    /* the receives nobody consumed, and those posted after the error */
    PROBE_CHECK(a->flushed[WR_RECV] == a_recv_left + (a->posted[WR_RECV] - PROBE_SLOTS),
                "qpA: %" PRIu64 " receives flushed, expected %" PRIu64, a->flushed[WR_RECV],
                a_recv_left + (a->posted[WR_RECV] - PROBE_SLOTS));
    /* no more messages than qpB had receives for; everything behind the
     * first refused message flushed */
    uint64_t after_sends = a->posted[WR_SEND] - warm - burst;
    PROBE_CHECK(a->ok[WR_SEND] <= warm + b_avail &&
                    a->flushed[WR_SEND] >= burst - b_avail + after_sends,
                "qpA: %" PRIu64 " sends ok, %" PRIu64 " flushed; qpB had %u receives",
                a->ok[WR_SEND], a->flushed[WR_SEND], b_avail);
    PROBE_CHECK(a->ok[WR_WRITE] == 0 && a->ok[WR_READ] == 0,
                "qpA: RDMA behind a refused message succeeded");
    /* qpB got each of qpA's successful messages, no more than it had
     * receives for, and lost nothing of its own */
    PROBE_CHECK(b->ok[WR_RECV] >= a->ok[WR_SEND] && b->ok[WR_RECV] <= warm + b_avail,
                "qpB: %" PRIu64 " receives, qpA: %" PRIu64 " sends ok", b->ok[WR_RECV],
                a->ok[WR_SEND]);
    for (int k = 0; k < WR_KINDS; k++)
        PROBE_CHECK(b->flushed[k] == 0, "qpB: flushed %s", kind_name[k]);
    PROBE_CHECK(b->ok[WR_SEND] == warm && b->posted[WR_SEND] == warm, "qpB: sends");
    uint64_t events = atomic_load_explicit(&p->events, memory_order_relaxed);
    printf("verbs_probe: qp-error ok: qpA %" PRIu64 " requests: %" PRIu64 " ok, %" PRIu64
           " flushed (%" PRIu64 " sends, %u RDMA behind a refused message); %u refused after "
           "the error; %u late completions; %" PRIu64 " CQ events\n",
           a_posted, a_posted - flushed, flushed, a->flushed[WR_SEND], blocked_ops, refused, extra,
           events);
    teardown(p);
    free(p);
    return 0;
}

/* rxe's retransmission counters, if the device has them (sysfs) */
static void print_retry_counters(const struct probe *p)
{
    static const char *const names[] = {"completer_retry_err", "duplicate_request",
                                        "out_of_seq_request", "retry_exceeded_err"};
    printf("verbs_probe: %s port %u:", ibv_get_device_name(p->ctx->device), p->port);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%u/hw_counters/%s",
                 ibv_get_device_name(p->ctx->device), p->port, names[i]);
        FILE *f = fopen(path, "r");
        unsigned long long v;
        if (f != NULL && fscanf(f, "%llu", &v) == 1)
            printf(" %s %llu", names[i], v);
        if (f != NULL)
            fclose(f);
    }
    printf("\n");
}

/* ---- two VMs ---------------------------------------------------------------------- */

struct wire_info {
    uint32_t qpn, psn, rkey, pad;
    uint64_t region;
    uint8_t gid[16];
};

static void full_io(int fd, void *buf, size_t len, bool out)
{
    char *b = buf;
    while (len > 0) {
        ssize_t n = out ? write(fd, b, len) : read(fd, b, len);
        if (n < 0 && errno == EINTR)
            continue;
        PROBE_CHECK(n > 0, "%s: %s", out ? "write" : "read", n ? strerror(errno) : "peer closed");
        b += n;
        len -= (size_t)n;
    }
}

static int oob_connect(bool server, const char *peer_ip, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (server) {
        int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        PROBE_CHECK(ls >= 0, "socket: %s", strerror(errno));
        setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        PROBE_CHECK(bind(ls, (struct sockaddr *)&sa, sizeof sa) == 0, "bind port %d: %s", port,
                    strerror(errno));
        PROBE_CHECK(listen(ls, 1) == 0, "listen: %s", strerror(errno));
        int fd = accept(ls, NULL, NULL);
        PROBE_CHECK(fd >= 0, "accept: %s", strerror(errno));
        close(ls);
        return fd;
    }
    PROBE_CHECK(inet_pton(AF_INET, peer_ip, &sa.sin_addr) == 1, "bad peer address %s", peer_ip);
    /* the server may not listen yet: retry (tw-vm starts both sides together) */
    for (int attempt = 0;; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        PROBE_CHECK(fd >= 0, "socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            return fd;
        PROBE_CHECK(attempt < 3000, "connect %s:%d: %s", peer_ip, port, strerror(errno));
        close(fd);
        usleep(100 * 1000);
    }
}

/*
 * Client: iters ping-pongs (a message, then the server's answer with the
 * same sequence number and size), RDMA writes into the server's region read
 * back by RDMA reads, and a final message the server answers after checking
 * the last writes in its memory.
 */
static int run_pair(uint32_t iters)
{
    const char *role = getenv("TWTEST_VM_ROLE"), *peer_ip = getenv("TWTEST_VM_PEER_IP");
    const char *port_s = getenv("TWTEST_VM_PROBE_PORT");
    if (role == NULL || peer_ip == NULL || *peer_ip == '\0') {
        printf("verbs_probe: SKIP: --pair needs TWTEST_VM_ROLE and TWTEST_VM_PEER_IP (tw-vm.sh "
               "--pair-case)\n");
        return 77;
    }
    bool server = strcmp(role, "server") == 0;
    PROBE_CHECK(server || strcmp(role, "client") == 0, "TWTEST_VM_ROLE=%s", role);
    struct probe *p = calloc(1, sizeof *p);
    PROBE_CHECK(p, "calloc");
    open_device(p);
    p->nsides = 1;
    create_side(p, 0, server ? "server" : "client", server);
    struct side *sd = &p->side[0];
    sd->tx_tag = server;
    sd->rx_tag = !server;
    int fd = oob_connect(server, peer_ip, port_s ? atoi(port_s) : PROBE_PORT);
    struct wire_info mine = {.qpn = htonl(sd->qp->qp_num),
                             .psn = htonl(side_psn(sd)),
                             .rkey = htonl(sd->mr->rkey),
                             .region = htobe64((uintptr_t)sd->region)},
                     theirs;
    memcpy(mine.gid, p->gid.raw, 16);
    full_io(fd, &mine, sizeof mine, true);
    full_io(fd, &theirs, sizeof theirs, false);
    sd->peer_qpn = ntohl(theirs.qpn);
    sd->peer_psn = ntohl(theirs.psn);
    sd->peer_rkey = ntohl(theirs.rkey);
    sd->peer_region = be64toh(theirs.region);
    memcpy(sd->peer_gid.raw, theirs.gid, 16);
    connect_side(p, 0);
    progress_start(p);
    sd->repost = true;
    for (uint32_t i = 0; i < PROBE_SLOTS; i++)
        PROBE_CHECK(post_recv(p, 0, i, false) == 0, "post_recv");
    /* both sides' receives are up before anyone sends */
    char c = 'r';
    full_io(fd, &c, 1, true);
    full_io(fd, &c, 1, false);

    uint32_t rounds = iters / 64 + 2;
    uint32_t total = iters + 1; /* the last message is the final one */
    if (server) {
        while (sd->recv_seq < total || sd->send_outstanding) {
            uint32_t before = sd->recv_seq;
            next_wc(p);
            if (sd->recv_seq != before) /* echo it */
                PROBE_CHECK(post_msg(p, 0, sd->send_seq++, false) == 0, "post echo");
        }
    } else {
        for (uint32_t i = 0; i < iters; i++) {
            PROBE_CHECK(post_msg(p, 0, sd->send_seq++, false) == 0, "post send");
            while (sd->recv_seq <= i || sd->send_outstanding)
                next_wc(p);
        }
        for (uint32_t r = 0; r < rounds; r++) {
            uint64_t w0 = sd->ok[WR_WRITE], r0 = sd->ok[WR_READ];
            for (uint32_t k = 0; k < PROBE_CHUNKS; k++)
                PROBE_CHECK(post_write(p, 0, k, PROBE_CHUNK, 9000u + r * PROBE_CHUNKS + k, false, 0,
                                       false) == 0,
                            "post write");
            while (sd->ok[WR_WRITE] - w0 < PROBE_CHUNKS)
                next_wc(p);
            for (uint32_t k = 0; k < PROBE_CHUNKS; k++)
                PROBE_CHECK(post_read(p, 0, k, PROBE_CHUNK, false) == 0, "post read");
            while (sd->ok[WR_READ] - r0 < PROBE_CHUNKS)
                next_wc(p);
            for (uint32_t k = 0; k < PROBE_CHUNKS; k++) {
                static char expect[PROBE_CHUNK];
                fill(expect, PROBE_CHUNK, 9000u + r * PROBE_CHUNKS + k);
                PROBE_CHECK(memcmp(expect, sd->rd_area + (size_t)k * PROBE_CHUNK, PROBE_CHUNK) == 0,
                            "RDMA write %u/%u read back differs", r, k);
            }
        }
        PROBE_CHECK(post_msg(p, 0, sd->send_seq++, false) == 0, "post final");
        while (sd->recv_seq < total || sd->send_outstanding)
            next_wc(p);
    }
    /* the client's writes finished before its final message, which the
     * server has: its region holds the last round of them */
    if (server)
        for (uint32_t k = 0; k < PROBE_CHUNKS; k++) {
            static char expect[PROBE_CHUNK];
            fill(expect, PROBE_CHUNK, 9000u + (rounds - 1) * PROBE_CHUNKS + k);
            PROBE_CHECK(memcmp(expect, sd->region + (size_t)k * PROBE_CHUNK, PROBE_CHUNK) == 0,
                        "server region chunk %u differs from the client's last writes", k);
        }
    /* neither side tears down while the other may still need its QP */
    full_io(fd, &c, 1, true);
    full_io(fd, &c, 1, false);
    close(fd);
    unsigned extra = finish_completions(p);
    print_counts(p);
    PROBE_CHECK(extra == 0, "%u completion(s) nobody waited for", extra);
    PROBE_CHECK(sd->posted[WR_SEND] == total && sd->ok[WR_SEND] == total, "sends");
    PROBE_CHECK(sd->ok[WR_RECV] == total && sd->posted[WR_RECV] == total + PROBE_SLOTS, "receives");
    uint64_t ops = server ? 0 : (uint64_t)rounds * PROBE_CHUNKS;
    PROBE_CHECK(sd->posted[WR_WRITE] == ops && sd->ok[WR_WRITE] == ops, "writes");
    PROBE_CHECK(sd->posted[WR_READ] == ops && sd->ok[WR_READ] == ops, "reads");
    for (int k = 0; k < WR_KINDS; k++)
        PROBE_CHECK(sd->flushed[k] == 0, "flushed %s", kind_name[k]);
    uint64_t events = atomic_load_explicit(&p->events, memory_order_relaxed);
    print_retry_counters(p);
    printf("verbs_probe: pair %s ok: %u messages each way, %" PRIu64 " RDMA writes and reads, "
           "%" PRIu64 " CQ events\n",
           role, total, ops, events);
    teardown(p);
    free(p);
    return 0;
}

int main(int argc, char **argv)
{
    enum { LOOPBACK, QP_ERROR, PAIR } mode = LOOPBACK;
    uint32_t iters = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--qp-error") == 0) {
            mode = QP_ERROR;
        } else if (strcmp(argv[i], "--pair") == 0) {
            mode = PAIR;
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            iters = (uint32_t)strtoul(argv[++i], NULL, 0);
        } else {
            fprintf(stderr, "usage: verbs_probe [--qp-error | --pair] [-n ITERS]\n");
            return 2;
        }
    }
    if (iters == 0)
        iters = mode == PAIR ? 200 : 1000;
    const char *st = getenv("TWTEST_VM_PROBE_STALL");
    if (st != NULL && atoi(st) > 0)
        stall_seconds = atoi(st);
    setvbuf(stdout, NULL, _IOLBF, 0);
    recs = calloc(PROBE_MAX_WR, sizeof *recs);
    PROBE_CHECK(recs, "calloc");
    int rc;
    switch (mode) {
    case QP_ERROR:
        rc = run_qp_error(iters);
        break;
    case PAIR:
        rc = run_pair(iters);
        break;
    default:
        rc = run_loopback(iters);
        break;
    }
    free(recs);
    return rc;
}
