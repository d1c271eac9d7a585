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

#include "core/tw_atomic.h"
#include "core/tw_config.h"
#include "core/tw_lock.h"
#include "core/tw_stats.h"
#include "msg/tw_msg.h"
#include "progress/tw_cq.h"
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
    int stats_at_exit; /* TW_STATS: TW_CTX_STATS_* */
    uint64_t stall_warn_ns;
} tw_rt_cfg_t;

/* TW_STATS: the counters on stderr at tw_finalize (tw_rt_cfg_t). */
enum { TW_CTX_STATS_OFF, TW_CTX_STATS_TEXT, TW_CTX_STATS_JSON };

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
    /* The stack (tw_stack.c): the roots of its iface trees, in routing
     * order -- transports, or the wrappers over them. Set by tw_init. */
    unsigned ntop;
    tw_tl_iface_t *tops[TW_CTX_MAX_TL];
    tw_msg_t *msg;
    struct tw_coll *coll;    /* collectives (src/coll) */
    struct tw_bootstrap *bs; /* the job (tw_bootstrap.h): set by tw_init, freed last */
    tw_stats_t *cq_stats;
    tw_mutex_t err_lock;
    tw_error_handler_t err_fn; /* guarded by err_lock */
    void *err_arg;             /* guarded by err_lock */
} tw_ctx_impl_t;

/*
 * The gate: calls that may run while another thread finalizes (the posting
 * calls, tw_progress -- which tw_cq_wait calls --, tw_stats_*) enter it,
 * and tw_finalize waits until no thread is inside before it tears anything
 * down; a call that enters after tw_finalize began is refused.
 *
 * Each thread counts its calls in a slot of its own (tw_thread_index), so
 * entering costs a plain store and no fence: tw_finalize, after it marks
 * the context dead, makes every running thread execute a full barrier
 * (membarrier, private expedited), and only then reads the slots. So a
 * caller either saw the context dead, or its count is seen. Where the
 * kernel refuses membarrier, callers pay a fence instead (tw_gate_fence).
 * Threads with an index beyond the slots share one atomic counter.
 */
#define TW_GATE_SLOTS 256

typedef struct tw_gate_slot {
    atomic_uint inside; /* written only by the slot's thread */
} TW_ALIGNED(TW_CACHELINE) tw_gate_slot_t;

extern atomic_bool tw_gate_fence; /* cleared once, before a context is live */

struct tw_context {
    atomic_uint magic; /* TW_CTX_LIVE while usable */
    tw_ctx_impl_t *impl;
    struct tw_context *next;    /* shell list; guarded by the shell lock */
    atomic_uint refused_logged; /* calls refused after tw_finalize: logged once */
    atomic_uint gate_shared;    /* the gate of threads beyond the slots */
    tw_gate_slot_t gate[TW_GATE_SLOTS];
};

#define TW_CTX_LIVE 0x74776378u /* "twcx" */
#define TW_CTX_DEAD 0x64656164u

/** The refusal of a call on @p ctx that is not live (or NULL): logged
 * (after tw_finalize, once per context), with the gate left when
 * @p inside. Always NULL. */
tw_ctx_impl_t *tw_ctx_refuse(tw_context_t *ctx, const char *fn, bool inside);

/** Enter @p ctx's gate: its implementation, or NULL (logged with @p fn,
 * and not inside) when it is not live. Pair with tw_ctx_leave. A pointer
 * that is not a live context is only read, never written. */
static inline tw_ctx_impl_t *tw_ctx_enter(tw_context_t *ctx, const char *fn)
{
    unsigned i;

    if (TW_UNLIKELY(ctx == NULL ||
                    atomic_load_explicit(&ctx->magic, memory_order_relaxed) != TW_CTX_LIVE)) {
        return tw_ctx_refuse(ctx, fn, false);
    }
    i = tw_thread_index();
    if (TW_LIKELY(i < TW_GATE_SLOTS)) {
        unsigned n = atomic_load_explicit(&ctx->gate[i].inside, memory_order_relaxed);
        atomic_store_explicit(&ctx->gate[i].inside, n + 1, memory_order_relaxed);
        if (TW_UNLIKELY(atomic_load_explicit(&tw_gate_fence, memory_order_relaxed))) {
            atomic_thread_fence(memory_order_seq_cst);
        } else {
            atomic_signal_fence(memory_order_seq_cst); /* tw_finalize's membarrier */
        }
    } else {
        atomic_fetch_add_explicit(&ctx->gate_shared, 1, memory_order_seq_cst);
    }
    if (TW_UNLIKELY(atomic_load_explicit(&ctx->magic, memory_order_acquire) != TW_CTX_LIVE)) {
        return tw_ctx_refuse(ctx, fn, true);
    }
    return ctx->impl;
}

