/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * One-sided operations: tw_put, tw_get, tw_flush, and the regions they
 * address.
 *
 * Regions. tw_mem_register gives a region an id (a counter) and a key (64
 * random bits), records its bounds in a registry (a hash of ids under a
 * rwlock), and registers it with every transport that does RDMA itself
 * (verbs, when reliability is off): each hands back a transport key. The
 * packed remote key (tw_mr_pack; layout in tw_rma_proto.h) carries the
 * owner's rank, id, key and bounds, then one section per transport key,
 * named by the transport.
 *
 * Two ways to move the bytes, chosen per operation:
 *   - direct: the route to the peer is a transport with TW_TL_CAP_PUT /
 *     GET and the remote key has a section of that transport: put_zcopy /
 *     get_zcopy (RDMA write / read). The transport's completion is the
 *     operation's: an RC write completes once the responder acknowledged
 *     it, so the bytes are in place;
 *   - emulated, over active messages of the messaging layer's am id
 *     TW_MSG_AM_RMA (wire format in tw_rma_proto.h) on any route, shm,
 *     tcp, self or reliability's: the target's engine looks the region up,
 *     checks key and bounds, copies (or pulls a large put straight into
 *     the region by rendezvous; answers a large get with a zero-copy send
 *     of the region's bytes) and answers. A put completes when its ack
 *     arrives, a get when its bytes landed. Requests and replies carry a
 *     cookie: a slot index and its generation in a table of waiting
 *     operations, so a stale, duplicated or forged reply finds nothing and
 *     is dropped.
 * Either way a put completes when its bytes are visible at the target,
 * so tw_flush waits for the puts to that peer posted before it: every
 * put takes a sequence number from its peer and joins the peer's list in
 * that order; a flush records the next number and completes once no put
 * below it is left (at once when the list is empty).
 *
 * Replies come from the target's engine, which must not wait for a busy
 * transport: a reply refused with TW_ERR_AGAIN is kept on a list that a
 * progress function of engine 0 retries (a get is served again from the
 * region then, since it may have been deregistered meanwhile).
 *
 * Failures. A peer that goes down fails its waiting emulated operations
 * (TW_ERR_PEER_FAILED) from the sweep in tw_rma_peer_down; direct ones
 * and rendezvous pulls are completed by their transport. Posting and the
 * sweep race safely: a post enters its slot, then looks at the down flag
 * (the sweep sets the flag, then looks at the slots); whoever takes the
 * slot out owns the completion. A region's rendezvous pulls and zero-copy
 * replies in flight are counted; deregistration unpublishes the region
 * first, waits for the count to drain, then releases the transport keys.
 * A request naming a region that is gone, with a wrong key or out of its
 * bounds, is refused with TW_ERR_INVALID (logged at both ends); a direct
 * RDMA access to a deregistered region is refused by the device, which
 * fails the connection (that is verbs).
 *
 * Locks: the registry rwlock (readers: engines serving requests, holding
 * it across the copy; writers: register, deregister), the slot table
 * mutex, one mutex per peer for its put list and flushes, the deferred
 * reply list's mutex. None is held while a completion is pushed or a
 * transport is called, except the registry's read lock across a send
 * that copies the region's bytes (am_short).
 */
#include "msg/tw_rma.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/random.h>

#include "core/tw_atomic.h"
#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "msg/tw_msg_proto.h"
#include "msg/tw_rma_proto.h"
#include "progress/tw_cq.h"

#define TW_RMA_MAX_REG   TW_RMA_RKEY_SECT_MAX /* transports that register memory */
#define TW_RMA_BUCKETS   256                  /* registry hash */
#define TW_RMA_SLOTS_MAX (1u << 24)
#define TW_MR_MAGIC      0x746d7231u
#define TW_RMA_NONE      UINT32_MAX

typedef struct tw_rma_tlkey {
    tw_tl_iface_t *iface;
    void *handle;
    uint8_t len;
    uint8_t bytes[TW_TL_KEY_MAX];
} tw_rma_tlkey_t;

/* The public tw_mr_t. */
struct tw_mr {
    uint32_t magic;
    atomic_bool dead; /* released at finalize: only the handle is left */
    tw_rma_t *rma;
    tw_mr_t *next; /* registry chain */
    uint64_t id;
    uint64_t key;
    uintptr_t base;
    size_t len;
    atomic_uint inflight; /* pulls into it and zero-copy replies from it */
    unsigned ntl;
    tw_rma_tlkey_t tl[TW_RMA_MAX_REG];
};

typedef struct tw_rma_op tw_rma_op_t;
struct tw_rma_op {
    tw_tl_comp_t comp; /* first: transports hand it back */
    tw_rma_t *rma;
    tw_rma_op_t *prev, *next; /* the peer's put list */
    tw_rma_op_t *swept;       /* the peer-down sweep's list */
    tw_cq_t *cq;
    void *user;
    void *dst; /* get */
    size_t len;
    uint64_t seq;
    uint64_t cookie; /* emulated: its slot */
    int peer;
    tw_op_t op;
    bool listed;
    atomic_int refs;   /* events still to come, + 1 while posting */
    atomic_int status; /* first error wins */
};

typedef struct tw_rma_flush_req tw_rma_flush_req_t;
struct tw_rma_flush_req {
    tw_rma_flush_req_t *next;
    tw_cq_t *cq;
    void *user;
    uint64_t upto; /* waits for every put numbered below */
};

typedef struct tw_rma_peer {
    pthread_mutex_t lock;
    uint64_t next_seq;
    tw_rma_op_t *head, *tail; /* puts not complete, in order */
    tw_rma_flush_req_t *fhead, *ftail;
} tw_rma_peer_t;

typedef struct tw_rma_defer tw_rma_defer_t;
struct tw_rma_defer {
    tw_rma_defer_t *next;
    int src;
    tw_rma_hdr_t h; /* the ack to send, or the get to serve */
};

/* A rendezvous pull of a large put into a region (target side), or a
 * zero-copy reply out of one. */
typedef struct tw_rma_xfer {
    tw_tl_comp_t comp; /* first */
    tw_rma_t *rma;
    tw_mr_t *mr;
    uint64_t cookie;
    int src;
} tw_rma_xfer_t;

struct tw_rma {
    int rank;
    int size;
    tw_tl_iface_t *const *route;
    const atomic_uchar *down;
    size_t eager_limit;
    tw_stats_t *stats;
    tw_rma_peer_t *peers;
    unsigned nreg;
    tw_tl_iface_t *reg[TW_RMA_MAX_REG]; /* transports that register memory */
    pthread_rwlock_t reg_lock;
    tw_mr_t *buckets[TW_RMA_BUCKETS];
    atomic_uint_fast64_t next_id;
    pthread_mutex_t slot_lock;
    tw_rma_op_t **slots;
    uint32_t *slot_gen;
    uint32_t *slot_next;
    uint32_t nslots;
    uint32_t free_head;
    pthread_mutex_t defer_lock;
    tw_rma_defer_t *dhead, *dtail;
    atomic_uint ndefer;
    atomic_uint_fast64_t drop_logged;
    atomic_uint_fast64_t refused_logged;
    atomic_uint_fast64_t failed_logged;
    int (*progress)(void *); /* manual mode: drives the context */
    void *progress_arg;
};

static const tw_stat_desc_t tw_rma_stat_descs[TW_RMA_STAT_COUNT] = {
    [TW_RMA_STAT_PUTS] = {"puts", TW_STAT_COUNTER},
    [TW_RMA_STAT_PUT_BYTES] = {"put_bytes", TW_STAT_COUNTER},
    [TW_RMA_STAT_GETS] = {"gets", TW_STAT_COUNTER},
    [TW_RMA_STAT_GET_BYTES] = {"get_bytes", TW_STAT_COUNTER},
    [TW_RMA_STAT_FLUSHES] = {"flushes", TW_STAT_COUNTER},
    [TW_RMA_STAT_DIRECT] = {"direct", TW_STAT_COUNTER},
    [TW_RMA_STAT_SERVED] = {"served", TW_STAT_COUNTER},
    [TW_RMA_STAT_REFUSED] = {"refused", TW_STAT_COUNTER},
    [TW_RMA_STAT_DEFERRED] = {"deferred", TW_STAT_COUNTER},
    [TW_RMA_STAT_DROPPED] = {"dropped", TW_STAT_COUNTER},
};

tw_stats_t *tw_rma_stats(tw_rma_t *rma)
{
    return rma->stats;
}

tw_status_t tw_rma_create(const tw_rma_params_t *params, tw_rma_t **rma_p)
{
    tw_rma_t *rma = tw_calloc(1, sizeof(*rma));

    if (rma == NULL) {
        return TW_ERR_NOMEM;
    }
    rma->rank = params->rank;
    rma->size = params->size;
    rma->route = params->route;
    rma->down = params->down;
    rma->eager_limit = params->eager_limit;
    rma->free_head = TW_RMA_NONE;
    atomic_init(&rma->next_id, 1);
    atomic_init(&rma->ndefer, 0);
    atomic_init(&rma->drop_logged, 0);
    atomic_init(&rma->refused_logged, 0);
    atomic_init(&rma->failed_logged, 0);
    rma->peers = tw_calloc((size_t)params->size, sizeof(*rma->peers));
    rma->stats = tw_stats_create("rma", tw_rma_stat_descs, TW_RMA_STAT_COUNT);
    if (rma->peers == NULL || rma->stats == NULL) {
        if (rma->stats != NULL) {
            tw_stats_destroy(rma->stats);
        }
        tw_free(rma->peers, (size_t)params->size * sizeof(*rma->peers));
        tw_free(rma, sizeof(*rma));
        return TW_ERR_NOMEM;
    }
    for (int i = 0; i < params->size; i++) {
        pthread_mutex_init(&rma->peers[i].lock, NULL);
    }
    pthread_rwlock_init(&rma->reg_lock, NULL);
    pthread_mutex_init(&rma->slot_lock, NULL);
    pthread_mutex_init(&rma->defer_lock, NULL);
    *rma_p = rma;
    return TW_OK;
}

static bool tw_rma_is_down(const tw_rma_t *rma, int peer)
{
    return atomic_load_explicit(&rma->down[peer], memory_order_seq_cst) != 0;
}

/** Count one more of a kind of trouble in @p counter. Returns how many so
 * far when this one is to be logged -- the first 16, then every 1000th,
 * so a broken or hostile peer cannot flood the log -- else 0. */
static inline uint64_t tw_rma_log_due(atomic_uint_fast64_t *counter)
{
    uint64_t n = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);

    return n < 16 || n % 1000 == 0 ? n + 1 : 0;
}

