/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The shared-memory transport: ranks of one node.
 *
 * Segments. Every rank creates one segment (tw_seg: O_EXCL, 0600,
 * unpredictable name, fallocated) holding its *inbound* rings: one ring per
 * other local rank, written only by that rank's threads. The name goes out
 * in the bootstrap blob; every rank attaches to every peer's segment, and
 * after the job-wide fence that follows, the creator unlinks its name, so
 * nothing is left in /dev/shm however the job ends later. The header
 * (magic, version, layout, key CRC, owner pid) is checked on attach; the
 * layout itself is recomputed locally, never read from shared memory.
 *
 * Rings. A ring is a power-of-two array of fixed cells (64-byte header +
 * payload). Producers -- any thread of the sending process -- claim a cell
 * by CAS on the ring's tail once the cell's sequence word says it is free
 * for that position, fill it, and publish it by storing position + 1 into
 * the sequence word (release). The consumer -- the receiver's progress
 * engine -- takes the cell at its private head when the sequence word
 * reads head + 1, and frees it by storing head + ncells. So a sender never
 * waits for another sender's commit, and a half-written cell (a sender
 * killed mid-copy) only ever looks "not yet published". Ring full is
 * TW_ERR_AGAIN.
 *
 * Trust. Peers run as our uid (they could ptrace us), so this is about
 * robustness, not secrecy: whatever a buggy or crashed peer leaves in its
 * rings must not make us read or write outside our buffers. At the head,
 * the sequence word must be head (empty) or head + 1 (ready), anything
 * else is corruption; a cell's fields are read once into locals and its
 * type, lengths and ids are checked before use; ids name entries of our
 * own tables and carry a generation. A violation fails that peer only:
 * its ring is no longer read, its operations complete with
 * TW_ERR_PEER_FAILED, the layer above is told.
 *
 * Cells:
 *   EAGER  hdr_len header bytes + payload, delivered to iface->recv.
 *   RTS    a large message (am_zcopy): header bytes; a0 = sender address,
 *          a1 = length, a2 = send id. Delivered to recv_rndv; the receiver
 *          pulls with rndv_get:
 *            CMA: process_vm_readv straight from the sender (one copy),
 *                 then FIN (a2 = send id) completes the send;
 *            fallback (TW_SHM_CMA=0, or EPERM): CTS (a1 = receive id,
 *                 a0 = bytes wanted, a2 = send id); the sender's engine
 *                 pushes DATA cells (a1 = receive id, a0 = offset) through
 *                 the ring, the receiver copies them out (two copies,
 *                 pipelined over the ring), and the send completes once
 *                 the last chunk is in the ring.
 *   CTS, FIN, DATA as above; they are posted by the engine, which queues
 *   them when the ring is full (never spins: two engines waiting on each
 *   other's full rings would deadlock).
 *
 * Wake-up. The receiver's engine mirrors its "going to sleep" flag into
 * its segment header (tw_pe_add_sleep_word); a sender that published a
 * cell and then reads the flag set sends one datagram to the receiver's
 * abstract unix socket, which its engine watches. Same Dekker pattern as
 * the engine's own doorbell. The first such sender turns the flag from 1
 * into 2, so a burst costs one datagram per sleep, not one per message.
 *
 * Waiting workers. A thread waiting in tw_cq_wait (or calling
 * tw_progress) while the engine is idle takes its lock (tw_pe_try_call)
 * and runs tw_shm_poll: the same consumer, but it stops at the first
 * arrival that runs user code (a user active message), which the engine
 * delivers in order later.
 *
 * Dead peers. A pidfd per peer, watched by the engine and polled every
 * TW_SHM_CHECK_NS: when it turns readable the peer is failed (or, if it
 * marked its segment closed first, it left cleanly) -- well within the
 * 500 ms the API promises.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/tw_config.h"
#include "core/tw_crc32c.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "shmem/tw_seg.h"
#include "transports/base/tw_tl.h"
#include "transports/shm/tw_shm.h"

#define TW_SHM_MAGIC     0x314d485357547774ull /* "twTWSHM1" */
#define TW_SHM_VERSION   1u
#define TW_SHM_HDR_SIZE  4096u
#define TW_SHM_CELL_HDR  64u
#define TW_SHM_CELL_SIZE (TW_SHM_CELL_HDR + 8192u + 256u)
#define TW_SHM_CELL_DATA (TW_SHM_CELL_SIZE - TW_SHM_CELL_HDR)
#define TW_SHM_MAX_MSG   (1ull << 40)          /* largest rendezvous accepted */
#define TW_SHM_CHECK_NS  (20ull * 1000 * 1000) /* pidfd poll interval */
#define TW_SHM_BUDGET    32                    /* cells per peer per pass */
#define TW_SHM_SENDS     4096u                 /* rendezvous sends in flight */
#define TW_SHM_ADDR_MAX  160u

enum { TW_SHM_SEG_LIVE = 1, TW_SHM_SEG_CLOSED = 2 };
enum { TW_SHM_EAGER = 1, TW_SHM_RTS, TW_SHM_CTS, TW_SHM_FIN, TW_SHM_DATA, TW_SHM_TYPE_MAX };
enum { TW_SHM_PEER_UP = 0, TW_SHM_PEER_FAILED = 1, TW_SHM_PEER_LEFT = 2 };

/* ---- shared layout ---------------------------------------------------- */

typedef struct tw_shm_seg_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t nlocal;
    uint32_t ncells;
    uint32_t cell_size;
    uint32_t owner_local;
    uint32_t owner_pid;
    uint32_t key_crc;
    _Atomic uint32_t state;                   /* TW_SHM_SEG_* */
    _Atomic uint32_t sleeping TW_ALIGNED(64); /* mirror of the engine's flag */
} tw_shm_seg_hdr_t;

typedef struct tw_shm_ring_hdr {
    _Atomic uint64_t tail; /* producers only */
    unsigned char pad[56];
    /* Set by the producer's engine when it found the ring full and has
     * work queued for it; the consumer clears it and wakes the producer
     * after freeing cells. */
    _Atomic uint32_t want_wake;
    unsigned char pad2[60];
} tw_shm_ring_hdr_t;

typedef struct tw_shm_cell {
    _Atomic uint64_t seq;
    uint8_t type;
    uint8_t am_id;
    uint16_t hdr_len;
    uint32_t len; /* bytes of data[] used */
    uint64_t a0, a1, a2, a3;
    uint64_t pad[2];
    unsigned char data[];
} tw_shm_cell_t;

_Static_assert(sizeof(tw_shm_cell_t) == TW_SHM_CELL_HDR, "cell header is 64 bytes");
_Static_assert(sizeof(tw_shm_seg_hdr_t) <= TW_SHM_HDR_SIZE, "segment header fits its page");

/* What a rank publishes (the bootstrap blob part of this transport). */
typedef struct tw_shm_addr {
    uint32_t magic;
    uint32_t local_rank;
    uint32_t pid;
    uint32_t ncells;
    char seg[TW_SEG_NAME_MAX];
    char node[64]; /* boot id: same kernel = same node */
} tw_shm_addr_t;

_Static_assert(sizeof(tw_shm_addr_t) <= TW_SHM_ADDR_MAX, "address fits");

/* ---- process-local state ---------------------------------------------- */

