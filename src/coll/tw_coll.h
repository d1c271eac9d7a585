/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Collectives: what the runtime sees of them. One tw_coll_t per context
 * holds its groups (the world among them), the context's nonblocking
 * collectives and its node segment. The public calls (tw_group_*,
 * tw_barrier, ...) are implemented here, in tw_coll_api.c: a group handle
 * leads to its context's tw_coll_t without the runtime.
 *
 * Life: tw_coll_create and tw_coll_start before the address exchange
 * (the engines not started: it registers its progress function with
 * engine 0; the world group), the node segment through that exchange
 * (tw_coll_node_*), tw_coll_stop before the stack quiesces
 * (outstanding nonblocking collectives complete TW_ERR_CANCELED),
 * tw_coll_destroy with the engines stopped.
 */
#ifndef TW_COLL_H
#define TW_COLL_H

#include "core/tw_config.h"
#include "msg/tw_msg.h"
#include "progress/tw_cq.h"
#include "progress/tw_pe.h"
#include "threadwire/threadwire.h"

typedef struct tw_coll tw_coll_t;

typedef struct tw_coll_params {
    int rank;
    int size;
    tw_context_t *ctx;             /* the shell: only compared (CQ owners) */
    tw_msg_t *msg;                 /* the library's own tagged messages */
    tw_pe_t *pe;                   /* the engine that drives nonblocking collectives */
    bool manual;                   /* no progress threads: waiting calls progress_fn */
    int (*progress_fn)(void *arg); /* tw_progress of the context */
    void *progress_arg;
    tw_cq_params_t cq;   /* how the context makes CQs (wait mode, stats) */
    size_t eager_limit;  /* sends above it are staged in a copy */
    const int *node_of;  /* [size]: dense node ids (lives as long as the context) */
    const char *job_key; /* names of segments */
    bool node_shm;       /* the shm transport carries the node's traffic: the
                          * node may use shared memory for collectives too */
    int nnodes;
} tw_coll_params_t;

/** The collectives' tunables (tw_info, validation at tw_init). */
extern const tw_cfg_table_t tw_coll_cfg_table;

/** TW_ERR_NOMEM, TW_ERR_INVALID (a bad TW_COLL_* variable: logged). */
tw_status_t tw_coll_create(const tw_coll_params_t *params, tw_coll_t **coll_p);
/** Make the world group (before the exchange). */
tw_status_t tw_coll_start(tw_coll_t *coll);
/* The node's shared-memory segment, set up through tw_init's address
 * exchange (no messages; failures only cost the shared-memory path):
 *   tw_coll_node_prepare  before the exchange (the node's leader creates it)
 *   tw_coll_node_addr     the leader's entry for its address blob
 *   tw_coll_node_attach   after the exchange, before its closing barrier:
 *                         the others attach by the entry of rank
 *                         tw_coll_node_leader (-1: nothing to attach)
 *   tw_coll_node_setup    after that barrier: the world group binds it */
tw_status_t tw_coll_node_prepare(tw_coll_t *coll);
#define TW_COLL_ADDR_NAME "coll"
size_t tw_coll_node_addr(const tw_coll_t *coll, void *buf, size_t room);
int tw_coll_node_leader(const tw_coll_t *coll);
void tw_coll_node_attach(tw_coll_t *coll, const void *addr, size_t len);
tw_status_t tw_coll_node_setup(tw_coll_t *coll);
/* Settings every rank's schedules depend on (TW_COLL_RSAG: a rank that
 * picks another allreduce algorithm would wait for messages that never
 * come): every rank's blob carries them, every rank checks its peers'. */
#define TW_COLL_JOB_ADDR_NAME "coll.job"
/** Our entry into @p buf (room @p room): its length, or 0. */
size_t tw_coll_job_addr(const tw_coll_t *coll, void *buf, size_t room);
/** @p peer's entry (@p addr NULL: it has none) against ours: TW_OK, or
 * TW_ERR_INVALID with an error naming the variable. */
tw_status_t tw_coll_job_check(const tw_coll_t *coll, int peer, const void *addr, size_t len);
/** @p peer is gone (first report). @p failed: every group holding it
 * fails. A clean departure (!@p failed) fails nothing: what it sent and
 * wrote before it left is there; a wait for anything more fails then. Thread:
 * any (an engine). */
void tw_coll_peer_down(tw_coll_t *coll, int peer, bool failed);
/** Finalize begins: outstanding nonblocking collectives complete
 * TW_ERR_CANCELED, groups are released, and what members sent that no
 * collective will read is dropped (tw_msg_coll_close). Thread: the
 * finalizing one. */
void tw_coll_stop(tw_coll_t *coll);
/** Free everything (engines stopped). */
void tw_coll_destroy(tw_coll_t *coll);
tw_group_t *tw_coll_world(tw_coll_t *coll);
/** Drive the nonblocking collectives from the calling thread if engine 0
 * is idle (tw_progress in thread mode: a thread waiting in tw_cq_wait
 * moves them on instead of waiting for the engine to wake). Returns the
 * events handled. Thread: any. */
int tw_coll_poll(tw_coll_t *coll);
tw_stats_t *tw_coll_stats(tw_coll_t *coll);
/** Make a group (tw_group_create after the context checks). */
tw_status_t tw_coll_group_create(tw_coll_t *coll, const int *ranks, int n, uint64_t key,
                                 tw_group_t **g_p);

#endif /* TW_COLL_H */