/* A bad or stale arrival: count it, and log it (rate-limited). */
static void tw_rma_drop(tw_rma_t *rma, int src, const char *why)
{
    uint64_t n = tw_rma_log_due(&rma->drop_logged);

    tw_stats_inc(rma->stats, TW_RMA_STAT_DROPPED);
    if (n != 0) {
        tw_warn("rma", "dropped a one-sided message from rank %d: %s (%llu so far)", src, why,
                (unsigned long long)n);
    }
}

/* ---- the table of operations waiting for a reply ----------------------- */

static tw_status_t tw_rma_slot_grow(tw_rma_t *rma)
{
    uint32_t n = rma->nslots == 0 ? 64 : rma->nslots * 2;
    tw_rma_op_t **slots;
    uint32_t *gen, *next;

    if (n > TW_RMA_SLOTS_MAX) {
        return TW_ERR_NOMEM;
    }
    slots = tw_calloc(n, sizeof(*slots));
    gen = tw_calloc(n, sizeof(*gen));
    next = tw_calloc(n, sizeof(*next));
    if (slots == NULL || gen == NULL || next == NULL) {
        tw_free(slots, n * sizeof(*slots));
        tw_free(gen, n * sizeof(*gen));
        tw_free(next, n * sizeof(*next));
        return TW_ERR_NOMEM;
    }
    if (rma->nslots > 0) {
        memcpy(slots, rma->slots, rma->nslots * sizeof(*slots));
        memcpy(gen, rma->slot_gen, rma->nslots * sizeof(*gen));
        memcpy(next, rma->slot_next, rma->nslots * sizeof(*next));
        tw_free(rma->slots, rma->nslots * sizeof(*slots));
        tw_free(rma->slot_gen, rma->nslots * sizeof(*gen));
        tw_free(rma->slot_next, rma->nslots * sizeof(*next));
    }
    /* The new half joins the free list (it was empty). */
    for (uint32_t i = rma->nslots; i < n; i++) {
        gen[i] = 1;
        next[i] = i + 1 < n ? i + 1 : TW_RMA_NONE;
    }
    rma->free_head = rma->nslots;
    rma->slots = slots;
    rma->slot_gen = gen;
    rma->slot_next = next;
    rma->nslots = n;
    return TW_OK;
}

/* Give @p op a slot and its cookie. */
static tw_status_t tw_rma_slot_add(tw_rma_t *rma, tw_rma_op_t *op)
{
    tw_status_t st = TW_OK;
    uint32_t i;

    pthread_mutex_lock(&rma->slot_lock);
    if (rma->free_head == TW_RMA_NONE) {
        st = tw_rma_slot_grow(rma);
    }
    if (st == TW_OK) {
        i = rma->free_head;
        rma->free_head = rma->slot_next[i];
        rma->slots[i] = op;
        op->cookie = (uint64_t)rma->slot_gen[i] << 32 | i;
    }
    pthread_mutex_unlock(&rma->slot_lock);
    return st;
}