typedef struct tw_shm_peer {
    int rank;
    int local;
    pid_t pid;
    int pidfd;    /* -1: none (then kill(pid, 0) is polled) */
    tw_seg_t seg; /* the peer's segment (our outbound ring is in it) */
    bool attached;
    tw_shm_ring_hdr_t *tx; /* our ring in the peer's segment */
    _Atomic uint32_t *tx_sleeping;
    _Atomic uint32_t *tx_state;
    struct sockaddr_un wake_addr;
    socklen_t wake_len;
    tw_shm_ring_hdr_t *rx;    /* the peer's ring in our segment */
    uint64_t rx_head;         /* engine only */
    atomic_uint state;        /* TW_SHM_PEER_* */
    const char *fail_pending; /* lock holder: found bad by a worker's poll */
} tw_shm_peer_t;

/* A rendezvous send waiting for FIN (CMA) or CTS (fallback). */
typedef struct tw_shm_send {
    tw_tl_comp_t *comp; /* NULL: slot free */
    const void *addr;
    size_t len;
    int peer;
    uint32_t gen;
    uint32_t next_free;
} tw_shm_send_t;

/* The receiver's handle of an announced message. */
struct tw_tl_rndv {
    struct tw_tl_rndv *prev, *next; /* every live handle, for close */
    int peer;
    uint64_t raddr;
    uint64_t len;
    uint64_t sid;
};

/* A fallback pull in progress on the receiver. */
typedef struct tw_shm_pull {
    tw_tl_comp_t *comp; /* NULL: slot free */
    unsigned char *dst;
    size_t want;
    size_t got;
    int peer;
    uint32_t gen;
} tw_shm_pull_t;

/* Engine-side outbound work: a control cell, or a push of DATA cells. */
typedef struct tw_shm_job {
    struct tw_shm_job *next;
    int peer;
    uint8_t type; /* CTS / FIN: control; DATA: push */
    uint64_t a0, a1, a2;
    const unsigned char *src; /* DATA: the sender's buffer */
    size_t off, want;         /* DATA */
} tw_shm_job_t;

typedef struct tw_shm_cfg {
    uint64_t cells;
    bool cma;
} tw_shm_cfg_t;

typedef struct tw_shm_iface {
    tw_tl_iface_t super;
    tw_shm_cfg_t cfg;
    tw_seg_t seg; /* ours: inbound rings */
    tw_shm_seg_hdr_t *hdr;
    unsigned nlocal, local_rank, ncells;
    size_t ring_stride;
    char node[64];
    uint32_t key_crc;
    int wake_fd;
    atomic_bool cma_off;  /* forced or refused once: fallback for everyone */
    tw_shm_peer_t *peers; /* [size]; unused for our own rank */

    pthread_mutex_t send_lock;
    tw_shm_send_t *sends; /* [TW_SHM_SENDS], guarded by send_lock */
    uint32_t send_free;   /* guarded by send_lock; UINT32_MAX = none */

    /* Engine owner only. */
    tw_tl_rndv_t handles; /* list head of live handles */
    tw_shm_pull_t *pulls;
    uint32_t npulls;
    tw_shm_job_t *jobs_head, *jobs_tail;
    uint64_t next_check_ns;
    uint64_t seen_wakeups;
    unsigned npeers_up;
    bool in_poll;           /* a worker runs tw_shm_poll: no user callbacks */
    unsigned nfail_pending; /* peers with fail_pending set */
} tw_shm_iface_t;

static const char *const tw_shm_type_names[TW_SHM_TYPE_MAX] = {"?",   "EAGER", "RTS",
                                                               "CTS", "FIN",   "DATA"};

static const tw_cfg_entry_t tw_shm_cfg_entries[] = {
    {.name = "TW_SHM_CELLS",
     .type = TW_CFG_UINT64,
     .defval = "64",
     .help = "shm transport: cells of 8.3 KiB in each sender's ring to each local peer (power of "
             "two); must be the same on every rank",
     .offset = offsetof(tw_shm_cfg_t, cells),
     .min = 4,
     .max = 4096},
    {.name = "TW_SHM_CMA",
     .type = TW_CFG_BOOL,
     .defval = "1",
     .help = "shm transport: pull large messages with one copy (process_vm_readv); 0 = copy "
             "them through the rings",
     .offset = offsetof(tw_shm_cfg_t, cma)},
};

const tw_cfg_table_t tw_shm_cfg_table = {
    .module = "shm",
    .entries = tw_shm_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_shm_cfg_entries),
};

/* Test hook: refuse CMA as if the kernel said EPERM. */
static atomic_bool tw_shm_cma_refused_by_test;

void tw_shm_test_refuse_cma(bool refuse)
{
    atomic_store(&tw_shm_cma_refused_by_test, refuse);
}

static void tw_shm_fail_peer(tw_shm_iface_t *shm, int peer, const char *why);

/* ---- layout ------------------------------------------------------------ */

static size_t tw_shm_ring_stride(unsigned ncells)
{
    return sizeof(tw_shm_ring_hdr_t) + (size_t)ncells * TW_SHM_CELL_SIZE;
}

static size_t tw_shm_seg_size(unsigned nlocal, unsigned ncells)
{
    return TW_SHM_HDR_SIZE + (size_t)(nlocal > 1 ? nlocal - 1 : 1) * tw_shm_ring_stride(ncells);
}

/* Ring of sender @p from in the segment of receiver @p to (local ranks). */
static tw_shm_ring_hdr_t *tw_shm_ring(void *base, unsigned ncells, unsigned from, unsigned to)
{
    unsigned idx = from < to ? from : from - 1;
    return (tw_shm_ring_hdr_t *)((char *)base + TW_SHM_HDR_SIZE +
                                 (size_t)idx * tw_shm_ring_stride(ncells));
}

static inline tw_shm_cell_t *tw_shm_cell(tw_shm_ring_hdr_t *ring, unsigned ncells, uint64_t pos)
{
    return (tw_shm_cell_t *)((char *)(ring + 1) + (size_t)(pos & (ncells - 1)) * TW_SHM_CELL_SIZE);
}

static void tw_shm_ring_init(tw_shm_ring_hdr_t *ring, unsigned ncells)
{
    atomic_init(&ring->tail, 0);
    atomic_init(&ring->want_wake, 0);
    for (unsigned i = 0; i < ncells; i++) {
        atomic_init(&tw_shm_cell(ring, ncells, i)->seq, i);
    }
}

/* ---- producing --------------------------------------------------------- */

/* Claim the next free cell of @p ring, or NULL when full. The consumer is
 * another process we do not trust with our progress: a sequence word that
 * never settles costs a bounded number of retries, then TW_ERR_AGAIN. */
