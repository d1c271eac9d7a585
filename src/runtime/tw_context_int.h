/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Context internals.
 *
 * A tw_context_t handle is a small shell that is never freed while the
 * process runs: tw_finalize frees everything behind it and marks it dead,
 * so a call on a finalized context is a clean TW_ERR_INVALID instead of a
 * use-after-free. Dead shells are reused by later tw_init calls (so 10^3
 * init/finalize cycles hold one shell) and freed at exit.
 */
#ifndef TW_CONTEXT_INT_H
#define TW_CONTEXT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/tw_config.h"
#include "core/tw_stats.h"
#include "msg/tw_msg.h"
#include "progress/tw_pe.h"
#include "threadwire/threadwire.h"
#include "transports/base/tw_tl.h"

#define TW_CTX_MAX_TL 8

/* Tunables of the runtime layer (table in tw_context.c). */
typedef struct tw_rt_cfg {
    char transports[TW_CFG_STRLEN];
    int progress_threads;
    int wait_mode;
    bool reliable;
    uint64_t spin_ns;
    size_t eager_limit;
    uint64_t match_buckets;
    uint64_t pe_ring_depth;
    char fault[TW_CFG_STRLEN];       /* TW_FAULT: lossy wrapping of the transports */
    char fault_on[TW_CFG_STRLEN];    /* TW_FAULT_ON: which ones (empty: all) */
    char fault_ranks[TW_CFG_STRLEN]; /* TW_FAULT_RANKS: in which ranks (empty: all) */
} tw_rt_cfg_t;

typedef struct tw_ctx_impl {
    tw_rt_cfg_t cfg;
    int rank;
    int size;
    int local_rank;
    int local_size;
    char job_key[TW_CFG_STRLEN];
    uint64_t lifeline_next_ns; /* engine 0's owner */
    tw_context_t *ctx;         /* the shell, for the error handler */
    bool manual;
    unsigned npe;
    tw_pe_t **pes;
    tw_pe_params_t pe_params; /* how the engines were made (for transports) */
    unsigned ntl;
    tw_tl_iface_t *ifaces[TW_CTX_MAX_TL];
    tw_msg_t *msg;
    struct tw_rel *rel;   /* reliability layer, or NULL when off */
    struct tw_boot *boot; /* launcher connection (twrun), or NULL */
    tw_stats_t *cq_stats;
    pthread_mutex_t err_lock;
    tw_error_handler_t err_fn; /* guarded by err_lock */
    void *err_arg;             /* guarded by err_lock */
} tw_ctx_impl_t;

struct tw_context {
    atomic_uint magic; /* TW_CTX_LIVE while usable */
    tw_ctx_impl_t *impl;
    struct tw_context *next; /* shell list; guarded by the shell lock */
};

#define TW_CTX_LIVE 0x74776378u /* "twcx" */
#define TW_CTX_DEAD 0x64656164u

/** The live implementation behind @p ctx, or NULL (logged with @p fn). */
tw_ctx_impl_t *tw_ctx_get(const tw_context_t *ctx, const char *fn);

extern const tw_cfg_table_t tw_rt_cfg_table;
/** Every module's tunables (tw_info and the unknown-variable check). */
extern const tw_cfg_table_t *const tw_cfg_all_tables[];
extern const size_t tw_cfg_all_tables_count;

#endif /* TW_CONTEXT_INT_H */