/* Slot lock held. */
static void tw_rma_slot_free(tw_rma_t *rma, uint32_t i)
{
    rma->slots[i] = NULL;
    rma->slot_gen[i] = rma->slot_gen[i] == UINT32_MAX ? 1 : rma->slot_gen[i] + 1;
    rma->slot_next[i] = rma->free_head;
    rma->free_head = i;
}

/* Take out the operation @p cookie names if it waits for @p peer's reply
 * of kind @p op; NULL if there is none (stale, duplicated or forged). */
static tw_rma_op_t *tw_rma_slot_take(tw_rma_t *rma, uint64_t cookie, int peer, tw_op_t op)
{
    uint32_t i = (uint32_t)cookie;
    tw_rma_op_t *o = NULL;

    pthread_mutex_lock(&rma->slot_lock);
    if (i < rma->nslots && rma->slots[i] != NULL && rma->slots[i]->cookie == cookie &&
        rma->slots[i]->peer == peer && rma->slots[i]->op == op) {
        o = rma->slots[i];
        tw_rma_slot_free(rma, i);
    }
    pthread_mutex_unlock(&rma->slot_lock);
    return o;
}

/* Take @p op out of its slot if it is still there (nobody answered or
 * swept it). */
static bool tw_rma_slot_drop(tw_rma_t *rma, tw_rma_op_t *op)
{
    return tw_rma_slot_take(rma, op->cookie, op->peer, op->op) == op;
}

/* ---- completing operations --------------------------------------------- */

/* Flushes of @p p that no earlier put holds back. Peer lock held. */
static tw_rma_flush_req_t *tw_rma_flushes_ready(tw_rma_peer_t *p)
{
    tw_rma_flush_req_t *ready = NULL, **tail = &ready;

    while (p->fhead != NULL && (p->head == NULL || p->head->seq >= p->fhead->upto)) {
        tw_rma_flush_req_t *f = p->fhead;
        p->fhead = f->next;
        f->next = NULL;
        *tail = f;
        tail = &f->next;
    }
    if (p->fhead == NULL) {
        p->ftail = NULL;
    }
    return ready;
}

static void tw_rma_flushes_complete(tw_rma_t *rma, int peer, tw_rma_flush_req_t *f, tw_status_t why)
{
    while (f != NULL) {
        tw_rma_flush_req_t *next = f->next;
        tw_status_t st = why;
        if (st == TW_OK && tw_rma_is_down(rma, peer)) {
            st = TW_ERR_PEER_FAILED;
        }
        tw_completion_t c = {.user = f->user, .status = st, .op = TW_OP_FLUSH, .peer = peer};
        tw_cq_push(f->cq, &c);
        tw_free(f, sizeof(*f));
        f = next;
    }
}

/* Take a put out of its peer's list; returns the flushes it released. */
static tw_rma_flush_req_t *tw_rma_unlist(tw_rma_t *rma, tw_rma_op_t *op)
{
    tw_rma_peer_t *p = &rma->peers[op->peer];
    tw_rma_flush_req_t *ready;

    pthread_mutex_lock(&p->lock);
    if (op->prev != NULL) {
        op->prev->next = op->next;
    } else {
        p->head = op->next;
    }
    if (op->next != NULL) {
        op->next->prev = op->prev;
    } else {
        p->tail = op->prev;
    }
    op->listed = false;
    ready = tw_rma_flushes_ready(p);
    pthread_mutex_unlock(&p->lock);
    return ready;
}

static void tw_rma_list(tw_rma_t *rma, tw_rma_op_t *op)
{
    tw_rma_peer_t *p = &rma->peers[op->peer];

    pthread_mutex_lock(&p->lock);
    op->seq = p->next_seq++;
    op->prev = p->tail;
    op->next = NULL;
    if (p->tail != NULL) {
        p->tail->next = op;
    } else {
        p->head = op;
    }
    p->tail = op;
    op->listed = true;
    pthread_mutex_unlock(&p->lock);
}

static void tw_rma_complete(tw_rma_op_t *op)
{
    tw_rma_t *rma = op->rma;
    tw_status_t st = (tw_status_t)atomic_load_explicit(&op->status, memory_order_acquire);
    tw_completion_t c = {.user = op->user,
                         .status = st,
                         .op = op->op,
                         .peer = op->peer,
                         .length = st == TW_OK ? op->len : 0};
    tw_rma_flush_req_t *ready = op->listed ? tw_rma_unlist(rma, op) : NULL;
    int peer = op->peer;

    tw_cq_push(op->cq, &c);
    tw_free(op, sizeof(*op));
    tw_rma_flushes_complete(rma, peer, ready, TW_OK);
}

/* One of the events @p op waits for happened. Thread: any. */
static void tw_rma_event(tw_rma_op_t *op, tw_status_t st)
{
    if (st != TW_OK) {
        int ok = TW_OK;
        atomic_compare_exchange_strong_explicit(&op->status, &ok, (int)st, memory_order_acq_rel,
                                                memory_order_relaxed);
    }
    if (atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel) == 1) {
        tw_rma_complete(op);
    }
}

static void tw_rma_comp_cb(tw_tl_comp_t *comp, tw_status_t st)
{
    tw_rma_event((tw_rma_op_t *)comp, st);
}

/* The target refused an operation of ours (its reason is logged there):
 * say so here too, then fail it with the target's status. */
static void tw_rma_refused(tw_rma_t *rma, int src, tw_rma_op_t *op, tw_status_t st)
{
    uint64_t n = tw_rma_log_due(&rma->failed_logged);

    if (n != 0) {
        tw_warn("rma", "rank %d refused a %s of %zu bytes: %s (%llu so far)", src,
                op->op == TW_OP_PUT ? "put" : "get", op->len, tw_strerror(st),
                (unsigned long long)n);
    }
    tw_rma_event(op, st);
}

/* A post that failed before anything took @p op: undo it. */
static void tw_rma_unpost(tw_rma_op_t *op)
{
    tw_rma_t *rma = op->rma;
    tw_rma_flush_req_t *ready = op->listed ? tw_rma_unlist(rma, op) : NULL;
    int peer = op->peer;

    tw_cq_unreserve(op->cq);
    tw_free(op, sizeof(*op));
    tw_rma_flushes_complete(rma, peer, ready, TW_OK);
}

/* ---- remote keys -------------------------------------------------------- */

/* Unpack the remote key handed to @p fn (tw_put / tw_get) into @p k and
 * check it is of @p peer's memory and covers [@p raddr, + @p len). */