static tw_shm_cell_t *tw_shm_claim(tw_shm_ring_hdr_t *ring, unsigned ncells, uint64_t *pos_p)
{
    uint64_t pos = atomic_load_explicit(&ring->tail, memory_order_relaxed);

    for (unsigned tries = 0; tries < 64; tries++) {
        tw_shm_cell_t *c = tw_shm_cell(ring, ncells, pos);
        uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        int64_t diff = (int64_t)(seq - pos);

        if (diff == 0) {
            if (atomic_compare_exchange_weak_explicit(&ring->tail, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                *pos_p = pos;
                return c;
            }
        } else if (diff < 0) {
            return NULL; /* the consumer has not freed it: full */
        } else {
            pos = atomic_load_explicit(&ring->tail, memory_order_relaxed);
        }
    }
    return NULL;
}

static void tw_shm_kick(tw_shm_iface_t *shm, tw_shm_peer_t *p)
{
    char b = 0;
    (void)sendto(shm->wake_fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                 (const struct sockaddr *)&p->wake_addr, p->wake_len);
}

/* Publish, then wake the receiver if it announced sleep. */
static void tw_shm_publish(tw_shm_iface_t *shm, tw_shm_peer_t *p, tw_shm_cell_t *c, uint64_t pos)
{
    atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
    /* Store seq / load sleeping: the sender half of the Dekker pair. */
    atomic_thread_fence(memory_order_seq_cst);
    /* 1: it sleeps and nobody woke it yet -- we do (2 tells later
     * senders that a datagram is on its way); 2: already woken. */
    if (atomic_load_explicit(p->tx_sleeping, memory_order_relaxed) == 1 &&
        atomic_exchange_explicit(p->tx_sleeping, 2, memory_order_relaxed) == 1) {
        tw_shm_kick(shm, p);
    }
}

static tw_shm_peer_t *tw_shm_peer(tw_shm_iface_t *shm, int peer)
{
    if (peer < 0 || peer >= shm->super.size || peer == shm->super.rank ||
        !shm->peers[peer].attached) {
        return NULL;
    }
    return &shm->peers[peer];
}

static inline bool tw_shm_peer_is_up(tw_shm_peer_t *p)
{
    return atomic_load_explicit(&p->state, memory_order_seq_cst) == TW_SHM_PEER_UP;
}

/* One cell with a header and up to two byte ranges. Thread: any. */
static tw_status_t tw_shm_post(tw_shm_iface_t *shm, tw_shm_peer_t *p, uint8_t type, uint8_t am_id,
                               const void *hdr, size_t hdr_len, const void *data, size_t len,
                               uint64_t a0, uint64_t a1, uint64_t a2)
{
    uint64_t pos;
    tw_shm_cell_t *c;

    if (!tw_shm_peer_is_up(p)) {
        return TW_ERR_PEER_FAILED;
    }
    c = tw_shm_claim(p->tx, shm->ncells, &pos);
    if (c == NULL) {
        tw_stats_inc(shm->super.stats, TW_TL_STAT_AGAIN);
        return TW_ERR_AGAIN;
    }
    c->type = type;
    c->am_id = am_id;
    c->hdr_len = (uint16_t)hdr_len;
    c->len = (uint32_t)(hdr_len + len);
    c->a0 = a0;
    c->a1 = a1;
    c->a2 = a2;
    if (hdr_len > 0) {
        memcpy(c->data, hdr, hdr_len);
    }
    if (len > 0) {
        memcpy(c->data + hdr_len, data, len);
    }
    tw_shm_publish(shm, p, c, pos);
    return TW_OK;
}

static tw_status_t tw_shm_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                   size_t hdr_len, const void *data, size_t len)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_peer_t *p = tw_shm_peer(shm, peer);
    tw_status_t st;

    if (p == NULL) {
        return TW_ERR_UNREACHABLE;
    }
    if (hdr_len + len > TW_SHM_CELL_DATA) {
        return TW_ERR_INVALID;
    }
    st = tw_shm_post(shm, p, TW_SHM_EAGER, am_id, hdr, hdr_len, data, len, 0, 0, 0);
    if (st == TW_OK) {
        tw_stats_inc(iface->stats, TW_TL_STAT_TX_MSGS);
        tw_stats_add(iface->stats, TW_TL_STAT_TX_BYTES, len);
    }
    return st;
}

/* ---- rendezvous sends ---------------------------------------------------- */

static uint64_t tw_shm_send_id(uint32_t idx, uint32_t gen)
{
    return (uint64_t)gen << 32 | idx;
}

/* Send @p sid of @p peer; NULL if it is not in the table (completed,
 * failed, or a bogus id). */
/* Caller holds send_lock. */
static tw_shm_send_t *tw_shm_send_find(tw_shm_iface_t *shm, uint64_t sid, int peer)
{
    uint32_t idx = (uint32_t)sid, gen = (uint32_t)(sid >> 32);
    tw_shm_send_t *s;

    if (idx >= TW_SHM_SENDS) {
        return NULL;
    }
    s = &shm->sends[idx];
    if (s->comp == NULL || s->gen != gen || s->peer != peer) {
        return NULL;
    }
    return s;
}

/* Caller holds send_lock. */
static void tw_shm_send_release(tw_shm_iface_t *shm, tw_shm_send_t *s)
{
    s->comp = NULL;
    s->gen++;
    s->next_free = shm->send_free;
    shm->send_free = (uint32_t)(s - shm->sends);
}

/* Complete send @p sid with @p st if it is still in the table. */
static bool tw_shm_send_complete(tw_shm_iface_t *shm, uint64_t sid, int peer, tw_status_t st)
{
    tw_tl_comp_t *comp = NULL;
    tw_shm_send_t *s;

    pthread_mutex_lock(&shm->send_lock);
    s = tw_shm_send_find(shm, sid, peer);
    if (s != NULL) {
        comp = s->comp;
        tw_shm_send_release(shm, s);
    }
    pthread_mutex_unlock(&shm->send_lock);
    if (comp != NULL) {
        comp->cb(comp, st);
    }
    return comp != NULL;
}

static tw_status_t tw_shm_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                   size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_peer_t *p = tw_shm_peer(shm, peer);
    tw_shm_send_t *s;
    uint64_t sid;
    tw_status_t st;

    if (p == NULL) {
        return TW_ERR_UNREACHABLE;
    }
    if (comp == NULL || hdr_len > TW_SHM_CELL_DATA || len > TW_SHM_MAX_MSG) {
        return TW_ERR_INVALID;
    }
    pthread_mutex_lock(&shm->send_lock);
    if (shm->send_free == UINT32_MAX) {
        pthread_mutex_unlock(&shm->send_lock);
        tw_stats_inc(iface->stats, TW_TL_STAT_AGAIN);
        return TW_ERR_AGAIN;
    }
    s = &shm->sends[shm->send_free];
    shm->send_free = s->next_free;
    s->comp = comp;
    s->addr = data;
    s->len = len;
    s->peer = peer;
    sid = tw_shm_send_id((uint32_t)(s - shm->sends), s->gen);
    pthread_mutex_unlock(&shm->send_lock);

    st = tw_shm_post(shm, p, TW_SHM_RTS, am_id, hdr, hdr_len, NULL, 0, (uint64_t)(uintptr_t)data,
                     len, sid);
    if (st != TW_OK) {
        /* Not announced: take it back -- unless a peer failure completed
         * it meanwhile, which then reported it. */
        bool mine = false;
        pthread_mutex_lock(&shm->send_lock);
        s = tw_shm_send_find(shm, sid, peer);
        if (s != NULL) {
            tw_shm_send_release(shm, s);
            mine = true;
        }
        pthread_mutex_unlock(&shm->send_lock);
        return mine ? st : TW_OK;
    }
    tw_stats_inc(iface->stats, TW_TL_STAT_TX_MSGS);
    tw_stats_add(iface->stats, TW_TL_STAT_TX_BYTES, len);
    return TW_OK;
}

/* ---- engine-side outbound work ------------------------------------------ */

