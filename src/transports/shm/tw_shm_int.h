/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Internals of the shm transport (README.md gives the overview;
 * tw_shm_proto.h the memory shared with other processes and who writes
 * what in it).
 *
 * Threads. Any thread sends (am_short, am_zcopy): it claims and fills
 * cells of its own rings and takes rendezvous send slots under send_lock.
 * Everything else belongs to the engine: its owner, or a waiting worker
 * that holds the engine's lock (tw_pe_try_call, in tw_shm_poll) --
 * "engine lock holder" below. Fields set at open or at addr_connect (the
 * caller of tw_init, before the engines start) are read-only after.
 */
#ifndef TW_SHM_INT_H
#define TW_SHM_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "core/tw_lock.h"
#include "shmem/tw_seg.h"
#include "transports/base/tw_tl.h"
#include "transports/shm/tw_shm.h"
#include "transports/shm/tw_shm_proto.h"

#define TW_SHM_CHECK_NS (20ull * 1000 * 1000) /* pidfd poll interval */
#define TW_SHM_BUDGET   32                    /* cells per peer per pass */
#define TW_SHM_SENDS    4096u                 /* rendezvous sends in flight */

enum { TW_SHM_PEER_UP = 0, TW_SHM_PEER_FAILED = 1, TW_SHM_PEER_LEFT = 2 };

typedef struct tw_shm_peer {
    /* Set at addr_connect, read-only after (the pidfd is closed at close). */
    int rank;
    int local;
    bool on_node; /* set at open: the node map puts it on our node */
    pid_t pid;
    int pidfd;    /* -1: none (then kill(pid, 0) is polled) */
    tw_seg_t seg; /* the peer's segment (our outbound ring is in it) */
    bool attached;
    tw_shm_ring_hdr_t *tx;         /* our ring in the peer's segment: we produce */
    _Atomic uint32_t *tx_sleeping; /* the peer's sleep flag (its segment header) */
    _Atomic uint32_t *tx_state;    /* the peer's TW_SHM_SEG_* (its segment header) */
    struct sockaddr_un wake_addr;
    socklen_t wake_len;
    tw_shm_ring_hdr_t *rx; /* the peer's ring in our segment: we consume */

    uint64_t rx_head; /* engine lock holder */
    /* TW_SHM_PEER_*: any thread reads it (seq_cst); only tw_shm_fail_peer,
     * on the engine owner, moves it off UP, once (CAS). */
    atomic_uint state;
    const char *fail_pending; /* engine lock holder: found bad by a worker's poll */
} tw_shm_peer_t;

/* A rendezvous send waiting for FIN (CMA) or CTS (fallback). Guarded by
 * the iface's send_lock; comp->cb runs outside it. */
typedef struct tw_shm_send {
    tw_tl_comp_t *comp; /* NULL: slot free */
    const void *addr;
    size_t len;
    int peer;
    uint32_t gen;
    uint32_t next_free;
} tw_shm_send_t;

/* The receiver's handle of an announced message. Engine lock holder. */
struct tw_tl_rndv {
    struct tw_tl_rndv *prev, *next; /* every live handle, for close */
    int peer;
    uint64_t raddr;
    uint64_t len;
    uint64_t sid;
};

/* A fallback pull in progress on the receiver. Engine lock holder. */
typedef struct tw_shm_pull {
    tw_tl_comp_t *comp; /* NULL: slot free */
    unsigned char *dst;
    size_t want;
    size_t got;
    int peer;
    uint32_t gen;
} tw_shm_pull_t;

/* Engine-side outbound work: a control cell, or a push of DATA cells.
 * Engine lock holder. */
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

    /* Set at open, read-only after. */
    tw_shm_cfg_t cfg;
    tw_seg_t seg; /* ours: inbound rings */
    tw_shm_seg_hdr_t *hdr;
    unsigned nlocal, local_rank, ncells;
    char node[TW_SHM_NODE_MAX];
    uint32_t key_crc;
    int wake_fd;
    tw_shm_peer_t *peers; /* [size]; unused for our own rank */

    atomic_bool cma_off; /* any thread; set once (forced or refused): fallback for all */

    tw_mutex_t send_lock;
    tw_shm_send_t *sends; /* [TW_SHM_SENDS], guarded by send_lock */
    uint32_t send_free;   /* guarded by send_lock; UINT32_MAX = none */
    uint32_t nsends;      /* guarded by send_lock: slots in use */

    /* Engine lock holder (npeers_up: also addr_connect, before the engines). */
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

/* The attached peer @p peer, or NULL (not ours to reach). Thread: any. */
static inline tw_shm_peer_t *tw_shm_peer(tw_shm_iface_t *shm, int peer)
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

/* ---- tw_shm_tx.c: producing, rendezvous sends, engine-side outbound work */

tw_status_t tw_shm_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len);
tw_status_t tw_shm_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp);
/* One datagram to @p p's wake-up socket. Thread: any. */
void tw_shm_kick(tw_shm_iface_t *shm, tw_shm_peer_t *p);
/* Send @p sid of @p peer, or NULL (completed, failed, or a bogus id).
 * Caller holds send_lock. */
tw_shm_send_t *tw_shm_send_find(tw_shm_iface_t *shm, uint64_t sid, int peer)
    TW_REQUIRES(shm->send_lock);
/* Free the slot for reuse (its id goes stale). Caller holds send_lock. */
void tw_shm_send_release(tw_shm_iface_t *shm, tw_shm_send_t *s) TW_REQUIRES(shm->send_lock);
/* Complete send @p sid with @p st if it is still in the table; true if it was. */
bool tw_shm_send_complete(tw_shm_iface_t *shm, uint64_t sid, int peer, tw_status_t st);
/* Queue a control cell (CTS/FIN) or a push (DATA of @p want bytes at
 * @p src). Thread: engine lock holder. */
void tw_shm_job_add(tw_shm_iface_t *shm, int peer, uint8_t type, uint64_t a0, uint64_t a1,
                    uint64_t a2, const void *src, size_t want);
/* Post queued jobs in order until a ring is full; returns jobs done.
 * Thread: engine lock holder. */
int tw_shm_jobs_progress(tw_shm_iface_t *shm);

/* ---- tw_shm_rx.c: rendezvous receives, failure, consuming ---------- */

tw_status_t tw_shm_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *h, void *dst, size_t len,
                            tw_tl_comp_t *comp);
int tw_shm_progress(tw_tl_iface_t *iface);
int tw_shm_poll(tw_tl_iface_t *iface);
/* Fail @p peer (or, @p why "left", note it left): complete its operations
 * with TW_ERR_PEER_FAILED and tell the layer above, once. From a worker's
 * poll it only marks the peer for the engine. Thread: engine lock holder. */
void tw_shm_fail_peer(tw_shm_iface_t *shm, int peer, const char *why);
void tw_shm_handle_unlink(tw_tl_rndv_t *h);
/* Complete pull @p pl with @p st and free its slot. Thread: engine lock holder. */
void tw_shm_pull_done(tw_shm_iface_t *shm, tw_shm_pull_t *pl, tw_status_t st);

#endif /* TW_SHM_INT_H */