static tw_status_t tw_rma_rkey_check(const char *fn, const void *rkey, int peer, uint64_t raddr,
                                     size_t len, tw_rma_rkey_t *k)
{
    const char *why = NULL;

    if (rkey == NULL) {
        tw_error("rma", "%s: NULL remote key", fn);
        return TW_ERR_INVALID;
    }
    /* tw_put and tw_get take no key length: a key is at most TW_RKEY_MAX
     * bytes, and its own length says how many of them are its. */
    if (tw_rma_rkey_parse(rkey, TW_RKEY_MAX, k, &why) != TW_OK) {
        tw_error("rma", "%s: not a remote key packed by tw_mr_pack: %s", fn, why);
        return TW_ERR_INVALID;
    }
    if (k->h.owner != peer) {
        tw_error("rma", "%s: the remote key is of rank %d's memory, not of rank %d's", fn,
                 k->h.owner, peer);
        return TW_ERR_INVALID;
    }
    if (raddr < k->h.base || len > k->h.size || raddr - k->h.base > k->h.size - len) {
        tw_error("rma",
                 "%s: %zu bytes at 0x%llx are not inside rank %d's region "
                 "[0x%llx, +%llu)",
                 fn, len, (unsigned long long)raddr, peer, (unsigned long long)k->h.base,
                 (unsigned long long)k->h.size);
        return TW_ERR_INVALID;
    }
    return TW_OK;
}

tw_status_t tw_rma_mr_pack(const tw_mr_t *mr, void *rkey, size_t *rkey_len)
{
    tw_rma_rkey_t k;
    size_t need;

    if (mr == NULL || mr->magic != TW_MR_MAGIC || rkey_len == NULL) {
        tw_error("rma", "tw_mr_pack: %s", rkey_len == NULL ? "NULL rkey_len" : "not a region");
        return TW_ERR_INVALID;
    }
    if (atomic_load_explicit(&mr->dead, memory_order_acquire)) {
        tw_error("rma", "tw_mr_pack: the region was released when its context finalized");
        return TW_ERR_INVALID;
    }
    k = (tw_rma_rkey_t){.h = {.nsect = (uint8_t)mr->ntl,
                              .owner = mr->rma->rank,
                              .id = mr->id,
                              .key = mr->key,
                              .base = mr->base,
                              .size = mr->len}};
    for (unsigned i = 0; i < mr->ntl; i++) {
        const char *name = mr->tl[i].iface->ops->name;
        k.sect[i] = (tw_rma_rkey_sect_t){.name = name,
                                         .key = mr->tl[i].bytes,
                                         .name_len = (uint8_t)strlen(name),
                                         .key_len = mr->tl[i].len};
    }
    need = tw_rma_rkey_size(&k);
    if (rkey == NULL) {
        *rkey_len = need;
        return TW_OK;
    }
    if (*rkey_len < need) {
        *rkey_len = need;
        return TW_ERR_TRUNCATED;
    }
    tw_rma_rkey_pack(&k, rkey);
    *rkey_len = need;
    return TW_OK;
}

/* ---- regions ------------------------------------------------------------ */

tw_status_t tw_rma_add_registrar(tw_rma_t *rma, tw_tl_iface_t *iface)
{
    if (rma->nreg == TW_RMA_MAX_REG || strlen(iface->ops->name) > TW_RMA_RKEY_NAME_MAX) {
        return TW_ERR_INVALID;
    }
    rma->reg[rma->nreg++] = iface;
    return TW_OK;
}

static void tw_rma_release_tl(tw_mr_t *mr)
{
    for (unsigned k = 0; k < mr->ntl; k++) {
        tw_tl_iface_t *iface = mr->tl[k].iface;
        tw_status_t st = iface->ops->mem_dereg(iface, mr->tl[k].handle);
        if (st != TW_OK) {
            tw_warn("rma", "%s would not deregister a region: %s", mr->tl[k].iface->ops->name,
                    tw_strerror(st));
        }
    }
    mr->ntl = 0;
}

tw_status_t tw_rma_mem_register(tw_rma_t *rma, void *addr, size_t len, tw_mr_t **mr_p)
{
    tw_mr_t *mr = tw_calloc(1, sizeof(*mr));
    tw_status_t st;

    if (mr == NULL) {
        return TW_ERR_NOMEM;
    }
    if (getrandom(&mr->key, sizeof(mr->key), 0) != (ssize_t)sizeof(mr->key)) {
        tw_error("rma", "tw_mem_register: getrandom failed: %m");
        tw_free(mr, sizeof(*mr));
        return TW_ERR_TRANSPORT;
    }
    mr->magic = TW_MR_MAGIC;
    atomic_init(&mr->dead, false);
    atomic_init(&mr->inflight, 0);
    mr->rma = rma;
    mr->id = atomic_fetch_add_explicit(&rma->next_id, 1, memory_order_relaxed);
    mr->base = (uintptr_t)addr;
    mr->len = len;
    for (unsigned k = 0; k < rma->nreg; k++) {
        tw_tl_iface_t *iface = rma->reg[k];
        tw_rma_tlkey_t *t = &mr->tl[mr->ntl];
        size_t klen = sizeof(t->bytes);
        st = iface->ops->mem_reg(iface, addr, len, t->bytes, &klen, &t->handle);
        if (st == TW_ERR_UNSUPPORTED) {
            continue; /* no key of its own (a wrapper over a transport without RDMA) */
        }
        if (st != TW_OK) {
            tw_error("rma", "tw_mem_register: %s refused %zu bytes at %p: %s", iface->ops->name,
                     len, addr, tw_strerror(st));
            tw_rma_release_tl(mr);
            tw_free(mr, sizeof(*mr));
            return st;
        }
        t->iface = iface;
        t->len = (uint8_t)klen;
        mr->ntl++;
    }
    pthread_rwlock_wrlock(&rma->reg_lock);
    mr->next = rma->buckets[mr->id % TW_RMA_BUCKETS];
    rma->buckets[mr->id % TW_RMA_BUCKETS] = mr;
    pthread_rwlock_unlock(&rma->reg_lock);
    *mr_p = mr;
    return TW_OK;
}

void tw_rma_set_progress(tw_rma_t *rma, int (*fn)(void *), void *arg)
{
    rma->progress = fn;
    rma->progress_arg = arg;
}

tw_status_t tw_rma_mem_deregister(tw_mr_t *mr)
{
    tw_backoff_t b = TW_BACKOFF_INIT;
    tw_rma_t *rma;

    if (mr == NULL || mr->magic != TW_MR_MAGIC) {
        tw_error("rma", "tw_mem_deregister: not a region");
        return TW_ERR_INVALID;
    }
    if (!atomic_load_explicit(&mr->dead, memory_order_acquire)) {
        rma = mr->rma;
        pthread_rwlock_wrlock(&rma->reg_lock);
        for (tw_mr_t **pp = &rma->buckets[mr->id % TW_RMA_BUCKETS]; *pp != NULL;
             pp = &(*pp)->next) {
            if (*pp == mr) {
                *pp = mr->next;
                break;
            }
        }
        pthread_rwlock_unlock(&rma->reg_lock);
        /* No request finds it now; let the pulls and replies that hold
         * it finish (their transports complete them, whatever happens). */
        while (atomic_load_explicit(&mr->inflight, memory_order_acquire) > 0) {
            if (rma->progress != NULL) {
                rma->progress(rma->progress_arg);
            }
            tw_backoff_wait(&b);
        }
        tw_rma_release_tl(mr);
    }
    mr->magic = 0;
    tw_free(mr, sizeof(*mr));
    return TW_OK;
}