static void tw_shm_job_push(tw_shm_iface_t *shm, tw_shm_job_t *j)
{
    j->next = NULL;
    if (shm->jobs_tail == NULL) {
        shm->jobs_head = j;
    } else {
        shm->jobs_tail->next = j;
    }
    shm->jobs_tail = j;
}

/* Queue a control cell (CTS/FIN) or a push; the engine posts it when the
 * ring has room. Thread: engine owner. */
static void tw_shm_job_add(tw_shm_iface_t *shm, int peer, uint8_t type, uint64_t a0, uint64_t a1,
                           uint64_t a2, const void *src, size_t want)
{
    tw_shm_job_t *j;

    if (type != TW_SHM_DATA && shm->jobs_head == NULL) {
        tw_status_t st = tw_shm_post(shm, &shm->peers[peer], type, 0, NULL, 0, NULL, 0, a0, a1, a2);
        if (st != TW_ERR_AGAIN) {
            return; /* posted, or the peer is down (its failure completes it) */
        }
    }
    j = tw_malloc(sizeof(*j));
    if (j == NULL) {
        /* Without it the peer's operation would hang: fail the peer. */
        tw_error("shm", "out of memory queuing a %s to rank %d", tw_shm_type_names[type], peer);
        tw_shm_fail_peer(shm, peer, "out of memory");
        return;
    }
    *j = (tw_shm_job_t){
        .peer = peer, .type = type, .a0 = a0, .a1 = a1, .a2 = a2, .src = src, .want = want};
    tw_shm_job_push(shm, j);
}

/* Post what a job still has to post; true when it is done. */
static bool tw_shm_job_run(tw_shm_iface_t *shm, tw_shm_job_t *j)
{
    tw_shm_peer_t *p = &shm->peers[j->peer];

    if (!tw_shm_peer_is_up(p)) {
        return true; /* the failure completed its operation */
    }
    if (j->type != TW_SHM_DATA) {
        return tw_shm_post(shm, p, j->type, 0, NULL, 0, NULL, 0, j->a0, j->a1, j->a2) !=
               TW_ERR_AGAIN;
    }
    while (j->off < j->want) {
        size_t n = TW_MIN(j->want - j->off, (size_t)TW_SHM_CELL_DATA);
        if (tw_shm_post(shm, p, TW_SHM_DATA, 0, NULL, 0, j->src + j->off, n, j->off, j->a1, 0) !=
            TW_OK) {
            return false;
        }
        j->off += n;
    }
    /* All of it is in the ring: the sender's buffer is free. */
    tw_shm_send_complete(shm, j->a2, j->peer, TW_OK);
    return true;
}

static int tw_shm_jobs_progress(tw_shm_iface_t *shm)
{
    int n = 0;

    while (shm->jobs_head != NULL) {
        tw_shm_job_t *j = shm->jobs_head;
        if (!tw_shm_job_run(shm, j)) {
            /* Ring full: ask the consumer to wake us when it frees cells
             * (we may sleep meanwhile), then look once more -- Dekker
             * again, against its free-then-check. */
            tw_shm_ring_hdr_t *ring = shm->peers[j->peer].tx;
            atomic_store_explicit(&ring->want_wake, 1, memory_order_seq_cst);
            atomic_thread_fence(memory_order_seq_cst);
            if (!tw_shm_job_run(shm, j)) {
                break; /* keep order, try next pass */
            }
        }
        shm->jobs_head = j->next;
        if (shm->jobs_head == NULL) {
            shm->jobs_tail = NULL;
        }
        tw_free(j, sizeof(*j));
        n++;
    }
    return n;
}

/* ---- rendezvous receives ------------------------------------------------- */

static void tw_shm_handle_unlink(tw_tl_rndv_t *h)
{
    h->prev->next = h->next;
    h->next->prev = h->prev;
}

static tw_status_t tw_shm_pull_add(tw_shm_iface_t *shm, int peer, void *dst, size_t want,
                                   tw_tl_comp_t *comp, uint64_t *rid_p)
{
    uint32_t i;

    for (i = 0; i < shm->npulls; i++) {
        if (shm->pulls[i].comp == NULL) {
            break;
        }
    }
    if (i == shm->npulls) {
        uint32_t n = shm->npulls == 0 ? 64 : shm->npulls * 2;
        tw_shm_pull_t *a = tw_calloc(n, sizeof(*a));
        if (a == NULL) {
            return TW_ERR_NOMEM;
        }
        if (shm->npulls > 0) {
            memcpy(a, shm->pulls, shm->npulls * sizeof(*a));
            tw_free(shm->pulls, shm->npulls * sizeof(*a));
        }
        shm->pulls = a;
        shm->npulls = n;
    }
    tw_shm_pull_t *pl = &shm->pulls[i];
    pl->comp = comp;
    pl->dst = dst;
    pl->want = want;
    pl->got = 0;
    pl->peer = peer;
    *rid_p = (uint64_t)pl->gen << 32 | i;
    return TW_OK;
}

static void tw_shm_pull_done(tw_shm_iface_t *shm, tw_shm_pull_t *pl, tw_status_t st)
{
    tw_tl_comp_t *comp = pl->comp;

    pl->comp = NULL;
    pl->gen++;
    comp->cb(comp, st);
    (void)shm;
}

/* One copy with CMA; TW_ERR_UNSUPPORTED when the kernel refuses. */
static tw_status_t tw_shm_cma_read(tw_shm_iface_t *shm, tw_shm_peer_t *p, void *dst, uint64_t raddr,
                                   size_t len)
{
    size_t done = 0;

    if (atomic_load_explicit(&tw_shm_cma_refused_by_test, memory_order_relaxed)) {
        errno = EPERM;
        goto refused;
    }
    while (done < len) {
        struct iovec l = {.iov_base = (char *)dst + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = len - done};
        ssize_t n = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EPERM || errno == ENOSYS)) {
            goto refused;
        }
        if (n < 0 && errno == ESRCH) {
            return TW_ERR_PEER_FAILED;
        }
        /* EFAULT or no progress: the announced range is not readable. */
        tw_error("shm", "rank %d announced %zu bytes at 0x%llx that cannot be read (%s)", p->rank,
                 len, (unsigned long long)raddr, n < 0 ? strerror(errno) : "short read");
        return TW_ERR_PROTOCOL;
    }
    return TW_OK;

refused:
    if (!atomic_exchange(&shm->cma_off, true)) {
        tw_warn("shm",
                "process_vm_readv refused (%s): large messages are copied through the rings "
                "from now on (check /proc/sys/kernel/yama/ptrace_scope, or set TW_SHM_CMA=0)",
                strerror(errno));
    }
    return TW_ERR_UNSUPPORTED;
}