/** Leave the gate entered by a tw_ctx_enter that returned non-NULL. */
static inline void tw_ctx_leave(tw_context_t *ctx)
{
    unsigned i = tw_thread_index();

    if (TW_LIKELY(i < TW_GATE_SLOTS)) {
        unsigned n = atomic_load_explicit(&ctx->gate[i].inside, memory_order_relaxed);
        atomic_store_explicit(&ctx->gate[i].inside, n - 1, memory_order_release);
    } else {
        atomic_fetch_sub_explicit(&ctx->gate_shared, 1, memory_order_release);
    }
}

/** CQ parameters of @p impl's context (tw_cq_create's, and the CQs the
 * layers make for themselves). */
void tw_ctx_cq_params(tw_ctx_impl_t *impl, tw_context_t *ctx, unsigned depth, tw_cq_params_t *p);
/** The same for the library's own CQs, which may be waited on while the
 * context is not live yet (tw_init): progress through the impl. */
void tw_ctx_cq_params_internal(tw_ctx_impl_t *impl, unsigned depth, tw_cq_params_t *p);
/** tw_progress on the implementation (no liveness check): @p arg is a
 * tw_ctx_impl_t. Thread: any. */
int tw_ctx_progress(void *arg);

/** The live implementation behind @p ctx, or NULL (logged with @p fn). */
tw_ctx_impl_t *tw_ctx_get(const tw_context_t *ctx, const char *fn);

extern const tw_cfg_table_t tw_rt_cfg_table;

/** Every module's tunables (tw_info, the unknown-variable check, and
 * validation at tw_init): the runtime's, the launcher's and each
 * transport's and wrapper's (their ops' cfg). Fills @p tables (room for
 * @p max) and returns how many. Thread: any. */
size_t tw_cfg_all_tables(const tw_cfg_table_t **tables, size_t max);

/* ---- the stack (tw_stack.c) ----------------------------------------------- */

/** The layers the runtime may put over the transports, bottom-up, after
 * the transport-level wrappers of tw_tl_wrappers. NULL-terminated. */
extern const tw_tl_ops_t *const tw_stack_layers[];

/** Check a TW_TRANSPORTS list: every name a transport, and usable here
 * (TW_ERR_UNSUPPORTED with the reason) -- TW_ERR_INVALID otherwise. */
tw_status_t tw_stack_check_list(const char *list);
/** Select, open and wrap: impl->tops, every iface registered with its
 * engine. @p up: the layer above (msg) and the job. */
tw_status_t tw_stack_build(tw_ctx_impl_t *impl, const tw_tl_params_t *up);
/** Exchange addresses through the launcher and connect every iface. */
tw_status_t tw_stack_exchange(tw_ctx_impl_t *impl);
/** Route every peer through the first root that reaches it. */
tw_status_t tw_stack_route(tw_ctx_impl_t *impl);
/** Every rank connected and routed: ready, each wrapper before its inner ifaces. */
void tw_stack_ready(tw_ctx_impl_t *impl);
/** Finalize with the engines running: goodbyes, bounded waits. */
void tw_stack_quiesce(tw_ctx_impl_t *impl);
/** Close every iface (the engines stopped). */
void tw_stack_close(tw_ctx_impl_t *impl);
/** The iface of the stack whose ops are named @p name (a transport below
 * its wrappers), or NULL (tests). */
tw_tl_iface_t *tw_stack_find(tw_ctx_impl_t *impl, const char *name);
/** The counters group named @p name of some iface of the stack, or NULL
 * (tests). */
tw_stats_t *tw_stack_stats(tw_ctx_impl_t *impl, const char *name);

#endif /* TW_CONTEXT_INT_H */