void tw_rma_release_regions(tw_rma_t *rma)
{
    unsigned n = 0;

    pthread_rwlock_wrlock(&rma->reg_lock);
    for (unsigned i = 0; i < TW_RMA_BUCKETS; i++) {
        for (tw_mr_t *mr = rma->buckets[i]; mr != NULL; mr = mr->next) {
            tw_rma_release_tl(mr);
            atomic_store_explicit(&mr->dead, true, memory_order_release);
            n++;
        }
        rma->buckets[i] = NULL;
    }
    pthread_rwlock_unlock(&rma->reg_lock);
    if (n > 0) {
        tw_warn("rma",
                "%u memory region(s) still registered at tw_finalize: released; "
                "tw_mem_deregister frees their handles",
                n);
    }
}

/* The region a request names, if key and bounds fit. Registry lock held. */
static tw_status_t tw_rma_lookup(tw_rma_t *rma, int src, const tw_rma_hdr_t *h, tw_mr_t **mr_p)
{
    tw_mr_t *mr = rma->buckets[h->region % TW_RMA_BUCKETS];
    const char *why = NULL;

    while (mr != NULL && mr->id != h->region) {
        mr = mr->next;
    }
    if (mr == NULL || mr->key != h->key) {
        why = mr == NULL ? "no such region (deregistered?)" : "wrong region key";
    } else if (h->addr < mr->base || h->len > mr->len || h->addr - mr->base > mr->len - h->len) {
        why = "out of the region's bounds";
    }
    if (why != NULL) {
        uint64_t n = tw_rma_log_due(&rma->refused_logged);
        tw_stats_inc(rma->stats, TW_RMA_STAT_REFUSED);
        if (n != 0) {
            tw_warn("rma", "refused rank %d's %s of %llu bytes at 0x%llx: %s (%llu so far)", src,
                    h->type == TW_RMA_PUT_REQ ? "put" : "get", (unsigned long long)h->len,
                    (unsigned long long)h->addr, why, (unsigned long long)n);
        }
        return TW_ERR_INVALID;
    }
    *mr_p = mr;
    return TW_OK;
}

/* ---- the target: serving requests --------------------------------------- */

static void tw_rma_defer(tw_rma_t *rma, int src, const tw_rma_hdr_t *h)
{
    tw_rma_defer_t *d = tw_malloc(sizeof(*d));

    if (d == NULL) {
        /* The origin's operation waits until the peer fails or finalize. */
        tw_error("rma", "out of memory keeping a reply to rank %d", src);
        return;
    }
    d->next = NULL;
    d->src = src;
    d->h = *h;
    pthread_mutex_lock(&rma->defer_lock);
    if (rma->dtail != NULL) {
        rma->dtail->next = d;
    } else {
        rma->dhead = d;
    }
    rma->dtail = d;
    atomic_fetch_add_explicit(&rma->ndefer, 1, memory_order_relaxed);
    pthread_mutex_unlock(&rma->defer_lock);
    tw_stats_inc(rma->stats, TW_RMA_STAT_DEFERRED);
}

/* A reply's send failed with @p st: keep it for later, or give up on a
 * peer that is gone (its operations fail there). */
static void tw_rma_send_failed(tw_rma_t *rma, int src, const tw_rma_hdr_t *h, tw_status_t st)
{
    if (st == TW_ERR_AGAIN) {
        tw_rma_defer(rma, src, h);
    } else {
        tw_debug("rma", "no reply to rank %d: %s", src, tw_strerror(st));
    }
}

static void tw_rma_ack(tw_rma_t *rma, int src, uint64_t cookie, tw_status_t st)
{
    tw_rma_hdr_t a = {.version = TW_RMA_HDR_VERSION,
                      .type = TW_RMA_PUT_ACK,
                      .status = (int16_t)st,
                      .cookie = cookie};
    tw_tl_iface_t *iface = rma->route[src];
    tw_status_t sst = tw_tl_am_short(iface, src, TW_MSG_AM_RMA, &a, sizeof(a), NULL, 0);

    if (sst != TW_OK) {
        tw_rma_send_failed(rma, src, &a, sst);
    }
}

static void tw_rma_serve_put(tw_rma_t *rma, int src, const tw_rma_hdr_t *h, const void *data,
                             size_t len)
{
    tw_status_t st = TW_ERR_PROTOCOL;
    tw_mr_t *mr;

    if (h->len == len) {
        pthread_rwlock_rdlock(&rma->reg_lock);
        st = tw_rma_lookup(rma, src, h, &mr);
        if (st == TW_OK && len > 0) {
            memcpy((void *)(uintptr_t)h->addr, data, len);
        }
        pthread_rwlock_unlock(&rma->reg_lock);
    } else {
        tw_rma_drop(rma, src, "put length does not match its payload");
    }
    if (st == TW_OK) {
        tw_stats_inc(rma->stats, TW_RMA_STAT_SERVED);
    }
    tw_rma_ack(rma, src, h->cookie, st);
}

static void tw_rma_xfer_done(tw_tl_comp_t *comp, tw_status_t st)
{
    tw_rma_xfer_t *x = (tw_rma_xfer_t *)comp;

    atomic_fetch_sub_explicit(&x->mr->inflight, 1, memory_order_release);
    tw_free(x, sizeof(*x));
    (void)st; /* the origin's get fails through its own transport */
}

static void tw_rma_serve_get(tw_rma_t *rma, int src, const tw_rma_hdr_t *h)
{
    tw_tl_iface_t *iface = rma->route[src];
    tw_rma_hdr_t r = {.version = TW_RMA_HDR_VERSION, .type = TW_RMA_GET_REP, .cookie = h->cookie};
    const void *addr = (const void *)(uintptr_t)h->addr;
    tw_rma_xfer_t *x = NULL;
    tw_status_t st, sst;
    tw_mr_t *mr;

    pthread_rwlock_rdlock(&rma->reg_lock);
    st = tw_rma_lookup(rma, src, h, &mr);
    if (st == TW_OK && h->len > iface->attr.max_zcopy) {
        st = TW_ERR_INVALID;
    }
    if (st != TW_OK) {
        pthread_rwlock_unlock(&rma->reg_lock);
        r.status = (int16_t)st;
        sst = tw_tl_am_short(iface, src, TW_MSG_AM_RMA, &r, sizeof(r), NULL, 0);
        if (sst != TW_OK) {
            tw_rma_send_failed(rma, src, &r, sst);
        }
        return;
    }
    r.len = h->len;
    if (h->len <= rma->eager_limit && sizeof(r) + h->len <= iface->attr.max_short) {
        /* Copied under the read lock: deregistration waits for it. */
        sst = tw_tl_am_short(iface, src, TW_MSG_AM_RMA, &r, sizeof(r), addr, h->len);
        pthread_rwlock_unlock(&rma->reg_lock);
    } else {
        atomic_fetch_add_explicit(&mr->inflight, 1, memory_order_relaxed);
        pthread_rwlock_unlock(&rma->reg_lock);
        x = tw_malloc(sizeof(*x));
        if (x == NULL) {
            sst = TW_ERR_AGAIN; /* try again later */
        } else {
            *x =
                (tw_rma_xfer_t){.comp = {.cb = tw_rma_xfer_done}, .rma = rma, .mr = mr, .src = src};
            sst = tw_tl_am_zcopy(iface, src, TW_MSG_AM_RMA, &r, sizeof(r), addr, h->len, &x->comp);
        }
        if (sst != TW_OK) {
            tw_free(x, sizeof(*x));
            atomic_fetch_sub_explicit(&mr->inflight, 1, memory_order_release);
        }
    }
    if (sst == TW_OK) {
        tw_stats_inc(rma->stats, TW_RMA_STAT_SERVED);
    } else {
        tw_rma_send_failed(rma, src, h, sst); /* served again from the request */
    }
}