static tw_status_t tw_shm_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *h, void *dst, size_t len,
                                   tw_tl_comp_t *comp)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_peer_t *p = &shm->peers[h->peer];
    tw_status_t st = TW_OK;
    uint64_t rid;

    tw_shm_handle_unlink(h);
    if (len > h->len) {
        len = h->len;
    }
    if (!tw_shm_peer_is_up(p)) {
        st = TW_ERR_PEER_FAILED;
        goto out;
    }
    if (len > 0 && !atomic_load_explicit(&shm->cma_off, memory_order_relaxed)) {
        st = tw_shm_cma_read(shm, p, dst, h->raddr, len);
        if (st == TW_OK) {
            tw_shm_job_add(shm, h->peer, TW_SHM_FIN, 0, 0, h->sid, NULL, 0);
            tw_stats_add(iface->stats, TW_TL_STAT_RX_BYTES, len);
            goto out;
        }
        if (st != TW_ERR_UNSUPPORTED) {
            tw_shm_fail_peer(shm, h->peer, "rendezvous read failed");
            st = TW_ERR_PEER_FAILED;
            goto out;
        }
    }
    if (len == 0) {
        /* Release the sender without data. */
        tw_shm_job_add(shm, h->peer, TW_SHM_FIN, 0, 0, h->sid, NULL, 0);
        st = TW_OK;
        goto out;
    }
    st = tw_shm_pull_add(shm, h->peer, dst, len, comp, &rid);
    if (st != TW_OK) {
        tw_shm_job_add(shm, h->peer, TW_SHM_FIN, 1, 0, h->sid, NULL, 0);
        goto out;
    }
    tw_shm_job_add(shm, h->peer, TW_SHM_CTS, len, rid, h->sid, NULL, 0);
    tw_stats_add(iface->stats, TW_TL_STAT_RX_BYTES, len);
    tw_free(h, sizeof(*h));
    return TW_OK; /* completes when the last DATA cell arrived */

out:
    tw_free(h, sizeof(*h));
    comp->cb(comp, st);
    return TW_OK;
}

/* ---- failure --------------------------------------------------------------- */

static void tw_shm_fail_peer(tw_shm_iface_t *shm, int peer, const char *why)
{
    tw_shm_peer_t *p = &shm->peers[peer];
    bool clean = strcmp(why, "left") == 0;
    unsigned expected = TW_SHM_PEER_UP;

    if (shm->in_poll) {
        /* A worker's poll found it: failing calls the error handler, which
         * runs on the engine only. Leave it to the engine, now. */
        if (p->fail_pending == NULL) {
            p->fail_pending = why;
            shm->nfail_pending++;
        }
        tw_pe_wake(shm->super.pe);
        return;
    }

    if (!atomic_compare_exchange_strong(&p->state, &expected,
                                        clean ? TW_SHM_PEER_LEFT : TW_SHM_PEER_FAILED)) {
        return; /* already down */
    }
    shm->npeers_up--;
    if (clean) {
        tw_debug("shm", "rank %d (pid %d) left the job", p->rank, (int)p->pid);
    } else {
        tw_error("shm",
                 "rank %d (pid %d) failed: %s; its operations complete with "
                 "TW_ERR_PEER_FAILED",
                 p->rank, (int)p->pid, why);
    }
    if (p->pidfd >= 0) {
        tw_pe_unwatch(shm->super.pe, p->pidfd);
    }
    /* Sends waiting for it. */
    for (;;) {
        tw_tl_comp_t *comp = NULL;
        pthread_mutex_lock(&shm->send_lock);
        for (uint32_t i = 0; i < TW_SHM_SENDS && comp == NULL; i++) {
            tw_shm_send_t *s = &shm->sends[i];
            if (s->comp != NULL && s->peer == peer) {
                comp = s->comp;
                tw_shm_send_release(shm, s);
            }
        }
        pthread_mutex_unlock(&shm->send_lock);
        if (comp == NULL) {
            break;
        }
        comp->cb(comp, TW_ERR_PEER_FAILED);
    }
    /* Pulls from it. */
    for (uint32_t i = 0; i < shm->npulls; i++) {
        if (shm->pulls[i].comp != NULL && shm->pulls[i].peer == peer) {
            tw_shm_pull_done(shm, &shm->pulls[i], TW_ERR_PEER_FAILED);
        }
    }
    /* Queued jobs for it are dropped by tw_shm_job_run. */
    if (shm->super.peer_down != NULL) {
        shm->super.peer_down(shm->super.peer_down_arg, peer, clean ? TW_OK : TW_ERR_PEER_FAILED);
    }
}

static int tw_shm_rx_peer(tw_shm_iface_t *shm, tw_shm_peer_t *p, bool inline_only);

/* Is the peer still there? Thread: engine owner. */
static void tw_shm_check_peers(tw_shm_iface_t *shm)
{
    for (int r = 0; r < shm->super.size; r++) {
        tw_shm_peer_t *p = &shm->peers[r];
        bool dead;

        if (!p->attached || !tw_shm_peer_is_up(p)) {
            continue;
        }
        if (p->pidfd >= 0) {
            struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
            dead = poll(&pfd, 1, 0) > 0;
        } else {
            dead = kill(p->pid, 0) != 0 && errno == ESRCH;
        }
        if (dead) {
            /* What it published before it went is still good. */
            for (unsigned k = 0; k <= shm->ncells / TW_SHM_BUDGET; k++) {
                if (tw_shm_rx_peer(shm, p, false) == 0) {
                    break;
                }
            }
            if (!tw_shm_peer_is_up(p)) {
                continue;
            }
            bool left =
                atomic_load_explicit(p->tx_state, memory_order_acquire) == TW_SHM_SEG_CLOSED;
            tw_shm_fail_peer(shm, r, left ? "left" : "the process died");
        }
    }
}

/* ---- consuming ------------------------------------------------------------- */

static void tw_shm_rx_data(tw_shm_iface_t *shm, int src, uint64_t rid, uint64_t off,
                           const unsigned char *data, size_t len, bool *bad)
{
    uint32_t idx = (uint32_t)rid, gen = (uint32_t)(rid >> 32);
    tw_shm_pull_t *pl;

    if (idx >= shm->npulls || (pl = &shm->pulls[idx])->comp == NULL || pl->gen != gen ||
        pl->peer != src || off != pl->got || len > pl->want - pl->got) {
        *bad = true;
        return;
    }
    memcpy(pl->dst + pl->got, data, len);
    pl->got += len;
    if (pl->got == pl->want) {
        tw_shm_pull_done(shm, pl, TW_OK);
    }
}

enum { TW_SHM_RX_BAD, TW_SHM_RX_DONE, TW_SHM_RX_STOP };

/* Handle one published cell: DONE, BAD (corrupt: the caller fails the
 * peer), or STOP (@p inline_only and the cell must go to the engine: an
 * arrival whose am id runs user code). */
