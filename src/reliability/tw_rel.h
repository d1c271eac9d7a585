/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The reliability layer (README.md has the overview): a wrapper iface
 * (ops table "rel", TW_TL_CAP_WRAP_ALL) over every transport of the
 * stack. The runtime puts it on top when tw_config_t.reliable /
 * TW_RELIABLE asks for TW_TL_FEATURE_RELIABLE; msg then routes every peer
 * to it. Below, each transport iface is a path; rel sends each fragment on
 * the first healthy path that reaches the peer.
 *
 * Its lifecycle is the ops table's (tw_tl.h): addr_pack publishes its
 * incarnation and addr_connect takes a peer's (and finds the paths that
 * reach it: the paths connected first); ready starts its clocks; quiesce
 * says goodbye at finalize with the engines still running; close fails
 * what is left, after the paths closed.
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

/* What tests set instead of the environment and the clock. */
typedef struct tw_rel_opts {
    const tw_rel_cfg_t *cfg; /* NULL: defaults and the environment */
    uint64_t (*clock)(void); /* ns; NULL: the monotonic clock */
} tw_rel_opts_t;

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

extern const tw_tl_ops_t tw_rel_ops;

/** Open rel over @p paths[0 .. @p n) (n <= TW_REL_MAX_PATHS, in routing
 * order), taking them over (their callbacks become rel's; a path with
 * TW_TL_CAP_INLINE_SEND gets no inline ids). @p params: the layer above
 * (msg) and the engine that runs rel's timers. Its ops' wrap_open is this
 * with @p opts NULL. TW_OK (rel owns the paths: tw_tl_close closes them
 * first); TW_ERR_INVALID (settings), TW_ERR_UNSUPPORTED (a path's short
 * messages cannot carry a fragment), TW_ERR_NOMEM, TW_ERR_TRANSPORT
 * (timer): the paths are untouched. Thread: the caller of tw_init. */
tw_status_t tw_rel_wrap(tw_tl_iface_t *const *paths, unsigned n, const tw_tl_params_t *params,
                        const tw_rel_opts_t *opts, tw_tl_iface_t **iface_p);

/** This process's incarnation (what addr_pack publishes). */
uint32_t tw_rel_epoch(const tw_tl_iface_t *rel);

#if TW_TESTING
/** Test hook: hand a frame to rel as if path @p index delivered it. */
void tw_rel_inject(tw_tl_iface_t *rel, unsigned index, int src, uint8_t am_id, const void *hdr,
                   size_t hdr_len, const void *data, size_t len);
#endif

#endif /* TW_REL_H */