int tw_rma_progress(void *arg)
{
    tw_rma_t *rma = arg;
    tw_rma_defer_t *d;
    int events = 0;

    if (atomic_load_explicit(&rma->ndefer, memory_order_relaxed) == 0) {
        return 0;
    }
    pthread_mutex_lock(&rma->defer_lock);
    d = rma->dhead;
    rma->dhead = rma->dtail = NULL;
    atomic_store_explicit(&rma->ndefer, 0, memory_order_relaxed);
    pthread_mutex_unlock(&rma->defer_lock);
    while (d != NULL) {
        tw_rma_defer_t *next = d->next;
        if (!tw_rma_is_down(rma, d->src)) {
            if (d->h.type == TW_RMA_GET_REQ) {
                tw_rma_serve_get(rma, d->src, &d->h);
            } else {
                tw_tl_iface_t *iface = rma->route[d->src];
                tw_status_t st =
                    tw_tl_am_short(iface, d->src, TW_MSG_AM_RMA, &d->h, sizeof(d->h), NULL, 0);
                if (st != TW_OK) {
                    tw_rma_send_failed(rma, d->src, &d->h, st);
                }
            }
        }
        tw_free(d, sizeof(*d));
        events++;
        d = next;
    }
    return events;
}

/* ---- arrivals ----------------------------------------------------------- */

/* Check an RMA header; false (counted, logged) if it is not one. */
static bool tw_rma_parse(tw_rma_t *rma, int src, const void *hdr, size_t hdr_len, tw_rma_hdr_t *h)
{
    const char *why = NULL;

    if (tw_rma_hdr_parse(hdr, hdr_len, h, &why) != TW_OK) {
        tw_rma_drop(rma, src, why);
        return false;
    }
    return true;
}

static void tw_rma_got_get_rep(tw_rma_t *rma, int src, const tw_rma_hdr_t *h, const void *data,
                               size_t len)
{
    tw_rma_op_t *op = tw_rma_slot_take(rma, h->cookie, src, TW_OP_GET);

    if (op == NULL) {
        tw_rma_drop(rma, src, "a reply to no get waiting for it");
        return;
    }
    if (h->status != TW_OK) {
        tw_rma_refused(rma, src, op, (tw_status_t)h->status);
    } else if (h->len != len || len != op->len) {
        tw_rma_drop(rma, src, "get reply of the wrong length");
        tw_rma_event(op, TW_ERR_PROTOCOL);
    } else {
        if (len > 0) {
            memcpy(op->dst, data, len);
        }
        tw_rma_event(op, TW_OK);
    }
}

void tw_rma_recv(tw_rma_t *rma, int src, const void *hdr, size_t hdr_len, const void *data,
                 size_t len)
{
    tw_rma_hdr_t h;
    tw_rma_op_t *op;

    if (!tw_rma_parse(rma, src, hdr, hdr_len, &h)) {
        return;
    }
    switch (h.type) {
    case TW_RMA_PUT_REQ:
        tw_rma_serve_put(rma, src, &h, data, len);
        break;
    case TW_RMA_GET_REQ:
        if (len != 0) {
            tw_rma_drop(rma, src, "get request with a payload");
            break;
        }
        tw_rma_serve_get(rma, src, &h);
        break;
    case TW_RMA_PUT_ACK:
        op = tw_rma_slot_take(rma, h.cookie, src, TW_OP_PUT);
        if (op == NULL || len != 0) {
            tw_rma_drop(rma, src, "an ack of no put waiting for it");
            if (op != NULL) {
                tw_rma_event(op, TW_ERR_PROTOCOL);
            }
            break;
        }
        if (h.status != TW_OK) {
            tw_rma_refused(rma, src, op, (tw_status_t)h.status);
        } else {
            tw_rma_event(op, TW_OK);
        }
        break;
    default:
        tw_rma_got_get_rep(rma, src, &h, data, len);
        break;
    }
}

static void tw_rma_released(tw_tl_comp_t *comp, tw_status_t st)
{
    (void)comp, (void)st;
}

static tw_tl_comp_t tw_rma_release_comp = {.cb = tw_rma_released};

/* The pull of a large put landed in the region (or failed): answer. */
static void tw_rma_pull_done(tw_tl_comp_t *comp, tw_status_t st)
{
    tw_rma_xfer_t *x = (tw_rma_xfer_t *)comp;
    tw_rma_t *rma = x->rma;
    int src = x->src;
    uint64_t cookie = x->cookie;

    atomic_fetch_sub_explicit(&x->mr->inflight, 1, memory_order_release);
    tw_free(x, sizeof(*x));
    if (st == TW_OK) {
        tw_stats_inc(rma->stats, TW_RMA_STAT_SERVED);
    }
    if (st != TW_ERR_PEER_FAILED && st != TW_ERR_CANCELED) {
        tw_rma_ack(rma, src, cookie, st);
    }
}