static int tw_shm_rx_cell(tw_shm_iface_t *shm, tw_shm_peer_t *p, const tw_shm_cell_t *c,
                          bool inline_only)
{
    /* Read every field once: the peer may still scribble on it. */
    uint8_t type = c->type, am_id = c->am_id;
    size_t hdr_len = c->hdr_len, len = c->len;
    uint64_t a0 = c->a0, a1 = c->a1, a2 = c->a2;
    bool bad = false;

    if (type == 0 || type >= TW_SHM_TYPE_MAX || len > TW_SHM_CELL_DATA || hdr_len > len) {
        return TW_SHM_RX_BAD;
    }
    if (inline_only && (type == TW_SHM_EAGER || type == TW_SHM_RTS) &&
        (am_id >= 64 || (shm->super.inline_am_ids & (1ull << am_id)) == 0)) {
        return TW_SHM_RX_STOP;
    }
    switch (type) {
    case TW_SHM_EAGER:
        tw_stats_inc(shm->super.stats, TW_TL_STAT_RX_MSGS);
        tw_stats_add(shm->super.stats, TW_TL_STAT_RX_BYTES, len - hdr_len);
        shm->super.recv(shm->super.recv_arg, p->rank, am_id, c->data, hdr_len, c->data + hdr_len,
                        len - hdr_len);
        return TW_SHM_RX_DONE;
    case TW_SHM_RTS: {
        tw_tl_rndv_t *h;
        if (hdr_len != len || a1 > TW_SHM_MAX_MSG) {
            return TW_SHM_RX_BAD;
        }
        h = tw_malloc(sizeof(*h));
        if (h == NULL) {
            tw_error("shm", "out of memory taking a rendezvous from rank %d", p->rank);
            return TW_SHM_RX_BAD;
        }
        *h = (tw_tl_rndv_t){.peer = p->rank, .raddr = a0, .len = a1, .sid = a2};
        h->next = shm->handles.next;
        h->prev = &shm->handles;
        h->next->prev = h;
        shm->handles.next = h;
        tw_stats_inc(shm->super.stats, TW_TL_STAT_RX_MSGS);
        shm->super.recv_rndv(shm->super.recv_arg, p->rank, am_id, c->data, hdr_len, a1, h);
        return TW_SHM_RX_DONE;
    }
    case TW_SHM_FIN:
        if (len != 0) {
            return TW_SHM_RX_BAD;
        }
        /* a0 != 0: the receiver could not take it. */
        return tw_shm_send_complete(shm, a2, p->rank, a0 == 0 ? TW_OK : TW_ERR_NOMEM)
                   ? TW_SHM_RX_DONE
                   : TW_SHM_RX_BAD;
    case TW_SHM_CTS: {
        tw_shm_send_t *s;
        const void *addr = NULL;
        bool ok;
        if (len != 0) {
            return TW_SHM_RX_BAD;
        }
        pthread_mutex_lock(&shm->send_lock);
        s = tw_shm_send_find(shm, a2, p->rank);
        ok = s != NULL && a0 <= s->len;
        if (ok) {
            addr = s->addr;
        }
        pthread_mutex_unlock(&shm->send_lock);
        if (!ok) {
            return TW_SHM_RX_BAD;
        }
        tw_shm_job_add(shm, p->rank, TW_SHM_DATA, 0, a1, a2, addr, a0);
        return TW_SHM_RX_DONE;
    }
    case TW_SHM_DATA:
        if (hdr_len != 0) {
            return TW_SHM_RX_BAD;
        }
        tw_shm_rx_data(shm, p->rank, a1, a0, c->data, len, &bad);
        return bad ? TW_SHM_RX_BAD : TW_SHM_RX_DONE;
    default:
        return TW_SHM_RX_BAD;
    }
}

static int tw_shm_rx_peer(tw_shm_iface_t *shm, tw_shm_peer_t *p, bool inline_only)
{
    int n = 0;

    while (n < TW_SHM_BUDGET && tw_shm_peer_is_up(p) && p->fail_pending == NULL) {
        uint64_t head = p->rx_head;
        tw_shm_cell_t *c = tw_shm_cell(p->rx, shm->ncells, head);
        uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);

        if (seq == head) {
            break; /* not published yet */
        }
        if (seq != head + 1) {
            tw_shm_fail_peer(shm, p->rank, "corrupt ring (sequence word)");
            break;
        }
        int rc = tw_shm_rx_cell(shm, p, c, inline_only);
        if (rc == TW_SHM_RX_STOP) {
            break; /* the engine takes it, in order */
        }
        if (rc == TW_SHM_RX_BAD) {
            tw_shm_fail_peer(shm, p->rank, "corrupt or unexpected ring cell");
            break;
        }
        atomic_store_explicit(&c->seq, head + shm->ncells, memory_order_release);
        p->rx_head = head + 1;
        n++;
    }
    if (n > 0) {
        /* Freed cells: wake a producer engine that waits for room. */
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&p->rx->want_wake, memory_order_relaxed) != 0 &&
            atomic_exchange_explicit(&p->rx->want_wake, 0, memory_order_relaxed) != 0) {
            tw_shm_kick(shm, p);
        }
    }
    return n;
}

/* Every live peer's ring, then the queued outbound work. */
static int tw_shm_rx_all(tw_shm_iface_t *shm, bool inline_only)
{
    int n = 0;

    for (int r = 0; r < shm->super.size; r++) {
        tw_shm_peer_t *p = &shm->peers[r];
        if (p->attached && tw_shm_peer_is_up(p)) {
            n += tw_shm_rx_peer(shm, p, inline_only);
        }
    }
    return n + tw_shm_jobs_progress(shm);
}

static int tw_shm_progress(tw_tl_iface_t *iface)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    uint64_t w = tw_pe_wakeups(iface->pe);
    int n;

    if (shm->npeers_up == 0 && shm->jobs_head == NULL) {
        return 0;
    }
    if (shm->nfail_pending > 0) {
        for (int r = 0; r < iface->size; r++) {
            const char *why = shm->peers[r].fail_pending;
            if (why != NULL) {
                shm->peers[r].fail_pending = NULL;
                shm->nfail_pending--;
                tw_shm_fail_peer(shm, r, why);
            }
        }
    }
    n = tw_shm_rx_all(shm, false);
    if (w != shm->seen_wakeups) {
        char buf[64];
        shm->seen_wakeups = w;
        while (recv(shm->wake_fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
        }
        shm->next_check_ns = 0;
    }
    uint64_t now = tw_time_coarse_ns(); /* every pass: the cheap clock */
    if (now >= shm->next_check_ns) {
        shm->next_check_ns = now + TW_SHM_CHECK_NS;
        tw_shm_check_peers(shm);
    }
    return n;
}

/* A waiting worker's share: tagged arrivals and what goes with them. */
/* Thread: holder of the engine's lock (tw_shm_poll). */
static int tw_shm_poll_locked(void *arg)
{
    tw_shm_iface_t *shm = arg;
    int n;

    if (shm->npeers_up == 0 && shm->jobs_head == NULL) {
        return 0;
    }
    shm->in_poll = true;
    n = tw_shm_rx_all(shm, true);
    shm->in_poll = false;
    return n;
}

static int tw_shm_poll(tw_tl_iface_t *iface)
{
    return tw_pe_try_call(iface->pe, tw_shm_poll_locked, iface);
}

/* ---- setup --------------------------------------------------------------- */

static void tw_shm_read_node_id(char *buf, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

    snprintf(buf, len, "unknown");
    if (f != NULL) {
        if (fgets(buf, (int)len, f) != NULL) {
            buf[strcspn(buf, "\n")] = '\0';
        }
        fclose(f);
    }
}

static tw_status_t tw_shm_query(char *why, size_t why_len)
{
    if (access("/dev/shm", W_OK) != 0) {
        snprintf(why, why_len, "/dev/shm is not writable: %s", strerror(errno));
        return TW_ERR_UNSUPPORTED;
    }
    return TW_OK;
}

/* The abstract socket "threadwire-<job key CRC>-<pid>" that wakes a rank. */
static void tw_shm_wake_name(const tw_shm_iface_t *shm, pid_t pid, struct sockaddr_un *a,
                             socklen_t *len)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    /* Abstract name: sun_path[0] = '\0'. */
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "threadwire-%08x-%d", shm->key_crc,
                     (int)pid);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static tw_status_t tw_shm_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
