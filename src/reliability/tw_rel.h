/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The reliability layer (tw_rel.c has the design essay). It sits between
 * the messaging layer and the transports when tw_config_t.reliable /
 * TW_RELIABLE is on, and presents itself to msg as one more iface (ops
 * table "rel"): msg routes every peer to it and keeps its one code path.
 * Below, every opened transport iface is a path; rel sends each fragment
 * on the first healthy path that reaches the peer.
 *
 * Order of use (runtime): tw_rel_create; open each transport with
 * recv / recv_arg / peer_down / peer_down_arg from tw_rel_path_params and
 * register it with tw_rel_set_path; publish tw_rel_epoch and hand each
 * peer's to tw_rel_set_peer_epoch; tw_rel_ready (paths per peer); traffic;
 * at finalize tw_rel_quiesce (goodbyes, waits for acks) with the engines
 * still running; tw_rel_destroy after the transports closed.
 */
#ifndef TW_REL_H
#define TW_REL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tw_config.h"
#include "core/tw_stats.h"
#include "progress/tw_pe.h"
#include "transports/base/tw_tl.h"

#define TW_REL_MAX_PATHS 8

typedef struct tw_rel tw_rel_t;

/* Tunables (TW_REL_*; table tw_rel_cfg_table). */
typedef struct tw_rel_cfg {
    uint64_t rto_ns;          /* first retransmission timeout */
    uint64_t rto_max_ns;      /* backoff ceiling */
    uint64_t path_timeout_ns; /* no ack progress this long (>= 6 tries): path failed */
    uint64_t ack_delay_ns;    /* delayed ack */
    uint64_t keepalive_ns;    /* ping a silent peer this often */
    int misses;               /* silent for keepalive * misses: the peer failed */
    uint64_t probe_ns;        /* probe a failed path this often (fail-back) */
    int probes;               /* answered probes before a path is used again */
    int queue;                /* messages per peer not yet acked before TW_ERR_AGAIN */
    uint64_t seq_start;       /* first sequence number (tests: wraparound) */
} tw_rel_cfg_t;

extern const tw_cfg_table_t tw_rel_cfg_table;

typedef struct tw_rel_params {
    int rank;
    int size;
    tw_pe_t *pe;             /* runs rel's timers */
    const tw_rel_cfg_t *cfg; /* NULL: defaults and the environment */
    tw_tl_recv_fn_t recv;    /* upper arrivals (msg) */
    void *recv_arg;
    uint64_t inline_am_ids;         /* upper am ids whose arrival runs no user code */
    tw_tl_peer_down_fn_t peer_down; /* upper: the peer is gone (TW_OK: it left) */
    void *peer_down_arg;
    uint64_t (*clock)(void); /* ns; NULL: the monotonic clock (tests drive their own) */
} tw_rel_params_t;

enum {
    TW_REL_STAT_FRAGS_SENT,
    TW_REL_STAT_RETRANSMITS,
    TW_REL_STAT_ACKS_SENT,
    TW_REL_STAT_NACKS_SENT,
    TW_REL_STAT_DELIVERED,    /* messages handed up */
    TW_REL_STAT_DUPLICATES,   /* fragments that had arrived before: dropped */
    TW_REL_STAT_OUT_OF_ORDER, /* fragments held for an earlier one */
    TW_REL_STAT_CRC_FAILURES,
    TW_REL_STAT_BAD_FRAMES, /* impossible fields with a good checksum */
    TW_REL_STAT_STALE,      /* from or for another incarnation */
    TW_REL_STAT_OUT_OF_WINDOW,
    TW_REL_STAT_FAILOVERS,
    TW_REL_STAT_FAILBACKS,
    TW_REL_STAT_PEER_FAILURES,
    TW_REL_STAT_PINGS,
    TW_REL_STAT_AGAIN, /* sends refused: the peer's queue is full */
    TW_REL_STAT_COUNT
};

tw_status_t tw_rel_create(const tw_rel_params_t *params, tw_rel_t **rel_p);
/** Fail what is left (TW_ERR_CANCELED) and free. After the transports
 * closed. */
void tw_rel_destroy(tw_rel_t *rel);

/** Fill @p params' recv, recv_rndv, peer_down fields for path @p index
 * (< TW_REL_MAX_PATHS), and inline_am_ids = rel's ids: a transport that
 * delivers those on the sending thread (self) must be given 0 instead --
 * rel calls transports with a peer's lock held. */
void tw_rel_path_params(tw_rel_t *rel, unsigned index, tw_tl_params_t *params);
void tw_rel_set_path(tw_rel_t *rel, unsigned index, tw_tl_iface_t *iface);

uint32_t tw_rel_epoch(const tw_rel_t *rel);
void tw_rel_set_peer_epoch(tw_rel_t *rel, int peer, uint32_t epoch);
/** Paths per peer; TW_ERR_UNREACHABLE when a peer has none. Registers the
 * timers with the engine. Before the engines start. */
tw_status_t tw_rel_ready(tw_rel_t *rel);

/** What msg routes to. */
tw_tl_iface_t *tw_rel_iface(tw_rel_t *rel);
tw_stats_t *tw_rel_stats(tw_rel_t *rel);

/** Say goodbye to every peer (in sequence, after all data) and wait up to
 * @p timeout_ns (0: the keepalive bound) for every peer to acknowledge everything sent, driving
 * the engine when it has no thread. Thread: the caller of tw_finalize. */
void tw_rel_quiesce(tw_rel_t *rel, uint64_t timeout_ns);

/** A waiting worker polls the paths (tw_progress, tw_cq_wait with
 * progress threads): arrivals are handled here, messages that run user
 * code are left to an engine. Returns events. Thread: any. */
int tw_rel_poll(tw_rel_t *rel);

/** Test hook: hand a frame to rel as if path @p index delivered it. */
void tw_rel_inject(tw_rel_t *rel, unsigned index, int src, uint8_t am_id, const void *hdr,
                   size_t hdr_len, const void *data, size_t len);

#endif /* TW_REL_H */