void tw_rma_rndv(tw_rma_t *rma, int src, const void *hdr, size_t hdr_len, size_t len,
                 tw_tl_rndv_t *rndv)
{
    tw_tl_iface_t *iface = rma->route[src];
    tw_rma_hdr_t h;
    tw_status_t st;

    if (!tw_rma_parse(rma, src, hdr, hdr_len, &h)) {
        goto release;
    }
    if (h.type == TW_RMA_PUT_REQ) {
        tw_rma_xfer_t *x = NULL;
        tw_mr_t *mr = NULL;
        st = TW_ERR_PROTOCOL;
        if (h.len == len) {
            pthread_rwlock_rdlock(&rma->reg_lock);
            st = tw_rma_lookup(rma, src, &h, &mr);
            if (st == TW_OK) {
                atomic_fetch_add_explicit(&mr->inflight, 1, memory_order_relaxed);
            }
            pthread_rwlock_unlock(&rma->reg_lock);
        } else {
            tw_rma_drop(rma, src, "put length does not match its payload");
        }
        if (st == TW_OK && (x = tw_malloc(sizeof(*x))) == NULL) {
            atomic_fetch_sub_explicit(&mr->inflight, 1, memory_order_release);
            st = TW_ERR_NOMEM;
        }
        if (st != TW_OK) {
            tw_rma_ack(rma, src, h.cookie, st);
            goto release;
        }
        *x = (tw_rma_xfer_t){
            .comp = {.cb = tw_rma_pull_done}, .rma = rma, .mr = mr, .cookie = h.cookie, .src = src};
        st = iface->ops->rndv_get(iface, rndv, (void *)(uintptr_t)h.addr, len, &x->comp);
        if (st != TW_OK) {
            tw_rma_pull_done(&x->comp, st);
        }
        return;
    }
    if (h.type == TW_RMA_GET_REP) {
        tw_rma_op_t *op = tw_rma_slot_take(rma, h.cookie, src, TW_OP_GET);
        if (op == NULL) {
            tw_rma_drop(rma, src, "a reply to no get waiting for it");
            goto release;
        }
        if (h.status != TW_OK || h.len != len || len != op->len) {
            tw_rma_drop(rma, src, "get reply of the wrong length");
            if (h.status != TW_OK) {
                tw_rma_refused(rma, src, op, (tw_status_t)h.status);
            } else {
                tw_rma_event(op, TW_ERR_PROTOCOL);
            }
            goto release;
        }
        st = iface->ops->rndv_get(iface, rndv, op->dst, len, &op->comp);
        if (st != TW_OK) {
            tw_rma_event(op, st);
        }
        return;
    }
    tw_rma_drop(rma, src, "a request or ack too large for its kind");
release:
    if (iface->ops->rndv_get(iface, rndv, NULL, 0, &tw_rma_release_comp) != TW_OK) {
        tw_debug("rma", "releasing a rendezvous of rank %d failed", src);
    }
}

/* Fail every operation waiting for a reply of @p peer (-1: of anyone)
 * with @p why: whoever takes an operation out of its slot completes it. */
static void tw_rma_sweep(tw_rma_t *rma, int peer, tw_status_t why)
{
    tw_rma_op_t *swept = NULL;

    pthread_mutex_lock(&rma->slot_lock);
    for (uint32_t i = 0; i < rma->nslots; i++) {
        tw_rma_op_t *op = rma->slots[i];
        if (op != NULL && (peer < 0 || op->peer == peer)) {
            tw_rma_slot_free(rma, i);
            op->swept = swept;
            swept = op;
        }
    }
    pthread_mutex_unlock(&rma->slot_lock);
    while (swept != NULL) {
        tw_rma_op_t *next = swept->swept;
        tw_rma_event(swept, why);
        swept = next;
    }
}

void tw_rma_peer_down(tw_rma_t *rma, int peer)
{
    tw_rma_sweep(rma, peer, TW_ERR_PEER_FAILED);
}

/* ---- the origin: posting ------------------------------------------------ */

static tw_rma_op_t *tw_rma_op_new(tw_rma_t *rma, int peer, tw_op_t kind, void *dst, size_t len,
                                  tw_cq_t *cq, void *user)
{
    tw_rma_op_t *op = tw_malloc(sizeof(*op));

    if (op != NULL) {
        *op = (tw_rma_op_t){.comp = {.cb = tw_rma_comp_cb},
                            .rma = rma,
                            .cq = cq,
                            .user = user,
                            .dst = dst,
                            .len = len,
                            .peer = peer,
                            .op = kind};
        atomic_init(&op->refs, 0);
        atomic_init(&op->status, TW_OK);
    }
    return op;
}

/* Common start of a post: route, peer state, CQ room. */
static tw_status_t tw_rma_post_begin(tw_rma_t *rma, int peer, tw_cq_t *cq)
{
    if (rma->route[peer] == NULL) {
        return TW_ERR_UNREACHABLE;
    }
    if (tw_rma_is_down(rma, peer)) {
        return TW_ERR_PEER_FAILED;
    }
    return tw_cq_reserve(cq);
}

/* A zero-length operation: nothing to move, complete it now. */
static tw_status_t tw_rma_post_empty(tw_cq_t *cq, tw_op_t kind, int peer, void *user)
{
    tw_completion_t c = {.user = user, .status = TW_OK, .op = kind, .peer = peer};

    tw_cq_push(cq, &c);
    return TW_OK;
}

/* Emulate @p op (its request header @p h) over active messages. The
 * operation has refs = 1 (the poster) on entry. */
static tw_status_t tw_rma_emulate(tw_rma_t *rma, tw_rma_op_t *op, tw_rma_hdr_t *h, const void *data)
{
    tw_tl_iface_t *iface = rma->route[op->peer];
    size_t len = op->op == TW_OP_PUT ? op->len : 0;
    bool zcopy = false;
    tw_status_t st;

    if (len > iface->attr.max_zcopy) {
        return TW_ERR_INVALID;
    }
    if (len > rma->eager_limit || sizeof(*h) + len > iface->attr.max_short) {
        zcopy = true;
    }
    /* The reply, and the transport's completion of a zero-copy send. */
    atomic_fetch_add_explicit(&op->refs, zcopy ? 2 : 1, memory_order_relaxed);
    st = tw_rma_slot_add(rma, op);
    if (st != TW_OK) {
        atomic_fetch_sub_explicit(&op->refs, zcopy ? 2 : 1, memory_order_relaxed);
        return st;
    }
    h->cookie = op->cookie;
    if (tw_rma_is_down(rma, op->peer)) {
        st = TW_ERR_PEER_FAILED; /* the sweep may have run before the slot existed */
    } else if (zcopy) {
        st = tw_tl_am_zcopy(iface, op->peer, TW_MSG_AM_RMA, h, sizeof(*h), data, len, &op->comp);
    } else {
        st = tw_tl_am_short(iface, op->peer, TW_MSG_AM_RMA, h, sizeof(*h), data, len);
    }
    if (st == TW_OK) {
        return TW_OK;
    }
    if (tw_rma_slot_drop(rma, op)) {
        /* Nothing else holds it: the post fails. */
        atomic_fetch_sub_explicit(&op->refs, zcopy ? 2 : 1, memory_order_relaxed);
        return st;
    }
    /* The peer-down sweep took the reply's share and reports it; the send
     * never took the transport's. The post stands, failed. */
    if (zcopy) {
        tw_rma_event(op, st);
    }
    return TW_OK;
}

/* Post @p op, direct if the route can and the key allows, else emulated.
 * On failure the caller undoes the post. */