static void tw_shm_iface_close(tw_tl_iface_t *iface);
static tw_status_t tw_shm_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p);
static tw_status_t tw_shm_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr,
                                       size_t len);
static void tw_shm_ready(tw_tl_iface_t *iface);

static bool tw_shm_reachable(tw_tl_iface_t *iface, int peer)
{
    return tw_shm_peer((tw_shm_iface_t *)iface, peer) != NULL;
}

const tw_tl_ops_t tw_shm_ops = {
    .name = "shm",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_RNDV | TW_TL_CAP_POLL,
    .cfg = &tw_shm_cfg_table,
    .query = tw_shm_query,
    .iface_open = tw_shm_iface_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = tw_shm_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_shm_addr_pack,
    .addr_connect = tw_shm_addr_connect,
    .ready = tw_shm_ready,
    .quiesce = tw_tl_noop_quiesce,
    .reachable = tw_shm_reachable,
    .am_short = tw_shm_am_short,
    .am_zcopy = tw_shm_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_shm_rndv_get,
    .progress = tw_shm_progress,
    .poll = tw_shm_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

static tw_status_t tw_shm_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    const tw_tl_attr_t attr = {
        .max_short = TW_SHM_CELL_DATA,
        .max_hdr = TW_SHM_CELL_DATA,
        .max_zcopy = TW_SHM_MAX_MSG,
    };
    tw_shm_iface_t *shm;
    struct sockaddr_un a;
    socklen_t alen;
    char name[TW_SEG_NAME_MAX];
    tw_status_t st;

    if (params->local_size < 1 || params->local_rank < 0 ||
        params->local_rank >= params->local_size || params->recv_rndv == NULL) {
        return TW_ERR_INVALID;
    }
    shm = tw_calloc(1, sizeof(*shm));
    if (shm == NULL) {
        return TW_ERR_NOMEM;
    }
    shm->wake_fd = -1;
    shm->seg.fd = -1;
    st = tw_tl_iface_init(&shm->super, &tw_shm_ops, params, &attr);
    if (st != TW_OK) {
        tw_free(shm, sizeof(*shm));
        return st;
    }
    pthread_mutex_init(&shm->send_lock, NULL);
    shm->handles.next = shm->handles.prev = &shm->handles;
    tw_cfg_set_defaults(&tw_shm_cfg_table, &shm->cfg);
    if (tw_cfg_apply_env(&tw_shm_cfg_table, &shm->cfg) != TW_OK) {
        st = TW_ERR_INVALID;
        goto err;
    }
    if ((shm->cfg.cells & (shm->cfg.cells - 1)) != 0) {
        tw_error("shm", "TW_SHM_CELLS=%llu is not a power of two",
                 (unsigned long long)shm->cfg.cells);
        st = TW_ERR_INVALID;
        goto err;
    }
    atomic_init(&shm->cma_off, !shm->cfg.cma);
    shm->ncells = (unsigned)shm->cfg.cells;
    shm->nlocal = (unsigned)params->local_size;
    shm->local_rank = (unsigned)params->local_rank;
    shm->ring_stride = tw_shm_ring_stride(shm->ncells);
    shm->key_crc = tw_crc32c(0, params->job_key, strlen(params->job_key));
    tw_shm_read_node_id(shm->node, sizeof(shm->node));

    shm->sends = tw_calloc(TW_SHM_SENDS, sizeof(*shm->sends));
    shm->peers = tw_calloc((size_t)params->size, sizeof(*shm->peers));
    if (shm->sends == NULL || shm->peers == NULL) {
        st = TW_ERR_NOMEM;
        goto err;
    }
    for (uint32_t i = 0; i < TW_SHM_SENDS; i++) {
        shm->sends[i].next_free = i + 1 < TW_SHM_SENDS ? i + 1 : UINT32_MAX;
    }
    shm->send_free = 0;
    for (int r = 0; r < params->size; r++) {
        shm->peers[r].pidfd = -1;
        shm->peers[r].seg.fd = -1;
        atomic_init(&shm->peers[r].state, TW_SHM_PEER_UP);
    }

    /* Our segment, with our inbound rings. */
    st = tw_seg_make_name(params->job_key, name, sizeof(name));
    if (st == TW_OK) {
        st = tw_seg_create(name, tw_shm_seg_size(shm->nlocal, shm->ncells), &shm->seg);
    }
    if (st != TW_OK) {
        goto err;
    }
    shm->hdr = shm->seg.base;
    shm->hdr->magic = TW_SHM_MAGIC;
    shm->hdr->version = TW_SHM_VERSION;
    shm->hdr->nlocal = shm->nlocal;
    shm->hdr->ncells = shm->ncells;
    shm->hdr->cell_size = TW_SHM_CELL_SIZE;
    shm->hdr->owner_local = shm->local_rank;
    shm->hdr->owner_pid = (uint32_t)getpid();
    shm->hdr->key_crc = shm->key_crc;
    atomic_init(&shm->hdr->state, TW_SHM_SEG_LIVE);
    atomic_init(&shm->hdr->sleeping, 0);
    for (unsigned from = 0; from < shm->nlocal; from++) {
        if (from != shm->local_rank) {
            tw_shm_ring_init(tw_shm_ring(shm->seg.base, shm->ncells, from, shm->local_rank),
                             shm->ncells);
        }
    }

    /* Wake-up socket. */
    shm->wake_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (shm->wake_fd < 0) {
        tw_error("shm", "socket(AF_UNIX, SOCK_DGRAM) failed: %m");
        st = TW_ERR_TRANSPORT;
        goto err;
    }
    tw_shm_wake_name(shm, getpid(), &a, &alen);
    if (bind(shm->wake_fd, (struct sockaddr *)&a, alen) != 0) {
        tw_error("shm", "cannot bind the wake-up socket @%s: %m", a.sun_path + 1);
        st = TW_ERR_TRANSPORT;
        goto err;
    }
    st = tw_pe_add_sleep_word(params->pe, &shm->hdr->sleeping);
    if (st == TW_OK) {
        st = tw_pe_watch(params->pe, shm->wake_fd);
    }
    if (st != TW_OK) {
        goto err;
    }
    *iface_p = &shm->super;
    return TW_OK;

err:
    tw_shm_iface_close(&shm->super);
    return st;
}

static tw_status_t tw_shm_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_addr_t a = {.magic = (uint32_t)TW_SHM_MAGIC,
                       .local_rank = shm->local_rank,
                       .pid = (uint32_t)getpid(),
                       .ncells = shm->ncells};

    if (cap < sizeof(a)) {
        return TW_ERR_INVALID;
    }
    snprintf(a.seg, sizeof(a.seg), "%s", shm->seg.name);
    snprintf(a.node, sizeof(a.node), "%s", shm->node);
    memcpy(buf, &a, sizeof(a));
    *len_p = sizeof(a);
    return TW_OK;
}

static tw_status_t tw_shm_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr, size_t len)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_peer_t *p = &shm->peers[peer];
    tw_shm_seg_hdr_t *h;
    tw_shm_addr_t a;
    tw_status_t st;

    if (len != sizeof(a)) {
        tw_error("shm", "rank %d published a %zu-byte shm address (want %zu)", peer, len,
                 sizeof(a));
        return TW_ERR_PROTOCOL;
    }
    memcpy(&a, addr, sizeof(a));
    a.seg[sizeof(a.seg) - 1] = '\0';
    a.node[sizeof(a.node) - 1] = '\0';
    if (a.magic != (uint32_t)TW_SHM_MAGIC || strcmp(a.node, shm->node) != 0) {
        return TW_OK; /* another node: not ours to reach */
    }
    if (a.local_rank >= shm->nlocal || a.local_rank == shm->local_rank || a.ncells != shm->ncells) {
        tw_error("shm",
                 "rank %d: local rank %u of %u, %u cells per ring (we are local rank %u, %u "
                 "cells): set TW_SHM_CELLS alike on every rank",
                 peer, a.local_rank, shm->nlocal, a.ncells, shm->local_rank, shm->ncells);
        return TW_ERR_PROTOCOL;
    }
    st = tw_seg_attach(a.seg, tw_shm_seg_size(shm->nlocal, shm->ncells), &p->seg);
    if (st != TW_OK) {
        return st;
    }
    h = p->seg.base;
    if (h->magic != TW_SHM_MAGIC || h->version != TW_SHM_VERSION || h->nlocal != shm->nlocal ||
        h->ncells != shm->ncells || h->cell_size != TW_SHM_CELL_SIZE ||
        h->owner_local != a.local_rank || h->owner_pid != a.pid || h->key_crc != shm->key_crc) {
        tw_error("shm", "segment %s of rank %d does not match its address (layout or job)", a.seg,
                 peer);
        tw_seg_detach(&p->seg);
        return TW_ERR_PROTOCOL;
    }
    p->rank = peer;
    p->local = (int)a.local_rank;
    p->pid = (pid_t)a.pid;
    p->tx = tw_shm_ring(p->seg.base, shm->ncells, shm->local_rank, a.local_rank);
    p->tx_sleeping = &h->sleeping;
    p->tx_state = &h->state;
    p->rx = tw_shm_ring(shm->seg.base, shm->ncells, a.local_rank, shm->local_rank);
    p->rx_head = 0;
    tw_shm_wake_name(shm, p->pid, &p->wake_addr, &p->wake_len);
    p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    if (p->pidfd < 0) {
        tw_debug("shm", "pidfd_open(%d) failed (%m): polling kill(pid, 0) instead", (int)p->pid);
        p->pidfd = -1;
    } else if (tw_pe_watch(iface->pe, p->pidfd) != TW_OK) {
        close(p->pidfd);
        p->pidfd = -1;
    }
    p->attached = true;
    shm->npeers_up++;
    return TW_OK;
}

static void tw_shm_ready(tw_tl_iface_t *iface)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;

    /* Everyone attached (the caller fenced): the name can go. */
    (void)tw_seg_unlink(&shm->seg);
    shm->seg.creator = false;
}

static void tw_shm_iface_close(tw_tl_iface_t *iface)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;

    if (shm->hdr != NULL) {
        /* Peers that see us exit now know it was on purpose. */
        atomic_store_explicit(&shm->hdr->state, TW_SHM_SEG_CLOSED, memory_order_release);
    }
    /* Whatever is still in flight is canceled. */
    if (shm->sends != NULL) {
        for (uint32_t i = 0; i < TW_SHM_SENDS; i++) {
            tw_shm_send_t *s = &shm->sends[i];
            if (s->comp != NULL) {
                tw_tl_comp_t *comp = s->comp;
                s->comp = NULL;
                comp->cb(comp, TW_ERR_CANCELED);
            }
        }
    }
    for (uint32_t i = 0; i < shm->npulls; i++) {
        if (shm->pulls[i].comp != NULL) {
            tw_shm_pull_done(shm, &shm->pulls[i], TW_ERR_CANCELED);
        }
    }
    while (shm->handles.next != NULL && shm->handles.next != &shm->handles) {
        tw_tl_rndv_t *h = shm->handles.next;
        tw_shm_handle_unlink(h);
        tw_free(h, sizeof(*h));
    }
    while (shm->jobs_head != NULL) {
        tw_shm_job_t *j = shm->jobs_head;
        shm->jobs_head = j->next;
        tw_free(j, sizeof(*j));
    }
    if (shm->peers != NULL) {
        for (int r = 0; r < iface->size; r++) {
            tw_shm_peer_t *p = &shm->peers[r];
            if (p->pidfd >= 0) {
                close(p->pidfd);
            }
            if (p->attached) {
                tw_seg_detach(&p->seg);
            }
        }
        tw_free(shm->peers, (size_t)iface->size * sizeof(*shm->peers));
    }
    if (shm->pulls != NULL) {
        tw_free(shm->pulls, shm->npulls * sizeof(*shm->pulls));
    }
    if (shm->sends != NULL) {
        tw_free(shm->sends, TW_SHM_SENDS * sizeof(*shm->sends));
    }
    if (shm->wake_fd >= 0) {
        close(shm->wake_fd);
    }
    if (shm->seg.base != NULL) {
        if (shm->seg.creator) {
            (void)tw_seg_unlink(&shm->seg); /* if ready never ran */
        }
        tw_seg_detach(&shm->seg);
    }
    pthread_mutex_destroy(&shm->send_lock);
    tw_tl_iface_cleanup(iface);
    tw_free(shm, sizeof(*shm));
}

/* ---- test hooks -------------------------------------------------------- */

bool tw_shm_test_cma_off(tw_tl_iface_t *iface)
{
    return atomic_load(&((tw_shm_iface_t *)iface)->cma_off);
}

unsigned tw_shm_test_chaos(tw_tl_iface_t *iface, int peer, uint64_t seed)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_peer_t *p = tw_shm_peer(shm, peer);
    uint64_t x = seed | 1;
    unsigned n = 0;

    if (p == NULL) {
        return 0;
    }
    /* Scribble on our ring in the peer's segment: its tail, sequence
     * words and cell headers. The peer must fail us and nothing else. */
    for (unsigned i = 0; i < 8; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned what = i == 0 ? 4 : (unsigned)(x % 5);
        tw_shm_cell_t *c = tw_shm_cell(p->tx, shm->ncells, x >> 8);
        uint64_t pos;
        switch (what) {
        case 4:
            /* A properly published cell full of nonsense. */
            c = tw_shm_claim(p->tx, shm->ncells, &pos);
            if (c != NULL) {
                c->type = (uint8_t)(x >> 5);
                c->am_id = (uint8_t)(x >> 13);
                c->hdr_len = (uint16_t)(x >> 21);
                c->len = (uint32_t)(x >> 29);
                c->a0 = x * 5, c->a1 = x * 11, c->a2 = x * 13;
                atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
            }
            break;
        case 0:
            atomic_store(&p->tx->tail, x);
            break;
        case 1:
            atomic_store_explicit(&c->seq, x >> 3, memory_order_release);
            break;
        case 2:
            memcpy((unsigned char *)c + 8, &x, sizeof(x));
            break;
        default:
            c->a0 = x, c->a1 = x * 3, c->a2 = x * 7, c->len = (uint32_t)x;
            c->hdr_len = (uint16_t)(x >> 16);
            c->type = (uint8_t)(x >> 24);
            /* Publish it as if it were the next cell. */
            atomic_store_explicit(&c->seq, (x >> 8) + 1, memory_order_release);
            break;
        }
        n++;
    }
    return n;
}