static tw_status_t tw_rma_post(tw_rma_t *rma, tw_rma_op_t *op, const tw_rma_rkey_t *k,
                               uint64_t raddr, const void *src)
{
    tw_tl_iface_t *iface = rma->route[op->peer];
    uint32_t cap = op->op == TW_OP_PUT ? TW_TL_CAP_PUT : TW_TL_CAP_GET;
    const uint8_t *tlkey =
        (iface->ops->caps & cap) != 0 ? tw_rma_rkey_find(k, iface->ops->name) : NULL;
    tw_rma_hdr_t h = {.version = TW_RMA_HDR_VERSION,
                      .type = op->op == TW_OP_PUT ? TW_RMA_PUT_REQ : TW_RMA_GET_REQ,
                      .region = k->h.id,
                      .key = k->h.key,
                      .addr = raddr,
                      .len = op->len};
    tw_status_t st = TW_ERR_INVALID;

    atomic_store_explicit(&op->refs, 1, memory_order_relaxed); /* the poster */
    if (tlkey != NULL) {
        atomic_fetch_add_explicit(&op->refs, 1, memory_order_relaxed);
        if (op->op == TW_OP_PUT) {
            st = iface->ops->put_zcopy(iface, op->peer, src, op->len, raddr, tlkey, &op->comp);
        } else {
            st = iface->ops->get_zcopy(iface, op->peer, op->dst, op->len, raddr, tlkey, &op->comp);
        }
        if (st == TW_OK) {
            tw_stats_inc(rma->stats, TW_RMA_STAT_DIRECT);
            return TW_OK;
        }
        atomic_fetch_sub_explicit(&op->refs, 1, memory_order_relaxed);
        if (st != TW_ERR_INVALID) {
            return st;
        }
        /* Not one the transport can do (too long, no key for the device
         * it would use): emulate it. */
    }
    return tw_rma_emulate(rma, op, &h, src);
}

static tw_status_t tw_rma_start(tw_rma_t *rma, int peer, tw_op_t kind, const void *src, void *dst,
                                size_t len, uint64_t raddr, const void *rkey, tw_cq_t *cq,
                                void *user)
{
    const char *fn = kind == TW_OP_PUT ? "tw_put" : "tw_get";
    tw_rma_rkey_t k;
    tw_rma_op_t *op;
    tw_status_t st;

    st = tw_rma_rkey_check(fn, rkey, peer, raddr, len, &k);
    if (st != TW_OK) {
        return st;
    }
    st = tw_rma_post_begin(rma, peer, cq);
    if (st != TW_OK) {
        return st;
    }
    if (len == 0) {
        tw_stats_inc(rma->stats, kind == TW_OP_PUT ? TW_RMA_STAT_PUTS : TW_RMA_STAT_GETS);
        return tw_rma_post_empty(cq, kind, peer, user);
    }
    op = tw_rma_op_new(rma, peer, kind, dst, len, cq, user);
    if (op == NULL) {
        tw_cq_unreserve(cq);
        return TW_ERR_NOMEM;
    }
    if (kind == TW_OP_PUT) {
        tw_rma_list(rma, op);
    }
    st = tw_rma_post(rma, op, &k, raddr, src);
    if (st != TW_OK) {
        tw_rma_unpost(op);
        return st;
    }
    tw_stats_inc(rma->stats, kind == TW_OP_PUT ? TW_RMA_STAT_PUTS : TW_RMA_STAT_GETS);
    tw_stats_add(rma->stats, kind == TW_OP_PUT ? TW_RMA_STAT_PUT_BYTES : TW_RMA_STAT_GET_BYTES,
                 len);
    tw_rma_event(op, TW_OK); /* the poster's share: it may complete now */
    return TW_OK;
}

tw_status_t tw_rma_put(tw_rma_t *rma, int dst, const void *src, size_t len, uint64_t raddr,
                       const void *rkey, tw_cq_t *cq, void *user)
{
    return tw_rma_start(rma, dst, TW_OP_PUT, src, NULL, len, raddr, rkey, cq, user);
}

tw_status_t tw_rma_get(tw_rma_t *rma, int src, void *dst, size_t len, uint64_t raddr,
                       const void *rkey, tw_cq_t *cq, void *user)
{
    return tw_rma_start(rma, src, TW_OP_GET, NULL, dst, len, raddr, rkey, cq, user);
}

tw_status_t tw_rma_flush(tw_rma_t *rma, int peer, tw_cq_t *cq, void *user)
{
    tw_rma_peer_t *p = &rma->peers[peer];
    tw_rma_flush_req_t *f;
    tw_status_t st = tw_rma_post_begin(rma, peer, cq);

    if (st != TW_OK) {
        return st;
    }
    tw_stats_inc(rma->stats, TW_RMA_STAT_FLUSHES);
    f = tw_malloc(sizeof(*f));
    if (f == NULL) {
        tw_cq_unreserve(cq);
        return TW_ERR_NOMEM;
    }
    *f = (tw_rma_flush_req_t){.cq = cq, .user = user};
    pthread_mutex_lock(&p->lock);
    if (p->head == NULL) {
        pthread_mutex_unlock(&p->lock);
        tw_rma_flushes_complete(rma, peer, f, TW_OK);
        return TW_OK;
    }
    f->upto = p->next_seq;
    if (p->ftail != NULL) {
        p->ftail->next = f;
    } else {
        p->fhead = f;
    }
    p->ftail = f;
    pthread_mutex_unlock(&p->lock);
    return TW_OK;
}

/* ---- teardown ----------------------------------------------------------- */

void tw_rma_destroy(tw_rma_t *rma)
{
    tw_rma_defer_t *d;

    /* The transports are closed: no reply comes any more. */
    tw_rma_sweep(rma, -1, TW_ERR_CANCELED);
    for (int i = 0; i < rma->size; i++) {
        tw_rma_peer_t *p = &rma->peers[i];
        if (p->head != NULL) {
            /* A transport closed without completing an operation. */
            tw_error("rma", "puts to rank %d still posted at finalize", i);
        }
        tw_rma_flushes_complete(rma, i, p->fhead, TW_ERR_CANCELED);
        pthread_mutex_destroy(&p->lock);
    }
    d = rma->dhead;
    while (d != NULL) {
        tw_rma_defer_t *next = d->next;
        tw_free(d, sizeof(*d));
        d = next;
    }
    tw_free(rma->slots, rma->nslots * sizeof(*rma->slots));
    tw_free(rma->slot_gen, rma->nslots * sizeof(*rma->slot_gen));
    tw_free(rma->slot_next, rma->nslots * sizeof(*rma->slot_next));
    pthread_rwlock_destroy(&rma->reg_lock);
    pthread_mutex_destroy(&rma->slot_lock);
    pthread_mutex_destroy(&rma->defer_lock);
    tw_stats_destroy(rma->stats);
    tw_free(rma->peers, (size_t)rma->size * sizeof(*rma->peers));
    tw_free(rma, sizeof(*rma));
}
